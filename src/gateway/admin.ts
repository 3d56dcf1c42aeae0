// The admin listener: /healthz, /readyz, /metrics and a read-only page of deployments and their URLs.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { RouteStore } from '../routing/store.js';
import type { DeploymentStatus } from '../routing/types.js';
import type { RouteSource } from '../sources/types.js';
import { deploymentsPage } from './admin-page.js';
import { LiveStats } from './live-stats.js';
import type { Metrics } from './metrics.js';

export interface AdminDeps {
  store: RouteStore;
  source: RouteSource;
  metrics: Metrics;
  isDraining: () => boolean;
  /** Readiness also waits for this (e.g. the first snapshot applied). */
  started: () => boolean;
  /** Problems that do not make the gateway unready but belong on /readyz (e.g. the rate-limit store is unreachable). */
  problems?: () => string[];
}

export function adminHandler(deps: AdminDeps): (req: IncomingMessage, res: ServerResponse) => void {
  const live = new LiveStats(deps.metrics);
  return (req, res) => {
    const path = (req.url ?? '/').split('?', 1)[0];
    if (req.method !== 'GET' && req.method !== 'HEAD')
      return send(res, 405, 'application/json', JSON.stringify({ error: 'method not allowed' }));
    switch (path) {
      case '/healthz':
        return send(res, 200, 'application/json', JSON.stringify({ status: 'ok' }));
      case '/readyz': {
        const r = readiness(deps);
        return send(res, r.ready ? 200 : 503, 'application/json', JSON.stringify(r));
      }
      case '/metrics':
        deps.metrics.render().then(
          (text) => send(res, 200, deps.metrics.registry.contentType, text),
          (err: Error) => send(res, 500, 'text/plain', err.message),
        );
        return;
      case '/deployments':
      case '/api/deployments':
        return send(res, 200, 'application/json', JSON.stringify(deploymentsView(deps), null, 2));
      case '/api/stats':
        return send(
          res,
          200,
          'application/json',
          JSON.stringify({ windowSeconds: 60, deployments: Object.fromEntries(live.read()) }),
        );
      case '/': {
        live.read(); // the first sample, so the page's first poll already has a window
        const h = deps.source.health();
        const routes = new Map(deps.store.current().routes.map((r) => [r.id, r]));
        const page = deploymentsPage({
          statuses: byName(deps),
          routes,
          synced: h.synced,
          stalenessMs: h.stalenessMs,
          problems: h.problems,
        });
        return send(res, 200, 'text/html; charset=utf-8', page);
      }
      default:
        return send(
          res,
          404,
          'application/json',
          JSON.stringify({
            error: `no admin page at ${path}; try /, /healthz, /readyz, /metrics, /deployments, /api/stats`,
          }),
        );
    }
  };
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

function send(res: ServerResponse, status: number, type: string, body: string): void {
  res.writeHead(status, {
    'content-type': type,
    'content-length': Buffer.byteLength(body),
    'cache-control': 'no-store',
  });
  res.end(body);
}
