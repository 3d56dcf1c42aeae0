// The data plane's context (forward/context.ts), made once from the configuration and the caller's services: the
// limiters, the endpoint picker and its fair queues, the body budgets; and what the picker's endpoints report (their
// metrics scraped in the background, the view /deployments and the page show).
import type { EndpointView } from '../../admin/page.js';
import type { Config } from '../../config/schema.js';
import { AuthFailureLimiter } from '../../limits/auth-failures.js';
import type { LimitStore } from '../../limits/buckets.js';
import { Budgets, MemoryBudgetStore, type BudgetStore } from '../../limits/budgets.js';
import { MemoryLimitStore } from '../../limits/memory.js';
import { PerMinuteLimits } from '../../limits/per-minute.js';
import { PerSecondLimiter } from '../../limits/per-second.js';
import { logWriter, type Logger } from '../../log.js';
import { AccessLog } from '../../observe/access-log.js';
import type { Metrics } from '../../observe/metrics.js';
import type { Tracing } from '../../observe/tracing.js';
import type { RouteStore } from '../../routing/store.js';
import type { Route, RouteTable } from '../../routing/types.js';
import type { EndpointResolver } from '../../sources/types.js';
import { corsPolicy } from '../admit/cors.js';
import { BodyBudget } from '../forward/body-budget.js';
import type { PlaneContext } from '../forward/context.js';
import type { EndpointStats, ScrapeTarget } from '../forward/endpoint-stats.js';
import { FairQueues } from '../forward/fair-queue.js';
import { Pools } from '../forward/pools.js';
import type { HoldQueues } from '../forward/scale-from-zero.js';
import { TargetPicker } from '../forward/targets.js';
import { TunnelCounts } from '../forward/tunnels.js';
import { DecodeBudget } from '../http/body-encoding.js';

/** What the context is made of besides the configuration: services the caller owns and also reads. */
export interface PlaneDeps {
  config: Config;
  store: RouteStore;
  metrics: Metrics;
  logger: Logger;
  /** The drain (listen/drain.ts), read for its draining flag. */
  drain: { readonly draining: boolean };
  /** The scale-from-zero queues (made by the caller, which also reads them for servegate_pending_requests). */
  holds: HoldQueues;
  /** What LLM endpoints report about their load (made by the caller, which also reads it for the metrics). */
  endpointStats?: EndpointStats;
  endpoints?: EndpointResolver;
  /** Tracing on (tracing.otlpEndpoint set). */
  tracing?: Tracing;
  /** Where per-minute limits count (Redis with limits.redis.url); default in process. */
  limitStore?: LimitStore;
  /** Budgets per key and project (SPEC §14); default: from the configuration, counted in process. */
  budgets?: Budgets;
}

/** The budgets of a configuration, counted in `store`, their spend in the budget gauges. */
export function budgetsOf(config: Config, store: BudgetStore, metrics: Metrics): Budgets {
  return new Budgets(
    store,
    { perProject: config.limits.perProject, projects: config.limits.projects },
    {
      failOpen: config.limits.redis.failOpen,
      onSpent: (spec, spent) => metrics.budgetSpent(spec.scope, spec.name, spent.tokens, spent.costMicros / 1e6),
    },
  );
}

/** The context with its fair queues always made (their `enabled` says whether requests wait). */
export type BuiltContext = PlaneContext & { queues: FairQueues };

