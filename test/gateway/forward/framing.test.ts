// Attacker-style framing tests: header floods, parse errors on pipelined and streaming connections, slow request
// bodies, truncated or malformed backend answers, request smuggling, CONNECT/TRACE and over-long targets.
// Real loopback sockets; misbehaving backends are raw `net` servers writing exact bytes.
import type net from 'node:net';
import { afterAll, afterEach, beforeAll, describe, it } from '@jest/globals';
import { expect } from '../../support/expect.js';
import {
  RecordingBackend,
  startDelayBackend,
  startOpenAIBackend,
  startPythonBackend,
  startV1Backend,
  type OpenAIBackend,
  type RecordedRequest,
} from '../../support/backends.js';
import { rawHttp, send, startGateway, type Gateway } from '../../support/harness.js';
import {
  Conn,
  plainAnswer,
  RawBackend,
  responsesOf,
  type ParsedResponse,
  type RawScript,
} from '../../support/raw-backend.js';
import { jsonError } from '../../support/raw-backend.js';
import { rawClients, within } from '../../support/net.js';
import { sleep, waitFor } from '../../support/wait.js';

let py: RecordingBackend;
let slow: RecordingBackend;
let v1: RecordingBackend;
let llm: OpenAIBackend;
let raw: RawBackend;
/** Never routed to: a CONNECT naming it must not open a connection to it. */
let bystander: RecordingBackend;
let gw: Gateway;
let key: string;

/** Per-path answers of the raw backend; anything else gets `200 ok <target>`. */
const rawRoutes = new Map<string, RawScript>();

beforeAll(async () => {
  [py, slow, v1, llm, bystander] = await Promise.all([
    startPythonBackend(),
    startDelayBackend(200),
    startV1Backend(),
    startOpenAIBackend(),
    startPythonBackend(),
  ]);
  raw = await new RawBackend((req, s) => {
    const script = rawRoutes.get(req.target.split('?')[0]);
    if (script) return script(req, s);
    s.write(plainAnswer(200, `ok ${req.target}`));
  }).listen();
  gw = await startGateway({
    deployments: [
      { namespace: 'demo', name: 'x', type: 'python', url: py.url },
      { namespace: 'demo', name: 'slow', type: 'python', url: slow.url },
      { namespace: 'demo', name: 'iris', modelServer: 'sklearn', url: v1.url },
      { namespace: 'demo', name: 'chat', modelServer: 'llm', url: llm.url },
      { namespace: 'demo', name: 'raw', type: 'python', url: raw.url },
    ],
    keys: [{ name: 'apikey-framing', projects: 'demo' }],
  });
  key = gw.keys['apikey-framing'];
});

afterAll(async () => {
  await gw?.close();
  await Promise.all([py, slow, v1, llm, raw, bystander].map((b) => b?.close()));
});

afterEach(() => {
  rawRoutes.clear();
  llm.stream = { chunks: 3, delayMs: 10 };
});

const host = (): [string, string] => ['Host', `127.0.0.1:${gw.port}`];
const authz = (): [string, string] => ['Authorization', `ApiKey ${key}`];
const authLine = () => `Authorization: ApiKey ${key}\r\n`;

/** Open connections of a test, closed after it. */
const { connect, seenSince } = rawClients(
  () => gw,
  () => key,
);

