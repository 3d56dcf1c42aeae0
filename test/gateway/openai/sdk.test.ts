// The official openai SDK against an LLM deployment through the gateway: plain and streaming calls,
// incremental delivery, the gateway's errors shown by the SDK, and hang-ups reaching the backend.
import OpenAI from 'openai';
import { performance } from 'node:perf_hooks';
import { afterAll, beforeAll, beforeEach, describe, expect, test } from '@jest/globals';
import { startOpenAIBackend, type OpenAIBackend } from '../../support/backends.js';
import { within } from '../../support/net.js';
import { sleep } from '../../support/wait.js';
import { send, startGateway, type Gateway } from '../../support/harness.js';

let llm: OpenAIBackend;
let gw: Gateway;
let key: string;
let client: OpenAI;

const sdk = (baseURL: string, apiKey: string) => new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 10_000 });

beforeAll(async () => {
  llm = await startOpenAIBackend();
  gw = await startGateway({
    deployments: [
      { namespace: 'genai', name: 'chat', modelServer: 'llm', url: llm.url },
      { namespace: 'other', name: 'chat', modelServer: 'llm', url: llm.url },
    ],
    keys: [{ name: 'apikey-llm', projects: 'genai' }],
  });
  key = gw.keys['apikey-llm'];
  client = sdk(`${gw.url}/v1/genai/chat/v1`, key);
});

afterAll(async () => {
  await gw?.close();
  await llm?.close();
});

beforeEach(() => {
  llm.stream = { chunks: 3, delayMs: 10 };
});

