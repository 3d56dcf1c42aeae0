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
import type { ModelServer, PerMinuteLimits, ServiceResource, ServingDeploymentResource, Snapshot } from '../types.js';
import type { BuildOptions } from '../build.js';
import { parseBackend } from './backend.js';
import { invalid, type RouteOrError } from './result.js';

export function servingDeploymentRoute(
  res: ServingDeploymentResource,
  source: Snapshot['source'],
  services: Map<string, ServiceResource> | undefined,
  options: BuildOptions,
): RouteOrError {
  const { name, namespace } = res.metadata;
  if (!isDnsLabel(name))
    return invalid(`metadata.name "${name}" must be a DNS-1123 label (lower-case a-z, 0-9, '-', at most 63)`);
  const spec = res.spec;
  if (!isObject(spec)) return invalid('spec must be an object');

  const project = spec.project === undefined || spec.project === '' ? namespace : spec.project;
  if (typeof project !== 'string' || project.length > 63 || !PROJECT_NAME.test(project)) {
    return invalid(
      `spec.project "${String(project)}" must be 1-63 letters, digits, '_' or '-', starting and ending with a letter or digit`,
    );
  }
  const type = spec.type;
  if (type !== 'model' && type !== 'python')
    return invalid(`spec.type must be "model" or "python", got ${JSON.stringify(type)}`);
  let modelServer: ModelServer | undefined;
  if (type === 'model') {
    if (!MODEL_SERVERS.includes(spec.modelServer as ModelServer)) {
      return invalid(
        `spec.modelServer is required for type "model" and must be one of ${MODEL_SERVERS.join(', ')}, got ${JSON.stringify(spec.modelServer)}`,
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
      return invalid(`spec.modelName "${String(modelName)}" must be letters, digits, '_', '.' or '-'`);
    }
  } else if (kind === 'llm' && spec.modelName !== undefined && spec.modelName !== '') {
    // The name the LLM server serves; the one OpenAI base URL writes it into the body's `model` (SPEC §9).
    if (typeof spec.modelName !== 'string' || spec.modelName.length > 253 || !SERVED_MODEL_NAME.test(spec.modelName)) {
      return invalid(
        `spec.modelName ${JSON.stringify(spec.modelName)} must be the name the LLM server serves: letters, digits and _ . : / @ + -`,
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
        return invalid(`spec.limits.${k} is not a field: spec.limits takes requestsPerMinute and tokensPerMinute`);
      const v = spec.limits[k];
      if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0)
        return invalid(`spec.limits.${k} must be a whole number 0 or more, got ${JSON.stringify(v)}`);
      if (v > 0) (limits ??= {})[k] = v;
    }
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
    ...(limits ? { limits } : {}),
  };
}
