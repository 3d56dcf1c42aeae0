// Review of the request path's reshaping (2026-11-27, R1): a request's body is a ClientBody now (its bytes and length
// together), edited in place for a fallback. Pinned end to end: a gzip-compressed chat body of 4 KB or more (a body
// undici is handed as a send-once iterable) that falls back after a 503 and then after a refused connection reaches
// the last fallback whole, decoded, `model` rewritten, with a Content-Length that is its own; and the access log line
// names that fallback's address as upstream, with the bytes it was sent as bytes in.
import { gzipSync } from 'node:zlib';
import type { ServerResponse } from 'node:http';
import { afterAll, beforeAll, expect, test } from '@jest/globals';
import { closedPort, RecordingBackend } from '../../support/backends.js';
import { eventually, send, startGateway, type Gateway } from '../../support/harness.js';

let failing: RecordingBackend;
let ok: RecordingBackend;
let gw: Gateway;

const doc = (name: string, url: string, extra: Record<string, unknown> = {}) => ({
  apiVersion: 'serving.servegate.dev/v1alpha1',
  kind: 'ServingDeployment',
  metadata: { name, namespace: 'demo' },
  spec: { type: 'model', modelServer: 'llm', backend: { url }, ...extra },
});

beforeAll(async () => {
  failing = await new RecordingBackend((_req, res: ServerResponse) => {
    res.writeHead(503, { 'content-type': 'application/json' });
    res.end('{"error":{"message":"overloaded","type":"server_error"}}');
  }).listen();
  ok = await new RecordingBackend((_req, res: ServerResponse, rec) => {
    const model = (JSON.parse(rec.body.toString()) as { model: string }).model;
    const text = JSON.stringify({
      object: 'chat.completion',
      model,
      choices: [{ index: 0, message: { role: 'assistant', content: 'fine' } }],
      usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 },
    });
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
    res.end(text);
  }).listen();
  const refused = `http://127.0.0.1:${await closedPort()}`;
  gw = await startGateway({
    files: {
      'llm.yaml': [
        doc('first', failing.url, { fallbacks: ['gone', 'last'] }),
        doc('gone', refused),
        doc('last', ok.url, { modelName: 'last-served' }),
      ],
    },
    keys: [{ name: 'k', projects: 'demo' }],
  });
});

afterAll(async () => {
  await gw?.close();
  await Promise.all([failing?.close(), ok?.close()]);
});

test('a compressed body of 4 KB or more down a chain of a 503 and a refused connection: whole at the last, and logged there', async () => {
  const prompt = Array.from({ length: 400 }, (_, i) => `line ${i} of the prompt`).join('\n');
  const plain = JSON.stringify({ model: 'first', messages: [{ role: 'user', content: prompt }] });
  const wire = gzipSync(plain);
  expect(wire.length).toBeGreaterThanOrEqual(1024);
  expect(Buffer.byteLength(plain)).toBeGreaterThanOrEqual(4096);
  const r = await send(`${gw.url}/v1/demo/first/v1/chat/completions`, {
    headers: {
      authorization: `ApiKey ${gw.keys.k}`,
      'content-type': 'application/json',
      'content-encoding': 'gzip',
    },
    body: wire,
  });
  expect([r.status, r.headers['x-servegate-deployment']]).toEqual([200, 'demo/last']);
  expect(failing.requests).toHaveLength(1);
  // The first deployment got the body as sent.
  expect(failing.requests[0].headers['content-encoding']).toBe('gzip');
  expect(failing.requests[0].body.equals(wire)).toBe(true);
  const got = ok.requests.at(-1)!;
  const sent = JSON.parse(got.body.toString()) as { model: string; messages: Array<{ content: string }> };
  expect(sent.model).toBe('last-served');
  expect(sent.messages[0].content).toBe(prompt);
  expect(got.headers['content-encoding']).toBeUndefined();
  expect(got.headers['content-length']).toBe(String(got.body.length));
  await eventually(() => {
    const line = gw.logs.find((l) => l.includes('"msg":"request"') && l.includes('"path":"/v1/demo/first/'));
    expect(line).toBeDefined();
    expect(JSON.parse(line!)).toMatchObject({
      status: 200,
      deployment: 'last',
      upstream: `127.0.0.1:${ok.port}`,
      bytesIn: got.body.length,
    });
  }, 3000);
});