describe('openai SDK through the gateway', () => {
  test('a non-streaming chat completion returns the model answer', async () => {
    const r = await client.chat.completions.create({
      model: 'tiny-llm',
      messages: [{ role: 'user', content: 'ping' }],
    });
    expect(r.choices[0].message.content).toBe('echo: ping');
    const rec = llm.last();
    expect(rec.url).toBe('/v1/chat/completions');
    expect(rec.headers.authorization).toBeUndefined();
  });

  test('a streaming chat completion delivers every chunk in order', async () => {
    llm.stream = { chunks: 6, delayMs: 5 };
    const stream = await client.chat.completions.create({
      model: 'tiny-llm',
      messages: [{ role: 'user', content: 'go' }],
      stream: true,
    });
    let text = '';
    let finish: string | null = null;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    expect(text).toBe('tok0 tok1 tok2 tok3 tok4 tok5 ');
    expect(finish).toBe('stop');
  });

  test('streamed chunks arrive as they are produced, not buffered until the end', async () => {
    llm.stream = { chunks: 5, delayMs: 120 };
    const stream = await client.chat.completions.create({
      model: 'tiny-llm',
      messages: [{ role: 'user', content: 'slow' }],
      stream: true,
    });
    const arrivals: number[] = [];
    for await (const chunk of stream) {
      if (chunk.choices[0]?.delta?.content) arrivals.push(performance.now());
    }
    const rec = llm.last();
    expect(arrivals.length).toBe(5);
    expect(rec.sent.length).toBe(5);
    // The first chunk reached the client before the backend had even produced the last one,
    // and every chunk arrived before the one after it was sent.
    expect(arrivals[0]).toBeLessThan(rec.sent[4]);
    for (let i = 0; i < 4; i++) expect(arrivals[i]).toBeLessThan(rec.sent[i + 1]);
  });

  test('the streamed response is an uncompressed event stream even when the client accepts gzip', async () => {
    llm.stream = { chunks: 2, delayMs: 5 };
    const r = await send(`${gw.url}/v1/genai/chat/v1/chat/completions`, {
      headers: { authorization: `Bearer ${key}`, 'accept-encoding': 'gzip, br' },
      body: { model: 'tiny-llm', messages: [{ role: 'user', content: 'x' }], stream: true },
    });
    expect(r.status).toBe(200);
    expect(r.headers['content-type']).toMatch(/^text\/event-stream/);
    expect(r.headers['content-encoding']).toBeUndefined();
    expect(r.text).toContain('data: [DONE]');
  });

  test('a streaming legacy completion works', async () => {
    const stream = await client.completions.create({ model: 'tiny-llm', prompt: 'p', stream: true });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.text ?? '';
    expect(text).toBe('tok0 tok1 tok2 ');
    expect(llm.last().url).toBe('/v1/completions');
  });

  test('models.list and embeddings.create work', async () => {
    const models = await client.models.list();
    expect(models.data.map((m) => m.id)).toEqual(['tiny-llm']);
    const emb = await client.embeddings.create({ model: 'tiny-llm', input: 'abc', encoding_format: 'float' });
    expect(emb.data[0].embedding).toEqual([0.25, -0.5, 0.125]);
  });

  test('a wrong key shows the gateway 401 message through the SDK error', async () => {
    const bad = `${key.slice(0, 17)}${'x'.repeat(key.length - 17)}`;
    const raw = await send(`${gw.url}/v1/genai/chat/v1/chat/completions`, {
      headers: { authorization: `Bearer ${bad}` },
      body: { model: 'tiny-llm', messages: [] },
    });
    expect(raw.status).toBe(401);
    const gatewayMessage: string = raw.json().error.message;
    expect(typeof gatewayMessage).toBe('string');
    expect(gatewayMessage.length).toBeGreaterThan(0);

    const before = llm.requests.length;
    const err = await sdk(`${gw.url}/v1/genai/chat/v1`, bad)
      .chat.completions.create({ model: 'tiny-llm', messages: [{ role: 'user', content: 'x' }] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.AuthenticationError);
    const e = err as InstanceType<typeof OpenAI.APIError>;
    expect(e.status).toBe(401);
    expect(e.message).toBe(`401 ${gatewayMessage}`);
    expect(typeof e.type).toBe('string');
    expect(llm.requests.length).toBe(before);
  });

  test('an unknown deployment shows the gateway 404 message through the SDK error', async () => {
    const err = await sdk(`${gw.url}/v1/genai/missing/v1`, key)
      .chat.completions.create({ model: 'tiny-llm', messages: [{ role: 'user', content: 'x' }] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    const e = err as InstanceType<typeof OpenAI.APIError>;
    expect(e.status).toBe(404);
    expect(typeof (e.error as { message?: unknown }).message).toBe('string');
    expect(e.message).toBe(`404 ${(e.error as { message: string }).message}`);
  });

  test('a key for another project shows a 403 through the SDK error', async () => {
    const before = llm.requests.length;
    const err = await sdk(`${gw.url}/v1/other/chat/v1`, key)
      .chat.completions.create({ model: 'tiny-llm', messages: [{ role: 'user', content: 'x' }] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.PermissionDeniedError);
    const e = err as InstanceType<typeof OpenAI.APIError>;
    expect(e.message).toBe(`403 ${(e.error as { message: string }).message}`);
    expect(llm.requests.length).toBe(before);
  });

  test('aborting a stream ends the upstream request', async () => {
    llm.stream = { chunks: 60, delayMs: 50 };
    const stream = await client.chat.completions.create({
      model: 'tiny-llm',
      messages: [{ role: 'user', content: 'long' }],
      stream: true,
    });
    let seen = 0;
    for await (const chunk of stream) {
      if (chunk.choices[0]?.delta?.content) seen++;
      if (seen === 2) break; // leaving the loop aborts the SDK's request
    }
    stream.controller.abort();
    const rec = llm.last();
    await within(rec.closed, 3000, "the backend's request to be closed");
    expect(rec.aborted).toBe(true);
    // The backend stopped producing long before the 60 chunks it would have sent.
    const sentAtClose = rec.sent.length;
    expect(sentAtClose).toBeLessThan(60);
    await sleep(200); // stays: the window in which a backend still fed would send more chunks (one every few ms)
    expect(rec.sent.length).toBe(sentAtClose);
  });
});
