// buildRouteTable(snapshot, options) → { table, statuses, keyProblems }: a pure function, deterministic output.
// Invalid resources become statuses with a stable reason; they never affect another resource.
import { createHash } from 'node:crypto';
import { isObject } from '../kube/objects.js';
import {
  deploymentUrls,
  isDnsLabel,
  KEY_PREFIX,
  KEY_SHA256,
  MODEL_SERVERS,
  legacyHostname,
  MODEL_NAME,
  PROJECT_NAME,
  projectNamespaceForm,
  SERVED_MODEL_NAME,
  routeKindOf,
  VERBS,
} from './names.js';
import type {
  ApiKeyRecord,
  Backend,
  BuildResult,
  DeploymentStatus,
  InferenceServiceResource,
  KeyProblem,
  KeySecretResource,
  ModelServer,
  ObjectMeta,
  ReadyReason,
  Route,
  RouteTable,
  ServiceResource,
  ServingDeploymentResource,
  Snapshot,
} from './types.js';

export interface BuildOptions {
  publicUrl: string;
  serverlessDomain: string;
  keysNamespace: string;
  /** Default upstream time to response headers. */
  defaultTimeoutMs: number;
}

type Candidate = {
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
type Rejection = { meta: ObjectMeta; resourceKind: Route['resourceKind']; reason: ReadyReason; message: string };

/**
 * Memo of the per-resource work, keyed by the resource object: sources hand unchanged resources over as the same
 * object, so a rebuild after one event re-evaluates one resource, not ten thousand. An entry is reused only when
 * everything else it depended on (options, source kind, the backend Service object) is the same, so the output is
 * exactly what a fresh evaluation would give.
 */
type Evaluated = { deps: string; service: ServiceResource | undefined | null; value: Candidate | Rejection };
const evaluated = new WeakMap<object, Evaluated>();


export function buildRouteTable(snapshot: Snapshot, options: BuildOptions): BuildResult {
  const servicesById = snapshot.services ? indexServices(snapshot.services) : undefined;
  const deps = `${snapshot.source}|${options.publicUrl}|${options.serverlessDomain}|${options.defaultTimeoutMs}`;
  const candidates: Candidate[] = [];
  const rejections: Rejection[] = [];

  const evaluate = (res: ServingDeploymentResource | InferenceServiceResource, serviceName: unknown, compute: () => RouteOrError): void => {
    const service = servicesById ? (typeof serviceName === 'string' ? servicesById.get(`${res.metadata.namespace}/${serviceName}`) : undefined) : null;
    let e = evaluated.get(res);
    if (!e || e.deps !== deps || e.service !== service) {
      const r = compute();
      const value: Candidate | Rejection =
        'reason' in r ? { meta: res.metadata, resourceKind: res.kind, ...r } : candidate(r, res.metadata, options);
      e = { deps, service, value };
      evaluated.set(res, e);
    }
    if ('reason' in e.value) rejections.push(e.value);
    else candidates.push(e.value);
  };
  for (const res of snapshot.deployments) {
    const spec = res.spec as { backend?: { service?: unknown } } | undefined;
    evaluate(res, spec?.backend?.service, () => servingDeploymentRoute(res, snapshot.source, servicesById, options));
  }
  for (const res of snapshot.inferenceServices) {
    evaluate(res, `${res.metadata.name}-predictor`, () => inferenceServiceRoute(res, servicesById, options));
  }

  // Oldest wins: creationTimestamp, then namespace/name.
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
      if (!conflict && other) conflict = `${route.project}/${route.deployment} is already served by ${other.resourceKind} ${other.id}, which is older`;
    }
    if (!conflict && route.hostname) {
      const other = byHost.get(route.hostname);
      if (other) conflict = `hostname ${route.hostname} is already served by ${other.resourceKind} ${other.id}, which is older`;
    }
    if (conflict) {
      statuses.push(rejectedStatus({ meta: c.meta, resourceKind: route.resourceKind, reason: 'Conflict', message: conflict }));
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
  rejections.sort((a, b) => cmp(`${a.resourceKind}/${a.meta.namespace}/${a.meta.name}`, `${b.resourceKind}/${b.meta.namespace}/${b.meta.name}`));
  for (const r of rejections) statuses.push(rejectedStatus(r));

  const { keys, problems, digests: keyDigests } = buildKeysCached(snapshot.keySecrets, options.keysNamespace);
  const table: RouteTable = { byPath, byHost, keys, routes, hash: hashDigests(digests, keyDigests) };
  return { table, statuses, keyProblems: problems };
}

type KeysResult = ReturnType<typeof buildKeysWithDigests>;
const keysByArray = new WeakMap<readonly KeySecretResource[], { keysNamespace: string; result: KeysResult }>();

/** Sources hand over the same array while no key changed: then the key index is reused as it is. */
function buildKeysCached(secrets: readonly KeySecretResource[], keysNamespace: string): KeysResult {
  const hit = keysByArray.get(secrets);
  if (hit && hit.keysNamespace === keysNamespace) return hit.result;
  const result = buildKeysWithDigests(secrets, keysNamespace);
  keysByArray.set(secrets, { keysNamespace, result });
  return result;
}

export function emptyRouteTable(): RouteTable {
  return { byPath: new Map(), byHost: new Map(), keys: new Map(), routes: [], hash: 'empty' };
}

function rejectedStatus(r: Rejection): DeploymentStatus {
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

function candidate(route: Omit<Route, 'hostname'>, meta: ObjectMeta, options: BuildOptions): Candidate {
  const h = legacyHostname(route.project, route.deployment, options.serverlessDomain);
  const full: Route = 'hostname' in h ? { ...route, hostname: h.hostname } : { ...route };
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
      ...deploymentUrls(options.publicUrl, full.project, full.deployment, full.kind, full.modelName),
      hostname: full.hostname,
      ready: true,
      reason: 'Routed',
      message: '',
      hostnameMessage,
    },
  };
}

