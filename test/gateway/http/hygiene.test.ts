// What may and may not cross the gateway, checked with raw sockets: hop-by-hop headers, message framing,
// Expect: 100-continue, and path forms that try to reach a deployment the key does not grant (SPEC §3).
import { afterAll, beforeAll, describe, test } from '@jest/globals';
import { expect } from '../../support/expect.js';
import { startPythonBackend, type RecordingBackend } from '../../support/backends.js';
import { RawClient, rawHttp, rawRequest, startGateway, type Gateway } from '../../support/harness.js';

let pyDemo: RecordingBackend;
let pyOther: RecordingBackend;
let gw: Gateway;
let key: string;

beforeAll(async () => {
  pyDemo = await startPythonBackend();
  pyOther = await startPythonBackend();
  gw = await startGateway({
    deployments: [
      { namespace: 'demo', name: 'x', type: 'python', url: pyDemo.url },
      { namespace: 'other', name: 'y', type: 'python', url: pyOther.url },
    ],
    keys: [{ name: 'apikey-demo', projects: 'demo' }],
  });
  key = gw.keys['apikey-demo'];
});

afterAll(async () => {
  await gw?.close();
  await pyDemo?.close();
  await pyOther?.close();
});

const host = (): [string, string] => ['Host', `127.0.0.1:${gw.port}`];
const authz = (): [string, string] => ['Authorization', `ApiKey ${key}`];

