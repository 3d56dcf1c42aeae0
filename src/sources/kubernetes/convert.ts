// Plain functions from raw API objects (as the API server sends them) to the neutral snapshot resources.
// They never throw: anything unusable becomes undefined (counted and logged by the caller).
import type {
  InferenceServiceResource,
  KeySecretResource,
  ServiceResource,
  ServicePortInfo,
  ServingDeploymentResource,
} from '../../routing/types.js';
import { isObject as isObj, readMeta, secretData } from '../../kube/objects.js';
import { API_VERSION, KIND } from '../../routing/types.js';

type Raw = Record<string, unknown>;

export const ORIGIN = 'kubernetes';

/** The metadata servegate uses; undefined when name or namespace is missing (src/kube/objects.ts). */
export const metaOf = readMeta;

export function toServingDeployment(raw: unknown): ServingDeploymentResource | undefined {
  const metadata = metaOf(raw);
  if (!metadata) return undefined;
  const r = raw as Raw;
  const res: ServingDeploymentResource = {
    apiVersion: API_VERSION,
    kind: KIND,
    metadata,
    spec: r.spec,
    origin: ORIGIN,
  };
  if (r.status !== undefined) res.status = r.status;
  return res;
}

export function toInferenceService(raw: unknown): InferenceServiceResource | undefined {
  const metadata = metaOf(raw);
  if (!metadata) return undefined;
  const res: InferenceServiceResource = {
    apiVersion: 'serving.kserve.io/v1beta1',
    kind: 'InferenceService',
    metadata,
    spec: (raw as Raw).spec,
    origin: ORIGIN,
  };
  // Only the conditions: the rest of KServe's status (URLs, traffic, model copies) changes often and routes nothing.
  const status = (raw as Raw).status;
  if (isObj(status) && Array.isArray(status.conditions)) res.status = { conditions: status.conditions };
  return res;
}

/** A key Secret: `data` base64-decoded, then `stringData` (if an API server ever sends it) on top. */
export function toKeySecret(raw: unknown): KeySecretResource | undefined {
  const metadata = metaOf(raw);
  if (!metadata) return undefined;
  const r = raw as Raw;
  return { metadata, data: secretData(r), origin: ORIGIN };
}

export function toService(raw: unknown): ServiceResource | undefined {
  const metadata = metaOf(raw);
  if (!metadata) return undefined;
  const spec = (raw as Raw).spec;
  const ports: ServicePortInfo[] = [];
  if (isObj(spec) && Array.isArray(spec.ports)) {
    for (const p of spec.ports) {
      if (!isObj(p) || typeof p.port !== 'number') continue;
      const port: ServicePortInfo = { port: p.port };
      if (typeof p.name === 'string' && p.name !== '') port.name = p.name;
      if (typeof p.targetPort === 'number' || (typeof p.targetPort === 'string' && p.targetPort !== ''))
        port.targetPort = p.targetPort;
      if (typeof p.protocol === 'string') port.protocol = p.protocol;
      ports.push(port);
    }
  }
  const svc: ServiceResource = {
    metadata: {
      name: metadata.name,
      namespace: metadata.namespace,
      uid: metadata.uid,
      resourceVersion: metadata.resourceVersion,
    },
    ports,
  };
  if (isObj(spec) && spec.type === 'ExternalName') {
    svc.type = 'ExternalName';
    if (typeof spec.externalName === 'string' && spec.externalName !== '') svc.externalName = spec.externalName;
  }
  return svc;
}

export interface SlicePort {
  /** '' when unnamed. */
  name: string;
  port?: number;
  protocol: string;
}

export interface ParsedSlice {
  namespace: string;
  name: string;
  /** The Service it belongs to (label kubernetes.io/service-name); undefined = belongs to none. */
  service?: string;
  ports: SlicePort[];
  /** Addresses of ready endpoints (conditions.ready !== false). */
  readyAddresses: string[];
  /** addressType: IPv4 (the default), IPv6 or FQDN; a dual-stack Service has a slice of each IP family. */
  addressType?: string;
}

export const SERVICE_NAME_LABEL = 'kubernetes.io/service-name';

export function toSlice(raw: unknown): ParsedSlice | undefined {
  const metadata = metaOf(raw);
  if (!metadata) return undefined;
  const r = raw as Raw;
  const ports: SlicePort[] = [];
  if (Array.isArray(r.ports)) {
    for (const p of r.ports) {
      if (!isObj(p)) continue;
      ports.push({
        name: typeof p.name === 'string' ? p.name : '',
        port: typeof p.port === 'number' ? p.port : undefined,
        protocol: typeof p.protocol === 'string' ? p.protocol : 'TCP',
      });
    }
  }
  const readyAddresses: string[] = [];
  if (Array.isArray(r.endpoints)) {
    for (const ep of r.endpoints) {
      if (!isObj(ep) || !Array.isArray(ep.addresses)) continue;
      if (isObj(ep.conditions) && ep.conditions.ready === false) continue;
      for (const a of ep.addresses) if (typeof a === 'string' && a !== '') readyAddresses.push(a);
    }
  }
  return {
    namespace: metadata.namespace,
    name: metadata.name,
    service: metadata.labels?.[SERVICE_NAME_LABEL],
    ports,
    readyAddresses,
    addressType: typeof r.addressType === 'string' && r.addressType !== '' ? r.addressType : 'IPv4',
  };
}

/** A Service's primary IP family (spec.ipFamilies[0]): the family its EndpointSlices are read in when it has two. */
export function servicePrimaryFamily(raw: unknown): string | undefined {
  const spec = isObj(raw) ? raw.spec : undefined;
  if (!isObj(spec) || !Array.isArray(spec.ipFamilies)) return undefined;
  const first: unknown = spec.ipFamilies[0];
  return typeof first === 'string' && first !== '' ? first : undefined;
}