type RouteOrError = Omit<Route, 'hostname'> | { reason: ReadyReason; message: string };

function invalid(message: string): { reason: ReadyReason; message: string } {
  return { reason: 'InvalidSpec', message };
}


function servingDeploymentRoute(
  res: ServingDeploymentResource,
  source: Snapshot['source'],
  services: Map<string, ServiceResource> | undefined,
  options: BuildOptions,
): RouteOrError {
  const { name, namespace } = res.metadata;
  if (!isDnsLabel(name)) return invalid(`metadata.name "${name}" must be a DNS-1123 label (lower-case a-z, 0-9, '-', at most 63)`);
  const spec = res.spec;
  if (!isObject(spec)) return invalid('spec must be an object');

  const project = spec.project === undefined || spec.project === '' ? namespace : spec.project;
  if (typeof project !== 'string' || project.length > 63 || !PROJECT_NAME.test(project)) {
    return invalid(`spec.project "${String(project)}" must be 1-63 letters, digits, '_' or '-', starting and ending with a letter or digit`);
  }
  const type = spec.type;
  if (type !== 'model' && type !== 'python') return invalid(`spec.type must be "model" or "python", got ${JSON.stringify(type)}`);
  let modelServer: ModelServer | undefined;
  if (type === 'model') {
    if (!MODEL_SERVERS.includes(spec.modelServer as ModelServer)) {
      return invalid(`spec.modelServer is required for type "model" and must be one of ${MODEL_SERVERS.join(', ')}, got ${JSON.stringify(spec.modelServer)}`);
    }
    modelServer = spec.modelServer as ModelServer;
  } else if (spec.modelServer !== undefined) {
    return invalid('spec.modelServer is only allowed with type "model"');
  }
  const kind = routeKindOf(type, modelServer);
  let modelName: string | undefined;
  if (kind === 'predictive') {
    modelName = spec.modelName === undefined || spec.modelName === '' ? name : (spec.modelName as string);
    if (typeof modelName !== 'string' || modelName.length > 253 || !MODEL_NAME.test(modelName)) {
      return invalid(`spec.modelName "${String(modelName)}" must be letters, digits, '_', '.' or '-'`);
    }
  } else if (kind === 'llm' && spec.modelName !== undefined && spec.modelName !== '') {
    // The name the LLM server serves; the one OpenAI base URL writes it into the body's `model` (SPEC §9).
    if (typeof spec.modelName !== 'string' || spec.modelName.length > 253 || !SERVED_MODEL_NAME.test(spec.modelName)) {
      return invalid(`spec.modelName ${JSON.stringify(spec.modelName)} must be the name the LLM server serves: letters, digits and _ . : / @ + -`);
    }
    modelName = spec.modelName;
  } else if (spec.modelName !== undefined && kind === 'python') {
    return invalid('spec.modelName is only allowed for predictive model servers');
  }
  let timeoutMs = options.defaultTimeoutMs;
  if (spec.timeoutSeconds !== undefined) {
    if (typeof spec.timeoutSeconds !== 'number' || !(spec.timeoutSeconds > 0) || spec.timeoutSeconds > 86_400) {
      return invalid('spec.timeoutSeconds must be a number of seconds between 0 and 86400');
    }
    timeoutMs = Math.round(spec.timeoutSeconds * 1000);
  }
  const backend = parseBackend(spec.backend, namespace, source, services);
  if ('reason' in backend) return backend;
  return {
    id: `${namespace}/${name}`,
    namespace,
    name,
    resourceKind: 'ServingDeployment',
    project,
    deployment: name,
    kind,
    modelServer,
    modelName,
    verbs: modelServer ? VERBS[modelServer] : [],
    backend,
    timeoutMs,
  };
}

