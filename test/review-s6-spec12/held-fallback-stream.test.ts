// SPEC §12 fallbacks through the openai SDK with `stream: true` (R4 conformance probe, session 6): a 503 before any
// byte falls back and the stream comes from the fallback; a deployment whose only fallback the key is not granted
// answers its own failure (not a 403 or 404 of the fallback's).
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import OpenAI from 'openai';
import { afterAll, beforeAll, expect, test } from '@jest/globals';
import { startGateway, type Gateway } from '../support/harness.js';
import { llmDoc } from './fleet.js';

let failing: Server;
let streaming: Server;
const models: unknown[] = [];
let gw: Gateway;

const listen = async (s: Server) => {
  await new Promise<void>((ok) => s.listen(0, '127.0.0.1', ok));
  return `http://127.0.0.1:${(s.address() as AddressInfo).port}`;
};

beforeAll(async () => {
  failing = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(503, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: { message: 'overloaded', type: 'server_error' } }));
    });
  });
  streaming = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (req.method !== 'POST') return void res.writeHead(404).end(); // a scrape of /metrics: none here
      models.push((JSON.parse(Buffer.concat(chunks).toString()) as { model: unknown }).model);
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      for (const word of ['fall', 'back'])
        res.write(
          `data: ${JSON.stringify({ id: 'x', object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content: word } }] })}\n\n`,
        );
      res.end('data: [DONE]\n\n');
    });
  });
  const [bad, good] = [await listen(failing), await listen(streaming)];
  gw = await startGateway({
    files: {
      'llm.yaml': [
        llmDoc('demo', 'chat', [bad], { fallbacks: ['small'] }),
        llmDoc('demo', 'small', [good], { modelName: 'tiny' }),
        llmDoc('demo', 'lonely', [bad], { fallbacks: ['secret/chat'] }),
        llmDoc('secret', 'chat', [good]),
      ],
    },
    keys: [{ name: 'k', projects: 'demo' }],
  });
});

afterAll(async () => {
  await gw?.close();
  for (const s of [failing, streaming]) if (s) await new Promise((ok) => s.close(ok));
});

test('a 503 before any byte: the stream comes from the fallback, model rewritten, the answer names it', async () => {
  const client = new OpenAI({ baseURL: `${gw.url}/v1/demo/chat/v1`, apiKey: gw.keys.k, maxRetries: 0 });
  const { data: stream, response } = await client.chat.completions
    .create({ model: 'chat', stream: true, messages: [{ role: 'user', content: 'hi' }] })
    .withResponse();
  let text = '';
  for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
  expect(text).toBe('fallback');
  expect(response.headers.get('x-servegate-deployment')).toBe('demo/small');
  expect(models).toEqual(['tiny']);
});

test("the only fallback not granted to the key is skipped: the client gets the deployment's own 503", async () => {
  const client = new OpenAI({ baseURL: `${gw.url}/v1/demo/lonely/v1`, apiKey: gw.keys.k, maxRetries: 0 });
  const err = await client.chat.completions
    .create({ model: 'lonely', messages: [{ role: 'user', content: 'hi' }] })
    .then(
      () => undefined,
      (e: unknown) => e,
    );
  expect(err).toBeInstanceOf(OpenAI.APIError);
  expect((err as InstanceType<typeof OpenAI.APIError>).status).toBe(503);
  expect((err as InstanceType<typeof OpenAI.APIError>).message).toContain('overloaded');
  expect(models).toEqual(['tiny']);
});
