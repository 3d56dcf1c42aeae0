// Prometheus metrics (prom-client), in a registry per server so that several gateways can live in one process (tests).
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { CompactHistogram, type HistogramSeries } from './histogram.js';

/** Figures read at scrape time from the parts that hold them. */
export interface MetricSources {
  /** Held requests per deployment (scale from zero). */
  pending?: () => Iterable<{ project: string; deployment: string; count: number }>;
  /** LLM endpoints: what each last reported (fresh figures only) and its scrape errors. */
  endpoints?: () => Iterable<{ address: string; waiting?: number; kv?: number; errors: number }>;
  /** Requests queued for saturated deployments (SPEC §14), per deployment and priority. */
  queues?: () => Iterable<{ project: string; deployment: string; priority: string; count: number }>;
  /**
   * The budgets that exist now (SPEC §14), as `${scope}\0${name}`: the spend series of any other (a deleted key, one
   * whose budget was removed) go at scrape time, as /budgets stops listing it.
   */
  budgets?: () => ReadonlySet<string>;
}

interface RouteCounters {
  project: string;
  deployment: string;
  /** Answers and 5xx answers: plain numbers for the admin page's live figures. */
  total: number;
  errors: number;
  /** '' (no canary: no variant label) or the variant → its exported series (the admin page adds them up). */
  variants: Map<string, VariantSeries>;
  /** The series of the last answer (most answers of a route share variant and status): no map lookups for the next. */
  lastVariant: string | undefined;
  lastStatus: number;
  lastSeries: VariantSeries | undefined;
  lastTally: Tally | undefined;
}

interface VariantSeries {
  requests: Map<number, Tally>;
  duration: HistogramSeries;
}

/**
 * A route's counters and pick tallies, in a hidden property of the route object: with thousands of routes a map
 * lookup per request is a cache miss (docs/performance.md, "The hidden classes").
 */
interface RouteSlot {
  /** The `perRoute` generation `counters` belong to (a clear starts a new one; another Metrics has its own). */
  gen: object | undefined;
  counters: RouteCounters | undefined;
  pickGen: object | undefined;
  picks: Map<string, Tally> | undefined;
}

const SLOT = Symbol('servegate.metrics');

function slotOf(route: object): RouteSlot | undefined {
  const held = (route as { [SLOT]?: RouteSlot })[SLOT];
  if (held) return held;
  if (!Object.isExtensible(route)) return undefined;
  const slot: RouteSlot = { gen: undefined, counters: undefined, pickGen: undefined, picks: undefined };
  Object.defineProperty(route, SLOT, { value: slot, enumerable: false, writable: false, configurable: true });
  return slot;
}

/** A plain number on the hot path, added to its Counter at scrape (prom-client hashes labels on every inc()). */
interface Tally {
  readonly labels: Record<string, string>;
  n: number;
}

function flushTally(counter: Counter, t: Tally): void {
  if (t.n === 0) return;
  counter.inc(t.labels, t.n);
  t.n = 0;
}

