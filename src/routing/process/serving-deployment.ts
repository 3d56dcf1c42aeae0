// The ServingDeployment processor: one resource's spec checked field by field into a route, or InvalidSpec /
// BackendNotFound with a message that names the field. Knows nothing of other resources (conflicts are the builder's).
import { isObject } from '../../kube/objects.js';
import {
  isDnsLabel,
  MODEL_NAME,
  MODEL_SERVERS,
  PROJECT_NAME,
  routeKindOf,
  SERVED_MODEL_NAME,
  VERBS,
} from '../names.js';
import type {
  BuildOptions,
  Canary,
  ModelServer,
  PerMinuteLimits,
  PredictProtocol,
  Priority,
  ServiceResource,
  ServingDeploymentResource,
  Snapshot,
} from '../types.js';
import { parseBackend, parsePathPrefix } from './backend.js';
import { parseBalancing, parseFallbacks } from './balancing.js';
import { invalid, type Refusal, type RouteOrError } from './result.js';
import { quoted, shown } from '../quote.js';

export function servingDeploymentRoute(
  res: ServingDeploymentResource,
  source: Snapshot['source'],
  services: Map<string, ServiceResource> | undefined,
  options: BuildOptions,
): RouteOrError {
  const { name, namespace } = res.metadata;
  if (!isDnsLabel(name))
    return invalid(`metadata.name ${quoted(name)} must be a DNS-1123 label (lower-case a-z, 0-9, '-', at most 63)`);
  const spec = res.spec;
  if (!isObject(spec)) return invalid('spec must be an object');

  const project = spec.project === undefined || spec.project === '' ? namespace : spec.project;
  if (typeof project !== 'string' || project.length > 63 || !PROJECT_NAME.test(project)) {
    return invalid(
      `spec.project ${quoted(project)} must be 1-63 letters, digits, '_' or '-', starting and ending with a letter or digit`,
    );
  }
  const type = spec.type;
  if (type !== 'model' && type !== 'python')
    return invalid(`spec.type must be "model" or "python", got ${quoted(type)}`);
  let modelServer: ModelServer | undefined;
  if (type === 'model') {
    if (!MODEL_SERVERS.includes(spec.modelServer as ModelServer)) {
      return invalid(
        `spec.modelServer is required for type "model" and must be one of ${MODEL_SERVERS.join(', ')}, got ${quoted(spec.modelServer)}`,
      );
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
      return invalid(`spec.modelName ${quoted(modelName)} must be letters, digits, '_', '.' or '-'`);
    }
  } else if (kind === 'llm' && spec.modelName !== undefined && spec.modelName !== '') {
    // The name the LLM server serves; the shared OpenAI base URL writes it into the body's `model` (SPEC §9).
    if (typeof spec.modelName !== 'string' || spec.modelName.length > 253 || !SERVED_MODEL_NAME.test(spec.modelName)) {
      return invalid(
        `spec.modelName ${quoted(spec.modelName)} must be the name the LLM server serves: letters, digits and _ . : / @ + -`,
      );
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
  let limits: PerMinuteLimits | undefined;
  if (spec.limits !== undefined && spec.limits !== null) {
    if (!isObject(spec.limits)) return invalid('spec.limits must be an object: {requestsPerMinute, tokensPerMinute}');
    for (const k of Object.keys(spec.limits)) {
      if (k !== 'requestsPerMinute' && k !== 'tokensPerMinute')
        return invalid(
          `spec.limits.${shown(k)} is not a field: spec.limits takes requestsPerMinute and tokensPerMinute`,
        );
      const v = spec.limits[k];
      if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0)
        return invalid(`spec.limits.${k} must be a whole number 0 or more, got ${quoted(v)}`);
      if (v > 0) (limits ??= {})[k] = v;
    }
  }
  let protocol: PredictProtocol | undefined;
  if (spec.protocol !== undefined && spec.protocol !== null) {
    if (spec.protocol !== 'v1' && spec.protocol !== 'v2')
      return invalid(`spec.protocol must be "v1" or "v2", got ${quoted(spec.protocol)}`);
    if (kind !== 'predictive' && spec.protocol === 'v2')
      return invalid('spec.protocol v2 (Open Inference Protocol) is for predictive model servers only');
    if (kind === 'predictive') protocol = spec.protocol;
  }
  const backend = parseBackend(spec.backend, namespace, source, services);
  if ('reason' in backend) return backend;
  const pathPrefix = parsePathPrefix(isObject(spec.backend) ? spec.backend.path : undefined);
  if (typeof pathPrefix === 'object') return pathPrefix;
  const hold = holdMsOf(spec.scaleFromZero, options);
  if (typeof hold === 'object') return hold;
  let canary: Canary | undefined;
  if (spec.canary !== undefined && spec.canary !== null) {
    const c = spec.canary;
    if (!isObject(c)) return invalid('spec.canary must be an object: {backend: {service, port}, percent}');
    for (const k of Object.keys(c))
      if (k !== 'backend' && k !== 'percent')
        return invalid(`spec.canary.${shown(k)} is not a field: spec.canary takes backend and percent`);
    if (typeof c.percent !== 'number' || !(c.percent >= 0 && c.percent <= 100))
      return invalid(`spec.canary.percent must be a number 0-100, got ${quoted(c.percent)}`);
    if (isObject(c.backend) && c.backend.path !== undefined)
      return invalid('spec.canary.backend.path is not a field: the canary takes the same spec.backend.path');
    const cb = parseBackend(c.backend, namespace, source, services);
    if ('reason' in cb)
      return { reason: cb.reason, message: cb.message.replace('spec.backend', 'spec.canary.backend') };
    canary = { backend: cb, percent: c.percent };
  }
  const balancing = parseBalancing(spec.balancing, kind);
  if ('reason' in balancing) return balancing;
  const fallbacks = parseFallbacks(spec.fallbacks, project, name);
  if (fallbacks !== undefined && 'reason' in fallbacks) return fallbacks;
  const pricing = parsePricing(spec.pricing);
  if (pricing !== undefined && 'reason' in pricing) return pricing;
  let priority: Priority | undefined;
  if (spec.priority !== undefined && spec.priority !== null) {
    if (spec.priority !== 'critical' && spec.priority !== 'standard' && spec.priority !== 'sheddable')
      return invalid(`spec.priority must be critical, standard or sheddable, got ${quoted(spec.priority)}`);
    priority = spec.priority;
  }
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
    ...(limits ? { limits } : {}),
    ...(protocol === 'v2' ? { protocol } : {}),
    ...(pathPrefix ? { pathPrefix } : {}),
    ...(hold ? { holdMs: hold } : {}),
    ...(canary ? { canary } : {}),
    balancing,
    ...(fallbacks ? { fallbacks } : {}),
    ...(pricing ? { pricing } : {}),
    ...(priority ? { priority } : {}),
  };
}

