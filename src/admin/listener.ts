// The admin listener: /healthz, /readyz, /metrics and a read-only page of deployments and their URLs.
import express, { type Express, type NextFunction, type Request, type Response } from 'express';
import type { RouteStore } from '../routing/store.js';
import type { DeploymentStatus, Route } from '../routing/types.js';
import type { RouteSource } from '../sources/types.js';
import { deploymentsPage, endpointLine, type EndpointView, type QueueView } from './page.js';
import { LiveStats } from './live-stats.js';
import type { Metrics } from '../observe/metrics.js';

export interface AdminDeps {
  store: RouteStore;
  source: RouteSource;
  metrics: Metrics;
  isDraining: () => boolean;
  /** Readiness also waits for this (e.g. the first snapshot applied). */
  started: () => boolean;
  /** Problems that do not make the gateway unready but belong on /readyz (e.g. the rate-limit store is unreachable). */
  problems?: () => string[];
  /** A deployment's endpoints with what is known of their load (SPEC §12); undefined when it has no endpoint list. */
  endpointsOf?: (route: Route) => EndpointView[] | undefined;
  /** A saturated deployment's fair queue (SPEC §14); undefined when it never queued. */
  queueOf?: (route: Route) => QueueView | undefined;
  /** What budgets hold now (SPEC §14; `servegate usage` reads it). */
  usage?: (q: { key?: string; project?: string }) => Promise<object>;
}

/**
 * The admin surface as an express app (express for its routing; it is off the data path, where docs/decisions.md
 * keeps node:http). Routing is exact (case-sensitive, no trailing-slash aliases); GET and HEAD only; every answer is
 * `cache-control: no-store` without an ETag, since every figure is live.
 */
export function adminHandler(deps: AdminDeps): Express {
  const live = new LiveStats(deps.metrics);
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.set('case sensitive routing', true);
  app.set('strict routing', true);
  app.set('query parser', false);

  app.use((req, res, next) => {
    res.set('cache-control', 'no-store');
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.set('allow', 'GET, HEAD');
      return void res.status(405).json({ error: 'method not allowed' });
    }
    next();
  });
  app.get('/healthz', (_req, res) => void res.json({ status: 'ok' }));
  app.get('/readyz', (_req, res) => {
    const r = readiness(deps);
    res.status(r.ready ? 200 : 503).json(r);
  });
  app.get('/metrics', (_req, res, next) => {
    deps.metrics.render().then((text) => void res.type(deps.metrics.registry.contentType).send(text), next);
  });
  app.get(['/deployments', '/api/deployments'], (_req, res) => {
    res.type('application/json').send(JSON.stringify(deploymentsView(deps), null, 2));
  });
  app.get('/budgets', (req, res, next) => {
    if (!deps.usage) return void res.status(404).json({ error: 'no budgets here' });
    const params = new URLSearchParams(req.url.includes('?') ? req.url.slice(req.url.indexOf('?')) : '');
    const q = { key: params.get('key') ?? undefined, project: params.get('project') ?? undefined };
    deps.usage(q).then((u) => void res.status('error' in u ? 503 : 200).json(u), next);
  });
  app.get('/api/stats', (_req, res) => {
    // Endpoint lines of the deployments picked among several endpoints (the page rewrites its lists from them).
    const endpoints: Record<string, string[]> = {};
    for (const r of deps.store.current().routes) {
      const eps = deps.endpointsOf?.(r);
      if (eps && eps.length > 1) endpoints[`${r.project}/${r.deployment}`] = eps.map(endpointLine);
    }
    res.json({ windowSeconds: 60, deployments: Object.fromEntries(live.read()), endpoints });
  });
  app.get('/', (_req, res) => {
    live.read(); // the first sample, so the page's first poll already has a window
    const h = deps.source.health();
    const routes = new Map(deps.store.current().routes.map((r) => [r.id, r]));
    const page = deploymentsPage({
      statuses: byName(deps),
      routes,
      synced: h.synced,
      stalenessMs: h.stalenessMs,
      problems: h.problems,
      keyProblems: deps.store.keyProblems(),
      endpointsOf: deps.endpointsOf,
      queueOf: deps.queueOf,
    });
    res.type('text/html; charset=utf-8').send(page);
  });
  app.use((req, res) => {
    res.status(404).json({
      error: `no admin page at ${req.path}; try /, /healthz, /readyz, /metrics, /deployments, /budgets, /api/stats`,
    });
  });
  app.use((err: Error, _req: Request, res: Response, _next: NextFunction) => {
    res.status(500).type('text/plain').send(err.message);
  });
  return app;
}

export function readiness(deps: AdminDeps): {
  ready: boolean;
  status: string;
  synced: boolean;
  stalenessSeconds: number;
  problems: string[];
} {
  const h = deps.source.health();
  const problems = [...h.problems, ...(deps.problems?.() ?? [])];
  const synced = h.synced && deps.started();
  const stalenessSeconds = Math.round(h.stalenessMs / 100) / 10;
  if (deps.isDraining()) return { ready: false, status: 'shutting down', synced, stalenessSeconds, problems };
  if (!synced)
    return { ready: false, status: 'waiting for the first full list of routes', synced, stalenessSeconds, problems };
  // A stale source keeps serving its last table: readiness reports it but stays ready (failing would drop every replica at once).
  return {
    ready: true,
    status: stalenessSeconds > 0 ? 'serving the last known routes; source is stale' : 'ready',
    synced,
    stalenessSeconds,
    problems,
  };
}

/** Statuses by namespace/name, for people. */
function byName(deps: AdminDeps): DeploymentStatus[] {
  return [...deps.store.statuses()].sort((a, b) =>
    a.id < b.id ? -1 : a.id > b.id ? 1 : a.resourceKind < b.resourceKind ? -1 : 1,
  );
}

function deploymentsView(deps: AdminDeps) {
  const routes = new Map(deps.store.current().routes.map((r) => [r.id, r]));
  return {
    deployments: byName(deps).map((s) => {
      const r = routes.get(s.id);
      return {
        kind: s.resourceKind,
        namespace: s.namespace,
        name: s.name,
        project: r?.project,
        type: r ? (r.modelServer ? 'model' : 'python') : undefined,
        modelServer: r?.modelServer,
        protocol: r?.kind === 'predictive' ? (r.protocol ?? 'v1') : undefined,
        canaryPercent: r?.canary?.percent,
        balancing: r?.balancing.policy,
        fallbacks: r?.fallbacks,
        endpoints: r ? deps.endpointsOf?.(r) : undefined,
        queue: r ? deps.queueOf?.(r) : undefined,
        scaleFromZeroHoldSeconds: r?.holdMs ? r.holdMs / 1000 : undefined,
        ready: s.ready,
        reason: s.reason,
        message: s.message || undefined,
        url: s.url,
        inferenceUrl: s.inferenceUrl,
        openaiUrl: s.openaiUrl,
        endpointUrl: s.endpointUrl,
        hostname: s.hostname,
      };
    }),
    keyProblems: deps.store.keyProblems(),
    source: deps.source.health(),
  };
}
