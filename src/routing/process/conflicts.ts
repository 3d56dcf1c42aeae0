// Where resources meet: every candidate route gets its legacy hostname and sort key; then, oldest first, each takes
// its paths, project form and hostname unless an older route holds one of them (Conflict, naming the older one).
import { createHash } from 'node:crypto';
import { deploymentUrls, legacyHostname, projectNamespaceForm } from '../names.js';
import { shareParts } from '../share.js';
import type { BuildOptions, DeploymentStatus, ObjectMeta, ReadyReason, Route } from '../types.js';
import { cmp } from './order.js';

export type Candidate = {
  route: Route;
  meta: ObjectMeta;
  hostnameMessage?: string;
  /** Precomputed for the age sort, the path index and the table hash. */
  age: number;
  ref: string;
  pathKeys: string[];
  form: string;
  digest: string;
  /** The status written when this candidate wins. */
  routed: DeploymentStatus;
};
export type Rejection = { meta: ObjectMeta; resourceKind: Route['resourceKind']; reason: ReadyReason; message: string };

export interface Resolved {
  byPath: Map<string, Route>;
  byHost: Map<string, Route>;
  routes: Route[];
  statuses: DeploymentStatus[];
  /** Per served route, for the table hash. */
  digests: string[];
}

export function rejectedStatus(r: Rejection): DeploymentStatus {
  return {
    id: `${r.meta.namespace}/${r.meta.name}`,
    namespace: r.meta.namespace,
    name: r.meta.name,
    resourceKind: r.resourceKind,
    generation: r.meta.generation,
    ready: false,
    reason: r.reason,
    message: r.message,
  };
}

/**
 * `readyEndpoints`: whether the backend Service has a ready endpoint (undefined = not known: the files source, or
 * an ExternalName Service, whose readiness is the resource's own).
 */
export function candidate(
  route: Omit<Route, 'hostname'>,
  meta: ObjectMeta,
  options: BuildOptions,
  readyEndpoints?: boolean,
): Candidate {
  const h = legacyHostname(route.project, route.deployment, options.serverlessDomain);
  // The processor's fresh route object is completed in place: its fields stay where its literal put them, and the
  // added hostname follows V8's shared transitions. A copy made as `{ ...route, hostname }` got a hidden class of its
  // own per route (9,992 for 10,000), and every field read on the request path missed its inline cache.
  const full = route as Route;
  if ('hostname' in h) full.hostname = h.hostname;
  shareParts(full);
  const form = projectNamespaceForm(full.project);
  const t = meta.creationTimestamp ? Date.parse(meta.creationTimestamp) : Number.NaN;
  const hostnameMessage = 'error' in h ? h.error : undefined;
  return {
    route: full,
    meta,
    hostnameMessage,
    age: Number.isNaN(t) ? Number.POSITIVE_INFINITY : t,
    ref: `${meta.namespace}/${meta.name}`,
    form,
    pathKeys: [...new Set([`${full.project}/${full.deployment}`, `${form}/${full.deployment}`])],
    digest: createHash('sha1').update(JSON.stringify(full)).digest('base64'),
    routed: {
      id: full.id,
      namespace: full.namespace,
      name: full.name,
      resourceKind: full.resourceKind,
      generation: meta.generation,
      ...deploymentUrls(options.publicUrl, full.project, full.deployment, full.kind, full.modelName, full.protocol),
      hostname: full.hostname,
      routed: true,
      ...readiness(full, readyEndpoints),
      hostnameMessage,
    },
  };
}

/** Ready=True means requests are served now (or held while the backend scales up), SPEC §2 and §10. */
function readiness(
  route: Route,
  readyEndpoints: boolean | undefined,
): Pick<DeploymentStatus, 'ready' | 'reason' | 'message'> {
  if (route.notReady) return { ready: false, reason: 'InferenceServiceNotReady', message: route.notReady };
  const b = route.backend;
  if (readyEndpoints !== false || b.kind !== 'service' || b.externalName)
    return { ready: true, reason: 'Routed', message: '' };
  const svc = `Service ${b.namespace}/${b.service}`;
  if (route.holdMs)
    return {
      ready: true,
      reason: 'ScaledToZero',
      message: `${svc} has no ready endpoint: requests wait up to ${route.holdMs / 1000}s for one`,
    };
  return {
    ready: false,
    reason: 'NoReadyEndpoints',
    message: `${svc} has no ready endpoint: requests get 503 until one is ready`,
  };
}

/** Oldest wins: creationTimestamp, then namespace/name. Rejections (already refused) follow, by kind and name. */
export function resolve(candidates: Candidate[], rejections: Rejection[]): Resolved {
  candidates.sort((a, b) => (a.age !== b.age ? (a.age < b.age ? -1 : 1) : cmp(a.ref, b.ref)));
  const byPath = new Map<string, Route>();
  const byHost = new Map<string, Route>();
  const projectForms = new Map<string, Route>(); // namespace form → the oldest route that wrote the project this way
  const routes: Route[] = [];
  const statuses: DeploymentStatus[] = [];
  const digests: string[] = [];

  for (const c of candidates) {
    const { route, form, pathKeys } = c;
    let conflict: string | undefined;
    const owner = projectForms.get(form);
    if (owner !== undefined && owner.project !== route.project) {
      conflict = `project "${route.project}" and project "${owner.project}" meet in the same form "${form}"; project "${owner.project}" is already served by ${owner.resourceKind} ${owner.id}, which is older`;
    }
    for (const k of pathKeys) {
      const other = byPath.get(k);
      if (!conflict && other)
        conflict = `${route.project}/${route.deployment} is already served by ${other.resourceKind} ${other.id}, which is older`;
    }
    if (!conflict && route.hostname) {
      const other = byHost.get(route.hostname);
      if (other)
        conflict = `hostname ${route.hostname} is already served by ${other.resourceKind} ${other.id}, which is older`;
    }
    if (conflict) {
      statuses.push(
        rejectedStatus({ meta: c.meta, resourceKind: route.resourceKind, reason: 'Conflict', message: conflict }),
      );
      continue;
    }
    if (!projectForms.has(form)) projectForms.set(form, route);
    for (const k of pathKeys) byPath.set(k, route);
    if (route.hostname) byHost.set(route.hostname, route);
    routes.push(route);
    digests.push(c.digest);
    statuses.push(c.routed);
  }
  // Candidates come oldest first (a total order), so routes and their statuses need no further sort; the few
  // rejected resources are sorted by kind and name.
  rejections.sort((a, b) =>
    cmp(`${a.resourceKind}/${a.meta.namespace}/${a.meta.name}`, `${b.resourceKind}/${b.meta.namespace}/${b.meta.name}`),
  );
  for (const r of rejections) statuses.push(rejectedStatus(r));
  return { byPath, byHost, routes, statuses, digests };
}
