// The gateway's own errors (SPEC §6): dialect per route, 413, 502, 504, stream idle timeout, hang-ups, retries.
import http from 'node:http';
import { afterAll, beforeAll, beforeEach, describe, test } from '@jest/globals';
import { expect } from '../../support/expect.js';
import {
  closedPort,
  RecordingBackend,
  startDelayBackend,
  startOpenAIBackend,
  startPythonBackend,
  startResetBackend,
  startV1Backend,
  type OpenAIBackend,
} from '../../support/backends.js';
import { eventually, RawClient, rawHttp, send, startGateway, type Gateway, type Reply } from '../../support/harness.js';
import { waitFor } from '../../support/wait.js';

let py: RecordingBackend;
let llm: OpenAIBackend;
let v1: RecordingBackend;
let slow: RecordingBackend;
let reset: RecordingBackend;
let hangup: RecordingBackend;
let gw: Gateway;
let key: string;
const auth = () => ({ authorization: `ApiKey ${key}` });
const LIMIT = 1024;

beforeAll(async () => {
  [py, llm, v1, slow, reset] = await Promise.all([
    startPythonBackend(),
    startOpenAIBackend(),
    startV1Backend(),
    startDelayBackend(1800),
    startResetBackend(),
  ]);
  // Reads the whole request, then closes the connection without answering.
  hangup = await new RecordingBackend((req) => void req.socket.destroy()).listen();
  const refused = `http://127.0.0.1:${await closedPort()}`;
  gw = await startGateway({
    config: {
      limits: {
        maxRequestBodyBytes: LIMIT,
        requestTimeoutSeconds: 1,
        streamIdleTimeoutSeconds: 1,
        headersTimeoutSeconds: 1,
      },
    },
    deployments: [
      { namespace: 'demo', name: 'app', type: 'python', url: py.url },
      { namespace: 'demo', name: 'chat', modelServer: 'llm', url: llm.url },
      { namespace: 'demo', name: 'iris', modelServer: 'sklearn', url: v1.url },
      { namespace: 'demo', name: 'refused', type: 'python', url: refused },
      { namespace: 'demo', name: 'refused-llm', modelServer: 'llm', url: refused },
      { namespace: 'demo', name: 'refused-model', modelServer: 'sklearn', url: refused },
      { namespace: 'demo', name: 'reset', type: 'python', url: reset.url },
      { namespace: 'demo', name: 'reset-llm', modelServer: 'llm', url: reset.url },
      { namespace: 'demo', name: 'hangup', type: 'python', url: hangup.url },
      { namespace: 'demo', name: 'slow', type: 'python', url: slow.url },
      { namespace: 'demo', name: 'slow-llm', modelServer: 'llm', url: slow.url },
      { namespace: 'demo', name: 'patient', type: 'python', url: slow.url, timeoutSeconds: 5 },
    ],
    keys: [{ name: 'apikey-errors', projects: 'demo' }],
  });
  key = gw.keys['apikey-errors'];
});

afterAll(async () => {
  await gw?.close();
  await Promise.all([py, llm, v1, slow, reset, hangup].map((b) => b?.close()));
});

beforeEach(() => {
  llm.stream = { chunks: 3, delayMs: 10 };
});

function expectKServeError(r: Reply, status: number) {
  expect(r.status).toBe(status);
  expect(String(r.headers['content-type'])).toMatch(/^application\/json/);
  const body = r.json();
  expect(typeof body.error, `body ${r.text}`).toBe('string');
  expect(body.error.length).toBeGreaterThan(0);
}

function expectOpenAIError(r: Reply, status: number) {
  expect(r.status).toBe(status);
  expect(String(r.headers['content-type'])).toMatch(/^application\/json/);
  const body = r.json();
  expect(typeof body.error, `body ${r.text}`).toBe('object');
  expect(typeof body.error.message).toBe('string');
  expect(body.error.message.length).toBeGreaterThan(0);
  expect(typeof body.error.type).toBe('string');
  expect(body.error).toHaveProperty('code');
}

const chatBody = { model: 'tiny-llm', messages: [{ role: 'user', content: 'hi' }] };

/** The gateway's own log lines (debug level and up) about one request, parsed. */
const logsOf = (requestId: unknown) =>
  gw.logs.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.requestId === requestId);

/** The debug line the gateway writes when it tries a failed connect again ("connect failed, retrying ..."). */
const isRetryLine = (l: Record<string, unknown>) => String(l.msg).startsWith('connect failed, retrying');

