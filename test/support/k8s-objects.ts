// Raw Kubernetes objects (as kubectl would send them) for tests against the fake API server.
import type { KeySecretResource } from '../../src/routing/types.js';

export type Obj = Record<string, any>;

export const SDEP_API = 'serving.servegate.dev/v1alpha1';
export const ISVC_API = 'serving.kserve.io/v1beta1';

export function sdepRaw(ref: string, spec: Obj = {}, extra: Obj = {}): Obj {
  const [namespace, name] = ref.split('/');
  return {
    apiVersion: SDEP_API,
    kind: 'ServingDeployment',
    metadata: { name, namespace },
    spec: { type: 'model', modelServer: 'sklearn', backend: { service: `${name}-svc`, port: 8080 }, ...spec },
    ...extra,
  };
}

/** A key Secret as a user applies it: stringData (the API server turns it into base64 data). */
export function keySecretRaw(secret: KeySecretResource): Obj {
  return {
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: {
      name: secret.metadata.name,
      namespace: secret.metadata.namespace,
      labels: { 'serving.servegate.dev/api-key': 'true' },
    },
    stringData: { ...secret.data },
  };
}

export function serviceRaw(
  ref: string,
  ports: Array<{ port: number; name?: string; targetPort?: number | string }>,
): Obj {
  const [namespace, name] = ref.split('/');
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name, namespace },
    spec: { ports: ports.map((p) => ({ protocol: 'TCP', ...p })) },
  };
}

export function sliceRaw(
  ref: string,
  service: string,
  ports: Array<{ port: number; name?: string }>,
  endpoints: Array<{ ip: string; ready?: boolean }>,
): Obj {
  const [namespace, name] = ref.split('/');
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: { name, namespace, labels: { 'kubernetes.io/service-name': service } },
    addressType: 'IPv4',
    ports: ports.map((p) => ({ protocol: 'TCP', name: p.name ?? '', port: p.port })),
    endpoints: endpoints.map((e) => ({
      addresses: [e.ip],
      conditions: e.ready === undefined ? {} : { ready: e.ready },
    })),
  };
}

export function isvcRaw(ref: string, format = 'sklearn'): Obj {
  const [namespace, name] = ref.split('/');
  return {
    apiVersion: ISVC_API,
    kind: 'InferenceService',
    metadata: { name, namespace },
    spec: { predictor: { model: { modelFormat: { name: format } } } },
  };
}