describe('header floods', () => {
  const fillers = (n: number): Array<[string, string]> =>
    Array.from({ length: n }, (_, i): [string, string] => [`X-Filler-${i}`, `v${i}`]);

  it('a request with 1,001 header lines whose Content-Length comes last is refused with 431 and never forwarded', async () => {
    const before = py.requests.length;
    const lines: Array<[string, string]> = [
      host(),
      authz(),
      ['Content-Type', 'text/plain'],
      ...fillers(997),
      ['Content-Length', '11'],
    ];
    expect(lines.length).toBe(1001);
    const c = await connect();
    c.write(rawHttp('POST', '/v1/demo/x/flood', lines, 'hello world'));
    const r = await c.response();
    const forwarded = (await seenSince(py, before, '/v1/demo/x/marker')).map(
      (u, i) => `${u} (body ${py.requests[before + i].body.length} bytes)`,
    );
    // One object, so that a failure shows both what the client got and what reached the backend.
    expect({ status: r.status, forwarded }).toEqual({ status: 431, forwarded: ['/marker (body 0 bytes)'] });
    jsonError(r);
  });

  it('a request with 90 header lines and a body is forwarded whole', async () => {
    const lines: Array<[string, string]> = [
      host(),
      authz(),
      ['Content-Type', 'text/plain'],
      ...fillers(86),
      ['Content-Length', '11'],
    ];
    expect(lines.length).toBe(90);
    const c = await connect();
    c.write(rawHttp('POST', '/v1/demo/x/ninety', lines, 'hello world'));
    const r = await c.response();
    expect(r.status).toBe(200);
    const rec = py.last();
    expect(rec.url).toBe('/ninety');
    expect(rec.body.toString()).toBe('hello world');
    expect(rec.complete).toBe(true);
    for (let i = 0; i < 86; i++) expect(rec.headers[`x-filler-${i}`]).toBe(`v${i}`);
  });

  describe('with limits.maxRequestHeaders: 20', () => {
    let small: Gateway;
    beforeAll(async () => {
      small = await startGateway({
        config: { limits: { maxRequestHeaders: 20 } },
        deployments: [{ namespace: 'demo', name: 'x', type: 'python', url: py.url }],
        keys: [{ name: 'apikey-small', projects: 'demo' }],
      });
    });
    afterAll(async () => {
      await small?.close();
    });

    it.each([
      [20, 200],
      [21, 431],
    ])('a request with %i header lines gets %i', async (count, status) => {
      const before = py.requests.length;
      const lines: Array<[string, string]> = [
        ['Host', `127.0.0.1:${small.port}`],
        ['Authorization', `ApiKey ${small.keys['apikey-small']}`],
        ...fillers(count - 3),
        ['Content-Length', '2'],
      ];
      expect(lines.length).toBe(count);
      const c = await connect(small.port);
      c.write(rawHttp('POST', '/v1/demo/x/limit', lines, 'hi'));
      const r = await c.response();
      expect(r.status).toBe(status);
      if (status === 431) {
        jsonError(r);
        expect(py.requests.length).toBe(before);
      } else {
        expect(py.last().body.toString()).toBe('hi');
      }
    });
  });
});

describe('parse errors keep pipeline order', () => {
  it('a malformed request pipelined behind a slow valid one: first the whole 200, then a 400, then the connection closes', async () => {
    const before = slow.requests.length;
    const c = await connect();
    c.write(
      Buffer.concat([
        rawHttp('GET', '/v1/demo/slow/first', [host(), authz()]),
        Buffer.from(
          `GET /v1/demo/slow/second HTTP/1.1\r\nHost: 127.0.0.1\r\n${authLine()}this is not a header line\r\n\r\n`,
          'latin1',
        ),
      ]),
    );
    await c.closed(5000);
    const rs = responsesOf(c);
    expect(rs.map((r) => r.status)).toEqual([200, 400]);
    expect(rs[0].complete).toBe(true);
    expect(JSON.parse(rs[0].body.toString()).backend).toBe('delay');
    jsonError(rs[1]);
    expect(slow.requests.slice(before).map((q) => q.url)).toEqual(['/first']);
  });

  it('garbage sent while an event stream is being answered is never written into the stream', async () => {
    llm.stream = { chunks: 10, delayMs: 50 };
    const c = await connect();
    c.write(
      rawHttp(
        'POST',
        '/v1/demo/chat/v1/chat/completions',
        [host(), authz(), ['Content-Type', 'application/json']],
        JSON.stringify({ model: 'tiny-llm', stream: true, messages: [{ role: 'user', content: 'hi' }] }),
      ),
    );
    await c.until((x) => x.text.includes('tok0'), 5000, 'the first streamed token');
    c.write('\x00\x01 this is not HTTP at all\r\n\r\n');
    await c.until(
      (x) => x.closedBy !== undefined || responsesOf(x)[0]?.complete === true,
      5000,
      'the stream to end or the connection to close',
    );
    const [r] = responsesOf(c);
    expect(r.status).toBe(200);
    expect(r.framing).toBe('chunked');
    expect(r.error, `stream bytes: ${JSON.stringify(c.text.slice(-400))}`).toBeUndefined();
    expect(r.body.toString()).toContain('tok0');
    if (r.complete) expect(r.body.toString()).toContain('[DONE]');
  });
});

