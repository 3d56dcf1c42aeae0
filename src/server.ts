// Assembles one servegate process in named steps: observe the route-table builds, the admin listener, the route
// source feeding the store, the data-plane listener, and the drain that stops them gracefully.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Config } from './config/schema.js';
import { adminHandler } from './admin/listener.js';
import { createDataPlane } from './gateway/listen/data-plane.js';
import { budgetsOf } from './gateway/listen/plane-context.js';
import { Drain } from './gateway/listen/drain.js';
import { HoldQueues } from './gateway/forward/scale-from-zero.js';
import { EndpointStats } from './gateway/forward/endpoint-stats.js';
import { Metrics } from './observe/metrics.js';
import { CertificateReloader, CertificateError } from './gateway/listen/tls.js';
import type { Tracing } from './observe/tracing.js';
import type { LimitStore } from './limits/buckets.js';
import { MemoryBudgetStore, type BudgetStore } from './limits/budgets.js';
import { budgetNames, budgetProblems, budgetUsage } from './limits/budget-usage.js';
import type { RedisLimitStore } from './limits/redis.js';
import { ConfigError } from './config/load.js';
import { silentLogger, type Logger } from './log.js';
import { RouteStore } from './routing/store.js';
import { buildOptionsOf } from './routing/build.js';
import type { EndpointResolver, RouteSource } from './sources/types.js';

export interface ServeOptions {
  config: Config;
  source: RouteSource;
  endpoints?: EndpointResolver;
  /** 0 = ephemeral. */
  port: number;
  adminPort: number;
  /** Listen address of the gateway port(s); default: all interfaces (IPv6 dual-stack where available). */
  host?: string;
  /**
   * Admin listen address, default 127.0.0.1: /deployments shows every project's deployments, which the data plane
   * hides (the chart passes 0.0.0.0 for the kubelet's probes and Prometheus).
   */
  adminHost?: string;
  logger?: Logger;
  /** Default true; tests with many servers in one process may turn process metrics off. */
  processMetrics?: boolean;
  /**
   * Called with the store and metrics before the source starts (so it sees the first build): the Kubernetes mode
   * attaches the status controller here. Its stop() runs when the server stops.
   */
  attach?: (ctx: { store: RouteStore; metrics: Metrics; logger: Logger }) => { stop(): Promise<void> };
}

export interface Servegate {
  port: number;
  /** With TLS and tls.httpPort: the extra plain-http listener's port. */
  httpPort?: number;
  adminPort: number;
  store: RouteStore;
  metrics: Metrics;
  /** Graceful stop: readiness 503, Connection: close, in-flight requests finish, streams end at the deadline. */
  shutdown(drainMs?: number): Promise<void>;
  /** Immediate stop. */
  close(): Promise<void>;
}

/** The admin listener's default address: this machine only (docs/install.md, "The admin port"). */
export const ADMIN_HOST = '127.0.0.1';