describe('hop-by-hop headers', () => {
  test('connection-level headers, and those named in Connection, are not forwarded; end-to-end ones are', async () => {
    const r = await rawRequest(
      gw.port,
      rawHttp(
        'POST',
        '/v1/demo/x/hop',
        [
          host(),
          authz(),
          ['Connection', 'keep-alive, X-Foo, x-bar'],
          ['Keep-Alive', 'timeout=5, max=100'],
          ['TE', 'trailers'],
          ['Trailer', 'X-Checksum'],
          ['Upgrade', 'h2c'],
          ['Proxy-Authorization', 'Basic dXNlcjpwYXNz'],
          ['X-Foo', 'hop-only'],
          ['X-Bar', 'hop-only-too'],
          ['X-Keep', 'end-to-end'],
          ['Content-Type', 'text/plain'],
        ],
        'hello',
      ),
    );
    expect(r.status).toBe(200);
    const rec = pyDemo.last();
    expect(rec.url).toBe('/hop');
    expect(rec.body.toString()).toBe('hello');
    const h = rec.headers;
    for (const name of [
      'keep-alive',
      'te',
      'trailer',
      'upgrade',
      'proxy-authorization',
      'x-foo',
      'x-bar',
      'authorization',
    ]) {
      expect(h[name], `${name} forwarded`).toBeUndefined();
    }
    expect(String(h.connection ?? '')).not.toMatch(/x-foo|x-bar/i);
    expect(h['x-keep']).toBe('end-to-end');
    expect(h['content-type']).toBe('text/plain');
  });

  test('a chunked request body arrives whole, re-framed by the gateway', async () => {
    const head = rawHttp('POST', '/v1/demo/x/chunked', [
      host(),
      authz(),
      ['Transfer-Encoding', 'chunked'],
      ['Content-Type', 'text/plain'],
    ]);
    const body = Buffer.from('5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n');
    const r = await rawRequest(gw.port, Buffer.concat([head, body]));
    expect(r.status).toBe(200);
    const rec = pyDemo.last();
    expect(rec.body.toString()).toBe('hello world');
    expect(rec.complete).toBe(true);
    // Exactly one framing reaches the backend, and it is right: chunked, or the length of the body the gateway has
    // whole (never both, never neither, never the client's chunk sizes as a length).
    expect([
      ['chunked', undefined],
      [undefined, '11'],
    ]).toContainEqual([rec.headers['transfer-encoding'], rec.headers['content-length']]);
  });

  test('a request with both Content-Length and Transfer-Encoding is refused, not forwarded', async () => {
    const before = pyDemo.requests.length;
    const msg =
      `POST /v1/demo/x/smuggle HTTP/1.1\r\nHost: 127.0.0.1:${gw.port}\r\nAuthorization: ApiKey ${key}\r\n` +
      'Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /v1/other/y/smuggled HTTP/1.1\r\nHost: x\r\n\r\n';
    const r = await rawRequest(gw.port, msg);
    expect(r.status).toBe(400);
    expect(pyDemo.requests.length).toBe(before);
    expect(pyOther.requests.length).toBe(0);
  });

  test.each([
    ['gzip, chunked', ['gzip, chunked']],
    ['Chunked in another case', ['Chunked']],
    ['two lines: gzip, then chunked', ['gzip', 'chunked']],
  ])(
    'Transfer-Encoding %s: a coding other than chunked alone is refused with 501, never forwarded',
    async (name, lines) => {
      const before = pyDemo.requests.length;
      const gzipped = Buffer.from('1f8b0800000000000003cb48cdc9c9070086a6103605000000', 'hex');
      const msg = Buffer.concat([
        Buffer.from(
          `POST /v1/demo/x/te HTTP/1.1\r\nHost: 127.0.0.1:${gw.port}\r\nAuthorization: ApiKey ${key}\r\n` +
            lines.map((l) => `Transfer-Encoding: ${l}\r\n`).join('') +
            `\r\n${gzipped.length.toString(16)}\r\n`,
        ),
        gzipped,
        Buffer.from('\r\n0\r\n\r\n'),
      ]);
      const r = await rawRequest(gw.port, msg);
      if (name.startsWith('Chunked')) {
        // chunked alone, however written: forwarded as a chunked body.
        expect(r.status).toBe(200);
        expect(pyDemo.requests.length).toBe(before + 1);
        return;
      }
      expect(r.status).toBe(501);
      expect(JSON.parse(r.text)).toEqual({ error: expect.stringContaining('Transfer-Encoding') });
      expect(r.headers.connection).toBe('close');
      expect(pyDemo.requests.length).toBe(before);
    },
  );

  test('Expect: 100-continue gets a 100, then the body is forwarded without authorization', async () => {
    const c = await RawClient.connect(gw.port);
    try {
      c.write(
        rawHttp('POST', '/v1/demo/x/expect', [
          host(),
          authz(),
          ['Expect', '100-continue'],
          ['Content-Type', 'text/plain'],
          ['Content-Length', '11'],
        ]),
      );
      const interim = await c.next();
      expect(interim.status).toBe(100);
      c.write('hello world');
      const r = await c.final();
      expect(r.status).toBe(200);
    } finally {
      c.close();
    }
    const rec = pyDemo.last();
    expect(rec.url).toBe('/expect');
    expect(rec.body.toString()).toBe('hello world');
    expect(rec.headers.authorization).toBeUndefined();
  });
  test('Expect: 100-continue with a wrong key: a final 401 and no 100, the connection closes, nothing reaches the backend', async () => {
    const before = pyDemo.requests.length;
    const c = await RawClient.connect(gw.port);
    try {
      c.write(
        rawHttp('POST', '/v1/demo/x/expect', [
          host(),
          ['Authorization', 'ApiKey AAAAAAAAAAAAAAAA.wrongwrongwrongwrongwrongwrongwrongwrong'],
          ['Expect', '100-continue'],
          ['Content-Type', 'text/plain'],
          ['Content-Length', '11'],
        ]),
      );
      const r = await c.next();
      expect(r.status).toBe(401);
      expect(r.headers.connection).toBe('close');
    } finally {
      c.close();
    }
    expect(pyDemo.requests.length).toBe(before);
  });
});

