// Token usage and timing of LLM answers (SPEC §9), through the official openai SDK: the counters equal the backend's
// `usage` (streamed and not), a client that did not ask for the usage chunk does not get one, time to first token
// and time per output token land in their histograms, and the access log line carries key, tokens and TTFT.
// /metrics is parsed exactly: every sample is looked up by its full label set.
import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, test } from '@jest/globals';
import { startOpenAIBackend, type OpenAIBackend } from '../../support/backends.js';
import { eventually, send, startGateway, type Gateway } from '../../support/harness.js';

let llm: OpenAIBackend;
let gw: Gateway;
let key: string;
let client: OpenAI;
let direct: OpenAI;

const KEY_NAME = 'apikey-usage';
const sdk = (baseURL: string) => new OpenAI({ baseURL, apiKey: key, maxRetries: 0, timeout: 10_000 });

beforeAll(async () => {
  llm = await startOpenAIBackend();
  gw = await startGateway({
    deployments: [
      {
        namespace: 'genai',
        name: 'llama',
        modelServer: 'llm',
        modelName: 'meta-llama/Llama-3.1-8B-Instruct',
        url: llm.url,
      },
    ],
    keys: [{ name: KEY_NAME, projects: 'genai' }],
  });
  key = gw.keys[KEY_NAME];
  client = sdk(`${gw.url}/openai/v1`);
  direct = sdk(`${gw.url}/v1/genai/llama/v1`);
});

afterAll(async () => {
  await gw?.close();
  await llm?.close();
});

beforeEach(() => {
  llm.clear();
  llm.stream = { chunks: 4, delayMs: 5 };
  llm.usage = { prompt: 17, completion: 4 };
});

// ---- /metrics, parsed exactly ----

type Sample = { name: string; labels: Record<string, string>; value: number };

function parseMetrics(text: string): Sample[] {
  const out: Sample[] = [];
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m) throw new Error(`not a Prometheus sample line: ${line}`);
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
    out.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return out;
}

async function scrape(): Promise<(name: string, labels: Record<string, string>) => number> {
  const samples = parseMetrics((await send(`${gw.adminUrl}/metrics`)).text);
  return (name, labels) => {
    const want = JSON.stringify(Object.entries(labels).sort());
    const found = samples.filter((s) => s.name === name && JSON.stringify(Object.entries(s.labels).sort()) === want);
    if (found.length > 1) throw new Error(`${name} ${want}: ${found.length} samples`);
    return found[0]?.value ?? 0;
  };
}

const ROUTE = { project: 'genai', deployment: 'llama' };
const tokens = (m: Awaited<ReturnType<typeof scrape>>) => ({
  prompt: m('servegate_llm_tokens_total', { ...ROUTE, type: 'prompt' }),
  completion: m('servegate_llm_tokens_total', { ...ROUTE, type: 'completion' }),
  keyPrompt: m('servegate_llm_key_tokens_total', { key: KEY_NAME, type: 'prompt' }),
  keyCompletion: m('servegate_llm_key_tokens_total', { key: KEY_NAME, type: 'completion' }),
  ttftCount: m('servegate_llm_time_to_first_token_seconds_count', ROUTE),
  tpotCount: m('servegate_llm_time_per_output_token_seconds_count', ROUTE),
});

/** The counters' change over `action`. */
async function delta(action: () => Promise<unknown>) {
  const before = tokens(await scrape());
  await action();
  // The figures are recorded when the answer's connection turn ends, a moment after the client has the last byte.
  return eventually(async () => {
    const after = tokens(await scrape());
    const d = Object.fromEntries(
      Object.entries(after).map(([k, v]) => [k, v - before[k as keyof typeof before]]),
    ) as typeof before;
    if (d.prompt === 0 && d.ttftCount === 0) throw new Error('not recorded yet');
    return d;
  });
}

const requestLines = () =>
  gw.logs.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.msg === 'request');

async function readStream(stream: AsyncIterable<OpenAI.Chat.Completions.ChatCompletionChunk>) {
  const chunks: OpenAI.Chat.Completions.ChatCompletionChunk[] = [];
  for await (const c of stream) chunks.push(c);
  return { chunks, text: chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('') };
}

