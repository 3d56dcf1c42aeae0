// What each LLM endpoint says about its own load (SPEC §12), scraped in the background from its Prometheus metrics —
// vLLM's `vllm:num_requests_waiting`, `vllm:num_requests_running`, `vllm:kv_cache_usage_perc` (or the older
// `vllm:gpu_cache_usage_perc`), `vllm:cache_config_info{block_size}`, and SGLang's `sglang:num_queue_reqs` and
// `sglang:token_usage` — every `scrapeIntervalMs`, one scrape per endpoint at a time, never on a request's path. A
// figure older than `staleAfterMs` is not used: such an endpoint is judged by the gateway's in-flight count alone.
import { Agent, request } from 'undici';
import { withFields } from '../../shape.js';

export interface Scraped {
  /** Requests waiting in the server's queue. */
  waiting: number;
  running: number;
  /** KV-cache use, 0-1 (undefined: the server does not say). */
  kv: number | undefined;
  blockSize: number | undefined;
  /** Date.now() of the scrape. */
  at: number;
}

/** One endpoint to scrape: the origin requests go to, and where its metrics are. */
export interface ScrapeTarget {
  origin: string;
  address: string;
  metricsUrl: string;
}

export interface ScrapeSettings {
  scrapeIntervalMs: number;
  staleAfterMs: number;
}

/** Longest metrics text read. */
const MAX_TEXT = 4 << 20;

export class EndpointStats {
  private readonly byOrigin = new Map<string, Scraped & { address: string }>();
  private readonly busy = new Set<string>();
  private readonly errors = new Map<string, { address: string; count: number }>();
  private timer: NodeJS.Timeout | undefined;
  private readonly agent: Agent;

  constructor(private readonly settings: ScrapeSettings) {
    const timeout = Math.max(200, Math.min(settings.staleAfterMs, 2000));
    this.agent = new Agent({ connections: 2, keepAliveTimeout: 10_000, headersTimeout: timeout, bodyTimeout: timeout });
  }

  /** The endpoint's figures when they are fresh. */
  fresh(origin: string, now = Date.now()): Scraped | undefined {
    const s = this.byOrigin.get(origin);
    return s && now - s.at <= this.settings.staleAfterMs ? s : undefined;
  }

  /** Starts scraping what `targets()` lists at each round (endpoints that leave the list are forgotten). */
  start(targets: () => Iterable<ScrapeTarget>): void {
    if (this.timer) return;
    this.timer = setInterval(() => this.round(targets()), this.settings.scrapeIntervalMs);
    this.timer.unref();
  }

  /** Every endpoint listed (scraped at least once, or failing) with its scrape errors; `fresh` gives its figures. */
  snapshot(): Array<{ address: string; origin: string; errors: number }> {
    const out: Array<{ address: string; origin: string; errors: number }> = [];
    for (const [origin, s] of this.byOrigin)
      out.push({ address: s.address, origin, errors: this.errors.get(origin)?.count ?? 0 });
    for (const [origin, e] of this.errors)
      if (!this.byOrigin.has(origin)) out.push({ address: e.address, origin, errors: e.count });
    return out;
  }

  /** Scrape errors of one endpoint since it was first listed. */
  errorsAt(origin: string): number {
    return this.errors.get(origin)?.count ?? 0;
  }

  async close(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    await this.agent.close().catch(() => undefined);
  }

  private round(targets: Iterable<ScrapeTarget>): void {
    const seen = new Set<string>();
    for (const t of targets) {
      if (seen.has(t.origin)) continue;
      seen.add(t.origin);
      if (this.busy.has(t.origin)) continue;
      this.busy.add(t.origin);
      void this.scrape(t).finally(() => this.busy.delete(t.origin));
    }
    for (const origin of this.byOrigin.keys()) if (!seen.has(origin)) this.byOrigin.delete(origin);
    for (const origin of this.errors.keys()) if (!seen.has(origin)) this.errors.delete(origin);
  }

  private async scrape(t: ScrapeTarget): Promise<void> {
    try {
      const r = await request(t.metricsUrl, { dispatcher: this.agent, method: 'GET' });
      if (r.statusCode !== 200) {
        await r.body.dump();
        throw new Error(`status ${r.statusCode}`);
      }
      let text = '';
      for await (const chunk of r.body) {
        text += (chunk as Buffer).toString('latin1');
        if (text.length > MAX_TEXT) throw new Error('metrics too large');
      }
      const s = parseServerMetrics(text);
      if (!s) throw new Error('no vLLM or SGLang metrics');
      this.byOrigin.set(t.origin, withFields(s, { at: Date.now(), address: t.address }));
    } catch {
      const e = this.errors.get(t.origin);
      if (e) e.count++;
      else this.errors.set(t.origin, { address: t.address, count: 1 });
    }
  }
}

/** The figures an LLM server reports in its Prometheus text; undefined when it reports none of them. */
export function parseServerMetrics(text: string): Omit<Scraped, 'at'> | undefined {
  const waiting = sum(text, 'vllm:num_requests_waiting') ?? sum(text, 'sglang:num_queue_reqs');
  const running = sum(text, 'vllm:num_requests_running') ?? sum(text, 'sglang:num_running_reqs');
  const kvRaw =
    sum(text, 'vllm:kv_cache_usage_perc', true) ??
    sum(text, 'vllm:gpu_cache_usage_perc', true) ??
    sum(text, 'sglang:token_usage', true);
  if (waiting === undefined && running === undefined && kvRaw === undefined) return undefined;
  const info = text.indexOf('\nvllm:cache_config_info{');
  let blockSize: number | undefined;
  if (info !== -1) {
    const end = text.indexOf('}', info);
    const m = /block_size="(\d+)"/.exec(text.slice(info, end));
    if (m) blockSize = Number(m[1]);
  }
  return { waiting: waiting ?? 0, running: running ?? 0, kv: kvRaw, blockSize };
}

/**
 * The sum of every sample of `name` (one per model or engine), found by searching for the name at a line start
 * rather than splitting the whole text (vLLM's metrics run to tens of kilobytes of histograms). `max`: the largest
 * sample instead (a share such as KV-cache use is not additive).
 */
function sum(text: string, name: string, max = false): number | undefined {
  let total: number | undefined;
  let from = 0;
  for (;;) {
    let i = text.indexOf(name, from);
    if (i === -1) return total;
    from = i + name.length;
    if (i > 0 && text.charCodeAt(i - 1) !== 10) continue;
    i += name.length;
    const c = text.charCodeAt(i);
    if (c === 123 /* { */) {
      i = text.indexOf('}', i);
      if (i === -1) return total;
      i++;
    } else if (c !== 32) continue; // a longer name that starts the same
    const eol = text.indexOf('\n', i);
    const fields = text
      .slice(i, eol === -1 ? undefined : eol)
      .trim()
      .split(' ');
    const v = Number(fields[0]);
    if (!Number.isFinite(v)) continue;
    total = total === undefined ? v : max ? Math.max(total, v) : total + v;
  }
}