/**
 * A 502 is the gateway's last word on a request: a retry is only ever sent before it answers. So once the answer is
 * in, the "backend failed" line is logged, no retry line is, and the backend's count is final: nothing to wait for.
 */
function expectAnsweredWithoutRetry(r: Reply, cause: string) {
  const lines = logsOf(r.headers['x-request-id']);
  expect(lines.filter((l) => l.msg === 'backend failed').map((l) => l.cause)).toEqual([cause]);
  expect(lines.filter(isRetryLine)).toEqual([]);
}

describe('error dialects', () => {
  test('a 401 on an OpenAI route is an OpenAI error object', async () => {
    expectOpenAIError(await send(`${gw.url}/v1/demo/chat/v1/chat/completions`, { body: chatBody }), 401);
  });

  test('a 401 on a predictive route is {"error": "..."}', async () => {
    expectKServeError(await send(`${gw.url}/v1/demo/iris/v1/models/iris:predict`, { body: { instances: [[1]] } }), 401);
  });

  test('a 401 on a python route is {"error": "..."}', async () => {
    expectKServeError(await send(`${gw.url}/v1/demo/app/x`, {}), 401);
  });

  test("a backend's own 5xx passes through untouched", async () => {
    const r = await send(`${gw.url}/v1/demo/app/status/500`, { headers: auth() });
    expect(r.status).toBe(500);
    expect(r.json().backend).toBe('python');
  });
});

describe('413 body too large', () => {
  test('a body over maxRequestBodyBytes with Content-Length is 413 and never forwarded', async () => {
    const before = py.requests.length;
    const r = await send(`${gw.url}/v1/demo/app/big`, {
      method: 'POST',
      headers: auth(),
      body: Buffer.alloc(LIMIT + 1, 97),
    });
    expectKServeError(r, 413);
    expect(py.requests.length).toBe(before);
  });

  test('a chunked body that grows over the limit is 413 and the backend never gets it whole', async () => {
    const c = await RawClient.connect(gw.port);
    let status: number;
    const part = Buffer.alloc(400, 98);
    const chunk = Buffer.concat([Buffer.from(`${part.length.toString(16)}\r\n`), part, Buffer.from('\r\n')]);
    try {
      c.write(
        rawHttp('POST', '/v1/demo/app/big-chunked', [
          ['Host', 'x'],
          ['Authorization', `ApiKey ${key}`],
          ['Transfer-Encoding', 'chunked'],
        ]),
      );
      c.write(chunk);
      // Unchecked routes stream bodies: the backend sees the request begin...
      await eventually(() => expect(py.matching('/big-chunked')).toHaveLength(1));
      // ...then the body grows past the limit.
      for (let i = 0; i < 3; i++) c.write(chunk);
      c.write('0\r\n\r\n');
      status = (await c.final()).status;
    } finally {
      c.close();
    }
    expect(status).toBe(413);
    const got = py.matching('/big-chunked')[0];
    await got.closed;
    expect(got.aborted).toBe(true);
    expect(got.complete).toBe(false);
    expect(got.body.length).toBeLessThan(1600);
  });

  test('a body of exactly maxRequestBodyBytes is forwarded whole', async () => {
    const r = await send(`${gw.url}/v1/demo/app/exact`, {
      method: 'POST',
      headers: auth(),
      body: Buffer.alloc(LIMIT, 99),
    });
    expect(r.status).toBe(200);
    expect(py.last().body.length).toBe(LIMIT);
  });

  test('413 on an OpenAI route is an OpenAI error object', async () => {
    const before = llm.requests.length;
    const big = { ...chatBody, messages: [{ role: 'user', content: 'x'.repeat(LIMIT) }] };
    expectOpenAIError(await send(`${gw.url}/v1/demo/chat/v1/chat/completions`, { headers: auth(), body: big }), 413);
    expect(llm.requests.length).toBe(before);
  });
});

