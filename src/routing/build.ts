// buildRouteTable: a deterministic function of its arguments wiring the per-kind processors (process/) and
// conflicts.ts; an invalid resource becomes a status and never affects another. A BuildCache lets a rebuild after one
// event re-evaluate one resource, not ten thousand, with a fresh build's exact output.
import { createHash } from 'node:crypto';
import type { Config } from '../config/schema.js';
import { BuildCache } from './cache.js';
import { candidate, resolve, type Candidate, type Rejection } from './process/conflicts.js';
import { inferenceServiceBackendName, inferenceServiceRoute } from './process/inference-service.js';
import { buildKeysCached } from './process/keys.js';
import type { RouteOrError } from './process/result.js';
import { servingDeploymentRoute } from './process/serving-deployment.js';
import type {
  BuildOptions,
  BuildResult,
  InferenceServiceResource,
  RouteTable,
  ServiceResource,
  ServingDeploymentResource,
  Snapshot,
} from './types.js';

export { BuildCache } from './cache.js';
export { buildKeys } from './process/keys.js';
export { kserveModelServer } from './process/inference-service.js';

/** The build options that follow from the configuration: one home for the gateway and `servegate url`. */
export function buildOptionsOf(
  config: Pick<Config, 'publicUrl' | 'serverlessDomain' | 'auth' | 'limits'>,
): Required<BuildOptions> {
  return {
    publicUrl: config.publicUrl,
    serverlessDomain: config.serverlessDomain,
    keysNamespace: config.auth.keysNamespace,
    projectNamespaceKeys: config.auth.projectNamespaceKeys,
    defaultTimeoutMs: Math.round(config.limits.requestTimeoutSeconds * 1000),
    scaleFromZeroHoldMs: Math.round(config.limits.scaleFromZeroHoldSeconds * 1000),
  };
}

export function buildRouteTable(
  snapshot: Snapshot,
  options: BuildOptions,
  cache: BuildCache = new BuildCache(),
): BuildResult {
  const servicesById = snapshot.services ? indexServices(snapshot.services, cache) : undefined;
  const deps = `${snapshot.source}|${options.publicUrl}|${options.serverlessDomain}|${options.defaultTimeoutMs}|${options.scaleFromZeroHoldMs ?? 0}`;
  const candidates: Candidate[] = [];
  const rejections: Rejection[] = [];

  // A resource is evaluated again only when it, the options or one of the Service objects it names changed.
  const evaluate = (
    res: ServingDeploymentResource | InferenceServiceResource,
    serviceNames: readonly unknown[],
    compute: () => RouteOrError,
  ): void => {
    const services = servicesById
      ? serviceNames.map((n) =>
          typeof n === 'string' ? servicesById.get(`${res.metadata.namespace}/${n}`) : undefined,
        )
      : null;
    let e = cache.evaluated.get(res);
    if (!e || e.deps !== deps || !sameServices(e.services, services)) {
      const r = compute();
      const value: Candidate | Rejection =
        'reason' in r
          ? { meta: res.metadata, resourceKind: res.kind, ...r }
          : candidate(r, res.metadata, options, services?.[0]?.readyEndpoints);
      e = { deps, services, value };
      cache.evaluated.set(res, e);
    }
    if ('reason' in e.value) rejections.push(e.value);
    else candidates.push(e.value);
  };
  for (const res of snapshot.deployments) {
    const spec = res.spec as
      { backend?: { service?: unknown }; canary?: { backend?: { service?: unknown } } } | undefined;
    evaluate(res, [spec?.backend?.service, spec?.canary?.backend?.service], () =>
      servingDeploymentRoute(res, snapshot.source, servicesById, options),
    );
  }
  for (const res of snapshot.inferenceServices) {
    evaluate(res, [inferenceServiceBackendName(res)], () => inferenceServiceRoute(res, servicesById, options));
  }

  const { byPath, byHost, routes, statuses, digests } = resolve(candidates, rejections);
  const {
    keys,
    problems,
    digests: keyDigests,
  } = buildKeysCached(snapshot.keySecrets, options.keysNamespace, cache, options.projectNamespaceKeys ?? false);
  const table: RouteTable = {
    byPath,
    byHost,
    keys,
    routes,
    hash: hashDigests(digests, keyDigests),
    serverlessDomain: options.serverlessDomain,
  };
  return { table, statuses, keyProblems: problems };
}

export function emptyRouteTable(serverlessDomain = ''): RouteTable {
  return { byPath: new Map(), byHost: new Map(), keys: new Map(), routes: [], hash: 'empty', serverlessDomain };
}

function indexServices(services: readonly ServiceResource[], cache: BuildCache): Map<string, ServiceResource> {
  const cached = cache.servicesByArray.get(services);
  if (cached) return cached;
  const m = new Map<string, ServiceResource>();
  cache.servicesByArray.set(services, m);
  for (const s of services) m.set(`${s.metadata.namespace}/${s.metadata.name}`, s);
  return m;
}

function sameServices(
  a: readonly (ServiceResource | undefined)[] | null,
  b: readonly (ServiceResource | undefined)[] | null,
): boolean {
  if (a === null || b === null) return a === b;
  return a.length === b.length && a.every((s, i) => s === b[i]);
}

function hashDigests(routeDigests: readonly string[], keyDigests: readonly string[]): string {
  const h = createHash('sha256');
  h.update(routeDigests.join(','));
  h.update('|');
  h.update(keyDigests.join(','));
  return h.digest('hex').slice(0, 16);
}
