// examples/backends/vllm-sim.mjs: the simulated vLLM replicas behind the endpoint-picking tests and the llm-routing
// benchmark (SPEC §12) behave as the picker expects of vLLM: a prefix cache that shortens the time to first token, a
// batch limit with a FIFO queue behind it, and vLLM's metric names on /metrics. Real loopback sockets.
import { afterEach, describe, expect, test } from '@jest/globals';
import { waitFor } from '../support/wait.js';

type Stats = {
  index: number;
  served: number;
  aborted: number;
  hitBlocks: number;
  queriedBlocks: number;
  waiting: number;
  running: number;
  cachedBlocks: number;
  kvCacheUsage: number;
};
type Replica = {
  index: number;
  port: number;
  url: string;
  stats(): Stats;
  set(o: object): void;
  resetPrefixCache(): void;
  close(): Promise<void>;
};
type Fleet = { replicas: Replica[]; urls: string[]; stats(): Stats[]; close(): Promise<void> };
type Sim = {
  startReplica(port: number, options?: object): Promise<Replica>;
  startFleet(n: number, options?: object): Promise<Fleet>;
};
const sim = (): Promise<Sim> =>
  import(new URL('../../examples/backends/vllm-sim.mjs', import.meta.url).href) as Promise<Sim>;

const open: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((s) => s.close()));
});
async function replica(options: object = {}): Promise<Replica> {
  const r = await (await sim()).startReplica(0, options);
  open.push(r);
  return r;
}

/** A system prompt of about `bytes` bytes (64 bytes = one block of 16 tokens). */
const systemPrompt = (tenant: string, bytes: number) =>
  `${tenant}: you are the assistant of ${tenant}. `.padEnd(bytes, `${tenant} policy text. `);

const chatBody = (system: string, user: string, extra: object = {}) =>
  JSON.stringify({
    model: 'chat',
    stream: true,
    messages: [
      { role: 'system', content: system },
      { role: 'user', content: user },
    ],
    ...extra,
  });

/** One streamed request: ms to the first event carrying a token, the tokens, the events, the replica header. */
async function stream(url: string, body: string, signal?: AbortSignal) {
  const t0 = performance.now();
  const r = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body,
    signal,
  });
  expect(r.status).toBe(200);
  expect(r.headers.get('content-type')).toMatch(/^text\/event-stream/);
  const reader = r.body!.getReader();
  const decoder = new TextDecoder();
  const events: string[] = [];
  let pending = '';
  let ttftMs: number | undefined;
  let tokens = 0;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    pending += decoder.decode(value, { stream: true });
    let end;
    while ((end = pending.indexOf('\n\n')) !== -1) {
      const ev = pending.slice(0, end);
      pending = pending.slice(end + 2);
      events.push(ev);
      if (ev === 'data: [DONE]') continue;
      const content = JSON.parse(ev.slice(6)).choices?.[0]?.delta?.content;
      if (content) {
        tokens++;
        ttftMs ??= performance.now() - t0;
      }
    }
  }
  return { ttftMs: ttftMs!, tokens, events, replica: r.headers.get('x-vllm-replica') };
}

