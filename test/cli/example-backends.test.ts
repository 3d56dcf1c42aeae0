// The sample servers of examples/backends/ speak their protocols well enough for real clients (openai SDK, ws).
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import OpenAI from 'openai';
import WebSocket from 'ws';
import { waitFor } from '../support/wait.js';

type Started = {
  port: number;
  close(): Promise<void>;
  stats?: { activeStreams: number; completedStreams: number; abortedStreams: number };
};
type Mod = { start(port: number, options?: object): Promise<Started> };
const load = (f: string) => import(new URL(`../../examples/backends/${f}`, import.meta.url).href) as Promise<Mod>;

describe('examples/backends/v1-server.mjs', () => {
  let s: Started;
  let base: string;
  beforeAll(async () => {
    s = await (await load('v1-server.mjs')).start(0, { models: ['iris', 'mnist'] });
    base = `http://127.0.0.1:${s.port}`;
  });
  afterAll(() => s.close());

  const post = (path: string, body: unknown) =>
    fetch(`${base}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: typeof body === 'string' ? body : JSON.stringify(body),
    });

  test.each([
    [
      'predict with instances',
      '/v1/models/iris:predict',
      {
        instances: [
          [5.1, 3.5, 1.4, 0.2],
          [0, 0, 9, 1],
        ],
      },
      { predictions: [0, 2] },
    ],
    ['predict with inputs', '/v1/models/iris:predict', { inputs: [[1, 7]] }, { predictions: [1] }],
    ['regress', '/v1/models/mnist:regress', { instances: [[1, 2, 3]] }, { predictions: [2] }],
    [
      'classify with examples',
      '/v1/models/mnist:classify',
      { examples: [[0, 1]] },
      { predictions: [{ class: 1, scores: [0.268941, 0.731059] }] },
    ],
  ])('%s answers {"predictions": [...]}', async (_n, path, body, want) => {
    const r = await post(path, body);
    expect(r.status).toBe(200);
    expect(await r.json()).toEqual(want);
  });

  test.each([
    ['a body that is not JSON', '/v1/models/iris:predict', '{nope', 400],
    ['a body without instances or inputs', '/v1/models/iris:predict', { foo: 1 }, 400],
    ['an unknown model', '/v1/models/nope:predict', { instances: [[1]] }, 404],
  ])('%s is an error in the KServe dialect', async (_n, path, body, status) => {
    const r = await post(path, body);
    expect(r.status).toBe(status);
    expect(await r.json()).toEqual({ error: expect.any(String) });
  });

  test('GET /v1/models/<name> reports readiness', async () => {
    const r = await fetch(`${base}/v1/models/iris`);
    expect(await r.json()).toEqual({ name: 'iris', ready: true });
  });
});

describe('examples/backends/llm-server.mjs', () => {
  let s: Started;
  let client: OpenAI;
  beforeAll(async () => {
    s = await (await load('llm-server.mjs')).start(0, { model: 'chat', chunkDelayMs: 50 });
    client = new OpenAI({ apiKey: 'unused', baseURL: `http://127.0.0.1:${s.port}/v1`, maxRetries: 0 });
  });
  afterAll(() => s.close());

  test('the openai SDK reads a chat completion', async () => {
    const r = await client.chat.completions.create({
      model: 'chat',
      messages: [{ role: 'user', content: 'Hello there' }],
    });
    expect(r.object).toBe('chat.completion');
    expect(r.choices[0].message).toMatchObject({ role: 'assistant', content: 'You said: Hello there' });
    expect(r.choices[0].finish_reason).toBe('stop');
    expect(r.usage?.total_tokens).toBeGreaterThan(0);
  });

  test('the openai SDK reads a streamed chat completion chunk by chunk, chunks arriving apart, with usage', async () => {
    const stream = await client.chat.completions.create({
      model: 'chat',
      messages: [{ role: 'user', content: 'one two three' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    const arrivals: number[] = [];
    let usage: unknown;
    for await (const chunk of stream) {
      arrivals.push(Date.now());
      text += chunk.choices[0]?.delta?.content ?? '';
      if (chunk.usage) usage = chunk.usage;
    }
    expect(text).toBe('You said: one two three');
    expect(usage).toMatchObject({ completion_tokens: 5 });
    // Not a speed assertion: the chunks are spread out in time (not one buffered burst).
    expect(arrivals[arrivals.length - 1] - arrivals[0]).toBeGreaterThanOrEqual(150);
  });

  test('the raw stream is Server-Sent Events ending in [DONE]', async () => {
    const r = await fetch(`http://127.0.0.1:${s.port}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'chat', prompt: 'hi', stream: true }),
    });
    expect(r.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const events = (await r.text()).split('\n\n').filter(Boolean);
    expect(events.every((e) => e.startsWith('data: '))).toBe(true);
    expect(events[events.length - 1]).toBe('data: [DONE]');
    const first = JSON.parse(events[0].slice(6));
    expect(first).toMatchObject({ object: 'text_completion', choices: [{ text: expect.any(String), index: 0 }] });
  });

  test('the openai SDK reads completions, models and embeddings (base64 by default, floats on request)', async () => {
    const c = await client.completions.create({ model: 'chat', prompt: 'Say hi', max_tokens: 2 });
    expect(c.choices[0]).toMatchObject({ text: ' You said:', finish_reason: 'length' });
    const models = await client.models.list();
    expect(models.data.map((m) => m.id)).toEqual(['chat']);
    const e1 = await client.embeddings.create({ model: 'chat', input: ['a', 'b'] });
    const e2 = await client.embeddings.create({ model: 'chat', input: ['a', 'b'], encoding_format: 'float' });
    expect(e1.data).toHaveLength(2);
    expect(Array.from(e1.data[0].embedding)).toEqual(e2.data[0].embedding);
    expect(Math.hypot(...e2.data[0].embedding)).toBeCloseTo(1, 5);
  });

  test('an OpenAI-shaped error for a bad body reaches the SDK as a BadRequestError', async () => {
    await expect(client.chat.completions.create({ model: 'chat', messages: [] })).rejects.toMatchObject({
      status: 400,
      message: expect.stringMatching(/messages/),
    });
  });

  test('a client that hangs up stops the stream at once', async () => {
    const ac = new AbortController();
    const r = await fetch(`http://127.0.0.1:${s.port}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'chat',
        stream: true,
        messages: [{ role: 'user', content: 'a b c d e f g h i j k l m n o p' }],
      }),
      signal: ac.signal,
    });
    const reader = r.body!.getReader();
    await reader.read();
    const before = s.stats!.abortedStreams;
    ac.abort();
    await waitFor(() => s.stats!.abortedStreams !== before, 'the abort to be counted', 2000, 10);
    expect(s.stats!.abortedStreams).toBe(before + 1);
    expect(s.stats!.activeStreams).toBe(0);
  });
});

