// Websocket tunnels end and are counted (found by a hostile review: 300 of 300 idle tunnels were still open after 65 s,
// nothing capped them, and the log line was written at open with 0 bytes and no upstream): a tunnel with no data either
// way for limits.websocketIdleTimeoutSeconds is closed (pings count as data); tunnels per key and per client address
// are capped (429 in the route's dialect); the access-log line is written when the tunnel ends.
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import WebSocket from 'ws';
import { startPythonBackend, type RecordingBackend } from '../../support/backends.js';
import { startGateway, type Gateway } from '../../support/harness.js';
import { waitFor } from '../../support/wait.js';

let py: RecordingBackend;
let gw: Gateway;

beforeAll(async () => {
  py = await startPythonBackend();
  gw = await startGateway({
    config: { limits: { websocketIdleTimeoutSeconds: 0.5, websocketsPerKey: 2, websocketsPerClient: 3 } },
    deployments: [
      { namespace: 'demo', name: 'app', type: 'python', url: py.url },
      { namespace: 'demo', name: 'chat', modelServer: 'llm', url: py.url },
    ],
    keys: [
      { name: 'k-idle', projects: 'demo' },
      { name: 'k-cap', projects: 'demo' },
      { name: 'k-a', projects: 'demo' },
      { name: 'k-b', projects: 'demo' },
      { name: 'k-log', projects: 'demo' },
    ],
  });
});

afterAll(async () => {
  await gw?.close();
  await py?.close();
});

/** A websocket through the gateway, open (or the status of the refusal and its body). */
function connect(
  key: string,
  path = '/v1/demo/app/ws',
): Promise<{ ws: WebSocket; closed: Promise<number> } | { status: number; body: string }> {
  const ws = new WebSocket(`ws://127.0.0.1:${gw.port}${path}`, {
    headers: { authorization: `Bearer ${gw.keys[key]}` },
  });
  const closed = new Promise<number>((r) => ws.once('close', (code) => r(code)));
  return new Promise((resolve, reject) => {
    ws.once('open', () => resolve({ ws, closed }));
    ws.once('unexpected-response', (_req, res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString() }));
    });
    ws.once('error', (e) => (ws.readyState === WebSocket.CLOSED ? undefined : reject(e)));
  });
}

async function open(key: string, path?: string): Promise<{ ws: WebSocket; closed: Promise<number> }> {
  const c = await connect(key, path);
  if (!('ws' in c)) throw new Error(`refused: ${c.status} ${c.body}`);
  return c;
}

const accessLines = (key: string) =>
  gw.logs
    .map((l) => JSON.parse(l) as Record<string, unknown>)
    .filter((l) => l.key === key && l.status === 101 && l.bytesIn !== undefined);

describe('idle websockets', () => {
  test('a tunnel with no data either way is closed after the idle timeout (1001)', async () => {
    const { closed } = await open('k-idle');
    const t0 = Date.now();
    expect(await closed).toBe(1001);
    // The sweep runs once a second: closed between the timeout and the timeout plus one period.
    expect(Date.now() - t0).toBeGreaterThanOrEqual(450);
    expect(Date.now() - t0).toBeLessThan(3000);
  });

  test('pings count as activity: a pinging client stays open well past the timeout', async () => {
    const { ws } = await open('k-idle');
    let pongs = 0;
    ws.on('pong', () => pongs++);
    const timer = setInterval(() => ws.ping(), 100);
    try {
      // 2 s of pings: four times the idle timeout, and past two sweeps.
      await waitFor(() => pongs >= 20, '20 pongs', 6000);
      expect(ws.readyState).toBe(WebSocket.OPEN);
    } finally {
      clearInterval(timer);
      ws.close();
    }
  });

  test('messages either way count too: an echo every 100 ms keeps the tunnel open', async () => {
    const { ws } = await open('k-idle');
    let echoes = 0;
    ws.on('message', () => echoes++);
    const timer = setInterval(() => ws.send('x'), 100);
    try {
      await waitFor(() => echoes >= 20, '20 echoes', 6000);
      expect(ws.readyState).toBe(WebSocket.OPEN);
    } finally {
      clearInterval(timer);
      ws.close();
    }
  });
});

describe('caps on open tunnels', () => {
  test('a key past limits.websocketsPerKey gets 429 until one of its tunnels ends', async () => {
    const a = await open('k-cap');
    const b = await open('k-cap', '/v1/demo/chat/v1/realtime');
    const third = await connect('k-cap');
    expect(third).toMatchObject({ status: 429 });
    expect(JSON.parse((third as { body: string }).body)).toEqual({
      error:
        'too many open websockets: API key "k-cap" has 2 websockets open (limits.websocketsPerKey); close one first',
    });
    // On an LLM route the refusal is an OpenAI error object.
    const fourth = await connect('k-cap', '/v1/demo/chat/v1/realtime');
    expect(fourth).toMatchObject({ status: 429 });
    expect(JSON.parse((fourth as { body: string }).body).error).toMatchObject({
      type: 'rate_limit_error',
      code: 'rate_limit_exceeded',
    });
    a.ws.close();
    await a.closed;
    const again = await waitFor(async () => {
      const c = await connect('k-cap');
      return 'ws' in c ? c : false;
    }, 'a tunnel once one ended');
    again.ws.close();
    b.ws.close();
    await Promise.all([again.closed, b.closed]);
  });

  test('a client address past limits.websocketsPerClient gets 429, whatever the key', async () => {
    const tunnels = [await open('k-a'), await open('k-a'), await open('k-b')];
    const refused = await connect('k-b');
    expect(refused).toMatchObject({ status: 429 });
    expect((refused as { body: string }).body).toMatch(/has 3 websockets open \(limits.websocketsPerClient\)/);
    for (const t of tunnels) t.ws.close();
    await Promise.all(tunnels.map((t) => t.closed));
  });
});

describe('the access-log line of a tunnel', () => {
  test('is written when the tunnel ends, with its bytes, duration and upstream', async () => {
    const { ws, closed } = await open('k-log');
    const echoed = new Promise((r) => ws.once('message', r));
    ws.send('y'.repeat(1000));
    await echoed;
    // Open, with data passed: no line yet.
    expect(accessLines('k-log')).toEqual([]);
    ws.close();
    await closed;
    const [line] = await waitFor(() => {
      const l = accessLines('k-log');
      return l.length === 1 ? l : false;
    }, 'the tunnel line');
    expect(line.upstream).toBe(new URL(py.url).host);
    // A 1000-byte masked frame in, its echo out.
    expect(line.bytesIn as number).toBeGreaterThan(1000);
    expect(line.bytesOut as number).toBeGreaterThan(1000);
    expect(line.ms as number).toBeGreaterThan(0);
  });
});
