// Endpoint picking (SPEC §12) as plain functions: the prefix hash, the policies, saturation and bounded load, and what
// a server's metrics text says.
import { describe, expect, jest, test } from '@jest/globals';
import { TargetPicker, type Target } from '../../../src/gateway/forward/targets.js';
import { parseServerMetrics, type Scraped } from '../../../src/gateway/forward/endpoint-stats.js';
import { promptKey as bodyKey, type PromptKey } from '../../../src/gateway/openai/prefix.js';
import { llmMembers } from '../../../src/gateway/openai/llm-body.js';
import type { Balancing, Route } from '../../../src/routing/types.js';
import { FixedStats, llmRoute } from '../../support/llm-route.js';

/** The picking key of a body as JSON.stringify writes it (the gateway reads the bytes). */
function prefixKey(doc: unknown, model: string): PromptKey | undefined {
  const raw = Buffer.from(JSON.stringify(doc));
  const members = llmMembers(raw);
  if (members instanceof Error) throw members;
  return bodyKey(raw, members, model);
}

const urls = (n: number) => Array.from({ length: n }, (_, i) => `http://127.0.0.1:${8001 + i}`);
const route = (policy: Balancing['policy'], n = 4): Route => llmRoute(urls(n), policy);

const busy = (waiting: number, kv = 0.1): Scraped => ({ waiting, running: 4, kv, blockSize: 16, at: Date.now() });
const port = (t: Target | undefined) => Number(t!.origin.split(':')[2]);

const chat = (system: string, user: string) => ({
  model: 'm',
  messages: [
    { role: 'system', content: system },
    { role: 'user', content: user },
  ],
});
const SYS_A = 'You are the support agent of ACME. '.repeat(40);
const SYS_B = 'You translate legal French into English. '.repeat(40);

describe('prefixKey', () => {
  test('requests sharing a long system prompt hash alike whatever the user asks', () => {
    expect(prefixKey(chat(SYS_A, 'one'), 'm')).toEqual(prefixKey(chat(SYS_A, 'two, longer question'), 'm'));
    expect(prefixKey(chat(SYS_A, 'one'), 'm')).not.toBe(prefixKey(chat(SYS_B, 'one'), 'm'));
  });

  test('another model is another key; a conversation keeps its own key from its second turn on', () => {
    expect(prefixKey(chat(SYS_A, 'x'), 'm')).not.toBe(prefixKey(chat(SYS_A, 'x'), 'n'));
    const turn1 = chat(SYS_A, 'q1 '.repeat(200));
    const turn2 = {
      ...turn1,
      messages: [...turn1.messages, { role: 'assistant', content: 'a1' }, { role: 'user', content: 'q2' }],
    };
    const turn3 = {
      ...turn2,
      messages: [...turn2.messages, { role: 'assistant', content: 'a2' }, { role: 'user', content: 'q3' }],
    };
    expect(prefixKey(turn1, 'm')!.rule).toBe('prefix');
    expect(prefixKey(turn2, 'm')!.rule).toBe('conversation');
    expect(prefixKey(turn2, 'm')).toEqual(prefixKey(turn3, 'm'));
    expect(prefixKey(turn2, 'm')).not.toEqual(prefixKey(turn1, 'm'));
  });

  test('a single short message is its own key; completions use the prompt; nothing to read: undefined', () => {
    expect(prefixKey({ messages: [{ role: 'user', content: 'hello' }] }, 'm')).not.toBe(
      prefixKey({ messages: [{ role: 'user', content: 'bye' }] }, 'm'),
    );
    expect(prefixKey({ prompt: SYS_A + 'tail 1' }, 'm')).toEqual(prefixKey({ prompt: SYS_A + 'tail 2' }, 'm'));
    expect(prefixKey({ input: 'embed me' }, 'm')).toBeUndefined();
  });
});

