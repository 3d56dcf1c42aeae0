// The admin listener: /healthz, /readyz, /metrics and a read-only page of deployments and their URLs.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { RouteStore } from '../routing/store.js';
import type { DeploymentStatus } from '../routing/types.js';
import type { RouteSource } from '../sources/types.js';
import type { Metrics } from './metrics.js';

export interface AdminDeps {
  store: RouteStore;
  source: RouteSource;
  metrics: Metrics;
  isDraining: () => boolean;
  /** Readiness also waits for this (e.g. the first snapshot applied). */
  started: () => boolean;
}

export function adminHandler(deps: AdminDeps): (req: IncomingMessage, res: ServerResponse) => void {
  return (req, res) => {
    const path = (req.url ?? '/').split('?', 1)[0];
    if (req.method !== 'GET' && req.method !== 'HEAD') return send(res, 405, 'application/json', JSON.stringify({ error: 'method not allowed' }));
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
      case '/':
        return send(res, 200, 'text/html; charset=utf-8', page(deps));
      default:
        return send(res, 404, 'application/json', JSON.stringify({ error: `no admin page at ${path}; try /, /healthz, /readyz, /metrics, /deployments` }));
    }
  };
}

export function readiness(deps: AdminDeps): { ready: boolean; status: string; synced: boolean; stalenessSeconds: number; problems: string[] } {
  const h = deps.source.health();
  const synced = h.synced && deps.started();
  const stalenessSeconds = Math.round(h.stalenessMs / 100) / 10;
  if (deps.isDraining()) return { ready: false, status: 'shutting down', synced, stalenessSeconds, problems: h.problems };
  if (!synced) return { ready: false, status: 'waiting for the first full list of routes', synced, stalenessSeconds, problems: h.problems };
  // A stale source keeps serving its last table: readiness reports it but stays ready (failing would drop every replica at once).
  return { ready: true, status: stalenessSeconds > 0 ? 'serving the last known routes; source is stale' : 'ready', synced, stalenessSeconds, problems: h.problems };
}

/** Statuses by namespace/name, for people. */
function byName(deps: AdminDeps): DeploymentStatus[] {
  return [...deps.store.statuses()].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : a.resourceKind < b.resourceKind ? -1 : 1));
}

function deploymentsView(deps: AdminDeps) {
  return {
    deployments: byName(deps).map((s) => ({
      kind: s.resourceKind,
      namespace: s.namespace,
      name: s.name,
      ready: s.ready,
      reason: s.reason,
      message: s.message || undefined,
      url: s.url,
      inferenceUrl: s.inferenceUrl,
      openaiUrl: s.openaiUrl,
      endpointUrl: s.endpointUrl,
      hostname: s.hostname,
    })),
    keyProblems: deps.store.keyProblems(),
    source: deps.source.health(),
  };
}

const esc = (s: unknown): string =>
  String(s ?? '').replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);

function page(deps: AdminDeps): string {
  const routes = new Map(deps.store.current().routes.map((r) => [r.id, r]));
  const rows = byName(deps)
    .map((s) => {
      const r = routes.get(s.id);
      const url = s.inferenceUrl ?? s.openaiUrl ?? s.endpointUrl ?? '';
      return `<tr><td>${esc(r?.project ?? '')}</td><td>${esc(s.name)}</td><td>${esc(s.namespace)}</td><td>${esc(r ? (r.modelServer ?? r.kind) : '')}</td>` +
        `<td>${s.ready ? 'Ready' : `<b>${esc(s.reason)}</b>: ${esc(s.message)}`}</td><td><code>${esc(url)}</code></td><td><code>${esc(s.hostname ?? '')}</code></td></tr>`;
    })
    .join('\n');
  const h = deps.source.health();
  return `<!doctype html><html><head><meta charset="utf-8"><title>servegate deployments</title>
<style>body{font-family:system-ui,sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}code{font-size:90%}</style></head>
<body><h1>servegate</h1><p>${deps.store.current().routes.length} deployments served; source ${h.synced ? 'synced' : 'not synced'}${h.stalenessMs ? `, stale for ${Math.round(h.stalenessMs / 1000)}s` : ''}.</p>
${h.problems.length ? `<ul>${h.problems.map((p) => `<li>${esc(p)}</li>`).join('')}</ul>` : ''}
<table><thead><tr><th>Project</th><th>Deployment</th><th>Namespace</th><th>Server</th><th>Status</th><th>URL</th><th>Legacy hostname</th></tr></thead><tbody>
${rows}
</tbody></table></body></html>`;
}

function send(res: ServerResponse, status: number, type: string, body: string): void {
  res.writeHead(status, { 'content-type': type, 'content-length': Buffer.byteLength(body), 'cache-control': 'no-store' });
  res.end(body);
}
