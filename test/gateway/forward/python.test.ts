// Python deployments: any method, any path, bodies streamed intact, websockets (SPEC §3 "type python").
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import WebSocket from 'ws';
import { sha256, startPythonBackend, type RecordingBackend } from '../../support/backends.js';
import { send, startGateway, type Gateway } from '../../support/harness.js';

let py: RecordingBackend;
let gw: Gateway;
let key: string;
const auth = () => ({ authorization: `ApiKey ${key}` });

beforeAll(async () => {
  py = await startPythonBackend();
  gw = await startGateway({
    deployments: [{ namespace: 'demo', name: 'app', type: 'python', url: py.url }],
    keys: [{ name: 'apikey-python', projects: 'demo' }],
  });
  key = gw.keys['apikey-python'];
});

afterAll(async () => {
  await gw?.close();
  await py?.close();
});

describe('python deployments', () => {
  test.each([
    ['PUT', 'a JSON body', '{"a":1}'],
    ['DELETE', 'no body', undefined],
    ['PATCH', 'a text body', 'patch me'],
    ['GET', 'a body', 'get with a body'],
    ['POST', 'a form body', 'a=1&b=2'],
    ['OPTIONS', 'no body (not a CORS preflight)', undefined],
  ])('%s with %s reaches the server as sent', async (method, _what, body) => {
    const r = await send(`${gw.url}/v1/demo/app/items/42?verbose=true`, {
      method,
      headers: { ...auth(), 'content-type': 'text/plain' },
      body,
    });
    expect(r.status).toBe(200);
    const rec = py.last();
    expect(rec.method).toBe(method);
    expect(rec.url).toBe('/items/42?verbose=true');
    expect(rec.body.toString()).toBe(body ?? '');
    expect(r.json()).toMatchObject({ backend: 'python', method, bodySha256: sha256(body ?? '') });
  });

  test('HEAD is forwarded and answered without a body', async () => {
    const r = await send(`${gw.url}/v1/demo/app/`, { method: 'HEAD', headers: auth() });
    expect(r.status).toBe(200);
    expect(r.body.length).toBe(0);
    expect(py.last().method).toBe('HEAD');
  });

  test.each([
    ['/v1/demo/app', '/'],
    ['/v1/demo/app/', '/'],
    ['/v1/demo/app/healthz', '/healthz'],
    ['/v1/demo/app/deep/nested/file.json?x=1&x=2', '/deep/nested/file.json?x=1&x=2'],
    ['/v1/demo/app/v1/models/anything:predict', '/v1/models/anything:predict'],
    ['/v1/demo/app/with%20space/caf%C3%A9', '/with%20space/caf%C3%A9'],
  ])('path %s reaches the server as %s', async (path, upstream) => {
    const r = await send(`${gw.url}${path}`, { headers: auth() });
    expect(r.status).toBe(200);
    expect(py.last().url).toBe(upstream);
  });

  test("the server's own status codes pass through", async () => {
    const r = await send(`${gw.url}/v1/demo/app/status/418`, { headers: auth() });
    expect(r.status).toBe(418);
    expect(r.json().backend).toBe('python');
  });

  test('several Set-Cookie headers come back as separate headers', async () => {
    const r = await send(`${gw.url}/v1/demo/app/cookies`, { headers: auth() });
    expect(r.status).toBe(200);
    expect(r.headers['set-cookie']).toEqual([
      'a=1; Path=/; HttpOnly',
      'b=2; Path=/; Expires=Wed, 21 Oct 2037 07:28:00 GMT',
    ]);
  });

  test('a binary body of a few MB goes up and comes back intact', async () => {
    const data = randomBytes(4 * 1024 * 1024 + 13);
    const r = await send(`${gw.url}/v1/demo/app/bytes`, {
      method: 'POST',
      headers: { ...auth(), 'content-type': 'application/octet-stream' },
      body: data,
      timeoutMs: 20_000,
    });
    expect(r.status).toBe(200);
    expect(py.last().body.length).toBe(data.length);
    expect(sha256(py.last().body)).toBe(sha256(data));
    expect(r.body.length).toBe(data.length);
    expect(sha256(r.body)).toBe(sha256(data));
  });

  test('a websocket opened through the gateway echoes text and binary messages', async () => {
    const ws = new WebSocket(`ws://127.0.0.1:${gw.port}/v1/demo/app/ws?room=7`, { headers: auth() });
    try {
      await new Promise<void>((resolve, reject) => {
        ws.once('open', () => resolve());
        ws.once('error', reject);
        ws.once('unexpected-response', (_req, res) => reject(new Error(`upgrade refused: ${res.statusCode}`)));
      });
      const next = () =>
        new Promise<{ data: Buffer; isBinary: boolean }>((resolve, reject) => {
          const t = setTimeout(() => reject(new Error('no echo within 3 s')), 3000);
          ws.once('message', (data, isBinary) => {
            clearTimeout(t);
            resolve({ data: data as Buffer, isBinary });
          });
        });
      let p = next();
      ws.send('hello through the gateway');
      expect((await p).data.toString()).toBe('hello through the gateway');
      const bin = randomBytes(70_000);
      p = next();
      ws.send(bin);
      const got = await p;
      expect(got.isBinary).toBe(true);
      expect(sha256(got.data)).toBe(sha256(bin));
    } finally {
      ws.close();
    }
    const up = py.upgrades.at(-1)!;
    expect(up.url).toBe('/ws?room=7');
    expect(up.headers.authorization).toBeUndefined();
    expect(up.headers['x-servegate-project']).toBe('demo');
    expect(up.headers['x-servegate-key']).toBe('apikey-python');
  });

  test('a websocket without a key is refused with 401 and never reaches the server', async () => {
    const before = py.upgrades.length;
    const ws = new WebSocket(`ws://127.0.0.1:${gw.port}/v1/demo/app/ws`);
    const status = await new Promise<number>((resolve, reject) => {
      ws.once('open', () => reject(new Error('opened without a key')));
      ws.once('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0));
      ws.once('error', (err) => reject(err));
    });
    ws.terminate();
    expect(status).toBe(401);
    expect(py.upgrades.length).toBe(before);
  });
});