describe('token counts equal the backend usage', () => {
  test('a non-streamed chat: tokens by deployment and by key, and a TTFT', async () => {
    llm.usage = { prompt: 23, completion: 9 };
    let answer: OpenAI.Chat.Completions.ChatCompletion | undefined;
    const d = await delta(async () => {
      answer = await client.chat.completions.create({
        model: 'genai/llama',
        messages: [{ role: 'user', content: 'count me' }],
      });
    });
    expect(answer!.usage).toEqual({ prompt_tokens: 23, completion_tokens: 9, total_tokens: 32 });
    expect(d).toEqual({ prompt: 23, completion: 9, keyPrompt: 23, keyCompletion: 9, ttftCount: 1, tpotCount: 0 });
  });

  test('a streamed chat that asks for usage: the client gets the usage chunk, and the same numbers are counted', async () => {
    llm.usage = { prompt: 31, completion: 4 };
    let got: Awaited<ReturnType<typeof readStream>> | undefined;
    const d = await delta(async () => {
      got = await readStream(
        await client.chat.completions.create({
          model: 'genai/llama',
          messages: [{ role: 'user', content: 'x' }],
          stream: true,
          stream_options: { include_usage: true },
        }),
      );
    });
    expect(got!.text).toBe('tok0 tok1 tok2 tok3 ');
    expect(got!.chunks.at(-1)!.usage).toEqual({ prompt_tokens: 31, completion_tokens: 4, total_tokens: 35 });
    expect(d).toEqual({ prompt: 31, completion: 4, keyPrompt: 31, keyCompletion: 4, ttftCount: 1, tpotCount: 1 });
  });

  test('a streamed chat that does not ask: counted all the same, and the client gets no usage chunk', async () => {
    llm.usage = { prompt: 5, completion: 4 };
    let got: Awaited<ReturnType<typeof readStream>> | undefined;
    const d = await delta(async () => {
      got = await readStream(
        await client.chat.completions.create({
          model: 'genai/llama',
          messages: [{ role: 'user', content: 'x' }],
          stream: true,
        }),
      );
    });
    expect(d).toEqual({ prompt: 5, completion: 4, keyPrompt: 5, keyCompletion: 4, ttftCount: 1, tpotCount: 1 });
    expect(got!.text).toBe('tok0 tok1 tok2 tok3 ');
    expect(got!.chunks).toHaveLength(5); // four tokens and the finish chunk
    expect(got!.chunks.filter((c) => 'usage' in c)).toEqual([]);
    // The gateway asked the backend for it.
    expect(JSON.parse(llm.last().body.toString()).stream_options).toEqual({ include_usage: true });
  });

  test('the raw event stream without the usage chunk: every other event as the backend sent it', async () => {
    const r = await send(`${gw.url}/openai/v1/chat/completions`, {
      headers: { authorization: `Bearer ${key}` },
      body: {
        model: 'genai/llama',
        messages: [{ role: 'user', content: 'raw' }],
        stream: true,
        stream_options: { include_usage: false },
      },
    });
    expect(r.status).toBe(200);
    expect(r.headers['content-type']).toMatch(/^text\/event-stream/);
    const events = r.text.split('\n\n').filter(Boolean);
    expect(events).toHaveLength(6); // 4 tokens, finish, [DONE]
    expect(events.at(-1)).toBe('data: [DONE]');
    expect(r.text).not.toContain('usage');
    expect(JSON.parse(llm.last().body.toString()).stream_options).toEqual({ include_usage: true });
  });

  test('a backend that puts "usage": null in every chunk once asked (as OpenAI does): the client that did not ask sees none of it', async () => {
    llm.usage = { prompt: 3, completion: 4, nullInChunks: true };
    const r = await send(`${gw.url}/openai/v1/chat/completions`, {
      headers: { authorization: `Bearer ${key}` },
      body: { model: 'genai/llama', messages: [{ role: 'user', content: 'raw' }], stream: true },
    });
    expect(r.text).not.toContain('usage');
    expect(r.text.split('\n\n').filter(Boolean)).toHaveLength(6);
    // The client that asks gets it all, as the backend sent it.
    const asked = await send(`${gw.url}/openai/v1/chat/completions`, {
      headers: { authorization: `Bearer ${key}` },
      body: {
        model: 'genai/llama',
        messages: [{ role: 'user', content: 'raw' }],
        stream: true,
        stream_options: { include_usage: true },
      },
    });
    expect(asked.text.match(/"usage":null/g)).toHaveLength(5);
    expect(asked.text).toContain('"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}');
  });

  test('usage on the last content chunk: the client still gets that chunk (without usage) and its finish reason', async () => {
    llm.usage = { prompt: 8, completion: 4, onLastChunk: true };
    let got: Awaited<ReturnType<typeof readStream>> | undefined;
    const d = await delta(async () => {
      got = await readStream(
        await client.chat.completions.create({
          model: 'genai/llama',
          messages: [{ role: 'user', content: 'x' }],
          stream: true,
        }),
      );
    });
    expect(d.prompt).toBe(8);
    expect(d.completion).toBe(4);
    expect(got!.chunks).toHaveLength(5);
    expect(got!.chunks.at(-1)!.choices[0].finish_reason).toBe('stop');
    expect(got!.chunks.filter((c) => 'usage' in c)).toEqual([]);
  });

  test('a streamed legacy completion is counted too', async () => {
    llm.usage = { prompt: 2, completion: 4 };
    const d = await delta(async () => {
      const stream = await client.completions.create({ model: 'genai/llama', prompt: 'p', stream: true });
      for await (const c of stream) expect('usage' in c).toBe(false);
    });
    expect(d).toMatchObject({ prompt: 2, completion: 4 });
  });

  test('embeddings count their prompt tokens and have no time to first token', async () => {
    const d = await delta(() =>
      client.embeddings.create({ model: 'genai/llama', input: 'abc', encoding_format: 'float' }),
    );
    expect(d).toEqual({ prompt: 2, completion: 0, keyPrompt: 2, keyCompletion: 0, ttftCount: 0, tpotCount: 0 });
  });

  test('per-deployment URLs: the body goes unchanged; usage is counted when the stream reports it, estimated when not', async () => {
    llm.usage = { prompt: 6, completion: 4 };
    const asked = await delta(async () =>
      readStream(
        await direct.chat.completions.create({
          model: 'x',
          messages: [{ role: 'user', content: 'x' }],
          stream: true,
          stream_options: { include_usage: true },
        }),
      ),
    );
    expect(asked).toMatchObject({ prompt: 6, completion: 4, ttftCount: 1 });
    // Not asked: the body is forwarded as sent, so the backend reports nothing. The gateway charges what it knows: the
    // prompt guessed at 4 bytes a token (30 bytes of messages: 8) and the generated text at 4 bytes a token (four
    // "tok<i> ": 20 bytes, 5), since that is more than one token per event that carried text (4).
    const body = { model: 'x', messages: [{ role: 'user', content: 'x' }], stream: true };
    const notAsked = await delta(() =>
      send(`${gw.url}/v1/genai/llama/v1/chat/completions`, { headers: { authorization: `Bearer ${key}` }, body }),
    );
    expect(llm.last().body.toString()).toBe(JSON.stringify(body));
    expect(notAsked).toEqual({ prompt: 8, completion: 5, keyPrompt: 8, keyCompletion: 5, ttftCount: 1, tpotCount: 1 });
  });
});