export function buildPlaneContext(deps: PlaneDeps): BuiltContext {
  const { config, drain, logger, store, metrics, holds } = deps;
  const limits = config.limits;
  const cors = corsPolicy(config.cors);
  const perMinute = new PerMinuteLimits(deps.limitStore ?? new MemoryLimitStore(), limits.perKey);
  const picker = new TargetPicker(deps.endpoints, deps.endpointStats, config.balancing);
  // Fair, prioritized queueing of saturated LLM deployments (SPEC §14): told of every request at every endpoint.
  const q = config.queueing;
  const queues = new FairQueues(
    {
      enabled: q.enabled,
      maxWaitSeconds: q.maxWaitSeconds,
      maxQueued: q.maxQueued,
      maxQueuedBytes: q.maxQueuedBytes,
      maxWaiting: config.balancing.maxWaiting,
      maxKvCache: config.balancing.maxKvCache,
    },
    picker,
    deps.endpointStats,
    metrics,
  );
  picker.watcher = queues;
  return {
    store,
    metrics,
    logger,
    access: config.accessLog && logger.isLevelEnabled('info') ? new AccessLog(logWriter(logger)) : undefined,
    cors,
    admission: {
      get table() {
        return store.current();
      },
      cors,
      perSecond: new PerSecondLimiter(limits.rateLimitPerKey, limits.rateLimitBurst),
      perMinute,
      budgets: deps.budgets ?? budgetsOf(config, new MemoryBudgetStore(), metrics),
      authFailures: new AuthFailureLimiter(config.auth.failureLimit),
      counters: {
        authFailure: (reason) => metrics.authFailures.inc({ reason }),
        rateLimited: (labels) => metrics.rateLimited.inc(labels),
      },
    },
    perMinute,
    picker,
    pools: new Pools(),
    drain,
    head: {
      trustForwarded: config.trustForwardedHeaders,
      forwardUnderscore: config.forwardUnderscoreHeaders,
      tracing: deps.tracing !== undefined,
    },
    tracing: deps.tracing,
    holds,
    queues,
    maxBody: limits.maxRequestBodyBytes,
    maxDecoded: Math.min(limits.maxDecodedBodyBytes, limits.maxRequestBodyBytes),
    decoder: new DecodeBudget(limits.decodeConcurrency),
    bodies: new BodyBudget(limits.maxBufferedBodyBytes, limits.bufferedBodyWaitSeconds * 1000),
    bodyMinRate: limits.requestBodyMinBytesPerSecond,
    maxHeaders: limits.maxRequestHeaders,
    streamIdleMs: limits.streamIdleTimeoutSeconds * 1000,
    bodyIdleMs: limits.requestBodyIdleTimeoutSeconds * 1000,
    websocketIdleMs: limits.websocketIdleTimeoutSeconds * 1000,
    tunnels: new TunnelCounts(limits.websocketsPerKey, limits.websocketsPerClient),
  };
}

/**
 * The endpoints of every deployment picked by its servers' load have their metrics scraped in the background. With
 * fair queueing on, a deployment of one endpoint is scraped too: its saturation decides whether requests queue.
 */
export function startScraping(deps: PlaneDeps, picker: TargetPicker): void {
  const from = deps.config.queueing.enabled ? 1 : 2;
  deps.endpointStats?.start(() => scrapeTargets(llmRoutes(deps.store.current()), picker, from));
}

/** A deployment's endpoints with their in-flight requests, picks and last reported figures (/deployments, the page). */
export function endpointViews(
  route: Route,
  picker: TargetPicker,
  stats: EndpointStats | undefined,
): EndpointView[] | undefined {
  const list = picker.targets(route.backend);
  if (!list) return undefined;
  const picks = picker.picksOf(list);
  const total = picks.reduce((n, p) => n + p.picks, 0);
  return list.map((t, i) => {
    const s = stats?.fresh(t.origin);
    const errors = stats?.errorsAt(t.origin) ?? 0;
    return {
      address: t.address,
      inflight: picker.inflightAt(t.origin),
      ...(s ? { waiting: s.waiting, running: s.running, kvCacheUsage: s.kv } : {}),
      ...(errors ? { scrapeErrors: errors } : {}),
      picks: picks[i].picks,
      share: total ? picks[i].picks / total : 0,
      ...(route.balancing.policy === 'llm' ? { weight: picks[i].weight } : {}),
    };
  });
}

/** Per table: the routes picked by their servers' load (walked every scrape round, so not every route each time). */
const llmRouteLists = new WeakMap<RouteTable, Route[]>();

function llmRoutes(table: RouteTable): Route[] {
  let list = llmRouteLists.get(table);
  if (!list) {
    list = table.routes.filter((r) => r.balancing.policy === 'llm');
    llmRouteLists.set(table, list);
  }
  return list;
}

/**
 * Where the metrics of each endpoint of an llm-policy deployment are (its serving port, or balancing.metricsPort), for
 * deployments of at least `from` endpoints.
 */
function* scrapeTargets(routes: Iterable<Route>, picker: TargetPicker, from = 2): Iterable<ScrapeTarget> {
  for (const r of routes) {
    if (r.balancing.policy !== 'llm') continue;
    for (const backend of r.canary ? [r.backend, r.canary.backend] : [r.backend]) {
      const list = picker.targets(backend);
      if (!list || list.length < from) continue;
      for (const t of list) {
        const u = new URL(t.origin);
        if (r.balancing.metricsPort) u.port = String(r.balancing.metricsPort);
        yield { origin: t.origin, address: t.address, metricsUrl: `${u.origin}${r.balancing.metricsPath}` };
      }
    }
  }
}