export async function startServegate(opts: ServeOptions): Promise<Servegate> {
  const { config, source } = opts;
  const logger = opts.logger ?? silentLogger;
  const store = new RouteStore(buildOptionsOf(config));
  // Scale-from-zero queues: the data plane holds requests in them, the metrics read them at scrape time.
  const holds = new HoldQueues({
    maxQueue: config.limits.scaleFromZeroMaxQueue,
    maxQueueBytes: config.limits.scaleFromZeroMaxQueueBytes,
  });
  // What LLM endpoints report about their load (SPEC §12): scraped by the data plane, read by the metrics.
  const endpointStats = new EndpointStats(config.balancing);
  const metrics = new Metrics(opts.processMetrics ?? true, {
    pending: () => holds.pending(store.current().routes),
    queues: () => live.plane?.ctx.queues?.lengths(store.current().routes) ?? [],
    // Read at scrape time only, once `budgets` (below) is made.
    budgets: () => budgetNames(budgets, store.current()),
    endpoints: () =>
      endpointStats.snapshot().map((e) => {
        const fresh = endpointStats.fresh(e.origin);
        return { address: e.address, waiting: fresh?.waiting, kv: fresh?.kv, errors: e.errors };
      }),
  });
  observeBuilds(store, metrics, logger);
  const drain = new Drain();

  // The certificate is checked before anything listens: a bad pair stops start-up naming the file.
  let certs: CertificateReloader | undefined;
  if (config.tls.certFile) {
    try {
      certs = new CertificateReloader(config.tls, {
        onReload: (pair) => {
          live.plane?.setCertificate(pair);
          metrics.tlsReloads.inc({ result: 'success' });
          metrics.tlsNotAfter.reset();
          metrics.tlsNotAfter.set({ subject: pair.subject }, pair.notAfter / 1000);
          logger.info(
            { subject: pair.subject, notAfter: new Date(pair.notAfter).toISOString() },
            'TLS certificate reloaded',
          );
        },
        onError: (err) => {
          metrics.tlsReloads.inc({ result: 'error' });
          // `file`, not `key`: the logger redacts every field named `key` (API keys), which would hide the file at fault.
          logger.error(
            { setting: err.key, file: err.file },
            `TLS certificate not reloaded, keeping the one in use: ${err.message}`,
          );
        },
      });
    } catch (err) {
      if (err instanceof CertificateError) throw new ConfigError(err.message);
      throw err;
    }
    metrics.tlsNotAfter.set({ subject: certs.current.subject }, certs.current.notAfter / 1000);
  }
  // Set once the data plane exists: a certificate reload before that has nothing to swap yet.
  const live: { plane?: ReturnType<typeof createDataPlane> } = {};

  // Tracing is constructed only when configured: off, the data plane has no tracer and trace headers pass untouched.
  let tracing: Tracing | undefined;
  if (config.tracing.otlpEndpoint) {
    const { Tracing: TracingClass } = await import('./observe/tracing.js');
    tracing = new TracingClass({ otlpEndpoint: config.tracing.otlpEndpoint, sampleRatio: config.tracing.sampleRatio });
  }

  // Per-minute limits count in Redis when limits.redis.url is set (every replica shares them), else in process.
  let limitStore: LimitStore | undefined;
  if (config.limits.redis.url) {
    const { RedisLimitStore } = await import('./limits/redis.js');
    limitStore = new RedisLimitStore({
      url: config.limits.redis.url,
      failOpen: config.limits.redis.failOpen,
      onError: () => metrics.limitsStoreErrors.inc(),
    });
  }

  // Budgets (SPEC §14) count where the per-minute limits do: in Redis, shared by every replica, or in this process.
  let budgetStore: BudgetStore = new MemoryBudgetStore();
  if (limitStore && 'command' in limitStore) {
    const { RedisBudgetStore } = await import('./limits/budgets-redis.js');
    budgetStore = new RedisBudgetStore(limitStore as RedisLimitStore);
  }
  const budgets = budgetsOf(config, budgetStore, metrics);

  let started = false;
  const admin = createServer(
    adminHandler({
      store,
      source,
      metrics,
      isDraining: () => drain.draining,
      started: () => started,
      problems: () => [
        ...(limitStore?.problem() ? [`rate limits: ${limitStore.problem()}`] : []),
        ...budgetProblems(budgets, store),
      ],
      usage: (q) => budgetUsage(budgets, store.current(), q),
      endpointsOf: (route) => live.plane?.endpointsOf(route),
      queueOf: (route) => live.plane?.ctx.queues?.view(route),
    }),
  );
  await listen(admin, opts.adminPort, opts.adminHost ?? ADMIN_HOST);
  const health = setInterval(() => {
    const h = source.health();
    metrics.sourceSynced.set(h.synced ? 1 : 0);
    metrics.sourceStaleness.set(h.stalenessMs / 1000);
  }, 1000).unref();

  let attached: { stop(): Promise<void> } | undefined;
  try {
    attached = opts.attach?.({ store, metrics, logger });
    await source.start((snapshot) => {
      try {
        store.apply(snapshot);
      } catch (err) {
        logger.error({ err }, 'could not build the route table; keeping the last one');
      }
    });
  } catch (err) {
    clearInterval(health);
    await attached?.stop().catch(() => undefined);
    await closeServer(admin);
    throw err;
  }
  started = true;

  const plane = (live.plane = createDataPlane({
    config,
    store,
    metrics,
    logger,
    drain,
    holds,
    endpointStats,
    endpoints: opts.endpoints,
    tracing,
    limitStore,
    budgets,
    tls: certs && { cert: certs.current.cert, key: certs.current.key, plain: config.tls.httpPort > 0 },
  }));
  const { server, plain, servers } = plane;
  await listen(server, opts.port, opts.host);
  if (plain) await listen(plain, config.tls.httpPort, opts.host);
  certs?.start();
  logger.info(
    {
      port: port(server),
      tls: Boolean(certs),
      httpPort: plain && port(plain),
      adminPort: port(admin),
      routes: store.current().routes.length,
    },
    'servegate listening',
  );
  const dataPlane = plane;

  let closed = false;
  const close = async (): Promise<void> => {
    if (closed) return;
    closed = true;
    clearInterval(health);
    certs?.stop();
    await tracing?.shutdown().catch((err: unknown) => logger.warn({ err }, 'flushing the last spans failed'));
    await limitStore?.close().catch(() => undefined);
    for (const c of drain.connections) c.destroy();
    await attached?.stop().catch((err: unknown) => logger.warn({ err }, 'stopping the controller failed'));
    await Promise.all([
      ...servers.map(closeServer),
      closeServer(admin),
      source.stop().catch(() => undefined),
      dataPlane.close(),
    ]);
  };

  const shutdown = async (drainMs = config.shutdown.drainSeconds * 1000): Promise<void> => {
    if (drain.draining || closed) return;
    await drain.run(servers, drainMs, config.shutdown.acceptSeconds * 1000, logger);
    await close();
    logger.info('servegate stopped');
  };

  return {
    port: port(server),
    httpPort: plain && port(plain),
    adminPort: port(admin),
    store,
    metrics,
    shutdown,
    close,
  };
}

