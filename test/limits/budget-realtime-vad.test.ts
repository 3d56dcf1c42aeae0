// A realtime session whose backend starts responses on its own (server-side turn detection) and whose key's budget
// runs out (SPEC §14): the session closes with 1008 and a reason that says why — `insufficient_quota: budget
// exhausted: ...`, as the error event of a refused response.create does — not `rate_limit_exceeded`, which tells a
// client to retry in seconds. Found by a hostile review.
import type { AddressInfo } from 'node:net';
import { WebSocket, WebSocketServer } from 'ws';
import { afterAll, beforeAll, expect, test } from '@jest/globals';
import { startGateway, type Gateway } from '../support/harness.js';
import { waitFor } from '../support/wait.js';

let wss: WebSocketServer;
let gw: Gateway;

beforeAll(async () => {
  wss = new WebSocketServer({ port: 0, host: '127.0.0.1' });
  await new Promise((r) => wss.once('listening', r));
  wss.on('connection', (ws) => {
    ws.on('message', (m) => {
      // Server-side turn detection: a committed turn starts a response with no response.create (150 tokens).
      if ((JSON.parse(String(m)) as { type: string }).type !== 'input_audio_buffer.commit') return;
      ws.send(JSON.stringify({ type: 'response.created', response: { id: 'r' } }));
      ws.send(JSON.stringify({ type: 'response.done', response: { usage: { input_tokens: 50, output_tokens: 100 } } }));
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
    keys: [{ name: 'k-budget', projects: 'demo', fields: { budgetTokens: '300' } }],
  });
});

afterAll(async () => {
  await gw?.close();
  await new Promise((r) => wss?.close(r));
});

test('responses the backend starts on its own: once the budget is spent, 1008 insufficient_quota', async () => {
  const ws = new WebSocket(`${gw.url.replace('http', 'ws')}/v1/demo/rt/v1/realtime?model=x`, {
    headers: { authorization: `Bearer ${gw.keys['k-budget']}` },
  });
  await new Promise((r, j) => ws.once('open', r).once('error', j));
  let done = 0;
  ws.on('message', (m) => void (String(m).includes('"response.done"') && done++));
  const closed = new Promise<{ code: number; reason: string }>((r) =>
    ws.once('close', (code, reason) => r({ code, reason: String(reason) })),
  );
  let isClosed = false;
  void closed.then(() => (isClosed = true));
  for (let i = 1; i <= 10 && !isClosed; i++) {
    ws.send(JSON.stringify({ type: 'input_audio_buffer.commit' }));
    await waitFor(() => done === i || isClosed, `turn ${i}`);
  }
  const { code, reason } = await closed;
  expect(code).toBe(1008);
  expect(reason).toMatch(/^insufficient_quota: budget exhausted: API key "k-budget" has spent/);
  // 150 tokens a turn against 300: the third response starts after the budget is spent.
  expect(done).toBeLessThanOrEqual(3);
});