describe('502 backend refused or broke', () => {
  test('connection refused on a python route is 502 {"error"}, after one retry', async () => {
    const r = await send(`${gw.url}/v1/demo/refused/x`, { headers: auth() });
    expectKServeError(r, 502);
    // Nothing reached the backend, so the gateway tried once more: the log lines expectAnsweredWithoutRetry reads.
    const lines = logsOf(r.headers['x-request-id']);
    expect(lines.filter(isRetryLine)).toHaveLength(1);
    expect(lines.filter((l) => l.msg === 'backend failed').map((l) => l.cause)).toEqual(['connect_refused']);
  });

  test('connection refused on a predictive route is 502 {"error"}', async () => {
    expectKServeError(
      await send(`${gw.url}/v1/demo/refused-model/v1/models/refused-model:predict`, {
        headers: auth(),
        body: { instances: [[1]] },
      }),
      502,
    );
  });

  test('connection refused on an OpenAI route is 502 as an OpenAI error object', async () => {
    expectOpenAIError(
      await send(`${gw.url}/v1/demo/refused-llm/v1/chat/completions`, { headers: auth(), body: chatBody }),
      502,
    );
  });

  test('a reset connection is 502 and the POST reached the backend exactly once (no retry)', async () => {
    const before = reset.requests.length;
    const r = await send(`${gw.url}/v1/demo/reset/once`, { method: 'POST', headers: auth(), body: 'pay once' });
    expectKServeError(r, 502);
    expectAnsweredWithoutRetry(r, 'reset');
    expect(reset.requests.length - before).toBe(1);
  });

  test('a reset on an OpenAI route is 502 as an OpenAI error object, sent once', async () => {
    const before = reset.requests.length;
    const r = await send(`${gw.url}/v1/demo/reset-llm/v1/chat/completions`, { headers: auth(), body: chatBody });
    expectOpenAIError(r, 502);
    expectAnsweredWithoutRetry(r, 'reset');
    expect(reset.requests.length - before).toBe(1);
  });

  test('a backend that reads the request and hangs up without answering gets it once: 502', async () => {
    const before = hangup.requests.length;
    const r = await send(`${gw.url}/v1/demo/hangup/charge`, {
      method: 'POST',
      headers: auth(),
      body: '{"amount": 10}',
    });
    expectKServeError(r, 502);
    expectAnsweredWithoutRetry(r, 'reset');
    expect(hangup.requests.length - before).toBe(1);
    expect(hangup.last().body.toString()).toBe('{"amount": 10}');
  });
});

describe('504 backend timeout', () => {
  test('no response headers within requestTimeoutSeconds is 504, and the request was sent once', async () => {
    const before = slow.requests.length;
    expectKServeError(await send(`${gw.url}/v1/demo/slow/wait`, { method: 'POST', headers: auth(), body: 'x' }), 504);
    expect(slow.requests.length - before).toBe(1);
  });

  test('504 on an OpenAI route is an OpenAI error object', async () => {
    expectOpenAIError(
      await send(`${gw.url}/v1/demo/slow-llm/v1/chat/completions`, { headers: auth(), body: chatBody }),
      504,
    );
  });

  test("a deployment's timeoutSeconds overrides the default", async () => {
    const r = await send(`${gw.url}/v1/demo/patient/wait`, { headers: auth() });
    expect(r.status).toBe(200);
    expect(r.json().backend).toBe('delay');
  });
});

/** Reads a streaming response until it ends or breaks; reports how. */
function readStream(path: string, body: unknown, maxMs: number) {
  return new Promise<{ status: number; text: string; how: 'end' | 'aborted' | 'error' | 'still-open' }>((resolve) => {
    let text = '';
    let status = 0;
    let done = false;
    const finish = (how: 'end' | 'aborted' | 'error' | 'still-open') => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      resolve({ status, text, how });
      req.destroy();
    };
    const timer = setTimeout(() => finish('still-open'), maxMs);
    const data = JSON.stringify(body);
    const req = http.request(
      {
        host: '127.0.0.1',
        port: gw.port,
        path,
        method: 'POST',
        agent: false,
        headers: { ...auth(), 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) },
      },
      (res) => {
        status = res.statusCode ?? 0;
        res.on('data', (c: Buffer) => (text += c.toString()));
        res.on('end', () => finish('end'));
        res.on('aborted', () => finish('aborted'));
        res.on('error', () => finish('error'));
        res.on('close', () => finish(res.complete ? 'end' : 'aborted'));
      },
    );
    req.on('error', () => finish('error'));
    req.end(data);
  });
}

