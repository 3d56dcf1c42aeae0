// The KServe InferenceService processor: project = namespace, deployment = name, backend the predictor Service.
import { isObject } from '../../kube/objects.js';
import { isDnsLabel, PROJECT_NAME, routeKindOf, VERBS } from '../names.js';
import type { InferenceServiceResource, ModelServer, ServiceResource } from '../types.js';
import type { BuildOptions } from '../build.js';
import { serviceBackend } from './backend.js';
import { invalid, type RouteOrError } from './result.js';

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

export function inferenceServiceRoute(
  res: InferenceServiceResource,
  services: Map<string, ServiceResource> | undefined,
  options: BuildOptions,
): RouteOrError {
  const { name, namespace } = res.metadata;
  if (!isDnsLabel(name)) return invalid(`metadata.name "${name}" must be a DNS-1123 label`);
  const modelServer = kserveModelServer(res.spec);
  if (!modelServer)
    return invalid(
      'spec.predictor has no model format servegate knows (sklearn, tensorflow, huggingface, vllm, xgboost, ...)',
    );
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
