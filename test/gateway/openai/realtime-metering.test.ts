// Realtime (websocket) traffic is metered too: each response.done's usage is counted and charged as its frames pass,
// with any framing (fragments, chunks split anywhere); the backend is not offered a compression extension that would
// hide the frames.
import type { AddressInfo } from 'node:net';
import { WebSocket, WebSocketServer } from 'ws';
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import { RealtimeMeter } from '../../../src/gateway/openai/realtime-meter.js';
import type { TokenUsage } from '../../../src/gateway/openai/usage-meter.js';
import { send, startGateway, type Gateway } from '../../support/harness.js';
import { metricValue } from '../../support/metrics.js';
import { waitFor } from '../../support/wait.js';

/** One websocket frame as a server writes it (unmasked), or a client (masked). */
function frame(opcode: number, payload: Buffer, fin = true, mask = false): Buffer {
  const head = [(fin ? 0x80 : 0) | opcode];
  const len = payload.length;
  const m = mask ? 0x80 : 0;
  if (len < 126) head.push(m | len);
  else if (len < 65536) head.push(m | 126, len >> 8, len & 0xff);
  else {
    head.push(m | 127, 0, 0, 0, 0);
    head.push((len >>> 24) & 0xff, (len >>> 16) & 0xff, (len >>> 8) & 0xff, len & 0xff);
  }
  if (!mask) return Buffer.concat([Buffer.from(head), payload]);
  const key = Buffer.from([1, 2, 3, 4]);
  const body = Buffer.from(payload.map((b, i) => b ^ key[i & 3]));
  return Buffer.concat([Buffer.from(head), key, body]);
}
const done = (input: number, output: number) =>
  Buffer.from(
    JSON.stringify({ type: 'response.done', response: { usage: { input_tokens: input, output_tokens: output } } }),
  );

describe('RealtimeMeter', () => {
  test('usage of every response.done, whatever the framing and however the bytes are split', () => {
    const audio = Buffer.from(JSON.stringify({ type: 'response.audio.delta', delta: 'A'.repeat(70_000) }));
    const d1 = done(5, 7);
    const d2 = done(11, 13);
    const stream = Buffer.concat([
      frame(1, audio),
      frame(9, Buffer.from('ping')),
      frame(1, d1.subarray(0, 10), false),
      frame(9, Buffer.alloc(0)), // a control frame between fragments
      frame(0, d1.subarray(10), true),
      frame(2, Buffer.from([1, 2, 3])),
      frame(1, d2, true, true),
    ]);
    for (const step of [1, 7, 1000, stream.length]) {
      const seen: TokenUsage[] = [];
      const m = new RealtimeMeter((u) => seen.push(u));
      for (let i = 0; i < stream.length; i += step) m.push(stream.subarray(i, i + step));
      expect(seen).toEqual([
        { prompt: 5, completion: 7 },
        { prompt: 11, completion: 13 },
      ]);
    }
  });

  test('a text that only mentions response.done, or a nested one, is not usage', () => {
    const seen: TokenUsage[] = [];
    const m = new RealtimeMeter((u) => seen.push(u));
    m.push(
      frame(
        1,
        Buffer.from(JSON.stringify({ type: 'conversation.item', text: 'response.done', usage: { input_tokens: 9 } })),
      ),
    );
    expect(seen).toEqual([]);
  });
});

describe('through the gateway', () => {
  let wss: WebSocketServer;
  let gw: Gateway;
  let offered: string | undefined;

  beforeAll(async () => {
    wss = new WebSocketServer({ port: 0, host: '127.0.0.1' });
    await new Promise((r) => wss.once('listening', r));
    wss.on('connection', (ws, req) => {
      offered = req.headers['sec-websocket-extensions'];
      ws.on('message', () => {
        ws.send(JSON.stringify({ type: 'response.audio.delta', delta: 'x'.repeat(5000) }));
        ws.send(done(12, 30).toString()); // a text frame, as the Realtime API sends
      });
    });
    gw = await startGateway({
      deployments: [
        {
          namespace: 'demo',
          name: 'rt',
          modelServer: 'llm',
          url: `http://127.0.0.1:${(wss.address() as AddressInfo).port}`,
        },
      ],
      keys: [{ name: 'k-rt', projects: 'demo', tpm: 60 }],
    });
  });

  afterAll(async () => {
    await gw?.close();
    await new Promise((r) => wss?.close(r));
  });

  const tokens = async (type: string) =>
    metricValue((await send(`${gw.adminUrl}/metrics`)).text, 'servegate_llm_key_tokens_total', { key: 'k-rt', type }) ??
    0;

  test('each response.done is counted and charged: the key tpm then trips on the next session', async () => {
    for (let session = 0; session < 2; session++) {
      const ws = new WebSocket(`${gw.url.replace('http', 'ws')}/v1/demo/rt/v1/realtime?model=x`, {
        headers: { authorization: `Bearer ${gw.keys['k-rt']}` },
      });
      await new Promise((r, j) => ws.once('open', r).once('error', j));
      const got = new Promise<string>((r) =>
        ws.on('message', (m) => String(m).includes('response.done') && r(String(m))),
      );
      ws.send(JSON.stringify({ type: 'response.create' }));
      expect(JSON.parse(await got).response.usage).toEqual({ input_tokens: 12, output_tokens: 30 });
      ws.close();
    }
    // The client offered permessage-deflate (ws does by default); the backend was not: its frames stay readable.
    expect(offered).toBeUndefined();
    await waitFor(async () => (await tokens('completion')) === 60);
    expect(await tokens('prompt')).toBe(24);
    // 84 tokens charged against a tpm of 60: the next session is refused.
    const third = new WebSocket(`${gw.url.replace('http', 'ws')}/v1/demo/rt/v1/realtime?model=x`, {
      headers: { authorization: `Bearer ${gw.keys['k-rt']}` },
    });
    const status = await new Promise<number>((r) =>
      third.once('unexpected-response', (_req, res) => r(res.statusCode ?? 0)),
    );
    expect(status).toBe(429);
  });
});
