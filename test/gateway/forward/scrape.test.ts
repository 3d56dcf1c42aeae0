// Scraping the endpoints' metrics (SPEC §12) as a tenant controlling its pods' /metrics could make it: linear on a
// crafted text, bounded in bytes, lines and total time, aborted with its endpoint, and never believing a figure
// outside its meaning; and the bounded load held on the least-loaded path whatever an endpoint reports.
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { performance } from 'node:perf_hooks';
import { afterEach, describe, expect, test } from '@jest/globals';
import {
  EndpointStats,
  parseServerMetrics,
  SCRAPER_USER_AGENT,
  type Scraped,
} from '../../../src/gateway/forward/endpoint-stats.js';
import { MetricsReader, ScrapeBoundError } from '../../../src/gateway/forward/metrics-text.js';
import { TargetPicker } from '../../../src/gateway/forward/targets.js';
import type { Route } from '../../../src/routing/types.js';
import { FixedStats, llmRoute } from '../../support/llm-route.js';
import { waitFor } from '../../support/wait.js';

const FIGURES =
  'vllm:num_requests_waiting{engine="0",model_name="m"} 3.0\nvllm:num_requests_running{engine="0",model_name="m"} 7.0\n' +
  'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.42\nvllm:cache_config_info{block_size="32",cache_dtype="auto"} 1.0\n';
const WANT = { waiting: 3, running: 7, kv: 0.42, blockSize: 32 };
/** `bytes` of well-formed histogram series of other names, as vLLM serves them. */
function otherSeries(bytes: number): string {
  const lines: string[] = [];
  let n = 0;
  for (let i = 0; n < bytes; i++) {
    const l = `vllm:e2e_request_latency_seconds_bucket{engine="0",le="${i}",model_name="m"} ${i}\n`;
    lines.push(l);
    n += l.length;
  }
  return lines.join('');
}

