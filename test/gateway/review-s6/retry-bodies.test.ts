// Review of the request path's reshaping (2026-11-27, R1): retries with bodies. The body is a ClientBody now; a body of
// LET_GO_MIN (4 KB) or more is handed to undici as a send-once iterable and let go once written. A try whose connect
// is refused wrote nothing: the one retry, at the deployment's other address, sends the same body whole, small or
// large, read whole from a chunked upload or not; a body streamed through (python) is not retried. Each case has its
// own refused address: after one refused connect an address is passed over for a while (targets.ts `unreachable`),
// so only the first request of a deployment meets it.
import type { ServerResponse } from 'node:http';
import { afterAll, beforeAll, expect, test } from '@jest/globals';
import { closedPort, RecordingBackend } from '../../support/backends.js';
import { RawClient, rawHttp, send, startGateway, type Gateway } from '../../support/harness.js';

let live: RecordingBackend;
let gw: Gateway;
const llm = (name: string, refused: number) => ({
  apiVersion: 'serving.servegate.dev/v1alpha1',
  kind: 'ServingDeployment',
  metadata: { name, namespace: 'demo' },
  spec: {
    type: 'model',
    modelServer: 'llm',
    balancing: { policy: 'round-robin' },
    backend: { urls: [`http://127.0.0.1:${refused}`, live.url] },
  },
});

beforeAll(async () => {
  live = await new RecordingBackend((_req, res: ServerResponse, rec) => {
    const text = JSON.stringify({
      object: 'chat.completion',
      choices: [{ index: 0, message: { role: 'assistant', content: `got ${rec.body.length}` } }],
      usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
    });
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
    res.end(text);
  }).listen();
  const refused = [await closedPort(), await closedPort(), await closedPort(), await closedPort()];
  gw = await startGateway({
    files: {
      'llm.yaml': [
        llm('pair-small', refused[0]),
        llm('pair-large', refused[1]),
        llm('pair-chunked', refused[2]),
        {
          apiVersion: 'serving.servegate.dev/v1alpha1',
          kind: 'ServingDeployment',
          metadata: { name: 'uploads', namespace: 'demo' },
          spec: {
            type: 'python',
            balancing: { policy: 'round-robin' },
            backend: { urls: [`http://127.0.0.1:${refused[3]}`, live.url] },
          },
        },
      ],
    },
    keys: [{ name: 'k', projects: 'demo' }],
  });
});

afterAll(async () => {
  await gw?.close();
  await live?.close();
});

const retries = () => gw.logs.filter((l) => l.includes('connect failed, retrying')).length;
const body = (n: number) =>
  JSON.stringify({ model: 'pair', messages: [{ role: 'user', content: `${n}:` + 'p'.repeat(n) }] });

test('small and 4 KB+ bodies: every request is answered, the refused address retried, the body whole at the other', async () => {
  // Round robin over two addresses, the refused one first: the first small and the first large body meet it.
  const retried: number[] = [];
  for (const n of [10, 6000, 20, 9000, 30, 12000]) {
    const before = retries();
    const sent = body(n);
    const r = await send(`${gw.url}/v1/demo/pair-${n < 4096 ? 'small' : 'large'}/v1/chat/completions`, {
      headers: { authorization: `ApiKey ${gw.keys.k}`, 'content-type': 'application/json' },
      body: sent,
    });
    expect([n, r.status]).toEqual([n, 200]);
    const got = live.requests.at(-1)!;
    expect([n, got.body.toString()]).toEqual([n, sent]);
    expect(got.headers['content-length']).toBe(String(Buffer.byteLength(sent)));
    if (retries() > before) retried.push(n);
  }
  // Small and large bodies both went through a retry.
  expect(retried.some((n) => n < 4096)).toBe(true);
  expect(retried.some((n) => n >= 4096)).toBe(true);
});

test('a 4 KB+ chunked upload read whole (LLM) is retried whole; one streamed through (python) is not retried', async () => {
  const answers: number[] = [];
  const before = retries();
  for (let i = 0; i < 2; i++) {
    const sent = body(7000 + i);
    const c = await RawClient.connect(gw.port);
    try {
      c.write(
        rawHttp('POST', '/v1/demo/pair-chunked/v1/chat/completions', [
          ['Host', 'x'],
          ['Authorization', `ApiKey ${gw.keys.k}`],
          ['Content-Type', 'application/json'],
          ['Transfer-Encoding', 'chunked'],
        ]),
      );
      c.write(`${Buffer.byteLength(sent).toString(16)}\r\n${sent}\r\n0\r\n\r\n`);
      const r = await c.final();
      answers.push(r.status);
      expect(live.requests.at(-1)!.body.toString()).toBe(sent);
    } finally {
      c.close();
    }
  }
  expect(answers).toEqual([200, 200]);
  expect(retries()).toBeGreaterThan(before);
  // Streamed through: the body cannot be sent twice, so the request that meets the refused address first is 502.
  const streamed: number[] = [];
  for (let i = 0; i < 2; i++) {
    const c = await RawClient.connect(gw.port);
    try {
      c.write(
        rawHttp('POST', `/v1/demo/uploads/up-${i}`, [
          ['Host', 'x'],
          ['Authorization', `ApiKey ${gw.keys.k}`],
          ['Content-Type', 'application/octet-stream'],
          ['Transfer-Encoding', 'chunked'],
        ]),
      );
      c.write(`1770\r\n${'u'.repeat(6000)}\r\n0\r\n\r\n`);
      streamed.push((await c.final()).status);
    } finally {
      c.close();
    }
  }
  expect(streamed.sort()).toEqual([200, 502]);
});
