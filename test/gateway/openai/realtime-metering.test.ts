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

// Limits hold inside a session (found by a hostile review: one session passed 21 response.done, 10.5 times a tpm of
// 300, in 4 s): each client response.create is a request against the key's and the deployment's per-minute windows;
// once one is exhausted, the next response.create gets an error event and never reaches the backend.
describe('limits inside a realtime session', () => {
  let wss: WebSocketServer;
  let gw: Gateway;
  /** The events the backend received, by type. */
  const got: string[] = [];

  beforeAll(async () => {
    wss = new WebSocketServer({ port: 0, host: '127.0.0.1' });
    await new Promise((r) => wss.once('listening', r));
    wss.on('connection', (ws) => {
      // One response at a time, as a server streams them (fragments of two messages cannot interleave).
      let chain = Promise.resolve();
      ws.on('message', (m) => {
        const type = (JSON.parse(String(m)) as { type: string }).type;
        got.push(type);
        // Server-side turn detection: a committed turn starts a response with no response.create.
        if (type === 'input_audio_buffer.commit') {
          ws.send(JSON.stringify({ type: 'response.created', response: { id: 'r' } }));
          ws.send(done(50, 100).toString());
          return;
        }
        if (type !== 'response.create') return;
        chain = chain.then(
          () =>
            new Promise<void>((resolve) => {
              // A fragmented delta (three frames) before the usage, the rest 100 ms after the first fragment: an
              // error event the gateway adds in between must wait for the end of the message.
              ws.send('{"type":"response.text.delta","delta":"', { fin: false });
              setTimeout(() => {
                ws.send('x'.repeat(10_000), { fin: false });
                ws.send('"}', { fin: true });
                ws.send(done(50, 100).toString());
                resolve();
              }, 100);
            }),
        );
      });
    });
    const url = `http://127.0.0.1:${(wss.address() as AddressInfo).port}`;
    gw = await startGateway({
      deployments: [
        { namespace: 'demo', name: 'rt', modelServer: 'llm', url },
        { namespace: 'demo', name: 'rt2', modelServer: 'llm', url, limits: { requestsPerMinute: 3 } },
        { namespace: 'demo', name: 'rt3', modelServer: 'llm', url, limits: { requestsPerMinute: 3 } },
      ],
      keys: [
        { name: 'k-tpm', projects: 'demo', tpm: 300 },
        { name: 'k-free', projects: 'demo' },
        { name: 'k-vad', projects: 'demo', tpm: 300 },
        { name: 'k-budget', projects: 'demo', fields: { budgetTokens: '300' } },
      ],
    });
  });

  afterAll(async () => {
    await gw?.close();
    await new Promise((r) => wss?.close(r));
  });

  /** A session; `events` collects every event the client receives. */
  async function session(key: string, path: string) {
    const ws = new WebSocket(`${gw.url.replace('http', 'ws')}${path}`, {
      headers: { authorization: `Bearer ${gw.keys[key]}` },
    });
    await new Promise((r, j) => ws.once('open', r).once('error', j));
    const events: Array<{ type: string; error?: Record<string, unknown> }> = [];
    ws.on('message', (m) => events.push(JSON.parse(String(m))));
    const count = (type: string) => events.filter((e) => e.type === type).length;
    return { ws, events, count };
  }

  test('a key with tpm 300 and 150 tokens a response: response.create is refused with an error event once spent', async () => {
    const { ws, events, count } = await session('k-tpm', '/v1/demo/rt/v1/realtime?model=x');
    const before = got.length;
    // One at a time, as a client waits for each answer: a response is admitted while the window has a token left
    // (it refills continuously), as an HTTP request is; its size is known only when it is done.
    let answered = 0;
    for (let i = 0; i < 10; i++) {
      ws.send(JSON.stringify({ type: 'response.create', event_id: `evt_${i}` }));
      answered++;
      await waitFor(() => count('response.done') + count('error') === answered, `answer ${i}`);
    }
    const done = count('response.done');
    // 2 responses spend the 300 tokens; a third may start in the milliseconds the window refills. Never 21.
    expect(done).toBeGreaterThanOrEqual(2);
    expect(done).toBeLessThanOrEqual(3);
    const errors = events.filter((e) => e.type === 'error').map((e) => e.error);
    expect(errors).toHaveLength(10 - done);
    expect(errors[0]).toMatchObject({ type: 'rate_limit_error', code: 'rate_limit_exceeded', event_id: `evt_${done}` });
    expect(String(errors[0]!.message)).toMatch(/^rate limit exceeded: .*tokens/);
    // Other events still pass (the session is not cut); the refused response.create never reached the backend.
    ws.send(JSON.stringify({ type: 'input_audio_buffer.append', audio: 'AAAA' }));
    await waitFor(() => got.length === before + done + 1, 'the append');
    expect(got.slice(before)).toEqual([...Array<string>(done).fill('response.create'), 'input_audio_buffer.append']);
    ws.close();
  });

  test("a key's budget (SPEC §14): each response.done is charged, and response.create is refused once it is spent", async () => {
    const { ws, events, count } = await session('k-budget', '/v1/demo/rt/v1/realtime?model=x');
    const before = got.length;
    for (let i = 0; i < 5; i++) {
      ws.send(JSON.stringify({ type: 'response.create', event_id: `b_${i}` }));
      await waitFor(() => count('response.done') + count('error') === i + 1, `answer ${i}`);
    }
    // 150 tokens a response against 300: admitted at 0 and at 150 spent, refused from 300 on (a budget does not refill).
    expect(count('response.done')).toBe(2);
    const errors = events.filter((e) => e.type === 'error').map((e) => e.error);
    expect(errors).toHaveLength(3);
    expect(errors[0]).toMatchObject({ type: 'insufficient_quota', code: 'insufficient_quota', event_id: 'b_2' });
    expect(String(errors[0]!.message)).toMatch(/API key "k-budget" has spent 300 tokens of 300/);
    expect(got.slice(before)).toEqual(['response.create', 'response.create']);
    ws.close();
  });

  test("a deployment's rpm counts each response.create as a request (the upgrade is one too)", async () => {
    const { ws, count } = await session('k-free', '/v1/demo/rt2/v1/realtime?model=x');
    for (let i = 0; i < 3; i++) ws.send(JSON.stringify({ type: 'response.create' }));
    await waitFor(() => count('response.done') === 2 && count('error') === 1, 'two responses and one refusal');
    ws.close();
  });

  test('an error event lands between messages, never inside a fragmented one', async () => {
    const { ws, events, count } = await session('k-free', '/v1/demo/rt3/v1/realtime?model=x');
    let protocolError: Error | undefined;
    ws.on('error', (e) => (protocolError = e));
    // The upgrade and A, B take the deployment's 3 requests; C is refused while A's delta is still open (its first
    // fragment passed, the rest is 100 ms away): its error event waits for the end of that message.
    const before = got.length;
    for (const id of ['A', 'B']) ws.send(JSON.stringify({ type: 'response.create', event_id: id }));
    // The backend has both (A's first fragment went out before B came in): C is refused inside A's open message.
    await waitFor(() => got.length === before + 2, 'A and B at the backend');
    ws.send(JSON.stringify({ type: 'response.create', event_id: 'C' }));
    await waitFor(() => count('response.done') === 2 && count('error') === 1, 'two responses and one refusal');
    expect(protocolError).toBeUndefined();
    expect(events.map((e) => e.type).slice(0, 2)).toEqual(['response.text.delta', 'error']);
    expect(events.filter((e) => e.type === 'response.text.delta')).toHaveLength(2);
    ws.close();
  });

  test('responses the backend starts on its own: once the window is spent, the session closes with 1008', async () => {
    const { ws, count } = await session('k-vad', '/v1/demo/rt/v1/realtime?model=x');
    const closed = new Promise<{ code: number; reason: string }>((r) =>
      ws.once('close', (code, reason) => r({ code, reason: String(reason) })),
    );
    let isClosed = false;
    void closed.then(() => (isClosed = true));
    for (let i = 1; i <= 10 && !isClosed; i++) {
      ws.send(JSON.stringify({ type: 'input_audio_buffer.commit' }));
      await waitFor(() => count('response.done') === i || isClosed, `turn ${i}`);
    }
    const { code, reason } = await closed;
    expect(code).toBe(1008);
    expect(reason).toMatch(/^rate_limit_exceeded: rate limit exceeded: .*tokens/);
    // 150 tokens a turn against 300: two or three responses (the window refills continuously), never ten.
    expect(count('response.done')).toBeGreaterThanOrEqual(2);
    expect(count('response.done')).toBeLessThanOrEqual(3);
  });
});
