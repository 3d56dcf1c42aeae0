// Attacker-style header and identity tests: upgrade tokens that are not websocket, underscore look-alikes of the
// gateway's own headers, request target versus Host, request ids, Connection-named headers, TE and Expect.
// Real loopback sockets; what reached the backend is read from its recording.
import { afterAll, beforeAll, describe, it } from '@jest/globals';
import { expect } from '../../support/expect.js';
import WebSocket from 'ws';
import {
  RecordingBackend,
  sha256,
  startPythonBackend,
  startV1Backend,
  type RecordedRequest,
} from '../../support/backends.js';
import { rawHttp, startGateway, type Gateway } from '../../support/harness.js';
import { type ParsedResponse } from '../../support/raw-backend.js';
import { jsonError } from '../../support/raw-backend.js';
import { rawClients } from '../../support/net.js';

let py: RecordingBackend;
let v1: RecordingBackend;
let secret: RecordingBackend;
let gw: Gateway;
let key: string;
const KEY_NAME = 'apikey-headers';

beforeAll(async () => {
  [py, v1, secret] = await Promise.all([startPythonBackend(), startV1Backend(), startV1Backend()]);
  gw = await startGateway({
    deployments: [
      { namespace: 'demo', name: 'x', type: 'python', url: py.url },
      { namespace: 'demo', name: 'iris', modelServer: 'sklearn', url: v1.url },
      { namespace: 'other', name: 'secret', modelServer: 'sklearn', url: secret.url },
    ],
    keys: [{ name: KEY_NAME, projects: 'demo' }],
  });
  key = gw.keys[KEY_NAME];
});

afterAll(async () => {
  await gw?.close();
  await Promise.all([py, v1, secret].map((b) => b?.close()));
});

const host = (port = gw.port): [string, string] => ['Host', `127.0.0.1:${port}`];
const authz = (k = key): [string, string] => ['Authorization', `ApiKey ${k}`];

const { connect, seenSince } = rawClients(
  () => gw,
  () => key,
);

/** One raw request on a fresh connection; its first final answer. */
async function exchange(port: number, bytes: string | Buffer): Promise<ParsedResponse> {
  const c = await connect(port);
  c.write(bytes);
  for (let i = 0; i < 5; i++) {
    const r = await c.response({ index: i });
    if (r.status >= 200 || !r.complete) return r;
  }
  throw new Error('only interim answers');
}

/** The one request the backend saw at `path` (by its upstream path); fails when there is none or several. */
function onlyAt(backend: RecordingBackend, path: string): RecordedRequest {
  const m = backend.requests.filter((q) => q.url === path);
  expect(
    m.map((q) => q.url),
    `requests at ${path}`,
  ).toEqual([path]);
  return m[0];
}

/** Header names on the wire at the backend, lower-cased. */
const wireNames = (rec: RecordedRequest) => rec.rawHeaders.filter((_, i) => i % 2 === 0).map((n) => n.toLowerCase());

