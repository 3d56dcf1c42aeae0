// What each LLM endpoint reports of its own load (SPEC §12; vLLM's and SGLang's metrics, metrics-text.ts), scraped in
// the background, never on a request's path. A figure older than `staleAfterMs` is not used (in-flight counts then
// judge). A scrape is bounded in bytes, lines and time: an endpoint past a bound is left alone for a while.
import { Agent, request } from 'undici';
import { copyWith } from '../../same-shape.js';
import { DEFAULT_MAX_BYTES, MetricsReader, ScrapeBoundError, type ServerFigures } from './metrics-text.js';

export { parseServerMetrics } from './metrics-text.js';

export interface Scraped extends ServerFigures {
  /** Date.now() of the scrape (its answer read). */
  at: number;
  /** Date.now() when its request was sent: the figures are from after it (fair-queue.ts dates its own changes so). */
  sent?: number;
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
  /** Most bytes of metrics text read per scrape (default 1 MiB). */
  scrapeMaxBytes?: number;
  /** Whole-scrape deadline, from the request to the last byte read (default staleAfterMs, between 0.2 and 2 s). */
  scrapeTimeoutMs?: number;
}

/** An endpoint whose scrape went past a bound (bytes, lines, time) is next scraped after this, doubled each time. */
const BACKOFF_MIN_MS = 1000;
const BACKOFF_MAX_MS = 30_000;

/** What a scrape says it is (as Prometheus's scraper does): backends and their logs can tell it from traffic. */
export const SCRAPER_USER_AGENT = 'servegate-endpoint-scraper';
const SCRAPE_HEADERS = { 'user-agent': SCRAPER_USER_AGENT, accept: 'text/plain' };

export class EndpointStats {
  private readonly byOrigin = new Map<string, Scraped & { address: string }>();
  /** The scrape in flight per endpoint: aborted when the endpoint leaves the list, or at close. */
  private readonly busy = new Map<string, AbortController>();
  private readonly errors = new Map<string, { address: string; count: number }>();
  /** Endpoints whose last scrape went past a bound: not scraped before `until`. */
  private readonly backoff = new Map<string, { until: number; ms: number }>();
  private timer: NodeJS.Timeout | undefined;
  private readonly agent: Agent;
  private readonly timeoutMs: number;
  private readonly maxBytes: number;

  constructor(private readonly settings: ScrapeSettings) {
    this.timeoutMs = settings.scrapeTimeoutMs ?? Math.max(200, Math.min(settings.staleAfterMs, 2000));
    this.maxBytes = settings.scrapeMaxBytes ?? DEFAULT_MAX_BYTES;
    const timeout = this.timeoutMs;
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

  /** Scrapes in flight (each aborted by close, or when its endpoint leaves the list). */
  inFlight(): number {
    return this.busy.size;
  }

  async close(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    for (const c of this.busy.values()) c.abort();
    await this.agent.close().catch(() => undefined);
  }

  private round(targets: Iterable<ScrapeTarget>): void {
    const seen = new Set<string>();
    const now = Date.now();
    for (const t of targets) {
      if (seen.has(t.origin)) continue;
      seen.add(t.origin);
      if (this.busy.has(t.origin)) continue;
      const b = this.backoff.get(t.origin);
      if (b && now < b.until) continue;
      const c = new AbortController();
      this.busy.set(t.origin, c);
      void this.scrape(t, c).finally(() => {
        if (this.busy.get(t.origin) === c) this.busy.delete(t.origin);
      });
    }
    for (const [origin, c] of this.busy)
      if (!seen.has(origin)) {
        c.abort();
        this.busy.delete(origin);
      }
    for (const origin of this.byOrigin.keys()) if (!seen.has(origin)) this.byOrigin.delete(origin);
    for (const origin of this.errors.keys()) if (!seen.has(origin)) this.errors.delete(origin);
    for (const origin of this.backoff.keys()) if (!seen.has(origin)) this.backoff.delete(origin);
  }

  private async scrape(t: ScrapeTarget, c: AbortController): Promise<void> {
    // The deadline covers the whole scrape: undici's bodyTimeout is per read, so a body sent a byte at a time never
    // reaches it.
    const deadline = setTimeout(() => c.abort(), this.timeoutMs);
    const sent = Date.now();
    try {
      const r = await request(t.metricsUrl, {
        dispatcher: this.agent,
        method: 'GET',
        headers: SCRAPE_HEADERS,
        signal: c.signal,
      });
      // Destroyed before its end (below, or by an abort), undici's body emits RequestAbortedError: with no listener
      // that error would take the process down. Whatever it says, the catch below has already seen why.
      r.body.on('error', () => undefined);
      try {
        if (r.statusCode !== 200) throw new Error(`status ${r.statusCode}`);
        const reader = new MetricsReader(this.maxBytes);
        // Stops reading as soon as every figure is in (the rest of a large text is not read); a bound throws.
        for await (const chunk of r.body) if (reader.push(chunk as Buffer)) break;
        if (c.signal.aborted) throw new Error('scrape aborted');
        const s = reader.end();
        if (!s) throw new Error('no vLLM or SGLang metrics');
        this.byOrigin.set(t.origin, copyWith(s, { at: Date.now(), sent, address: t.address }));
        this.backoff.delete(t.origin);
      } finally {
        // Whatever was not read is not waited for: the connection goes (a small answer was read whole already).
        if (!r.body.destroyed) r.body.destroy();
      }
    } catch (err) {
      // An endpoint that left the list is not counted: its entries are gone.
      if (this.busy.get(t.origin) !== c) return;
      const e = this.errors.get(t.origin);
      if (e) e.count++;
      else this.errors.set(t.origin, { address: t.address, count: 1 });
      if (err instanceof ScrapeBoundError || c.signal.aborted) {
        const ms = Math.min(BACKOFF_MAX_MS, Math.max(BACKOFF_MIN_MS, 2 * (this.backoff.get(t.origin)?.ms ?? 0)));
        this.backoff.set(t.origin, { until: Date.now() + ms, ms });
      }
    } finally {
      clearTimeout(deadline);
    }
  }
}