describe('reading the metrics text', () => {
  test('a body whose only } is at its end reads in linear time (4 MB against 1 MB: about 4×, not 16× or more)', () => {
    const crafted = (bytes: number) =>
      'vllm:num_requests_waiting{x\n'.repeat(Math.floor(bytes / 28)) + 'vllm:num_requests_running 2\n}';
    const small = crafted(1 << 20);
    const big = crafted(4 << 20);
    const time = (text: string) => {
      const t0 = performance.now();
      expect(parseServerMetrics(text)).toEqual({ waiting: 0, running: 2, kv: undefined, blockSize: undefined });
      return performance.now() - t0;
    };
    time(small); // warm the code up
    // The fastest of several runs of each, interleaved (other work on the machine slows some runs, not all). Linear:
    // about 4×; the quadratic search was 50× on the 2-core machine. 12× leaves room for noise and none for it.
    let fastSmall = Infinity;
    let fastBig = Infinity;
    for (let k = 0; k < 7; k++) {
      fastSmall = Math.min(fastSmall, time(small));
      fastBig = Math.min(fastBig, time(big));
    }
    expect(fastBig / Math.max(fastSmall, 0.05)).toBeLessThan(12);
  }, 120_000);

  test('past 1 MiB by default a scrape stops, unless every figure was read first (a 4 MiB text, figures first)', () => {
    const big = Buffer.from(FIGURES + otherSeries(4 << 20), 'latin1');
    const first = new MetricsReader();
    let done = false;
    let at = 0;
    for (; at < big.length && !done; at += 65_536) done = first.push(big.subarray(at, at + 65_536));
    expect(done).toBe(true);
    expect(at).toBe(65_536); // the rest is not read
    expect(first.end()).toEqual(WANT);

    const last = Buffer.from(otherSeries(2 << 20) + FIGURES, 'latin1');
    const reader = new MetricsReader();
    let read = 0;
    const all = () => {
      for (let i = 0; i < last.length; i += 65_536) {
        const piece = last.subarray(i, i + 65_536);
        reader.push(piece);
        read += piece.length;
      }
    };
    expect(all).toThrow(ScrapeBoundError);
    expect(read).toBeLessThanOrEqual((1 << 20) + 65_536);
  });

  test("vLLM's finished requests are read after its other figures, and looked for only a few hundred lines further", () => {
    const success = 'vllm:request_success_total{finished_reason="length"} 12\n';
    const counted = new MetricsReader();
    expect(counted.push(Buffer.from(FIGURES + otherSeries(4_000) + success + otherSeries(4 << 20), 'latin1'))).toBe(
      true,
    );
    expect(counted.end()).toEqual({ ...WANT, finished: 12 });
    // Without it (or far past the others), the rest is not read: a 4 MiB text costs its first few tens of kilobytes.
    for (const text of [FIGURES + otherSeries(4 << 20), FIGURES + otherSeries(1 << 20) + success]) {
      const reader = new MetricsReader();
      const bytes = Buffer.from(text, 'latin1');
      let at = 0;
      while (!reader.push(bytes.subarray(at, at + 4096))) at += 4096;
      expect(at).toBeLessThan(64 << 10);
      expect(reader.end()).toEqual(WANT);
    }
  });

  test('a text of many short lines stops at the line bound', () => {
    const reader = new MetricsReader();
    expect(() => reader.push(Buffer.from('x 1\n'.repeat(60_000)))).toThrow(expect.objectContaining({ bound: 'lines' }));
  });

  test('the same figures whatever the pieces (lines cut anywhere, a } inside a quoted label)', () => {
    const text = `# HELP vllm:num_requests_waiting x\n${FIGURES.replace('model_name="m"', 'model_name="a}b\\"c"')}`;
    const bytes = Buffer.from(text, 'latin1');
    for (const size of [1, 2, 7, 31, 64]) {
      const r = new MetricsReader();
      for (let i = 0; i < bytes.length; i += size) r.push(bytes.subarray(i, i + size));
      expect([size, r.end()]).toEqual([size, WANT]);
    }
  });

  test.each([
    ['a negative count', 'vllm:num_requests_waiting -1e9\nvllm:num_requests_running 2', { waiting: 0, running: 2 }],
    [
      'NaN and infinities are not believed',
      'vllm:num_requests_waiting{e="0"} NaN\nvllm:num_requests_waiting{e="1"} 4\nvllm:num_requests_running +Inf\n' +
        'vllm:kv_cache_usage_perc NaN',
      { waiting: 4, running: 0, kv: undefined },
    ],
    ['a share above 1', 'vllm:num_requests_waiting 1\nvllm:kv_cache_usage_perc 7', { waiting: 1, kv: 1 }],
    ['a share below 0', 'vllm:num_requests_waiting 1\nvllm:gpu_cache_usage_perc -0.5', { waiting: 1, kv: 0 }],
    ['a count past 10^9', 'vllm:num_requests_waiting 1e300\nvllm:num_requests_waiting{e="1"} 1e300', { waiting: 1e9 }],
    ['SGLang', 'sglang:num_queue_reqs -3\nsglang:token_usage 2.5', { waiting: 0, kv: 1 }],
  ])('%s is clamped to its meaning', (_name, text, want) => {
    expect(parseServerMetrics(text)).toMatchObject(want);
  });
});

// --- scrapes over loopback ---------------------------------------------------------------------------------------

interface Fake {
  server: Server;
  origin: string;
  /** Requests for /metrics received. */
  requests: number[];
  /** Sockets open now. */
  open: Set<Socket>;
}

const fakes: Fake[] = [];
const statsMade: EndpointStats[] = [];

afterEach(async () => {
  await Promise.all(statsMade.splice(0).map((s) => s.close()));
  for (const f of fakes.splice(0)) {
    for (const s of f.open) s.destroy();
    await new Promise((r) => f.server.close(r));
  }
});