describe('slow request bodies (limits.requestBodyIdleTimeoutSeconds: 1)', () => {
  let sgw: Gateway;
  let skey: string;
  beforeAll(async () => {
    sgw = await startGateway({
      config: { limits: { requestBodyIdleTimeoutSeconds: 1 } },
      deployments: [
        { namespace: 'demo', name: 'x', type: 'python', url: py.url },
        { namespace: 'demo', name: 'iris', modelServer: 'sklearn', url: v1.url },
        { namespace: 'demo', name: 'chat', modelServer: 'llm', url: llm.url },
      ],
      keys: [{ name: 'apikey-slow', projects: 'demo' }],
    });
    skey = sgw.keys['apikey-slow'];
  });
  afterAll(async () => {
    await sgw?.close();
  });

  const head = (path: string, extra: Array<[string, string]>) =>
    rawHttp('POST', path, [['Host', `127.0.0.1:${sgw.port}`], ['Authorization', `ApiKey ${skey}`], ...extra]);

  /** Sends the head and the first bytes, then nothing; returns the answer and how long it took. */
  async function stall(
    path: string,
    extra: Array<[string, string]>,
    first: string,
  ): Promise<{ c: Conn; r: ParsedResponse; ms: number }> {
    const c = await connect(sgw.port);
    c.write(head(path, extra));
    c.write(first);
    const t0 = Date.now();
    const r = await c.response({ timeoutMs: 6000 });
    return { c, r, ms: Date.now() - t0 };
  }

  async function backendAborted(path: string): Promise<RecordedRequest> {
    const rec = await waitFor(() => py.matching(path)[0] ?? false, `the python backend to see ${path}`, 3000);
    await within(rec.closed, 3000, `the backend's request ${path} to be closed`);
    return rec;
  }

  it.each([
    [
      '1 byte of a 100-byte Content-Length body',
      '/stall-length',
      [
        ['Content-Type', 'application/octet-stream'],
        ['Content-Length', '100'],
      ],
      'a',
    ],
    [
      'a chunked body that stops after one chunk',
      '/stall-chunked',
      [
        ['Content-Type', 'application/octet-stream'],
        ['Transfer-Encoding', 'chunked'],
      ],
      '5\r\nhello\r\n',
    ],
  ] as Array<[string, string, Array<[string, string]>, string]>)(
    'python deployment, %s: 408 within seconds (not the 30 s default), the connection closes, the backend request is aborted',
    async (_what, path, extra, first) => {
      const { c, r, ms } = await stall(`/v1/demo/x${path}`, extra, first);
      expect(r.status).toBe(408);
      jsonError(r);
      expect(ms).toBeLessThan(5000); // 1 s idle + the 1 s sweep, with room for a loaded CI box
      await c.closed(2000);
      const rec = await backendAborted(path);
      expect(rec.complete).toBe(false);
      expect(rec.aborted).toBe(true);
    },
  );

  it('sklearn deployment, a predict body that stalls: 408, the backend never sees it', async () => {
    const before = v1.requests.length;
    const { c, r, ms } = await stall(
      '/v1/demo/iris/v1/models/iris:predict',
      [
        ['Content-Type', 'application/json'],
        ['Content-Length', '100'],
      ],
      '{',
    );
    expect(r.status).toBe(408);
    jsonError(r);
    expect(ms).toBeLessThan(5000); // 1 s idle + the 1 s sweep, with room for a loaded CI box
    await c.closed(2000);
    const m = await send(`${sgw.url}/v1/demo/iris/v1/models/iris`, { headers: { authorization: `ApiKey ${skey}` } });
    expect(m.status).toBe(200);
    expect(v1.requests.slice(before).map((q) => q.url)).toEqual(['/v1/models/iris']);
  });

  it('LLM deployment, a chat body that stalls: 408 as an OpenAI error object, the backend never sees it', async () => {
    const before = llm.requests.length;
    const { c, r, ms } = await stall(
      '/v1/demo/chat/v1/chat/completions',
      [
        ['Content-Type', 'application/json'],
        ['Content-Length', '100'],
      ],
      '{',
    );
    expect(r.status).toBe(408);
    const err = JSON.parse(r.body.toString()).error;
    expect(typeof err?.message).toBe('string');
    expect(typeof err?.type).toBe('string');
    expect(ms).toBeLessThan(5000); // 1 s idle + the 1 s sweep, with room for a loaded CI box
    await c.closed(2000);
    expect(llm.requests.length).toBe(before);
  });

  it('a body that trickles in (a byte every 300 ms, never idle for 1 s) is forwarded whole', async () => {
    const c = await connect(sgw.port);
    c.write(
      head('/v1/demo/x/trickle', [
        ['Content-Type', 'text/plain'],
        ['Content-Length', '8'],
      ]),
    );
    for (const ch of 'trickled') {
      c.write(ch);
      await sleep(300); // stays: the stimulus, a body trickling a byte every 300 ms
    }
    const r = await c.response();
    expect(r.status).toBe(200);
    const rec = py.matching('/trickle').at(-1);
    expect(rec?.body.toString()).toBe('trickled');
  });
});