describe('connection reuse', () => {
  test('pipelined requests on one keep-alive connection are each forwarded with their own body', async () => {
    const c = await RawClient.connect(gw.port);
    const before = pyDemo.requests.length;
    try {
      c.write(
        Buffer.concat([
          rawHttp('POST', '/v1/demo/x/first', [host(), authz(), ['Content-Type', 'text/plain']], 'one'),
          rawHttp('POST', '/v1/demo/x/second', [host(), authz(), ['Content-Type', 'text/plain']], 'two-two'),
        ]),
      );
      const a = await c.final();
      const b = await c.final();
      expect([a.status, b.status]).toEqual([200, 200]);
      expect(JSON.parse(a.text).path).toBe('/first');
      expect(JSON.parse(b.text).path).toBe('/second');
    } finally {
      c.close();
    }
    const seen = pyDemo.requests.slice(before).map((q) => [q.url, q.body.toString()]);
    expect(seen).toEqual([
      ['/first', 'one'],
      ['/second', 'two-two'],
    ]);
  });

  test('the body of a refused request is never taken for a request of its own', async () => {
    const c = await RawClient.connect(gw.port);
    const inner = rawHttp('GET', '/v1/demo/x/smuggled', [host(), authz()]);
    try {
      c.write(
        rawHttp(
          'POST',
          '/v1/demo/x/refused',
          [host(), ['Authorization', 'ApiKey nope'], ['Content-Type', 'text/plain']],
          inner,
        ),
      );
      const first = await c.final();
      expect(first.status).toBe(401);
      // The unread body is not parsed as a request: the gateway says it closes, and does.
      expect(first.headers.connection).toBe('close');
      await expect(c.final({ timeoutMs: 2000 })).rejects.toThrow(/connection closed/);
    } finally {
      c.close();
    }
    expect(pyDemo.matching('/smuggled')).toEqual([]);
    expect(pyDemo.matching('/refused')).toEqual([]);
  });

  test('a refused request with an unread body ends its connection (Connection: close); a new connection is served', async () => {
    const c = await RawClient.connect(gw.port);
    try {
      c.write(
        rawHttp(
          'POST',
          '/v1/demo/x/refused2',
          [host(), ['Authorization', 'ApiKey nope'], ['Content-Type', 'text/plain']],
          'x'.repeat(300),
        ),
      );
      const first = await c.final();
      expect(first.status).toBe(401);
      expect(first.headers.connection).toBe('close');
      await expect(c.final({ timeoutMs: 2000 })).rejects.toThrow(/connection closed/);
    } finally {
      c.close();
    }
    const again = await rawRequest(
      gw.port,
      rawHttp('GET', '/v1/demo/x/after', [host(), authz(), ['Connection', 'close']]),
    );
    expect(again.status).toBe(200);
    expect(JSON.parse(again.text).path).toBe('/after');
  });
});