describe('timing', () => {
  test('time to first token lands in its bucket: a first chunk after 300 ms is over 0.25 s, and the sum grows by that much', async () => {
    llm.usage = { prompt: 1, completion: 4, firstDelayMs: 300 };
    const before = await scrape();
    const bucket = (m: typeof before, le: string) =>
      m('servegate_llm_time_to_first_token_seconds_bucket', { ...ROUTE, le });
    await readStream(
      await client.chat.completions.create({
        model: 'genai/llama',
        messages: [{ role: 'user', content: 'slow' }],
        stream: true,
      }),
    );
    const after = await eventually(async () => {
      const m = await scrape();
      expect(bucket(m, '+Inf') - bucket(before, '+Inf')).toBe(1);
      return m;
    });
    expect(bucket(after, '0.25') - bucket(before, '0.25')).toBe(0);
    expect(bucket(after, '60') - bucket(before, '60')).toBe(1);
    const sum = (m: typeof before) => m('servegate_llm_time_to_first_token_seconds_sum', ROUTE);
    expect(sum(after) - sum(before)).toBeGreaterThanOrEqual(0.3);
    expect(sum(after) - sum(before)).toBeLessThan(5);
  });

  test('time per output token: the stream after its first event divided by the tokens after the first', async () => {
    llm.stream = { chunks: 5, delayMs: 40 };
    llm.usage = { prompt: 1, completion: 5 };
    const before = await scrape();
    const sum = (m: typeof before) => m('servegate_llm_time_per_output_token_seconds_sum', ROUTE);
    await readStream(
      await client.chat.completions.create({
        model: 'genai/llama',
        messages: [{ role: 'user', content: 'x' }],
        stream: true,
      }),
    );
    const after = await eventually(async () => {
      const m = await scrape();
      expect(
        m('servegate_llm_time_per_output_token_seconds_count', ROUTE) -
          before('servegate_llm_time_per_output_token_seconds_count', ROUTE),
      ).toBe(1);
      return m;
    });
    // Four more chunks 40 ms apart after the first: about 40 ms a token.
    expect(sum(after) - sum(before)).toBeGreaterThanOrEqual(0.03);
    expect(sum(after) - sum(before)).toBeLessThan(1);
  });

  test('/metrics declares the LLM metrics with HELP and TYPE', async () => {
    const text = (await send(`${gw.adminUrl}/metrics`)).text;
    expect(text).toContain('# TYPE servegate_llm_tokens_total counter');
    expect(text).toContain('# TYPE servegate_llm_key_tokens_total counter');
    expect(text).toContain('# TYPE servegate_llm_time_to_first_token_seconds histogram');
    expect(text).toContain('# TYPE servegate_llm_time_per_output_token_seconds histogram');
    expect(text).not.toContain(key.split('.')[1]);
  });
});