describe('a truncated backend answer is never complete for the client', () => {
  /** The raw backend's socket for a path, once the request arrived. */
  const sockets = new Map<string, net.Socket>();
  const holdOpen =
    (bytes: string): RawScript =>
    (req, s) => {
      s.write(bytes);
      sockets.set(req.target, s);
    };

  async function get(path: string): Promise<Conn> {
    const c = await connect();
    c.write(rawHttp('GET', `/v1/demo/raw${path}`, [host(), authz()]));
    return c;
  }

  it('a close-delimited answer cut by a reset: the client sees no clean end and the connection closes', async () => {
    rawRoutes.set(
      '/cut-reset',
      holdOpen('HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Type: text/plain\r\n\r\npartial...'),
    );
    const c = await get('/cut-reset');
    await c.until((x) => x.text.includes('partial...'), 5000, 'the partial body');
    (sockets.get('/cut-reset') as net.Socket & { resetAndDestroy(): void }).resetAndDestroy();
    await c.until(
      (x) => x.closedBy !== undefined || responsesOf(x)[0]?.complete === true,
      3000,
      'the connection to close',
    );
    const [r] = responsesOf(c);
    expect(r.status).toBe(200);
    expect(r.body.toString()).toBe('partial...');
    expect({ framing: r.framing, complete: r.complete }).toMatchObject({ complete: false });
    await c.closed(3000);
  });

  it('the same answer ended by a clean FIN arrives complete, with its terminator', async () => {
    rawRoutes.set(
      '/cut-fin',
      holdOpen('HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Type: text/plain\r\n\r\npartial...'),
    );
    const c = await get('/cut-fin');
    await c.until((x) => x.text.includes('partial...'), 5000, 'the partial body');
    sockets.get('/cut-fin')!.end('and the rest');
    const r = await c.response();
    expect(r.status).toBe(200);
    expect(r.complete).toBe(true);
    expect(r.body.toString()).toBe('partial...and the rest');
  });

  it.each([
    [
      'Content-Length: 100 but 10 bytes, then close',
      'HTTP/1.1 200 OK\r\nContent-Length: 100\r\nContent-Type: text/plain\r\n\r\n0123456789',
      '0123456789',
    ],
    [
      'a chunked answer cut before the last chunk',
      'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/plain\r\n\r\na\r\n0123456789\r\n',
      '0123456789',
    ],
    [
      'a chunked answer cut inside a chunk',
      'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/plain\r\n\r\n14\r\n0123456789',
      '0123456789',
    ],
  ])('%s: the client sees an incomplete body and the connection closes', async (_what, bytes, partial) => {
    rawRoutes.set('/short', (_req, s) => {
      s.end(bytes);
    });
    const c = await get('/short');
    await c.closed(3000);
    const [r] = responsesOf(c);
    expect(r.status).toBe(200);
    expect(r.body.toString()).toBe(partial);
    expect(r.complete).toBe(false);
  });
});