describe('examples/backends/echo-server.mjs', () => {
  let s: Started;
  beforeAll(async () => {
    s = await (await load('echo-server.mjs')).start(0);
  });
  afterAll(() => s.close());

  test('echoes method, path, query, headers and body', async () => {
    const r = await fetch(`http://127.0.0.1:${s.port}/a/b?x=1&x=2&y=z`, {
      method: 'PUT',
      headers: { 'x-test': 'yes' },
      body: 'payload',
    });
    expect(await r.json()).toMatchObject({
      method: 'PUT',
      path: '/a/b',
      query: { x: ['1', '2'], y: 'z' },
      headers: { 'x-test': 'yes' },
      body: 'payload',
    });
  });

  test('GET /health is ok', async () => {
    expect(await (await fetch(`http://127.0.0.1:${s.port}/health`)).json()).toEqual({ status: 'ok' });
  });

  test('the ws client gets text, binary, large and fragmented messages echoed, and a clean close', async () => {
    const ws = new WebSocket(`ws://127.0.0.1:${s.port}/ws`, ['chat.v1']);
    const got: Array<{ data: string; binary: boolean }> = [];
    await new Promise<void>((resolve, reject) => {
      ws.on('open', () => {
        expect(ws.protocol).toBe('chat.v1');
        ws.send('hello');
        ws.send(Buffer.from([1, 2, 3]));
        ws.send('x'.repeat(70_000));
        ws.send('frag-', { fin: false });
        ws.send('ment', { fin: true });
      });
      ws.on('message', (data, binary) => {
        got.push({ data: binary ? (data as Buffer).toString('hex') : data.toString(), binary });
        if (got.length === 4) ws.close(1000, 'bye');
      });
      ws.on('close', (code) => (code === 1000 ? resolve() : reject(new Error(`close ${code}`))));
      ws.on('error', reject);
    });
    expect(got).toEqual([
      { data: 'hello', binary: false },
      { data: '010203', binary: true },
      { data: 'x'.repeat(70_000), binary: false },
      { data: 'frag-ment', binary: false },
    ]);
  });

  test('a websocket on another path is refused', async () => {
    const ws = new WebSocket(`ws://127.0.0.1:${s.port}/elsewhere`);
    const status = await new Promise<number>((resolve) =>
      ws.on('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0)),
    );
    expect(status).toBe(404);
  });
});