describe('upgrade tokens other than websocket are not tunnelled', () => {
  it.each([
    [
      'h2c (with HTTP2-Settings)',
      'h2c',
      [
        ['Connection', 'Upgrade, HTTP2-Settings'],
        ['Upgrade', 'h2c'],
        ['HTTP2-Settings', 'AAMAAABkAARAAAAAAAIAAAAA'],
      ],
    ],
    [
      'foo/1',
      'foo',
      [
        ['Connection', 'Upgrade'],
        ['Upgrade', 'foo/1'],
      ],
    ],
  ] as Array<[string, string, Array<[string, string]>]>)(
    'Upgrade: %s to a python deployment gets a plain HTTP/1.1 answer, and the backend a plain request with its body',
    async (_what, tag, extra) => {
      const upgradesBefore = py.upgrades.length;
      const body = `the body of an ${tag} upgrade attempt`;
      const c = await connect();
      c.write(
        rawHttp('POST', `/v1/demo/x/upgrade-${tag}`, [host(), authz(), ['Content-Type', 'text/plain'], ...extra], body),
      );
      const r = await c.response();
      expect(r.status, `answer: ${r.body.toString()}`).toBe(200);
      expect(JSON.parse(r.body.toString()).bodySha256).toBe(sha256(body));
      const rec = onlyAt(py, `/upgrade-${tag}`);
      expect(rec.body.toString()).toBe(body);
      expect(rec.headers.upgrade).toBeUndefined();
      expect(rec.headers['http2-settings']).toBeUndefined();
      expect(String(rec.headers.connection ?? '')).not.toMatch(/upgrade|http2-settings/i);
      expect(py.upgrades.length).toBe(upgradesBefore);
    },
  );

  it('a websocket upgrade to a python deployment still works', async () => {
    const ws = new WebSocket(`ws://127.0.0.1:${gw.port}/v1/demo/x/socket`, {
      headers: { authorization: `ApiKey ${key}` },
    });
    try {
      await new Promise<void>((resolve, reject) => {
        ws.once('open', () => resolve());
        ws.once('error', reject);
        ws.once('unexpected-response', (_req, res) => reject(new Error(`upgrade refused: ${res.statusCode}`)));
      });
      const echoed = new Promise<string>((resolve) => ws.once('message', (d) => resolve(d.toString())));
      ws.send('ping through the gateway');
      expect(await echoed).toBe('ping through the gateway');
      expect(py.upgrades.at(-1)?.url).toBe('/socket');
      expect(py.upgrades.at(-1)?.headers.upgrade).toBe('websocket');
    } finally {
      ws.terminate();
    }
  });
});

describe('header look-alikes with underscores', () => {
  const lookAlikes: Array<[string, string]> = [
    ['X_Servegate_Key', 'evil'],
    ['x_servegate_project', 'other'],
    ['X-Servegate_Deployment', 'secret'],
    ['X_Forwarded_For', '6.6.6.6'],
    ['X_Forwarded_Host', 'evil.example'],
    ['X_Forwarded_Proto', 'https'],
    ['x_real_ip', '6.6.6.6'],
    ['Proxy_Authorization', 'Basic ZXZpbDpldmls'],
    ['Keep_Alive', 'timeout=999'],
    ['Transfer_Encoding', 'chunked'],
  ];

  function expectGatewayOwnValues(rec: RecordedRequest, keyName: string): void {
    expect(rec.headers['x-servegate-key']).toBe(keyName);
    expect(rec.headers['x-servegate-project']).toBe('demo');
    expect(rec.headers['x-servegate-deployment']).toBe('x');
    expect(rec.headers['x-forwarded-for']).toBe('127.0.0.1');
    expect(rec.headers['x-forwarded-proto']).toBe('http');
    expect(rec.headers['x-real-ip']).toBeUndefined();
  }

  it('by default no header with an underscore in its name reaches the backend', async () => {
    const r = await exchange(
      gw.port,
      rawHttp(
        'POST',
        '/v1/demo/x/underscores',
        [host(), authz(), ...lookAlikes, ['X_Custom_Thing', 'a'], ['Content-Type', 'text/plain']],
        'body',
      ),
    );
    expect(r.status).toBe(200);
    const rec = onlyAt(py, '/underscores');
    expect(wireNames(rec).filter((n) => n.includes('_'))).toEqual([]);
    expect(rec.body.toString()).toBe('body');
    expectGatewayOwnValues(rec, KEY_NAME);
  });

  describe('with forwardUnderscoreHeaders: true', () => {
    let ugw: Gateway;
    beforeAll(async () => {
      ugw = await startGateway({
        config: { forwardUnderscoreHeaders: true },
        deployments: [{ namespace: 'demo', name: 'x', type: 'python', url: py.url }],
        keys: [{ name: 'apikey-underscores', projects: 'demo' }],
      });
    });
    afterAll(async () => {
      await ugw?.close();
    });

    it('X_Custom_Thing is forwarded, look-alikes of gateway-owned, forwarding and hop-by-hop headers are not', async () => {
      const k = ugw.keys['apikey-underscores'];
      const r = await exchange(
        ugw.port,
        rawHttp(
          'POST',
          '/v1/demo/x/underscores-on',
          [host(ugw.port), authz(k), ...lookAlikes, ['X_Custom_Thing', 'a'], ['Content-Type', 'text/plain']],
          'body',
        ),
      );
      expect(r.status).toBe(200);
      const rec = onlyAt(py, '/underscores-on');
      expect(rec.headers.x_custom_thing).toBe('a');
      expect(wireNames(rec).filter((n) => n.includes('_'))).toEqual(['x_custom_thing']);
      expect(rec.body.toString()).toBe('body');
      expectGatewayOwnValues(rec, 'apikey-underscores');
    });
  });
});