describe('backend answers that break the rules', () => {
  async function exchange(requests: Buffer[], headRequests: number[] = []): Promise<ParsedResponse[]> {
    const c = await connect();
    c.write(Buffer.concat(requests));
    await c.response({ index: requests.length - 1, headRequests });
    return responsesOf(c, headRequests);
  }

  it('103 Early Hints, then 200: the client gets the 200 and its body, without the hints as final headers', async () => {
    rawRoutes.set('/hints', (_req, s) => {
      s.write('HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n');
      s.write(plainAnswer(200, 'final answer'));
    });
    const rs = await exchange([rawHttp('GET', '/v1/demo/raw/hints', [host(), authz()])]);
    // The interim answer is not passed on (docs/gateway.md): the client gets the final answer alone.
    expect(rs.map((r) => r.status)).toEqual([200]);
    expect(rs[0].body.toString()).toBe('final answer');
    expect(rs[0].headers.link).toBeUndefined();
  });

  it('a 101 to a request that asked for no upgrade is a 502, and nothing is tunnelled', async () => {
    rawRoutes.set('/switch', (_req, s) => {
      s.write('HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\nTUNNELLED-BYTES');
    });
    const c = await connect();
    c.write(rawHttp('GET', '/v1/demo/raw/switch', [host(), authz()]));
    const r = await c.response();
    expect(r.status).toBe(502);
    jsonError(r);
    expect(c.text).not.toContain('TUNNELLED-BYTES');
  });

  it('a HEAD answer that carries body bytes does not leak them into the next answer', async () => {
    rawRoutes.set('/head', (_req, s) => {
      s.write('HTTP/1.1 200 OK\r\nContent-Length: 18\r\nContent-Type: text/plain\r\n\r\nNOT-FOR-THE-CLIENT');
    });
    const rs = await exchange(
      [
        rawHttp('HEAD', '/v1/demo/raw/head', [host(), authz()]),
        rawHttp('GET', '/v1/demo/raw/after-head', [host(), authz()]),
      ],
      [0],
    );
    expect(rs.map((r) => r.status)).toEqual([200, 200]);
    expect(rs[1].body.toString()).toBe('ok /after-head');
    const again = await send(`${gw.url}/v1/demo/raw/again`, { headers: { authorization: `ApiKey ${key}` } });
    expect([again.status, again.text]).toEqual([200, 'ok /again']);
  });

  it.each([
    [204, 'No Content'],
    [304, 'Not Modified'],
  ])(
    'a %i with body bytes from the backend reaches the client without a body, and the next answer is intact',
    async (status, text) => {
      rawRoutes.set('/nobody', (_req, s) => {
        s.write(`HTTP/1.1 ${status} ${text}\r\nContent-Type: text/plain\r\n\r\nSMUGGLED-BODY`);
      });
      const rs = await exchange([
        rawHttp('GET', '/v1/demo/raw/nobody', [host(), authz()]),
        rawHttp('GET', '/v1/demo/raw/after-nobody', [host(), authz()]),
      ]);
      expect(rs.map((r) => r.status)).toEqual([status, 200]);
      expect(rs[0].body.length).toBe(0);
      expect(rs[1].body.toString()).toBe('ok /after-nobody');
      const again = await send(`${gw.url}/v1/demo/raw/again`, { headers: { authorization: `ApiKey ${key}` } });
      expect([again.status, again.text]).toEqual([200, 'ok /again']);
    },
  );

  it.each([
    [
      'Content-Length and Transfer-Encoding together',
      'HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n',
    ],
    ['two different Content-Length values', 'HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\nhello!!'],
  ])('an answer head with %s is a 502', async (_what, bytes) => {
    rawRoutes.set('/bad-answer', (_req, s) => {
      s.end(bytes);
    });
    const c = await connect();
    c.write(rawHttp('GET', '/v1/demo/raw/bad-answer', [host(), authz()]));
    const r = await c.response();
    expect(r.status).toBe(502);
    jsonError(r);
  });

  it('an answer with a bad chunk size never reaches the client as a complete 200', async () => {
    rawRoutes.set('/bad-chunk', (_req, s) => {
      s.end('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\nworld\r\n0\r\n\r\n');
    });
    const c = await connect();
    c.write(rawHttp('GET', '/v1/demo/raw/bad-chunk', [host(), authz()]));
    await c.until(
      (x) => x.closedBy !== undefined || responsesOf(x).some((r) => r.complete),
      3000,
      'an answer or the close',
    );
    expect(responsesOf(c).filter((r) => r.status === 200 && r.complete)).toEqual([]);
  });

  it('backend trailers: the body arrives whole and well framed, and the trailer field does not become a header', async () => {
    rawRoutes.set('/trailers', (_req, s) => {
      s.write(
        'HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\nTrailer: X-Checksum\r\n\r\n',
      );
      s.write('5\r\nhello\r\n6\r\n world\r\n0\r\nX-Checksum: abc123\r\n\r\n');
    });
    const c = await connect();
    c.write(rawHttp('GET', '/v1/demo/raw/trailers', [host(), authz(), ['TE', 'trailers']]));
    const r = await c.response();
    expect(r.status).toBe(200);
    expect(r.complete).toBe(true);
    expect(r.body.toString()).toBe('hello world');
    expect(r.headers['x-checksum']).toBeUndefined();
  });

  it('a Content-Length in the backend trailers never reaches the client as a header or a trailer', async () => {
    rawRoutes.set('/trailer-length', (_req, s) => {
      s.write('HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n');
      s.write('5\r\nhello\r\n0\r\nContent-Length: 9999\r\n\r\n');
    });
    const c = await connect();
    c.write(rawHttp('GET', '/v1/demo/raw/trailer-length', [host(), authz(), ['TE', 'trailers']]));
    await c.until(
      (x) => x.closedBy !== undefined || responsesOf(x)[0]?.complete === true,
      3000,
      'the answer or the close',
    );
    const [r] = responsesOf(c);
    expect(r.status).toBe(200);
    expect(r.headers['content-length']).toBeUndefined();
    expect(r.trailers.map(([n]) => n.toLowerCase())).not.toContain('content-length');
    expect(c.text).not.toContain('9999');
  });

  it('a backend header value Node would refuse to write (a control character) gives a 502, and the gateway keeps serving', async () => {
    rawRoutes.set('/ctl-header', (_req, s) => {
      s.write('HTTP/1.1 200 OK\r\nX-Bad: a\x01b\r\nContent-Length: 2\r\n\r\nok');
    });
    const c = await connect();
    c.write(rawHttp('GET', '/v1/demo/raw/ctl-header', [host(), authz()]));
    const r = await c.response();
    expect(r.status).toBe(502);
    const again = await send(`${gw.url}/v1/demo/raw/again`, { headers: { authorization: `ApiKey ${key}` } });
    expect([again.status, again.text]).toEqual([200, 'ok /again']);
  });
});

