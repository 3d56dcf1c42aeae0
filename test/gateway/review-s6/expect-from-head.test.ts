// Review of the request path's reshaping (2026-11-27, R1): the Expect header is read from the request head
// (request-head.ts expectationOf) rather than from which of Node's events fired, and the three events make the same
// exchange. Pinned on real sockets where the event and the head could disagree or the 100 could go out of place: a
// request pipelined behind another, a key that is refused (no 100, the body never read, the connection closed), a
// chunked body read whole on an LLM route, and HTTP/1.0 (no 100 at all, however the value is written).
import { afterAll, beforeAll, expect, test } from '@jest/globals';
import { RecordingBackend } from '../../support/backends.js';
import { RawClient, rawHttp, startGateway, type Gateway } from '../../support/harness.js';

let py: RecordingBackend;
let llm: RecordingBackend;
let gw: Gateway;

beforeAll(async () => {
  py = await new RecordingBackend((req, res, rec) => {
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.end(`${req.url} got ${rec.body.length}`);
  }).listen();
  llm = await new RecordingBackend((_req, res, rec) => {
    const text = JSON.stringify({
      object: 'chat.completion',
      choices: [{ index: 0, message: { role: 'assistant', content: `got ${rec.body.length}` } }],
      usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
    });
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
    res.end(text);
  }).listen();
  gw = await startGateway({
    deployments: [
      { namespace: 'demo', name: 'py', type: 'python', url: py.url },
      { namespace: 'demo', name: 'chat', modelServer: 'llm', url: llm.url },
    ],
    keys: [{ name: 'k', projects: 'demo' }],
  });
});

afterAll(async () => {
  await gw?.close();
  await Promise.all([py?.close(), llm?.close()]);
});

const host = (): [string, string] => ['Host', `127.0.0.1:${gw.port}`];
const authz = (k = gw.keys.k): [string, string] => ['Authorization', `ApiKey ${k}`];

test('pipelined behind another request: its 100 comes after the answer before it, then its own answer', async () => {
  const c = await RawClient.connect(gw.port);
  try {
    c.write(
      Buffer.concat([
        rawHttp('GET', '/v1/demo/py/before', [host(), authz()]),
        rawHttp('POST', '/v1/demo/py/after', [host(), authz(), ['Expect', '100-continue'], ['Content-Length', '5']]),
      ]),
    );
    const first = await c.next();
    expect([first.status, first.text]).toEqual([200, '/before got 0']);
    const interim = await c.next();
    expect(interim.status).toBe(100);
    c.write('hello');
    const second = await c.next();
    expect([second.status, second.text]).toEqual([200, '/after got 5']);
  } finally {
    c.close();
  }
});

test('a refused key with Expect: 100-continue: 401 and no 100, the body is never asked for and the connection closes', async () => {
  const before = py.requests.length;
  const c = await RawClient.connect(gw.port);
  try {
    c.write(
      rawHttp('POST', '/v1/demo/py/refused', [
        host(),
        authz('sg_nope.not-a-key'),
        ['Expect', '100-continue'],
        ['Content-Length', '5'],
      ]),
    );
    const r = await c.next();
    expect(r.status).toBe(401);
    const closed = new Promise<void>((resolve) => c.socket.once('close', () => resolve()));
    await closed;
  } finally {
    c.close();
  }
  expect(py.requests.length).toBe(before);
});

test('a chunked body read whole on an LLM route: 100 once admitted, then the answer to the whole body', async () => {
  const body = JSON.stringify({ model: 'chat', messages: [{ role: 'user', content: 'x'.repeat(5000) }] });
  const c = await RawClient.connect(gw.port);
  try {
    c.write(
      rawHttp('POST', '/v1/demo/chat/v1/chat/completions', [
        host(),
        authz(),
        ['Expect', '100-continue'],
        ['Content-Type', 'application/json'],
        ['Transfer-Encoding', 'chunked'],
      ]),
    );
    expect((await c.next()).status).toBe(100);
    const half = Math.floor(body.length / 2);
    for (const part of [body.slice(0, half), body.slice(half)])
      c.write(`${Buffer.byteLength(part).toString(16)}\r\n${part}\r\n`);
    c.write('0\r\n\r\n');
    const r = await c.next();
    expect(r.status).toBe(200);
    expect(JSON.parse(r.text).choices[0].message.content).toBe(`got ${Buffer.byteLength(body)}`);
  } finally {
    c.close();
  }
  expect(llm.requests.at(-1)!.headers['content-length']).toBe(String(Buffer.byteLength(body)));
});

test('HTTP/1.0 with Expect: 100-continue: no 100, the body sent along is forwarded', async () => {
  const c = await RawClient.connect(gw.port);
  try {
    c.write(
      `POST /v1/demo/py/old HTTP/1.0\r\nAuthorization: ApiKey ${gw.keys.k}\r\nExpect: 100-continue\r\n` +
        'Content-Length: 3\r\n\r\nabc',
    );
    const r = await c.next();
    expect([r.status, r.text]).toEqual([200, '/old got 3']);
  } finally {
    c.close();
  }
});