describe('streams', () => {
  test('a stream that stalls longer than streamIdleTimeoutSeconds is ended, upstream too', async () => {
    llm.stream = { chunks: 10, delayMs: 20, stallAfter: 2 };
    const r = await readStream('/v1/demo/chat/v1/chat/completions', { ...chatBody, stream: true }, 6000);
    expect(r.status).toBe(200);
    // A visible cut (docs/gateway.md): the chunked answer ends without its last chunk, never as a clean end.
    expect(r.how).toBe('aborted');
    expect(r.text).toContain('tok0');
    expect(r.text).toContain('tok1');
    expect(r.text).not.toContain('[DONE]');
    // Its last event says why, in the OpenAI dialect (SPEC §6 amended), so that an SDK raises instead of returning it.
    expect(r.text).toMatch(
      /\n\ndata: \{"error":\{"message":"the backend sent nothing for \d+s: the answer is incomplete","type":"upstream_error","code":"stream_idle_timeout"\}\}\n\n$/,
    );
    const rec = llm.last();
    await waitFor(() => rec.closedAt !== undefined, 'the upstream stream to be closed', 3000);
    expect(rec.aborted).toBe(true);
  });

  test('a stream longer than the request and idle timeouts, but never idle that long, completes', async () => {
    llm.stream = { chunks: 6, delayMs: 400 };
    const r = await readStream('/v1/demo/chat/v1/chat/completions', { ...chatBody, stream: true }, 8000);
    expect(r.status).toBe(200);
    expect(r.how).toBe('end');
    for (let i = 0; i < 6; i++) expect(r.text).toContain(`tok${i}`);
    expect(r.text).toContain('data: [DONE]');
  });
});

describe('hang-ups', () => {
  test.each([
    [
      'Content-Length',
      (k: string) =>
        rawHttp('POST', '/v1/demo/app/truncated-cl', [
          ['Host', 'x'],
          ['Authorization', `ApiKey ${k}`],
          ['Content-Length', '1000'],
        ]),
      'a'.repeat(500),
    ],
    [
      'chunked',
      (k: string) =>
        rawHttp('POST', '/v1/demo/app/truncated-chunked', [
          ['Host', 'x'],
          ['Authorization', `ApiKey ${k}`],
          ['Transfer-Encoding', 'chunked'],
        ]),
      `1f4\r\n${'a'.repeat(500)}\r\n`,
    ],
  ])(
    'a client that hangs up mid-upload (%s) never has a truncated body delivered as complete',
    async (framing, head, part) => {
      const path = framing === 'chunked' ? '/truncated-chunked' : '/truncated-cl';
      const before = py.matching(path).length;
      const c = await RawClient.connect(gw.port);
      c.write(head(key));
      c.write(part);
      // The request has begun streaming to the backend (an unchecked route): then the client hangs up.
      await eventually(() => expect(py.matching(path).length).toBe(before + 1));
      c.close();
      const q = py.matching(path).at(-1)!;
      await q.closed;
      expect(q.complete && !q.aborted, `backend got a complete ${q.body.length}-byte body`).toBe(false);
      expect(q.body.length).toBeLessThanOrEqual(500);
    },
  );

  test('a client that hangs up ends the upstream request at once', async () => {
    const before = slow.requests.length;
    const req = http.request({
      host: '127.0.0.1',
      port: gw.port,
      path: '/v1/demo/patient/hang',
      method: 'GET',
      agent: false,
      headers: auth(),
    });
    req.on('error', () => {});
    req.end();
    await slow.waitForRequests(before + 1);
    const rec = slow.last();
    req.destroy();
    await waitFor(() => rec.closedAt !== undefined, 'the upstream request to be closed', 1500);
    expect(rec.aborted).toBe(true);
  });
});

describe('slow clients', () => {
  test('a client that never finishes its request headers gets a 408 and its connection closed after headersTimeoutSeconds', async () => {
    const before = py.requests.length;
    const c = await RawClient.connect(gw.port);
    c.write(`GET /v1/demo/app/slowloris HTTP/1.1\r\nHost: x\r\nAuthorization: ApiKey ${key}\r\n`);
    try {
      // headersTimeoutSeconds is 1: allow generous slack, but not the 30 s of Node's default check interval. Part of
      // a head has arrived, so the gateway answers (clientError ERR_HTTP_REQUEST_TIMEOUT) before it closes.
      const r = await c.next({ timeoutMs: 4000 });
      expect(r.status).toBe(408);
      expect(r.headers['content-type']).toMatch(/^application\/json/);
      expect(r.headers.connection).toBe('close');
      expect(JSON.parse(r.text)).toEqual({ error: 'request headers not received within 1s' });
      await expect(c.next({ timeoutMs: 2000 })).rejects.toThrow(/^connection closed/);
    } finally {
      c.close();
    }
    expect(py.requests.length).toBe(before);
  });
});