describe('request target versus Host (RFC 9112 §3.2, §3.2.2)', () => {
  const predict = JSON.stringify({ instances: [[1, 2, 3, 4]] });
  const json: [string, string] = ['Content-Type', 'application/json'];

  it.each([
    ['without a port', 'http://iris.demo.serving.local/v1/models/iris:predict'],
    ['with a port', 'http://iris.demo.serving.local:8080/v1/models/iris:predict'],
    ['upper case', 'HTTP://IRIS.Demo.Serving.Local/v1/models/iris:predict'],
  ])('an absolute-form target naming a legacy host (%s) is routed by it, whatever Host says', async (_what, target) => {
    const before = v1.requests.length;
    const r = await exchange(gw.port, rawHttp('POST', target, [['Host', 'other.example'], authz(), json], predict));
    expect(r.status).toBe(200);
    expect(JSON.parse(r.body.toString())).toMatchObject({ backend: 'v1', model: 'iris', verb: 'predict' });
    const seen = v1.requests.slice(before);
    expect(seen.map((q) => q.url)).toEqual(['/v1/models/iris:predict']);
    expect(String(seen[0].headers['x-forwarded-host']).toLowerCase()).toMatch(/^iris\.demo\.serving\.local(:8080)?$/);
  });

  it('an absolute-form target with a path-routed path works, whatever its authority', async () => {
    const before = v1.requests.length;
    const r = await exchange(
      gw.port,
      rawHttp(
        'POST',
        'http://anything.example/v1/demo/iris/v1/models/iris:predict?q=1',
        [['Host', 'other.example'], authz(), json],
        predict,
      ),
    );
    expect(r.status).toBe(200);
    expect(v1.requests.slice(before).map((q) => q.url)).toEqual(['/v1/models/iris:predict?q=1']);
  });

  it('an absolute-form target naming a legacy host the key does not grant is 403, even with a granted Host', async () => {
    const before = v1.requests.length;
    const r = await exchange(
      gw.port,
      rawHttp(
        'POST',
        'http://secret.other.serving.local/v1/models/secret:predict',
        [['Host', 'iris.demo.serving.local'], authz(), json],
        predict,
      ),
    );
    expect(r.status).toBe(403);
    jsonError(r);
    expect(secret.requests.length).toBe(0);
    expect(v1.requests.length).toBe(before);
  });

  it.each([
    [
      'two identical Host lines',
      [
        ['Host', 'localhost'],
        ['Host', 'localhost'],
      ],
    ],
    [
      'two different Host lines',
      [
        ['Host', 'iris.demo.serving.local'],
        ['Host', 'secret.other.serving.local'],
      ],
    ],
  ] as Array<[string, Array<[string, string]>]>)('%s: 400, not forwarded', async (_what, hosts) => {
    const beforePy = py.requests.length;
    const beforeV1 = v1.requests.length;
    const r = await exchange(gw.port, rawHttp('GET', '/v1/demo/x/two-hosts', [...hosts, authz()]));
    expect(r.status).toBe(400);
    jsonError(r);
    expect(await seenSince(py, beforePy, '/v1/demo/x/marker')).toEqual(['/marker']);
    expect(v1.requests.length).toBe(beforeV1);
    expect(secret.requests.length).toBe(0);
  });

  it('HTTP/1.1 without Host: a JSON 400, not forwarded', async () => {
    const before = py.requests.length;
    const r = await exchange(gw.port, `GET /v1/demo/x/no-host HTTP/1.1\r\nAuthorization: ApiKey ${key}\r\n\r\n`);
    expect(r.status).toBe(400);
    jsonError(r);
    expect(await seenSince(py, before, '/v1/demo/x/marker')).toEqual(['/marker']);
  });

  it('HTTP/1.0 without Host is served', async () => {
    const r = await exchange(gw.port, `GET /v1/demo/x/http10 HTTP/1.0\r\nAuthorization: ApiKey ${key}\r\n\r\n`);
    expect(r.status).toBe(200);
    expect(onlyAt(py, '/http10').method).toBe('GET');
  });

  it.each([
    ['a path in it', 'iris.demo.serving.local/evil'],
    ['userinfo', 'user@iris.demo.serving.local'],
    ['two ports', '127.0.0.1:80:80'],
    ['an unclosed IPv6 bracket', '[::1'],
  ])('a Host with %s is a JSON 400 and not forwarded', async (_what, value) => {
    const beforePy = py.requests.length;
    const beforeV1 = v1.requests.length;
    const r = await exchange(gw.port, rawHttp('GET', '/v1/demo/x/bad-host', [['Host', value], authz()]));
    expect(r.status).toBe(400);
    jsonError(r);
    expect(await seenSince(py, beforePy, '/v1/demo/x/marker')).toEqual(['/marker']);
    expect(v1.requests.length).toBe(beforeV1);
  });
});