describe('access log', () => {
  test('the request line carries the key name, the tokens and the time to first token', async () => {
    llm.usage = { prompt: 13, completion: 4 };
    const r = await send(`${gw.url}/openai/v1/chat/completions`, {
      headers: { authorization: `Bearer ${key}` },
      body: { model: 'genai/llama', messages: [{ role: 'user', content: 'log me' }], stream: true },
    });
    const id = r.headers['x-request-id'];
    const line = await eventually(() => {
      const found = requestLines().filter((l) => l.requestId === id);
      expect(found).toHaveLength(1);
      return found[0];
    });
    expect(line).toMatchObject({
      status: 200,
      project: 'genai',
      deployment: 'llama',
      key: KEY_NAME,
      promptTokens: 13,
      completionTokens: 4,
      path: '/openai/v1/chat/completions',
    });
    expect(typeof line.ttftMs).toBe('number');
    expect(line.ttftMs as number).toBeLessThanOrEqual(line.ms as number);
    expect(line.bytesOut).toBe(r.body.length);
  });

  test('a refused request has no token fields', async () => {
    const r = await send(`${gw.url}/openai/v1/chat/completions`, {
      headers: { authorization: `Bearer ${key}` },
      body: { model: 'genai/nope' },
    });
    expect(r.status).toBe(404);
    const id = r.headers['x-request-id'];
    const line = await eventually(() => {
      const found = requestLines().filter((l) => l.requestId === id);
      expect(found).toHaveLength(1);
      return found[0];
    });
    expect(line.key).toBe(KEY_NAME);
    expect(line).not.toHaveProperty('promptTokens');
    expect(line).not.toHaveProperty('ttftMs');
  });
});