function parseBackend(
  raw: unknown,
  namespace: string,
  source: Snapshot['source'],
  services: Map<string, ServiceResource> | undefined,
): Backend | { reason: ReadyReason; message: string } {
  if (!isObject(raw)) return invalid('spec.backend is required: {service, port} (or {url} in the files source)');
  if (raw.url !== undefined) {
    if (source !== 'files') {
      return invalid('spec.backend.url is refused in the kubernetes source: name a Service in the same namespace with backend.service and backend.port');
    }
    if (raw.service !== undefined) return invalid('spec.backend takes either url or service/port, not both');
    if (typeof raw.url !== 'string') return invalid('spec.backend.url must be a string');
    let u: URL;
    try {
      u = new URL(raw.url);
    } catch {
      return invalid(`spec.backend.url "${raw.url}" is not a URL`);
    }
    if (u.protocol !== 'http:' || u.search || u.hash || u.username) {
      return invalid(`spec.backend.url "${raw.url}" must be a plain http://host:port URL (optionally with a path prefix)`);
    }
    return { kind: 'url', url: `${u.origin}${u.pathname.replace(/\/+$/, '')}` };
  }
  const { service, port } = raw;
  if (typeof service !== 'string' || !isDnsLabel(service)) {
    return invalid(`spec.backend.service must be the name of a Service in namespace ${namespace} (a DNS-1123 label), got ${JSON.stringify(service)}`);
  }
  if (typeof port !== 'number' || !Number.isInteger(port) || port < 1 || port > 65535) {
    return invalid(`spec.backend.port must be a port number 1-65535, got ${JSON.stringify(port)}`);
  }
  return serviceBackend(namespace, service, port, services);
}

