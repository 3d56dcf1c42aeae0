// The KServe InferenceService processor: project = namespace, deployment = name, backend the predictor Service.
import { isObject } from '../../kube/objects.js';
import { isDnsLabel, PROJECT_NAME, routeKindOf, VERBS } from '../names.js';
import type {
  BuildOptions,
  InferenceServiceResource,
  ModelServer,
  PredictProtocol,
  ServiceResource,
} from '../types.js';
import { serviceBackend } from './backend.js';
import { invalid, type RouteOrError } from './result.js';
import { quoted, shown } from '../quote.js';
import { defaultBalancing } from './balancing.js';

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

/** The Service KServe's ingress sends traffic to: the transformer's when there is one, else the predictor's. */
export function inferenceServiceBackendName(res: InferenceServiceResource): string {
  const spec = res.spec;
  return `${res.metadata.name}-${isObject(spec) && isObject(spec.transformer) ? 'transformer' : 'predictor'}`;
}

/** The predictor's model block: predictor.model, or an older predictor.<framework> block. */
function predictorModel(spec: unknown): Record<string, unknown> | undefined {
  if (!isObject(spec) || !isObject(spec.predictor)) return undefined;
  const p = spec.predictor;
  if (isObject(p.model)) return p.model;
  for (const key of Object.keys(KSERVE_FORMATS)) if (isObject(p[key])) return p[key] as Record<string, unknown>;
  return undefined;
}

/**
 * V2 (Open Inference Protocol) when the predictor says `protocolVersion: v2`, or its runtime or model format is one
 * that speaks only V2 (Triton, MLServer).
 */
export function kserveProtocol(spec: unknown): PredictProtocol {
  const m = predictorModel(spec);
  if (!m) return 'v1';
  const version = typeof m.protocolVersion === 'string' ? m.protocolVersion.toLowerCase() : '';
  if (version === 'v2' || version === 'grpc-v2') return 'v2';
  const runtime = typeof m.runtime === 'string' ? m.runtime.toLowerCase() : '';
  return runtime.includes('mlserver') || isTriton(spec) ? 'v2' : 'v1';
}

function isTriton(spec: unknown): boolean {
  const m = predictorModel(spec);
  if (!m) return false;
  const runtime = typeof m.runtime === 'string' ? m.runtime.toLowerCase() : '';
  const format = isObject(m.modelFormat) && typeof m.modelFormat.name === 'string' ? m.modelFormat.name : '';
  return (
    runtime.includes('triton') ||
    format.toLowerCase() === 'triton' ||
    isObject((spec as { predictor: Record<string, unknown> }).predictor.triton)
  );
}

/** KServe's Hugging Face server answers the OpenAI API under /openai (/openai/v1/chat/completions). */
function isHuggingFace(spec: unknown): boolean {
  const m = predictorModel(spec);
  if (!m) return false;
  const format = isObject(m.modelFormat) && typeof m.modelFormat.name === 'string' ? m.modelFormat.name : '';
  const runtime = typeof m.runtime === 'string' ? m.runtime.toLowerCase() : '';
  return format.toLowerCase() === 'huggingface' || runtime.includes('huggingface');
}

/**
 * Why the InferenceService says it is not ready, from its own `Ready` condition; undefined when it is ready or has
 * no Ready condition yet to go by (its endpoints decide then).
 */
export function kserveNotReady(status: unknown): string | undefined {
  if (!isObject(status) || !Array.isArray(status.conditions)) return undefined;
  const ready = status.conditions.find((c) => isObject(c) && c.type === 'Ready') as Record<string, unknown> | undefined;
  if (!ready || ready.status === 'True') return undefined;
  const why = [ready.reason, ready.message].filter((x) => typeof x === 'string' && x !== '').join(': ');
  return `the InferenceService is not ready (Ready=${shown(String(ready.status))}${why ? `, ${shown(why, 256)}` : ''})`;
}

/** Annotation that sets the scale-from-zero hold of an InferenceService (it has no servegate spec field). */
export const HOLD_ANNOTATION = 'serving.servegate.dev/scale-from-zero-hold-seconds';

export function inferenceServiceRoute(
  res: InferenceServiceResource,
  services: Map<string, ServiceResource> | undefined,
  options: BuildOptions,
): RouteOrError {
  const { name, namespace } = res.metadata;
  if (!isDnsLabel(name)) return invalid(`metadata.name ${quoted(name)} must be a DNS-1123 label`);
  const modelServer = kserveModelServer(res.spec);
  if (!modelServer)
    return invalid(
      'spec.predictor has no model format servegate knows (sklearn, tensorflow, huggingface, vllm, xgboost, triton, ...)',
    );
  if (!PROJECT_NAME.test(namespace)) return invalid(`namespace ${quoted(namespace)} cannot be a project name`);
  let hold = options.scaleFromZeroHoldMs ?? 0;
  const annotated = res.metadata.annotations?.[HOLD_ANNOTATION];
  if (annotated !== undefined) {
    const seconds = Number(annotated);
    if (annotated.trim() === '' || !(seconds >= 0 && seconds <= 3600))
      return invalid(`annotation ${HOLD_ANNOTATION} must be a number of seconds 0-3600, got ${quoted(annotated)}`);
    hold = Math.round(seconds * 1000);
  }
  const backend = serviceBackend(namespace, inferenceServiceBackendName(res), 80, services, true);
  if ('reason' in backend) return backend;
  const kind = routeKindOf('model', modelServer);
  const protocol = kind === 'predictive' ? kserveProtocol(res.spec) : 'v1';
  const notReady = kserveNotReady(res.status);
  return {
    id: `${namespace}/${name}`,
    namespace,
    name,
    resourceKind: 'InferenceService',
    project: namespace,
    deployment: name,
    kind,
    modelServer,
    // Triton serves the models of its repository under their own names: any name is passed on.
    modelName: kind === 'predictive' && !isTriton(res.spec) ? name : undefined,
    verbs: VERBS[modelServer],
    backend,
    timeoutMs: options.defaultTimeoutMs,
    ...(protocol === 'v2' ? { protocol } : {}),
    ...(kind === 'llm' && isHuggingFace(res.spec) ? { pathPrefix: '/openai' } : {}),
    ...(hold ? { holdMs: hold } : {}),
    ...(notReady ? { notReady } : {}),
    balancing: defaultBalancing(kind),
  };
}