describe('request smuggling and framing attacks', () => {
  const target = '/v1/demo/x/smuggle';
  const start = () =>
    `POST ${target} HTTP/1.1\r\nHost: 127.0.0.1:${gw.port}\r\n${authLine()}Content-Type: text/plain\r\n`;
  const smuggled = `GET /v1/demo/x/smuggled HTTP/1.1\r\nHost: 127.0.0.1\r\n`;

  const cases: Array<[string, () => string]> = [
    [
      'Content-Length and Transfer-Encoding together',
      () => `${start()}Content-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n${smuggled}${authLine()}\r\n`,
    ],
    [
      'two different Content-Length values',
      () => `${start()}Content-Length: 5\r\nContent-Length: 60\r\n\r\nhello${smuggled}${authLine()}\r\n`,
    ],
    [
      'a Content-Length list with two values',
      () => `${start()}Content-Length: 5, 60\r\n\r\nhello${smuggled}${authLine()}\r\n`,
    ],
    ['a signed Content-Length', () => `${start()}Content-Length: +5\r\n\r\nhello`],
    [
      'Transfer-Encoding: chunked, identity',
      () => `${start()}Transfer-Encoding: chunked, identity\r\n\r\n5\r\nhello\r\n0\r\n\r\n`,
    ],
    ['Transfer-Encoding: gzip', () => `${start()}Transfer-Encoding: gzip\r\n\r\n5\r\nhello\r\n0\r\n\r\n`],
    ['an invalid chunk size', () => `${start()}Transfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n`],
    [
      'an over-long chunk size',
      () => `${start()}Transfer-Encoding: chunked\r\n\r\nfffffffffffffffff1\r\nhello\r\n0\r\n\r\n`,
    ],
    ['chunk data not followed by CRLF', () => `${start()}Transfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n`],
    ['an obs-fold continuation line', () => `${start()}X-Folded: first\r\n  second\r\nContent-Length: 5\r\n\r\nhello`],
    [
      'an obs-fold continuation of Transfer-Encoding',
      () => `${start()}Transfer-Encoding: identity\r\n chunked\r\nContent-Length: 5\r\n\r\nhello`,
    ],
    ['a NUL in a header value', () => `${start()}X-Nul: a\x00b\r\nContent-Length: 5\r\n\r\nhello`],
    ['a bare CR in a header value', () => `${start()}X-Cr: a\rb\r\nContent-Length: 5\r\n\r\nhello`],
    ['a space before the colon of a header name', () => `${start()}X-Spaced : yes\r\nContent-Length: 5\r\n\r\nhello`],
    [
      'a space before the colon of Transfer-Encoding',
      () => `${start()}Transfer-Encoding : chunked\r\nContent-Length: 5\r\n\r\nhello`,
    ],
  ];

  it.each(cases)('%s: 400, the connection closes, nothing reaches the backend', async (_what, message) => {
    const before = py.requests.length;
    const c = await connect();
    c.write(message());
    const r = await c.response();
    expect(r.status).toBe(400);
    jsonError(r);
    await c.closed(2000);
    expect(await seenSince(py, before, '/v1/demo/x/marker')).toEqual(['/marker']);
  });

  it('an invalid chunk after the body started streaming: 400, and the backend request is aborted, never completed', async () => {
    const c = await connect();
    c.write(
      `${start().replace(target, '/v1/demo/x/streamed-then-bad')}Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n`,
    );
    const rec = await waitFor(
      () => py.matching('/streamed-then-bad')[0] ?? false,
      'the streamed request to reach the backend',
      3000,
    );
    c.write('zz\r\nworld\r\n0\r\n\r\n');
    const r = await c.response();
    expect(r.status).toBe(400);
    jsonError(r);
    await within(rec.closed, 3000, 'the backend request to be closed');
    expect(rec.complete).toBe(false);
    expect(rec.aborted).toBe(true);
  });

  it.each([
    [
      'CONNECT to a backend address',
      () => `CONNECT 127.0.0.1:${bystander.port} HTTP/1.1\r\nHost: 127.0.0.1:${bystander.port}\r\n${authLine()}\r\n`,
    ],
    [
      'CONNECT to a deployment path',
      () => `CONNECT /v1/demo/x/tunnel HTTP/1.1\r\nHost: 127.0.0.1:${gw.port}\r\n${authLine()}\r\n`,
    ],
  ])('%s is refused with a JSON 405 and nothing is tunnelled', async (_what, message) => {
    const before = py.requests.length;
    const c = await connect();
    c.write(message());
    const r = await c.response();
    expect(r.status).toBe(405);
    jsonError(r);
    expect(await seenSince(py, before, '/v1/demo/x/marker')).toEqual(['/marker']);
    expect(bystander.connections).toBe(0);
  });

  it('TRACE to a python deployment is refused with a JSON 405 and not forwarded', async () => {
    const before = py.requests.length;
    const c = await connect();
    c.write(rawHttp('TRACE', '/v1/demo/x/trace', [host(), authz(), ['X-Secret-Cookie', 'reflect-me']]));
    const r = await c.response();
    expect(r.status).toBe(405);
    jsonError(r);
    expect(r.body.toString()).not.toContain('reflect-me');
    expect(await seenSince(py, before, '/v1/demo/x/marker')).toEqual(['/marker']);
  });

  it('a request target over 16 KB is refused with 431 (JSON: the request line counts toward the 16 KB head limit) and not forwarded', async () => {
    const before = py.requests.length;
    const c = await connect();
    c.write(rawHttp('GET', `/v1/demo/x/${'a'.repeat(17 * 1024)}`, [host(), authz()]));
    const r = await c.response();
    expect(r.status).toBe(431);
    jsonError(r);
    expect(await seenSince(py, before, '/v1/demo/x/marker')).toEqual(['/marker']);
  });
});