function serviceBackend(
  namespace: string,
  service: string,
  port: number,
  services: Map<string, ServiceResource> | undefined,
): Backend | { reason: ReadyReason; message: string } {
  if (!services) return { kind: 'service', namespace, service, port };
  const svc = services.get(`${namespace}/${service}`);
  if (!svc) return { reason: 'BackendNotFound', message: `Service ${namespace}/${service} not found` };
  const p = svc.ports.find((sp) => sp.port === port);
  if (!p) {
    const offered = svc.ports.map((sp) => sp.port).join(', ') || 'none';
    return { reason: 'BackendNotFound', message: `Service ${namespace}/${service} has no port ${port} (ports: ${offered})` };
  }
  return { kind: 'service', namespace, service, port, portName: p.name, targetPort: p.targetPort };
}

const KSERVE_FORMATS: Record<string, ModelServer> = {
  sklearn: 'sklearn',
  tensorflow: 'tensorflow',
  huggingface: 'llm',
  vllm: 'llm',
  xgboost: 'python',
  lightgbm: 'python',
  pytorch: 'python',
  onnx: 'python',
  pmml: 'python',
  paddle: 'python',
  triton: 'python',
  mlflow: 'python',
};

/** The model server of an InferenceService: predictor.model.modelFormat.name, or the older predictor.<framework> keys. */
export function kserveModelServer(spec: unknown): ModelServer | undefined {
  if (!isObject(spec) || !isObject(spec.predictor)) return undefined;
  const p = spec.predictor;
  if (isObject(p.model) && isObject(p.model.modelFormat) && typeof p.model.modelFormat.name === 'string') {
    const fmt = p.model.modelFormat.name.toLowerCase();
    const runtime = typeof p.model.runtime === 'string' ? p.model.runtime.toLowerCase() : '';
    if (runtime.includes('vllm') || runtime.includes('huggingface')) return 'llm';
    return KSERVE_FORMATS[fmt];
  }
  for (const key of Object.keys(KSERVE_FORMATS)) if (isObject(p[key])) return KSERVE_FORMATS[key];
  return undefined;
}

function inferenceServiceRoute(
  res: InferenceServiceResource,
  services: Map<string, ServiceResource> | undefined,
  options: BuildOptions,
): RouteOrError {
  const { name, namespace } = res.metadata;
  if (!isDnsLabel(name)) return invalid(`metadata.name "${name}" must be a DNS-1123 label`);
  const modelServer = kserveModelServer(res.spec);
  if (!modelServer) return invalid('spec.predictor has no model format servegate knows (sklearn, tensorflow, huggingface, vllm, xgboost, ...)');
  if (!PROJECT_NAME.test(namespace)) return invalid(`namespace "${namespace}" cannot be a project name`);
  const backend = serviceBackend(namespace, `${name}-predictor`, 80, services);
  if ('reason' in backend) return backend;
  const kind = routeKindOf('model', modelServer);
  return {
    id: `${namespace}/${name}`,
    namespace,
    name,
    resourceKind: 'InferenceService',
    project: namespace,
    deployment: name,
    kind,
    modelServer,
    modelName: kind === 'predictive' ? name : undefined,
    verbs: VERBS[modelServer],
    backend,
    timeoutMs: options.defaultTimeoutMs,
  };
}

/** Parses API-key Secrets. A bad one is reported and skipped, never fatal. */
export function buildKeys(
  secrets: readonly KeySecretResource[],
  keysNamespace: string,
): { keys: Map<string, ApiKeyRecord[]>; problems: KeyProblem[] } {
  const { keys, problems } = buildKeysWithDigests(secrets, keysNamespace);
  return { keys, problems };
}

type ParsedKey = { keysNamespace: string; id: string; value: ApiKeyRecord | string; digest: string };
const parsedKeys = new WeakMap<KeySecretResource, ParsedKey>();