/** A metrics server on loopback; `serve` answers each scrape. */
async function fake(serve: (res: ServerResponse) => void): Promise<Fake> {
  const f = { requests: [] as number[], open: new Set<Socket>() } as unknown as Fake;
  f.server = createServer((req, res) => {
    f.requests.push(Date.now());
    serve(res);
  });
  f.server.on('connection', (s: Socket) => {
    f.open.add(s);
    s.on('close', () => f.open.delete(s));
  });
  await new Promise<void>((r) => f.server.listen(0, '127.0.0.1', r));
  f.origin = `http://127.0.0.1:${(f.server.address() as AddressInfo).port}`;
  fakes.push(f);
  return f;
}

/** One byte every 20 ms, for ever (until the client goes). */
function trickle(res: ServerResponse): void {
  res.writeHead(200, { 'content-type': 'text/plain' });
  const t = setInterval(() => res.write('#'), 20);
  res.on('close', () => clearInterval(t));
}

const target = (f: Fake) => ({ origin: f.origin, address: f.origin.slice(7), metricsUrl: `${f.origin}/metrics` });

function stats(extra: { scrapeTimeoutMs?: number; staleAfterMs?: number } = {}): EndpointStats {
  const s = new EndpointStats({ scrapeIntervalMs: 20, staleAfterMs: 1000, ...extra });
  statsMade.push(s);
  return s;
}

describe('scrapes over loopback', () => {
  test('a /metrics that trickles a byte at a time is aborted at the whole-scrape deadline and counted as an error', async () => {
    const f = await fake(trickle);
    const s = stats({ scrapeTimeoutMs: 300 });
    s.start(() => [target(f)]);
    await waitFor(() => f.requests.length === 1 && f.open.size === 1, 'the scrape to start');
    const started = f.requests[0];
    await waitFor(() => s.errorsAt(f.origin) === 1 && f.open.size === 0, 'the scrape to be aborted and counted');
    expect(Date.now() - started).toBeLessThan(300 + 3000);
  });

  test('an endpoint leaving the list has its open scrape aborted (three rotations: none stays open)', async () => {
    const servers = await Promise.all(Array.from({ length: 6 }, () => fake(trickle)));
    let listed = servers.slice(0, 2);
    const s = stats({ scrapeTimeoutMs: 60_000 });
    s.start(() => listed.map(target));
    for (let k = 0; k < 3; k++) {
      const pair = servers.slice(2 * k, 2 * k + 2);
      listed = pair;
      await waitFor(() => pair.every((f) => f.open.size === 1), `rotation ${k + 1}'s scrapes to be open`);
    }
    listed = [];
    const open = () => servers.reduce((n, f) => n + f.open.size, 0);
    await waitFor(() => open() === 0 && s.inFlight() === 0, 'every scrape to be aborted', 5000);
    expect(servers.map((f) => s.errorsAt(f.origin))).toEqual([0, 0, 0, 0, 0, 0]);
  });

  test('an endpoint whose /metrics is not there (an error status with a body, not vLLM) is an error, and the process goes on', async () => {
    // undici's body, destroyed before its end, emits an error: without a listener that took the gateway down at the
    // first scrape of any LLM endpoint that answers its /metrics with anything but 200 (jest reports it as the
    // suite's unhandled error).
    const f = await fake((res) => {
      res.writeHead(500, { 'content-type': 'application/json' });
      res.end('{"error":"no such route"}');
    });
    const s = stats();
    s.start(() => [target(f)]);
    await waitFor(() => s.errorsAt(f.origin) >= 3, 'three scrapes to fail');
    await new Promise((r) => setImmediate(r));
    expect(s.fresh(f.origin)).toBeUndefined();
  });

  test('a scrape says who it is, so that backends tell it from traffic', async () => {
    const agents: Array<string | undefined> = [];
    const f = await fake((res) => {
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.end(FIGURES);
    });
    f.server.prependListener('request', (req: { headers: { 'user-agent'?: string } }) =>
      agents.push(req.headers['user-agent']),
    );
    const s = stats();
    s.start(() => [target(f)]);
    await waitFor(() => s.fresh(f.origin) !== undefined, 'a scrape');
    expect(agents[0]).toBe(SCRAPER_USER_AGENT);
  });

  test('close aborts the scrapes in flight', async () => {
    const f = await fake(trickle);
    const s = stats({ scrapeTimeoutMs: 60_000 });
    s.start(() => [target(f)]);
    await waitFor(() => f.open.size === 1, 'the scrape to start');
    await s.close();
    await waitFor(() => f.open.size === 0, 'the scrape to be aborted');
  });

  test('4 MiB of metrics with the figures first are read (only their start); with them after 2 MiB: an error, then a back-off', async () => {
    const first = FIGURES + otherSeries(4 << 20);
    const good = await fake((res) => res.writeHead(200).end(first));
    const last = otherSeries(2 << 20) + FIGURES;
    const bad = await fake((res) => res.writeHead(200).end(last));
    const s = stats();
    s.start(() => [target(good), target(bad)]);
    const fresh = await waitFor(() => s.fresh(good.origin) ?? false, 'the figures of the large text');
    expect(fresh).toMatchObject(WANT);
    expect(s.errorsAt(good.origin)).toBe(0);
    await waitFor(() => s.errorsAt(bad.origin) === 2, 'two scrapes over the byte bound', 8000);
    expect(s.fresh(bad.origin)).toBeUndefined();
    // Scraped every 20 ms, but after a scrape over a bound the endpoint waits a second.
    expect(bad.requests[1] - bad.requests[0]).toBeGreaterThanOrEqual(900);
  }, 15_000);
});