/** spec.pricing: {inputPerMillion, outputPerMillion}, each a number 0 or more (a missing one is 0). */
function parsePricing(raw: unknown): { inputPerMillion: number; outputPerMillion: number } | Refusal | undefined {
  if (raw === undefined || raw === null) return undefined;
  if (!isObject(raw)) return invalid('spec.pricing must be an object: {inputPerMillion, outputPerMillion}');
  const out = { inputPerMillion: 0, outputPerMillion: 0 };
  for (const k of Object.keys(raw)) {
    if (k !== 'inputPerMillion' && k !== 'outputPerMillion')
      return invalid(
        `spec.pricing.${shown(k)} is not a field: spec.pricing takes inputPerMillion and outputPerMillion`,
      );
    const v = raw[k];
    if (typeof v !== 'number' || !Number.isFinite(v) || v < 0 || v > 1e9)
      return invalid(`spec.pricing.${k} must be a number 0 or more (per million tokens), got ${quoted(v)}`);
    out[k] = v;
  }
  return out.inputPerMillion > 0 || out.outputPerMillion > 0 ? out : undefined;
}

/** spec.scaleFromZero.holdSeconds in ms (0 = off), the configured default when the field is absent. */
export function holdMsOf(raw: unknown, options: BuildOptions, field = 'spec.scaleFromZero'): number | Refusal {
  const fallback = options.scaleFromZeroHoldMs ?? 0;
  if (raw === undefined || raw === null) return fallback;
  if (!isObject(raw)) return invalid(`${field} must be an object: {holdSeconds}`);
  for (const k of Object.keys(raw))
    if (k !== 'holdSeconds') return invalid(`${field}.${shown(k)} is not a field: ${field} takes holdSeconds`);
  const s = raw.holdSeconds;
  if (s === undefined) return fallback;
  if (typeof s !== 'number' || !(s >= 0 && s <= 3600))
    return invalid(`${field}.holdSeconds must be a number of seconds 0-3600, got ${quoted(s)}`);
  return Math.round(s * 1000);
}