/** Prometheus text → { "name{labels}": value } and the TYPE of every family. */
function parseMetrics(text: string) {
  const samples = new Map<string, number>();
  const types = new Map<string, string>();
  for (const line of text.split('\n')) {
    if (!line) continue;
    const type = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (type) types.set(type[1], type[2]);
    if (line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$/.exec(line);
    expect(m).not.toBeNull();
    samples.set(m![1] + (m![2] ?? ''), Number(m![3]));
  }
  const value = (name: string) => {
    const hits = [...samples].filter(([k]) => k === name || k.startsWith(`${name}{`));
    return hits.length === 1 ? hits[0][1] : undefined;
  };
  return { samples, types, value };
}

async function metrics(url: string) {
  const r = await fetch(`${url}/metrics`);
  expect(r.status).toBe(200);
  expect(r.headers.get('content-type')).toMatch(/^text\/plain/);
  return parseMetrics(await r.text());
}

describe('examples/backends/vllm-sim.mjs', () => {
  test('a repeated prompt hits the prefix cache: a shorter TTFT the second time on the same replica', async () => {
    const r = await replica({ prefillMsPerBlock: 3, decodeMsPerToken: 1, maxTokens: 4 });
    const body = chatBody(systemPrompt('acme', 64 * 60), 'What is the refund policy?');
    const first = await stream(r.url, body);
    const second = await stream(r.url, body);
    expect(first.tokens).toBe(4);
    // About 61 uncached blocks × 3 ms the first time; only the partial last block the second time.
    expect(first.ttftMs).toBeGreaterThanOrEqual(150);
    expect(second.ttftMs).toBeLessThan(first.ttftMs / 2);
    const s = r.stats();
    expect(s.served).toBe(2);
    expect(s.hitBlocks).toBeGreaterThanOrEqual(59);
    expect(s.hitBlocks / s.queriedBlocks).toBeGreaterThan(0.45);
    const m = await metrics(r.url);
    expect(m.value('vllm:prefix_cache_hits_total')).toBe(s.hitBlocks * 16);
    expect(m.value('vllm:prefix_cache_queries_total')).toBeGreaterThan(m.value('vllm:prefix_cache_hits_total')!);
    // The usage event reports the cached tokens (as vLLM's prompt_tokens_details does).
    expect(second.events.some((e) => e.includes('"usage"'))).toBe(false); // not asked for
    const withUsage = await stream(
      r.url,
      chatBody(systemPrompt('acme', 64 * 60), 'x', { stream_options: { include_usage: true } }),
    );
    const usage = JSON.parse(withUsage.events.find((e) => e.includes('"usage"'))!.slice(6)).usage;
    expect(usage).toMatchObject({ completion_tokens: 4, prompt_tokens_details: { cached_tokens: expect.any(Number) } });
    expect(usage.prompt_tokens_details.cached_tokens).toBeGreaterThanOrEqual(59 * 16);
  });

  test('blocks are chained: the same text after a different first block is not a hit', async () => {
    const r = await replica({ prefillMsPerBlock: 0.1, decodeMsPerToken: 1, maxTokens: 1 });
    const tail = systemPrompt('shared', 64 * 20);
    await stream(r.url, chatBody(`A${'a'.repeat(63)}${tail}`, 'q'));
    const before = r.stats().hitBlocks;
    await stream(r.url, chatBody(`B${'a'.repeat(63)}${tail}`, 'q'));
    expect(r.stats().hitBlocks - before).toBe(0);
    await stream(r.url, chatBody(`A${'a'.repeat(63)}${tail}`, 'other question'));
    expect(r.stats().hitBlocks - before).toBeGreaterThanOrEqual(20);
  });

  test('the cache is bounded (LRU in blocks): old prefixes are evicted, memory stays within kvBlocks', async () => {
    const r = await replica({ kvBlocks: 40, prefillMsPerBlock: 0.05, decodeMsPerToken: 0.5, maxTokens: 1 });
    const a = chatBody(systemPrompt('tenant-a', 64 * 16), 'q');
    await stream(r.url, a);
    for (let i = 0; i < 5; i++) await stream(r.url, chatBody(systemPrompt(`other-${i}`, 64 * 16), 'q'));
    expect(r.stats().cachedBlocks).toBeLessThanOrEqual(40);
    const before = r.stats().hitBlocks;
    await stream(r.url, a);
    expect(r.stats().hitBlocks).toBe(before); // evicted
    // POST /reset_prefix_cache (vLLM's) drops what is cached and not in use.
    expect(r.stats().cachedBlocks).toBeGreaterThan(0);
    expect((await fetch(`${r.url}/reset_prefix_cache`, { method: 'POST' })).status).toBe(200);
    expect(r.stats().cachedBlocks).toBe(0);
  });

  test('/metrics is Prometheus text with the names of vLLM', async () => {
    const r = await replica();
    const m = await metrics(r.url);
    for (const name of [
      'vllm:num_requests_waiting',
      'vllm:num_requests_running',
      'vllm:kv_cache_usage_perc',
      'vllm:cache_config_info',
    ])
      expect(m.types.get(name)).toBe('gauge');
    for (const name of ['vllm:prefix_cache_queries_total', 'vllm:prefix_cache_hits_total'])
      expect(m.types.get(name)).toBe('counter');
    expect(m.value('vllm:num_requests_waiting')).toBe(0);
    expect(m.value('vllm:kv_cache_usage_perc')).toBe(0);
    const info = [...m.samples.keys()].find((k) => k.startsWith('vllm:cache_config_info{'));
    expect(info).toMatch(/block_size="16"/);
    expect(m.value('vllm:cache_config_info')).toBe(1);
    expect(m.samples.has('vllm:gpu_cache_usage_perc')).toBe(false);
  });

  test('the waiting queue grows beyond the batch limit, FIFO, and drains', async () => {
    const r = await replica({ maxRunning: 2, prefillMsPerBlock: 0.1, decodeMsPerToken: 40, maxTokens: 10 });
    const runs = Array.from({ length: 5 }, (_, i) => stream(r.url, chatBody(`prompt ${i}`, 'q')));
    const m = await waitFor(async () => {
      const now = await metrics(r.url);
      return now.value('vllm:num_requests_waiting') === 3 && now;
    }, 'three requests waiting');
    expect(m.value('vllm:num_requests_running')).toBe(2);
    expect(m.value('vllm:num_requests_waiting')).toBe(3);
    expect(m.value('vllm:kv_cache_usage_perc')).toBeGreaterThan(0);
    expect(r.stats()).toMatchObject({ running: 2, waiting: 3 });
    const done = await Promise.all(runs);
    // The first two run at once; the others wait for a slot: their first token comes about one answer later.
    expect(Math.max(done[0].ttftMs, done[1].ttftMs)).toBeLessThan(200);
    expect(Math.min(done[2].ttftMs, done[3].ttftMs, done[4].ttftMs)).toBeGreaterThanOrEqual(300);
    expect(r.stats()).toMatchObject({ running: 0, waiting: 0, served: 5 });
  });

  test('a client that hangs up frees its running slot at once', async () => {
    const r = await replica({ maxRunning: 1, decodeMsPerToken: 50, maxTokens: 100 });
    const ac = new AbortController();
    const res = await fetch(`${r.url}/v1/chat/completions`, {
      method: 'POST',
      body: chatBody('long one', 'q'),
      signal: ac.signal,
    });
    await res.body!.getReader().read();
    expect(r.stats().running).toBe(1);
    ac.abort();
    await waitFor(() => r.stats().running === 0, 'the slot freed', 1000);
    expect(r.stats()).toMatchObject({ running: 0, aborted: 1 });
    const next = await stream(r.url, chatBody('next', 'q', { max_tokens: 2 }));
    expect(next.tokens).toBe(2);
  });

  test('the option kvMetric: "gpu_cache_usage_perc" exposes the older name instead', async () => {
    const r = await replica({ kvMetric: 'gpu_cache_usage_perc' });
    const m = await metrics(r.url);
    expect(m.types.get('vllm:gpu_cache_usage_perc')).toBe('gauge');
    expect(m.value('vllm:gpu_cache_usage_perc')).toBe(0);
    expect(m.types.has('vllm:kv_cache_usage_perc')).toBe(false);
  });

  test('metricsFailure: "error" answers 500, "hang" never answers; serving goes on; set() switches it', async () => {
    const r = await replica({ metricsFailure: 'error' });
    expect((await fetch(`${r.url}/metrics`)).status).toBe(500);
    r.set({ metricsFailure: 'hang' });
    await expect(fetch(`${r.url}/metrics`, { signal: AbortSignal.timeout(300) })).rejects.toThrow();
    expect((await stream(r.url, chatBody('s', 'q', { max_tokens: 1 }))).tokens).toBe(1);
    r.set({ metricsFailure: undefined });
    expect((await fetch(`${r.url}/metrics`)).status).toBe(200);
  });

  test('slowdown makes a replica slower', async () => {
    const fast = await replica({ prefillMsPerBlock: 1, decodeMsPerToken: 1, maxTokens: 1 });
    const slow = await replica({ prefillMsPerBlock: 1, decodeMsPerToken: 1, maxTokens: 1, slowdown: 5 });
    const body = chatBody(systemPrompt('x', 64 * 40), 'q');
    const a = await stream(fast.url, body);
    const b = await stream(slow.url, body);
    expect(b.ttftMs).toBeGreaterThan(a.ttftMs * 2);
  });

  test('a fleet: one server per replica, each answer names its replica; non-streamed answers and completions', async () => {
    const fleet = await (await sim()).startFleet(3, { decodeMsPerToken: 1, maxTokens: 3 });
    open.push(fleet);
    expect(new Set(fleet.urls).size).toBe(3);
    for (const [i, url] of fleet.urls.entries()) {
      const chat = await fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        body: JSON.stringify({ model: 'chat', messages: [{ role: 'user', content: 'hi' }] }),
      });
      expect(chat.headers.get('x-vllm-replica')).toBe(String(i));
      expect(await chat.json()).toMatchObject({
        object: 'chat.completion',
        choices: [{ message: { role: 'assistant', content: ' tok0 tok1 tok2' }, finish_reason: 'length' }],
        usage: { completion_tokens: 3, prompt_tokens: expect.any(Number) },
      });
      const models = await fetch(`${url}/v1/models`);
      expect(models.headers.get('x-vllm-replica')).toBe(String(i));
      expect(await models.json()).toMatchObject({ object: 'list', data: [{ id: 'chat' }] });
    }
    const c = await fetch(`${fleet.urls[1]}/v1/completions`, {
      method: 'POST',
      body: JSON.stringify({ model: 'chat', prompt: 'Say hi', stream: true, max_tokens: 2 }),
    });
    const events = (await c.text()).split('\n\n').filter(Boolean);
    expect(events).toHaveLength(3);
    expect(JSON.parse(events[0].slice(6))).toMatchObject({ object: 'text_completion', choices: [{ text: ' tok0' }] });
    expect(events[2]).toBe('data: [DONE]');
    expect(fleet.stats().map((s) => s.served)).toEqual([1, 2, 1]);
    const bad = await fetch(`${fleet.urls[0]}/v1/chat/completions`, { method: 'POST', body: '{"messages":[]}' });
    expect(bad.status).toBe(400);
    expect(await bad.json()).toMatchObject({ error: { message: expect.stringMatching(/messages/) } });
  });
});