describe('TargetPicker, llm policy', () => {
  test('the same prefix goes to the same endpoint, every time and in a second picker (another replica)', () => {
    const r = route('llm');
    const a = new TargetPicker();
    const b = new TargetPicker();
    const key = prefixKey(chat(SYS_A, 'x'), 'm')!;
    const first = a.choose(r, key)!;
    expect(first.reason).toBe('prefix');
    for (let i = 0; i < 20; i++) expect(a.choose(r, key)!.target.origin).toBe(first.target.origin);
    expect(b.choose(r, key)!.target.origin).toBe(first.target.origin);
  });

  test('a prefix seen for the first time goes to its endpoint while it is idle, else in turn', () => {
    const r = route('llm');
    const p = new TargetPicker();
    const key = (i: number) => prefixKey(chat(`one-off prompt ${i} `.repeat(20), 'q'), 'm')!;
    // Idle: its rendezvous choice, where its next request goes too.
    const first = p.choose(r, key(0))!;
    expect(first.reason).toBe('prefix');
    expect(p.choose(r, key(0))!.target.origin).toBe(first.target.origin);
    // Every endpoint busy (one request in flight from here): new prompts go in turn, each endpoint twice in 8.
    for (const u of urls(4)) p.begin(u);
    const turns = Array.from({ length: 8 }, (_, i) => p.choose(r, key(1 + i))!);
    expect(turns.map((c) => c.reason)).toEqual(new Array(8).fill('round-robin'));
    const counts = new Map<number, number>();
    for (const c of turns) counts.set(port(c.target), (counts.get(port(c.target)) ?? 0) + 1);
    expect([...counts.values()]).toEqual([2, 2, 2, 2]);
  });

  test('many prefixes spread over the endpoints (none gets more than twice its share)', () => {
    const r = route('llm');
    const p = new TargetPicker();
    const counts = new Map<number, number>();
    for (let i = 0; i < 4000; i++) {
      const t = p.choose(r, prefixKey(chat(`tenant ${i} `.repeat(30), 'q'), 'm'))!.target;
      counts.set(port(t), (counts.get(port(t)) ?? 0) + 1);
    }
    expect(counts.size).toBe(4);
    for (const n of counts.values()) expect(n).toBeLessThan(2000);
  });

  test('a saturated endpoint (waiting or KV use over the bounds) is avoided while another is not', () => {
    const r = route('llm');
    const stats = new FixedStats();
    const p = new TargetPicker(undefined, stats);
    const key = prefixKey(chat(SYS_A, 'x'), 'm')!;
    p.choose(r, key);
    const home = p.choose(r, key)!.target;
    stats.figures.set(home.origin, busy(6));
    const moved = p.choose(r, key)!;
    expect(moved.reason).toBe('spill');
    expect(moved.target.origin).not.toBe(home.origin);
    stats.figures.set(home.origin, busy(0, 0.95));
    expect(p.choose(r, key)!.target.origin).not.toBe(home.origin);
    stats.figures.set(home.origin, busy(5, 0.8)); // at the bounds, not over
    expect(p.choose(r, key)!.target.origin).toBe(home.origin);
  });

  test('bounded load: in-flight requests past max(1.25 × mean, mean + 2) move to the next endpoint of the prefix', () => {
    const r = route('llm');
    const p = new TargetPicker();
    const key = prefixKey(chat(SYS_A, 'x'), 'm')!;
    p.choose(r, key);
    const home = p.choose(r, key)!.target;
    // Three in flight at home, none elsewhere: mean (3 + 1) / 4 = 1, bound max(1.25, 3) = 3; a fourth would be 4.
    for (let i = 0; i < 3; i++) p.begin(home.origin);
    const next = p.choose(r, key)!;
    expect(next.target.origin).not.toBe(home.origin);
    expect(next.reason).toBe('spill');
    // Two in flight: a third would be 3 > max(1.25 × 0.75, 0.75 + 2); one in flight: 2 ≤ 2.5, home again.
    p.end(home.origin);
    expect(p.choose(r, key)!.target.origin).not.toBe(home.origin);
    p.end(home.origin);
    expect(p.choose(r, key)!.target.origin).toBe(home.origin);
  });

  test('a conversation is judged by what its endpoint reports, not by this replica’s in-flight count', () => {
    const r = route('llm');
    const stats = new FixedStats();
    const p = new TargetPicker(undefined, stats);
    const key: PromptKey = { hash: 0x5eed, rule: 'conversation' };
    const home = p.choose(r, key)!;
    expect(home.reason).toBe('conversation');
    for (const u of urls(4)) stats.figures.set(u, busy(0));
    // Six in flight here at its endpoint, none elsewhere: past the bounded load, but the endpoint says it has room.
    for (let i = 0; i < 6; i++) p.begin(home.target.origin);
    expect(p.choose(r, key)!.target.origin).toBe(home.target.origin);
    // Its own figures say it is saturated: the next endpoint of the key's ranking.
    stats.figures.set(home.target.origin, busy(6));
    expect(p.choose(r, key)!.reason).toBe('spill');
    // No fresh figures for it: this replica's bounded load is all there is to go by.
    stats.figures.delete(home.target.origin);
    expect(p.choose(r, key)!.reason).toBe('spill');
    for (let i = 0; i < 6; i++) p.end(home.target.origin);
    expect(p.choose(r, key)!.target.origin).toBe(home.target.origin);
  });

  test.each([
    // One endpoint lastingly half again as busy as the others (running, as it reports it)...
    ['load', (i: number) => ({ running: i === 0 ? 6 : 4 })],
    // ...or sent half again as many requests (its finished requests, as vLLM counts them: 15 a second against 10).
    ['requests sent', (i: number, ms: number) => ({ finished: Math.floor(((i === 0 ? 15 : 10) * ms) / 1000) })],
  ])(
    'the weights are a function of what the endpoints report (%s): a replica started later comes to the same',
    (_n, fig) => {
      jest.useFakeTimers({ now: 1_000_000 });
      try {
        const r = route('llm');
        const stats = new FixedStats();
        const early = new TargetPicker(undefined, stats);
        const late = new TargetPicker(undefined, stats);
        const key: PromptKey = { hash: 7, rule: 'conversation' };
        for (let ms = 0; ms <= 20_000; ms += 100) {
          jest.setSystemTime(1_000_000 + ms);
          urls(4).forEach((u, i) => stats.figures.set(u, { ...busy(0), ...fig(i, ms), at: Date.now() }));
          early.choose(r, key);
          if (ms >= 15_000) late.choose(r, key);
        }
        const list = early.targets(r.backend)!;
        const weights = early.picksOf(list).map((p) => p.weight);
        expect(late.picksOf(late.targets(r.backend)!).map((p) => p.weight)).toEqual(weights);
        expect(weights[0]).toBeLessThan(1);
        for (const w of weights.slice(1)) expect(w).toBeGreaterThan(weights[0]);
      } finally {
        jest.useRealTimers();
      }
    },
  );

  test('the weights spread the requests the endpoints report, not their load: 32 tenants ranked unevenly come out even', () => {
    jest.useFakeTimers({ now: 1_000_000 });
    try {
      const r = route('llm');
      const list = new TargetPicker().targets(r.backend)!;
      const at = (t: Target) => list.findIndex((x) => x.origin === t.origin);
      const keys = Array.from({ length: 32 }, (_, k) => prefixKey(chat(`Tenant ${k} policy. `.repeat(100), 'q'), 'm')!);
      // Without weights these addresses rank 10, 5, 12 and 5 of the tenants first.
      const ranked = [0, 0, 0, 0];
      const plain = new TargetPicker();
      for (const k of keys) ranked[at(plain.choose(r, k)!.target)]++;
      expect(ranked).toEqual([10, 5, 12, 5]);
      // A fleet that reports what vLLM does, scraped every 100 ms: the third endpoint, whose prompts hit its cache,
      // answers in 120 ms, the others in 240 ms; 40 requests a second, the tenants in turn.
      const stats = new FixedStats();
      const p = new TargetPicker(undefined, stats);
      const serviceMs = [240, 240, 120, 240];
      const ends: number[][] = [[], [], [], []];
      const finished = [0, 0, 0, 0];
      const shares = [0, 0, 0, 0];
      for (let ms = 0, i = 0; ms <= 20_000; ms += 25, i++) {
        jest.setSystemTime(1_000_000 + ms);
        const now = Date.now();
        ends.forEach((e, j) => {
          for (; e.length && e[0] <= now; finished[j]++) {
            e.shift();
            p.end(list[j].origin);
          }
          if (ms % 100 === 0)
            stats.figures.set(list[j].origin, { ...busy(0), running: e.length, finished: finished[j], at: now });
        });
        const j = at(p.choose(r, keys[i % 32])!.target);
        p.begin(list[j].origin);
        ends[j].push(now + serviceMs[j]);
        if (ms >= 10_000) shares[j]++;
      }
      // Weighted by the load they report, the fast endpoint took 1.67x its share and two others 0.71x.
      const even = shares.map((n) => Math.round((400 * n) / shares.reduce((a, b) => a + b)) / 100);
      for (const x of even) expect([even, x >= 0.75 && x <= 1.25]).toEqual([even, true]);
    } finally {
      jest.useRealTimers();
    }
  });

  test('every endpoint saturated: the least loaded wins; nothing is refused', () => {
    const r = route('llm', 3);
    const stats = new FixedStats();
    const p = new TargetPicker(undefined, stats);
    urls(3).forEach((u, i) => stats.figures.set(u, busy(10 + i)));
    const c = p.choose(r, prefixKey(chat(SYS_B, 'x'), 'm'))!;
    expect([port(c.target), c.reason]).toEqual([8001, 'load']);
  });

  test('one endpoint: "only"; the retry avoids the address that failed', () => {
    expect(new TargetPicker().choose(route('llm', 1), { hash: 1, rule: 'prefix' })!.reason).toBe('only');
    const r = route('llm', 2);
    const p = new TargetPicker();
    const key = prefixKey(chat(SYS_A, 'x'), 'm')!;
    const home = p.choose(r, key)!.target;
    expect(p.pick(r, r.backend, home.address, key)!.origin).not.toBe(home.origin);
  });
});