export class Metrics {
  readonly registry = new Registry();
  readonly requests = new Counter({
    name: 'servegate_requests_total',
    help: 'Requests answered, by project, deployment and status code (and variant, for deployments with a canary)',
    labelNames: ['project', 'deployment', 'status', 'variant'] as const,
    registers: [this.registry],
    collect: (): void => this.flushRequests(),
  });
  readonly duration = new CompactHistogram(
    'servegate_request_duration_seconds',
    'Time from request to the end of the response, by project and deployment (and variant, for deployments with a canary)',
    ['project', 'deployment', 'variant'],
    [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
  );
  readonly upstreamErrors = new Counter({
    name: 'servegate_upstream_errors_total',
    help: 'Upstream and client failures by cause (connect_refused, reset, headers_timeout, stream_idle_timeout, no_ready_endpoint, not_ready, hold_timeout, hold_queue_full, client_abort, client_body_timeout, client_body_too_slow)',
    labelNames: ['cause'] as const,
    registers: [this.registry],
  });
  readonly authFailures = new Counter({
    name: 'servegate_auth_failures_total',
    help: 'Requests refused by authentication or authorisation, by reason (missing, malformed, unknown, mismatch, expired, forbidden)',
    labelNames: ['reason'] as const,
    registers: [this.registry],
  });
  readonly routes = new Gauge({ name: 'servegate_routes', help: 'Deployments served now', registers: [this.registry] });
  readonly keys = new Gauge({ name: 'servegate_api_keys', help: 'API keys loaded', registers: [this.registry] });
  readonly reloads = new Counter({
    name: 'servegate_reloads_total',
    help: 'Snapshots applied, by result (changed: the table was swapped; unchanged: same hash, skipped)',
    labelNames: ['result'] as const,
    registers: [this.registry],
  });
  readonly invalidResources = new Gauge({
    name: 'servegate_invalid_resources',
    help: 'Resources not served, by reason (InvalidSpec, Conflict, BackendNotFound, InvalidKey, ReadError)',
    labelNames: ['reason'] as const,
    registers: [this.registry],
  });
  readonly sourceSynced = new Gauge({
    name: 'servegate_source_synced',
    help: '1 once the route source delivered its first full snapshot',
    registers: [this.registry],
  });
  readonly sourceStaleness = new Gauge({
    name: 'servegate_source_staleness_seconds',
    help: 'Seconds since the route source last confirmed it is current (0 = healthy)',
    registers: [this.registry],
  });
  readonly watchRestarts = new Counter({
    name: 'servegate_watch_restarts_total',
    help: 'Kubernetes watches re-opened, by kind and reason (closed, error, expired, idle, list_error, too_large: the server had gone back behind the watch, e.g. etcd restored from a backup)',
    labelNames: ['kind', 'reason'] as const,
    registers: [this.registry],
  });
  readonly rateLimited = new Counter({
    name: 'servegate_rate_limited_total',
    help: 'Every 429 the gateway answered, by reason (per_second: limits.rateLimitPerKey; per_minute: rpm/tpm of a key or deployment; failed_auth: a client address throttled after failed authentications; open_websockets: limits.websocketsPerKey or websocketsPerClient), scope (key, deployment, client) and kind (requests, tokens, auth_failures, websockets)',
    labelNames: ['scope', 'kind', 'reason'] as const,
    registers: [this.registry],
  });
  readonly limitsStoreErrors = new Counter({
    name: 'servegate_limits_store_errors_total',
    help: 'Limit checks and token charges the shared store (Redis) could not answer; each such request was admitted (failOpen) or refused with 503',
    registers: [this.registry],
  });
  readonly tlsReloads = new Counter({
    name: 'servegate_tls_certificate_reloads_total',
    help: 'Certificate reloads after a change of tls.certFile/keyFile, by result (success; error: the previous pair stays in use)',
    labelNames: ['result'] as const,
    registers: [this.registry],
  });
  readonly tlsNotAfter = new Gauge({
    name: 'servegate_tls_certificate_expiry_timestamp_seconds',
    help: 'notAfter of the certificate in use (Unix seconds), by its subject; absent without TLS',
    labelNames: ['subject'] as const,
    registers: [this.registry],
  });
  // LLM usage (SPEC §9): tokens per deployment and per key, time to first token, time per output token.
  readonly llmTokens = new Counter({
    name: 'servegate_llm_tokens_total',
    help: 'Tokens of LLM answers as their usage reported them, by project, deployment and type (prompt, completion)',
    labelNames: ['project', 'deployment', 'type'] as const,
    registers: [this.registry],
  });
  readonly llmTokensEstimated = new Counter({
    name: 'servegate_llm_tokens_estimated_total',
    help: "Tokens of LLM answers charged from the gateway's own estimate over what their usage reported (none reported, or less than the gateway saw pass), by project, deployment and type (prompt, completion)",
    labelNames: ['project', 'deployment', 'type'] as const,
    registers: [this.registry],
  });
  readonly llmKeyTokens = new Counter({
    name: 'servegate_llm_key_tokens_total',
    help: 'Tokens of LLM answers as their usage reported them, by API key name and type (prompt, completion)',
    labelNames: ['key', 'type'] as const,
    registers: [this.registry],
  });
  readonly ttft = new CompactHistogram(
    'servegate_llm_time_to_first_token_seconds',
    'Time from request to the first streamed event (non-streamed: to the first byte of a generated answer), by project and deployment',
    ['project', 'deployment'],
    [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 10, 30, 60],
  );
  readonly tpot = new CompactHistogram(
    'servegate_llm_time_per_output_token_seconds',
    'Streamed LLM answers: time from the first event to the end divided by the completion tokens after the first, by project and deployment',
    ['project', 'deployment'],
    [0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1],
  );
  /** Requests being forwarded now; a plain number on the hot path, read by the gauge at scrape time. */
  inflightNow = 0;
  readonly inflight: Gauge = new Gauge({
    name: 'servegate_inflight_requests',
    help: 'Requests being forwarded now',
    registers: [this.registry],
    collect: (): void => this.inflight.set(this.inflightNow),
  });

  private perRoute = new Map<string, RouteCounters>();
  /** The generation of `perRoute` (route objects hold its entries: see RouteSlot). */
  private gen: object = {};

  /** Counts one answer in plain numbers; `variant` only when canaried (SPEC §10); `at`: the route object. */
  observeRequest(
    project: string,
    deployment: string,
    status: number,
    seconds: number,
    variant = '',
    at?: object,
  ): void {
    const slot = at && slotOf(at);
    let e = slot && slot.gen === this.gen ? slot.counters : undefined;
    if (!e) {
      e = this.routeCounters(project, deployment);
      if (slot) {
        slot.gen = this.gen;
        slot.counters = e;
      }
    }
    e.total++;
    if (status >= 500) e.errors++;
    let v: VariantSeries | undefined;
    let c: Tally | undefined;
    if (e.lastStatus === status && e.lastVariant === variant) {
      v = e.lastSeries!;
      c = e.lastTally!;
    } else {
      v = e.variants.get(variant);
      if (!v) {
        v = {
          requests: new Map(),
          duration: variant
            ? this.duration.child(project, deployment, variant)
            : this.duration.child(project, deployment),
        };
        e.variants.set(variant, v);
      }
      c = v.requests.get(status);
      if (!c) {
        const labels: Record<string, string> = { project, deployment, status: String(status) };
        if (variant) labels.variant = variant;
        c = { labels, n: 0 };
        v.requests.set(status, c);
      }
      e.lastVariant = variant;
      e.lastStatus = status;
      e.lastSeries = v;
      e.lastTally = c;
    }
    c.n++;
    this.duration.observe(v.duration, seconds);
  }

  private routeCounters(project: string, deployment: string): RouteCounters {
    const key = `${project}\u0000${deployment}`;
    let e = this.perRoute.get(key);
    if (!e) {
      if (this.perRoute.size > 50_000) {
        this.flushRequests();
        this.perRoute.clear();
        this.gen = {};
      }
      e = {
        project,
        deployment,
        total: 0,
        errors: 0,
        variants: new Map(),
        lastVariant: undefined,
        lastStatus: 0,
        lastSeries: undefined,
        lastTally: undefined,
      };
      this.perRoute.set(key, e);
    }
    return e;
  }

  private flushRequests(): void {
    for (const e of this.perRoute.values())
      for (const v of e.variants.values()) for (const t of v.requests.values()) flushTally(this.requests, t);
  }

  readonly pending: Gauge = new Gauge({
    name: 'servegate_pending_requests',
    help: 'Requests held while their deployment has no ready endpoint (scale from zero), by project and deployment',
    labelNames: ['project', 'deployment'] as const,
    registers: [this.registry],
    collect: (): void => {
      this.pending.reset();
      for (const p of this.sources.pending?.() ?? [])
        this.pending.set({ project: p.project, deployment: p.deployment }, p.count);
    },
  });

  // ---- budgets and fair queueing (SPEC §14) ----------------------------------------------------------------------

  readonly budgetSpentTokens = new Gauge({
    name: 'servegate_budget_spent_tokens',
    help: "Tokens spent in a budget's current period as this replica last charged it (the shared total with limits.redis.url), by scope (key, project) and name",
    labelNames: ['scope', 'name'] as const,
    registers: [this.registry],
    // Prunes the series of both gauges: a scrape reads this one first (registration order), so once per scrape.
    collect: (): void => this.pruneBudgetSeries(),
  });
  readonly budgetSpentCost = new Gauge({
    name: 'servegate_budget_spent_cost',
    help: "Cost (tokens x spec.pricing, in the prices' currency) spent in a budget's current period as this replica last charged it, by scope (key, project) and name",
    labelNames: ['scope', 'name'] as const,
    registers: [this.registry],
  });
  /** The budget series set, by `${scope}\0${name}`: those of a budget that went are removed at scrape time. */
  private readonly budgetSeries = new Map<string, { scope: string; name: string }>();

  /** A budget's spend this period as this replica last charged it (servegate_budget_spent_tokens and _cost). */
  budgetSpent(scope: string, name: string, tokens: number, cost: number): void {
    this.budgetSeries.set(`${scope}\0${name}`, { scope, name });
    this.budgetSpentTokens.set({ scope, name }, tokens);
    this.budgetSpentCost.set({ scope, name }, cost);
  }

  private pruneBudgetSeries(): void {
    const live = this.sources.budgets?.();
    if (!live) return;
    for (const [id, labels] of this.budgetSeries) {
      if (live.has(id)) continue;
      this.budgetSeries.delete(id);
      this.budgetSpentTokens.remove(labels);
      this.budgetSpentCost.remove(labels);
    }
  }
  readonly queueLength: Gauge = new Gauge({
    name: 'servegate_queue_length',
    help: 'Requests waiting in the gateway for a saturated LLM deployment, by project, deployment and priority',
    labelNames: ['project', 'deployment', 'priority'] as const,
    registers: [this.registry],
    collect: (): void => {
      this.queueLength.reset();
      for (const q of this.sources.queues?.() ?? [])
        this.queueLength.set({ project: q.project, deployment: q.deployment, priority: q.priority }, q.count);
    },
  });
  readonly queueWait = new Histogram({
    name: 'servegate_queue_wait_seconds',
    help: 'Time requests waited in the gateway for a saturated LLM deployment before they were sent on or shed, by project, deployment and priority',
    labelNames: ['project', 'deployment', 'priority'] as const,
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
    registers: [this.registry],
  });
  readonly queueShed = new Counter({
    name: 'servegate_queue_shed_total',
    help: 'Requests refused for a saturated LLM deployment, by project, deployment, priority and reason (sheddable, queue_full, queue_bytes, timeout)',
    labelNames: ['project', 'deployment', 'priority', 'reason'] as const,
    registers: [this.registry],
  });

  // ---- endpoint picking (SPEC §12) ----------------------------------------------------------------------------------

  readonly endpointPicks = new Counter({
    name: 'servegate_endpoint_picks_total',
    help: "Endpoints picked for requests to deployments with more than one ready endpoint, by reason, SPEC §12's four (prefix: the first choice of the prompt's key, its shared prefix's or its conversation's; load: a choice made for load: the least loaded, or a later choice of the key's ranking, the earlier being saturated; only: one endpoint; round-robin)",
    labelNames: ['project', 'deployment', 'reason'] as const,
    registers: [this.registry],
    collect: (): void => this.flushPicks(),
  });
  private picks = new Map<string, Tally>();
  /** The generation of `picks` (route objects hold their tallies by reason: see RouteSlot). */
  private picksGen: object = {};

  /** One pick, counted as a plain number (handed to prom-client at scrape time). `at`: the route object. */
  endpointPick(project: string, deployment: string, pickReason: string, at?: object): void {
    // SPEC §12 names four reasons; the picker's finer ones (the access log keeps them) are counted under those.
    const reason = pickReason === 'conversation' ? 'prefix' : pickReason === 'spill' ? 'load' : pickReason;
    const slot = at && slotOf(at);
    let byReason = slot && slot.pickGen === this.picksGen ? slot.picks : undefined;
    let c = byReason?.get(reason);
    if (!c) {
      const k = `${project}\u0000${deployment}\u0000${reason}`;
      c = this.picks.get(k);
      if (!c) {
        if (this.picks.size > 50_000) {
          this.flushPicks();
          this.picks.clear();
          this.picksGen = {};
          byReason = undefined;
        }
        c = { labels: { project, deployment, reason }, n: 0 };
        this.picks.set(k, c);
      }
      if (slot) {
        if (!byReason) {
          slot.pickGen = this.picksGen;
          slot.picks = byReason = new Map();
        }
        byReason.set(reason, c);
      }
    }
    c.n++;
  }

  private flushPicks(): void {
    for (const t of this.picks.values()) flushTally(this.endpointPicks, t);
  }

  readonly endpointWaiting: Gauge = new Gauge({
    name: 'servegate_endpoint_waiting',
    help: 'Requests waiting at an LLM endpoint, as it last reported them (vllm:num_requests_waiting), by endpoint address; absent while its figures are stale',
    labelNames: ['endpoint'] as const,
    registers: [this.registry],
    collect: (): void => this.collectEndpoints(),
  });
  readonly endpointKvCache = new Gauge({
    name: 'servegate_endpoint_kv_cache_usage',
    help: 'KV-cache use (0-1) of an LLM endpoint, as it last reported it (vllm:kv_cache_usage_perc), by endpoint address',
    labelNames: ['endpoint'] as const,
    registers: [this.registry],
  });
  readonly endpointScrapeErrors = new Counter({
    name: 'servegate_endpoint_scrape_errors_total',
    help: "Failed scrapes of an LLM endpoint's metrics, by endpoint address (such an endpoint is judged by in-flight requests alone)",
    labelNames: ['endpoint'] as const,
    registers: [this.registry],
  });
  /** Scrape errors already counted per endpoint (the source keeps running totals; the counter takes the growth). */
  private scrapeErrorsSeen = new Map<string, number>();

  private collectEndpoints(): void {
    this.endpointWaiting.reset();
    this.endpointKvCache.reset();
    for (const e of this.sources.endpoints?.() ?? []) {
      if (e.waiting !== undefined) this.endpointWaiting.set({ endpoint: e.address }, e.waiting);
      if (e.kv !== undefined) this.endpointKvCache.set({ endpoint: e.address }, e.kv);
      const grew = e.errors - (this.scrapeErrorsSeen.get(e.address) ?? 0);
      if (grew > 0) {
        this.endpointScrapeErrors.inc({ endpoint: e.address }, grew);
        this.scrapeErrorsSeen.set(e.address, e.errors);
      }
    }
  }

  readonly fallbacks = new Counter({
    name: 'servegate_fallbacks_total',
    help: 'Requests sent to a fallback deployment after theirs failed before answering, by project, deployment, the fallback (to: project/deployment) and reason (connect, 5xx, 429, no_endpoint, timeout, rate_limited: the fallback before was past its own limits)',
    labelNames: ['project', 'deployment', 'to', 'reason'] as const,
    registers: [this.registry],
  });

  /** Totals per deployment since start (the admin page's live figures are differences of two of these). */
  routeTotals(): Array<{
    project: string;
    deployment: string;
    total: number;
    errors: number;
    counts: Float64Array;
    count: number;
  }> {
    return [...this.perRoute.values()].map((e) => ({
      project: e.project,
      deployment: e.deployment,
      total: e.total,
      errors: e.errors,
      ...durationTotals(e),
    }));
  }

  /** Upper bounds of the request-duration buckets, ascending (seconds). */
  get durationBounds(): readonly number[] {
    return this.duration.bounds;
  }

  private perLlm = new Map<
    string,
    {
      prompt: { inc(n: number): void };
      completion: { inc(n: number): void };
      ttft: HistogramSeries;
      tpot: HistogramSeries;
    }
  >();
  private perKey = new Map<string, { prompt: { inc(n: number): void }; completion: { inc(n: number): void } }>();

  /** One LLM answer's usage and timing; undefined parts were not seen. */
  /** Tokens charged from the gateway's estimate over the reported usage (servegate_llm_tokens_estimated_total). */
  observeEstimated(project: string, deployment: string, tokens: number, type: 'prompt' | 'completion'): void {
    if (tokens > 0) this.llmTokensEstimated.inc({ project, deployment, type }, tokens);
  }

  observeLlm(
    project: string,
    deployment: string,
    key: string,
    tokens: { prompt: number; completion: number } | undefined,
    ttft: number | undefined,
    tpot: number | undefined,
  ): void {
    const rk = `${project}\u0000${deployment}`;
    let e = this.perLlm.get(rk);
    if (!e) {
      if (this.perLlm.size > 50_000) this.perLlm.clear();
      e = {
        prompt: this.llmTokens.labels(project, deployment, 'prompt'),
        completion: this.llmTokens.labels(project, deployment, 'completion'),
        ttft: this.ttft.child(project, deployment),
        tpot: this.tpot.child(project, deployment),
      };
      this.perLlm.set(rk, e);
    }
    if (ttft !== undefined) this.ttft.observe(e.ttft, ttft);
    if (tpot !== undefined) this.tpot.observe(e.tpot, tpot);
    if (!tokens) return;
    let k = this.perKey.get(key);
    if (!k) {
      if (this.perKey.size > 50_000) this.perKey.clear();
      k = { prompt: this.llmKeyTokens.labels(key, 'prompt'), completion: this.llmKeyTokens.labels(key, 'completion') };
      this.perKey.set(key, k);
    }
    // Both series exist from a deployment's first answer on, so a rate() over them never starts mid-way.
    e.prompt.inc(tokens.prompt);
    e.completion.inc(tokens.completion);
    k.prompt.inc(tokens.prompt);
    k.completion.inc(tokens.completion);
  }

  /** The whole exposition: prom-client's metrics and the compact histograms. */
  async render(): Promise<string> {
    return (await this.registry.metrics()) + this.duration.render() + this.ttft.render() + this.tpot.render();
  }

  /** `defaults`: the process_* and nodejs_* metrics; `sources`: figures read at scrape time. */
  constructor(
    defaults = true,
    private readonly sources: MetricSources = {},
  ) {
    // Standard names (process_*, nodejs_*): what stock Node.js dashboards and alerts query (SPEC §11).
    if (defaults) collectDefaultMetrics({ register: this.registry });
  }
}

/** A deployment's request-duration buckets over all its variants (one series unless it has a canary). */
function durationTotals(e: RouteCounters): { counts: Float64Array; count: number } {
  let counts: Float64Array | undefined;
  let count = 0;
  for (const v of e.variants.values()) {
    if (!counts) counts = v.duration.counts.slice();
    else for (let i = 0; i < counts.length; i++) counts[i] += v.duration.counts[i];
    count += v.duration.count;
  }
  return { counts: counts ?? new Float64Array(0), count };
}