describe('path forms never reach a deployment the key does not grant', () => {
  // The key grants project "demo" only; "other/y" must never see a request. Each form is refused before routing, with
  // the reason, or forwarded to demo/x as the opaque segment it is (no decoding, no dot-segment removal).
  const refused: Array<[string, string]> = [
    ['/v1/demo/x/../../other/y/secret', 'dot segments ("." or "..") are not allowed in the path'],
    [
      '/v1/demo/x/%2e%2e/%2e%2e/other/y/secret',
      'encoded "/", "\\", "." or NUL (%2F, %5C, %2E, %00) are not allowed in the path',
    ],
    [
      '/v1/demo/x/%2E%2E/%2E%2E/other/y/secret',
      'encoded "/", "\\", "." or NUL (%2F, %5C, %2E, %00) are not allowed in the path',
    ],
    [
      '/v1/demo/x/..%2f..%2fother%2fy%2fsecret',
      'encoded "/", "\\", "." or NUL (%2F, %5C, %2E, %00) are not allowed in the path',
    ],
    [
      '/v1/demo/x/..%2F..%2Fother/y/secret',
      'encoded "/", "\\", "." or NUL (%2F, %5C, %2E, %00) are not allowed in the path',
    ],
    [
      '/v1/demo/x%2f..%2f..%2fother/y/secret',
      'encoded "/", "\\", "." or NUL (%2F, %5C, %2E, %00) are not allowed in the path',
    ],
    [
      '/v1/demo%2fx/../../other/y/secret',
      'encoded "/", "\\", "." or NUL (%2F, %5C, %2E, %00) are not allowed in the path',
    ],
    ['/v1/demo/x/..\\..\\other\\y\\secret', 'backslashes are not allowed in the path'],
    [
      '/v1/demo/x/..%5c..%5cother%5cy%5csecret',
      'encoded "/", "\\", "." or NUL (%2F, %5C, %2E, %00) are not allowed in the path',
    ],
    ['//v1/demo/x/../../other/y/secret', 'empty path segments ("//") are not allowed'],
    ['/v1//demo/x/../../../other/y/secret', 'empty path segments ("//") are not allowed'],
    ['/v1/demo//x/../../other/y/secret', 'empty path segments ("//") are not allowed'],
    [
      '/v1/demo/x/%00/../../../other/y/secret',
      'encoded "/", "\\", "." or NUL (%2F, %5C, %2E, %00) are not allowed in the path',
    ],
    [
      '/v1/demo/x%00/../../other/y/secret',
      'encoded "/", "\\", "." or NUL (%2F, %5C, %2E, %00) are not allowed in the path',
    ],
    ['/v1/demo/./x/.././../other/y/secret', 'dot segments ("." or "..") are not allowed in the path'],
    [
      '/v1/demo/x/.%2e/.%2e/other/y/secret',
      'encoded "/", "\\", "." or NUL (%2F, %5C, %2E, %00) are not allowed in the path',
    ],
    ['/v1/demo/x/#/../../other/y/secret', 'a fragment is not allowed in the request target'],
    ['/v1/other/y/../../demo/x/secret', 'dot segments ("." or "..") are not allowed in the path'],
    ['/v1/demo/../other/y/secret', 'dot segments ("." or "..") are not allowed in the path'],
    ['/v1/demo/x/../../OTHER/y/secret', 'dot segments ("." or "..") are not allowed in the path'],
  ];

  test.each(refused)('%s is refused (400): %s', async (path, message) => {
    const before = pyDemo.requests.length;
    const r = await rawRequest(gw.port, rawHttp('GET', path, [host(), authz(), ['Connection', 'close']]));
    expect([r.status, JSON.parse(r.text).error]).toEqual([400, message]);
    expect(pyDemo.requests.length).toBe(before);
    expect(pyOther.requests.map((q) => q.url)).toEqual([]);
  });

  // Not dot-segments once decoded or split by ";" or "?": forwarded to the granted deployment exactly as written.
  test.each([
    ['/v1/demo/x/%252e%252e/%252e%252e/other/y/secret', '/%252e%252e/%252e%252e/other/y/secret'],
    ['/v1/demo/x/..;/..;/other/y/secret', '/..;/..;/other/y/secret'],
    ['/v1/demo/x/?/../../other/y/secret', '/?/../../other/y/secret'],
  ])('%s reaches demo/x only, as %s', async (path, forwarded) => {
    const before = pyDemo.requests.length;
    const r = await rawRequest(gw.port, rawHttp('GET', path, [host(), authz(), ['Connection', 'close']]));
    expect(r.status).toBe(200);
    expect(pyDemo.requests.length).toBe(before + 1);
    expect(pyDemo.last().url).toBe(forwarded);
    expect(pyOther.requests.map((q) => q.url)).toEqual([]);
  });

  test('an absolute-form request target naming another deployment is not served with this key', async () => {
    const r = await rawRequest(
      gw.port,
      rawHttp('GET', `http://127.0.0.1:${gw.port}/v1/other/y/secret`, [host(), authz(), ['Connection', 'close']]),
    );
    expect([r.status, JSON.parse(r.text).error]).toEqual([
      403,
      'API key "apikey-demo" does not grant access to project "other"',
    ]);
    expect(pyOther.requests.length).toBe(0);
  });

  test('what the authorised backend receives is a normalised path without dot-segments', async () => {
    const before = pyDemo.requests.length;
    const r = await rawRequest(
      gw.port,
      rawHttp('GET', '/v1/demo/x/a/./b/../c', [host(), authz(), ['Connection', 'close']]),
    );
    // Refused rather than resolved: the gateway never guesses what a dot-segment meant.
    expect([r.status, JSON.parse(r.text).error]).toEqual([
      400,
      'dot segments ("." or "..") are not allowed in the path',
    ]);
    expect(pyDemo.requests.length).toBe(before);
    expect(pyDemo.requests.length).toBeGreaterThan(0); // the loop below has requests to look at
    for (const q of pyDemo.requests) {
      const segments = q.url
        .split('?')[0]
        .split('/')
        .map((s) => s.toLowerCase());
      for (const dot of ['.', '..', '%2e', '%2e%2e', '.%2e', '%2e.']) expect(segments, q.url).not.toContain(dot);
    }
  });
});