describe('request ids, Connection-named headers, TE and Expect', () => {
  it.each([
    ['longer than 200 characters', 'r'.repeat(201)],
    ['with a space', 'id with space'],
    ['with a tab', 'id\twith-tab'],
    ['with non-ASCII bytes', 'id-\xe9\xe9'],
    ['repeated', ['one', 'two']],
  ])(
    'a client x-request-id %s is replaced by a fresh one, the same at the backend and in the answer',
    async (what, value) => {
      const path = `/rid-${what.replace(/\W+/g, '-')}`;
      const values = Array.isArray(value) ? value : [value];
      const r = await exchange(
        gw.port,
        rawHttp('GET', `/v1/demo/x${path}`, [
          host(),
          authz(),
          ...values.map((v): [string, string] => ['X-Request-Id', v]),
        ]),
      );
      expect(r.status).toBe(200);
      const id = r.headers['x-request-id'];
      expect(id).toMatch(/^[\x21-\x7e]{1,200}$/);
      for (const v of values) expect(id).not.toContain(v);
      expect(onlyAt(py, path).headers['x-request-id']).toBe(id);
    },
  );

  it('a sane client x-request-id is kept end to end', async () => {
    const r = await exchange(
      gw.port,
      rawHttp('GET', '/v1/demo/x/rid-sane', [host(), authz(), ['X-Request-Id', 'trace-abc.123_XYZ']]),
    );
    expect(r.headers['x-request-id']).toBe('trace-abc.123_XYZ');
    expect(onlyAt(py, '/rid-sane').headers['x-request-id']).toBe('trace-abc.123_XYZ');
  });

  it('a client Connection naming the gateway’s own headers does not make the gateway drop them', async () => {
    const r = await exchange(
      gw.port,
      rawHttp('GET', '/v1/demo/x/conn-named', [
        host(),
        authz(),
        [
          'Connection',
          'keep-alive, x-servegate-key, x-servegate-project, x-servegate-deployment, x-forwarded-for, x-forwarded-proto, x-request-id, host',
        ],
      ]),
    );
    expect(r.status).toBe(200);
    const rec = onlyAt(py, '/conn-named');
    expect(rec.headers['x-servegate-key']).toBe(KEY_NAME);
    expect(rec.headers['x-servegate-project']).toBe('demo');
    expect(rec.headers['x-servegate-deployment']).toBe('x');
    expect(rec.headers['x-forwarded-for']).toBe('127.0.0.1');
    expect(rec.headers['x-forwarded-proto']).toBe('http');
    expect(rec.headers['x-request-id']).toBe(r.headers['x-request-id']);
    expect(rec.headers.host).toBe(`127.0.0.1:${py.port}`);
  });

  it('a client Connection naming the framing headers does not cost the body', async () => {
    const r = await exchange(
      gw.port,
      rawHttp(
        'POST',
        '/v1/demo/x/conn-framing',
        [host(), authz(), ['Connection', 'content-length, transfer-encoding'], ['Content-Type', 'text/plain']],
        'whole body',
      ),
    );
    expect(r.status).toBe(200);
    expect(onlyAt(py, '/conn-framing').body.toString()).toBe('whole body');
  });

  it('TE with a transfer coding the gateway cannot undo never reaches the backend (only "trailers" may)', async () => {
    const r = await exchange(
      gw.port,
      rawHttp('GET', '/v1/demo/x/te', [host(), authz(), ['TE', 'gzip, deflate;q=0.5, trailers'], ['Connection', 'TE']]),
    );
    expect(r.status).toBe(200);
    const te = String(onlyAt(py, '/te').headers.te ?? '');
    expect(
      te
        .split(',')
        .map((t) => t.trim().split(';')[0])
        .filter((t) => t !== '' && t !== 'trailers'),
    ).toEqual([]);
  });

  it('an Expect other than 100-continue gets a JSON 417 and is not forwarded', async () => {
    const before = py.requests.length;
    const r = await exchange(
      gw.port,
      rawHttp(
        'POST',
        '/v1/demo/x/expect-other',
        [host(), authz(), ['Expect', 'fancy-feature'], ['Content-Type', 'text/plain']],
        'x',
      ),
    );
    expect(r.status).toBe(417);
    jsonError(r);
    expect(await seenSince(py, before, '/v1/demo/x/marker')).toEqual(['/marker']);
  });

  it('Expect is read as Node reads it: "100-Continue" among others on HTTP/1.1 gets a 100, any Expect on HTTP/1.0 is ignored', async () => {
    const c = await connect(gw.port);
    c.write(
      rawHttp('POST', '/v1/demo/x/expect-mixed', [
        host(),
        authz(),
        ['Expect', 'fancy, 100-Continue'],
        ['Content-Type', 'text/plain'],
        ['Content-Length', '1'],
      ]),
    );
    const interim = await c.response({ index: 0 });
    expect(interim.status).toBe(100);
    c.write('x');
    expect((await c.response({ index: 1 })).status).toBe(200);
    expect(onlyAt(py, '/expect-mixed').body.toString()).toBe('x');

    const r = await exchange(
      gw.port,
      `POST /v1/demo/x/expect-http10 HTTP/1.0\r\nAuthorization: ApiKey ${key}\r\nExpect: fancy-feature\r\nContent-Length: 1\r\n\r\ny`,
    );
    expect(r.status).toBe(200);
    expect(onlyAt(py, '/expect-http10').body.toString()).toBe('y');
  });

  it('hop-by-hop headers of the backend answer, and those its Connection names, do not reach the client', async () => {
    const hop = await new RecordingBackend((_req, res) => {
      res.setHeader('Connection', 'keep-alive, X-Internal-Token');
      res.setHeader('X-Internal-Token', 'backend-secret');
      res.setHeader('Keep-Alive', 'timeout=5');
      res.setHeader('Proxy-Authenticate', 'Basic realm="inner"');
      res.setHeader('X-Public', 'fine');
      res.end('ok');
    }).listen();
    const hgw = await startGateway({
      deployments: [{ namespace: 'demo', name: 'hop', type: 'python', url: hop.url }],
      keys: [{ name: 'apikey-hop', projects: 'demo' }],
    });
    try {
      const r = await exchange(
        hgw.port,
        rawHttp('GET', '/v1/demo/hop/x', [host(hgw.port), authz(hgw.keys['apikey-hop'])]),
      );
      expect(r.status).toBe(200);
      expect(r.body.toString()).toBe('ok');
      expect(r.headers['x-public']).toBe('fine');
      expect(r.headers['x-internal-token']).toBeUndefined();
      expect(r.headers['proxy-authenticate']).toBeUndefined();
      expect(r.headers['keep-alive'] ?? '').not.toBe('timeout=5');
    } finally {
      await hgw.close();
      await hop.close();
    }
  });
});