function buildKeysWithDigests(
  secrets: readonly KeySecretResource[],
  keysNamespace: string,
): { keys: Map<string, ApiKeyRecord[]>; problems: KeyProblem[]; digests: string[] } {
  const keys = new Map<string, ApiKeyRecord[]>();
  const problems: KeyProblem[] = [];
  const parsed: Array<{ s: KeySecretResource; p: ParsedKey }> = [];
  for (const s of secrets) {
    let p = parsedKeys.get(s);
    if (!p || p.keysNamespace !== keysNamespace) {
      const value = parseKeySecret(s, keysNamespace);
      const digest =
        typeof value === 'string'
          ? ''
          : createHash('sha1')
              .update(JSON.stringify([value.name, value.namespace, value.prefix, value.sha256.toString('hex'), value.projects === '*' ? '*' : [...value.projects].sort(), value.expiresAt ?? null, value.scopeNamespace ?? null]))
              .digest('base64');
      p = { keysNamespace, id: `${s.metadata.namespace}/${s.metadata.name}`, value, digest };
      parsedKeys.set(s, p);
    }
    parsed.push({ s, p });
  }
  parsed.sort((a, b) => cmp(a.p.id, b.p.id));
  const digests: string[] = [];
  for (const { s, p } of parsed) {
    if (typeof p.value === 'string') {
      problems.push({ id: p.id, origin: s.origin, message: p.value });
      continue;
    }
    digests.push(p.digest);
    const list = keys.get(p.value.prefix);
    if (list) list.push(p.value);
    else keys.set(p.value.prefix, [p.value]);
  }
  return { keys, problems, digests };
}

function parseKeySecret(s: KeySecretResource, keysNamespace: string): ApiKeyRecord | string {
  const d = s.data;
  const prefix = (d.prefix ?? '').trim();
  if (!KEY_PREFIX.test(prefix)) return 'prefix must be 16 characters [A-Za-z0-9]';
  const sha = (d.sha256 ?? '').trim().toLowerCase();
  if (!KEY_SHA256.test(sha)) return 'sha256 must be 64 hex characters (SHA-256 of the whole key "<prefix>.<secret>")';
  const projectsRaw = (d.projects ?? '').trim();
  if (!projectsRaw) return 'projects is required: a comma-separated list of project names, or "*"';
  let projects: '*' | Set<string>;
  if (projectsRaw === '*') projects = '*';
  else {
    const list = projectsRaw.split(',').map((p) => p.trim()).filter(Boolean);
    const bad = list.find((p) => !PROJECT_NAME.test(p));
    if (bad !== undefined || list.length === 0) return `projects has an invalid project name ${JSON.stringify(bad ?? projectsRaw)}`;
    projects = new Set(list.map(projectNamespaceForm));
  }
  let expiresAt: number | undefined;
  if (d.expiresAt !== undefined && d.expiresAt.trim() !== '') {
    expiresAt = Date.parse(d.expiresAt.trim());
    if (Number.isNaN(expiresAt)) return `expiresAt "${d.expiresAt}" is not an RFC 3339 time`;
  }
  const scoped = s.metadata.namespace !== keysNamespace;
  return {
    name: s.metadata.name,
    namespace: s.metadata.namespace,
    prefix,
    sha256: Buffer.from(sha, 'hex'),
    projects,
    expiresAt,
    scopeNamespace: scoped ? s.metadata.namespace : undefined,
  };
}

const servicesByArray = new WeakMap<readonly ServiceResource[], Map<string, ServiceResource>>();

function indexServices(services: readonly ServiceResource[]): Map<string, ServiceResource> {
  const cached = servicesByArray.get(services);
  if (cached) return cached;
  const m = new Map<string, ServiceResource>();
  servicesByArray.set(services, m);
  for (const s of services) m.set(`${s.metadata.namespace}/${s.metadata.name}`, s);
  return m;
}

function cmp(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function hashDigests(routeDigests: readonly string[], keyDigests: readonly string[]): string {
  const h = createHash('sha256');
  h.update(routeDigests.join(','));
  h.update('|');
  h.update(keyDigests.join(','));
  return h.digest('hex').slice(0, 16);
}