// --- the bounded load whatever an endpoint reports ---------------------------------------------------------------

const urls = (n: number) => Array.from({ length: n }, (_, i) => `http://127.0.0.1:${8001 + i}`);
const route = (n: number): Route => llmRoute(urls(n));

const scraped = (text: string): Scraped => ({ ...parseServerMetrics(text)!, at: Date.now() });

describe('bounded load with an endpoint that lies', () => {
  /** Places 300 requests that stay in flight; the most any endpoint got, and the bound at the end. */
  function place(stats: FixedStats, prefix?: number): { most: number; bound: number } {
    const r = route(4);
    const p = new TargetPicker(undefined, stats);
    const key = prefix === undefined ? undefined : { hash: prefix, rule: 'prefix' as const };
    for (let i = 0; i < 300; i++) p.begin(p.choose(r, key)!.target.origin);
    const most = Math.max(...urls(4).map((u) => p.inflightAt(u)));
    return { most, bound: Math.max(1.25 * (300 / 4), 300 / 4 + 2) };
  }

  test('waiting -1e9 on the least-loaded path (embeddings, Responses API): no more than the bound', () => {
    const stats = new FixedStats();
    for (const u of urls(4)) stats.figures.set(u, scraped('vllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 0.1'));
    stats.figures.set(urls(4)[1], scraped('vllm:num_requests_waiting -1e9\nvllm:kv_cache_usage_perc -5'));
    const { most, bound } = place(stats);
    expect(most).toBeLessThanOrEqual(bound);
  });

  test('every endpoint saturated and one claiming an empty queue: the least loaded, within the bound', () => {
    const stats = new FixedStats();
    for (const u of urls(4)) stats.figures.set(u, { waiting: 60, running: 8, kv: 0.9, blockSize: 16, at: Date.now() });
    stats.figures.set(urls(4)[2], { waiting: 0, running: 0, kv: 0.9, blockSize: 16, at: Date.now() });
    for (const prefix of [undefined, 12345]) {
      const { most, bound } = place(stats, prefix);
      expect([prefix, most <= bound]).toEqual([prefix, true]);
    }
  });
});