describe('TargetPicker, other policies', () => {
  test('round-robin takes the endpoints in turn', () => {
    const r = route('round-robin', 3);
    const p = new TargetPicker();
    const seen = Array.from({ length: 6 }, () => port(p.choose(r, { hash: 123, rule: 'prefix' })!.target));
    expect(seen).toEqual([8001, 8002, 8003, 8001, 8002, 8003]);
    expect(p.choose(r)!.reason).toBe('round-robin');
  });

  test('least-request takes the endpoint with the fewest in flight here', () => {
    const r = route('least-request', 3);
    const p = new TargetPicker();
    p.begin('http://127.0.0.1:8001');
    p.begin('http://127.0.0.1:8002');
    expect(port(p.choose(r)!.target)).toBe(8003);
    p.begin('http://127.0.0.1:8003');
    p.begin('http://127.0.0.1:8003');
    p.end('http://127.0.0.1:8001');
    expect(port(p.choose(r)!.target)).toBe(8001);
  });
});

describe('parseServerMetrics', () => {
  const vllm = [
    '# HELP vllm:num_requests_waiting Number of requests waiting.',
    '# TYPE vllm:num_requests_waiting gauge',
    'vllm:num_requests_waiting{engine="0",model_name="m"} 3.0',
    'vllm:num_requests_waiting_by_reason{reason="x"} 99',
    'vllm:num_requests_running{engine="0",model_name="m"} 7.0',
    'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.42',
    'vllm:cache_config_info{block_size="32",cache_dtype="auto"} 1.0',
    'vllm:e2e_request_latency_seconds_bucket{le="0.3"} 5',
  ].join('\n');

  test.each([
    ['vLLM (kv_cache_usage_perc)', vllm, { waiting: 3, running: 7, kv: 0.42, blockSize: 32 }],
    [
      'older vLLM (gpu_cache_usage_perc), two engines',
      'vllm:num_requests_waiting{engine="0"} 1\nvllm:num_requests_waiting{engine="1"} 2\nvllm:gpu_cache_usage_perc 0.5\nvllm:gpu_cache_usage_perc{engine="1"} 0.7',
      { waiting: 3, running: 0, kv: 0.7, blockSize: undefined },
    ],
    [
      "vLLM's finished requests: its finished_reason series summed (read after the other figures)",
      `${vllm}\nvllm:prompt_tokens_total 900\nvllm:request_success_total{finished_reason="stop",model_name="m"} 5\n` +
        'vllm:request_success_total{finished_reason="length"} 7\nvllm:request_success_total{finished_reason="abort"} 1',
      { waiting: 3, running: 7, kv: 0.42, blockSize: 32, finished: 13 },
    ],
    [
      'SGLang',
      'sglang:num_queue_reqs{model="m"} 4\nsglang:token_usage{model="m"} 0.25',
      { waiting: 4, running: 0, kv: 0.25, blockSize: undefined },
    ],
  ])('%s', (_name, text, want) => {
    expect(parseServerMetrics(text)).toEqual(want);
  });

  test('a server that reports none of these: undefined', () => {
    expect(parseServerMetrics('process_cpu_seconds_total 1\n')).toBeUndefined();
  });
});