/** Counts and logs every route-table build: sizes, problems by reason (each problem logged once when it appears). */
function observeBuilds(store: RouteStore, metrics: Metrics, logger: Logger): void {
  let loggedProblems = new Set<string>();
  store.onBuild(({ changed, result }, snapshot) => {
    metrics.reloads.inc({ result: changed ? 'changed' : 'unchanged' });
    metrics.routes.set(result.table.routes.length);
    let keyCount = 0;
    for (const list of result.table.keys.values()) keyCount += list.length;
    metrics.keys.set(keyCount);
    const byReason: Record<string, number> = {
      InvalidSpec: 0,
      Conflict: 0,
      BackendNotFound: 0,
      InvalidKey: result.keyProblems.length,
      ReadError: snapshot.readErrors?.length ?? 0,
    };
    for (const s of result.statuses) if (!s.ready) byReason[s.reason] = (byReason[s.reason] ?? 0) + 1;
    for (const [reason, n] of Object.entries(byReason)) metrics.invalidResources.set({ reason }, n);
    if (changed)
      logger.info(
        { routes: result.table.routes.length, keys: keyCount, hash: result.table.hash },
        'route table updated',
      );
    // Problems are logged when they appear, even when the table itself did not change (a bad key adds no route).
    const problems = [
      ...result.statuses
        .filter((s) => !s.ready)
        .map((s) => ({ at: { resource: `${s.resourceKind} ${s.id}`, reason: s.reason }, msg: s.message })),
      ...result.keyProblems.map((p) => ({
        at: { secret: p.id, origin: p.origin },
        msg: `API-key Secret ignored: ${p.message}`,
      })),
      ...(snapshot.readErrors ?? []).map((e) => ({ at: { origin: e.origin }, msg: e.message })),
    ];
    const seen = new Set<string>();
    for (const p of problems) {
      const sig = JSON.stringify(p);
      seen.add(sig);
      if (!loggedProblems.has(sig)) logger.warn(p.at, p.msg);
    }
    loggedProblems = seen;
  });
}

function listen(server: Server, p: number, host?: string): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(p, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
}

function closeServer(server: Server): Promise<void> {
  return new Promise((resolve) => {
    if (!server.listening) return resolve();
    server.close(() => resolve());
  });
}

function port(server: Server): number {
  return (server.address() as AddressInfo).port;
}
