// Plain functions from raw API objects (as the API server sends them) to the neutral snapshot resources.
// They never throw: anything unusable becomes undefined (counted and logged by the caller).
import type {
  InferenceServiceResource,
  KeySecretResource,
  ObjectMeta,
  ServiceResource,
  ServicePortInfo,
  ServingDeploymentResource,
} from '../../routing/types.js';
import { API_VERSION, KIND } from '../../routing/types.js';

type Raw = Record<string, unknown>;

export const ORIGIN = 'kubernetes';

function isObj(v: unknown): v is Raw {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function stringMap(v: unknown): Record<string, string> | undefined {
  if (!isObj(v)) return undefined;
  const out: Record<string, string> = {};
  for (const [k, val] of Object.entries(v)) if (typeof val === 'string') out[k] = val;
  return out;
}

/** The metadata servegate uses; undefined when name or namespace is missing. */
export function metaOf(raw: unknown, namespaced = true): ObjectMeta | undefined {
  if (!isObj(raw) || !isObj(raw.metadata)) return undefined;
  const m = raw.metadata;
  if (typeof m.name !== 'string' || m.name === '') return undefined;
  if (namespaced && (typeof m.namespace !== 'string' || m.namespace === '')) return undefined;
  const meta: ObjectMeta = { name: m.name, namespace: typeof m.namespace === 'string' ? m.namespace : '' };
  if (typeof m.uid === 'string') meta.uid = m.uid;
  if (typeof m.generation === 'number') meta.generation = m.generation;
  if (typeof m.resourceVersion === 'string') meta.resourceVersion = m.resourceVersion;
  if (typeof m.creationTimestamp === 'string') meta.creationTimestamp = m.creationTimestamp;
  const labels = stringMap(m.labels);
  if (labels) meta.labels = labels;
  const annotations = stringMap(m.annotations);
  if (annotations) meta.annotations = annotations;
  return meta;
}

export function toServingDeployment(raw: unknown): ServingDeploymentResource | undefined {
  const metadata = metaOf(raw);
  if (!metadata) return undefined;
  const r = raw as Raw;
  const res: ServingDeploymentResource = { apiVersion: API_VERSION, kind: KIND, metadata, spec: r.spec, origin: ORIGIN };
  if (r.status !== undefined) res.status = r.status;
  return res;
}

export function toInferenceService(raw: unknown): InferenceServiceResource | undefined {
  const metadata = metaOf(raw);
  if (!metadata) return undefined;
  return { apiVersion: 'serving.kserve.io/v1beta1', kind: 'InferenceService', metadata, spec: (raw as Raw).spec, origin: ORIGIN };
}

/** A key Secret: `data` base64-decoded, then `stringData` (if an API server ever sends it) on top. */
export function toKeySecret(raw: unknown): KeySecretResource | undefined {
  const metadata = metaOf(raw);
  if (!metadata) return undefined;
  const r = raw as Raw;
  const data: Record<string, string> = {};
  if (isObj(r.data)) {
    for (const [k, v] of Object.entries(r.data)) if (typeof v === 'string') data[k] = Buffer.from(v, 'base64').toString('utf8');
  }
  if (isObj(r.stringData)) {
    for (const [k, v] of Object.entries(r.stringData)) if (typeof v === 'string') data[k] = v;
  }
  return { metadata, data, origin: ORIGIN };
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
      if (typeof p.targetPort === 'number' || (typeof p.targetPort === 'string' && p.targetPort !== '')) port.targetPort = p.targetPort;
      if (typeof p.protocol === 'string') port.protocol = p.protocol;
      ports.push(port);
    }
  }
  return { metadata: { name: metadata.name, namespace: metadata.namespace, uid: metadata.uid, resourceVersion: metadata.resourceVersion }, ports };
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
  return { namespace: metadata.namespace, name: metadata.name, service: metadata.labels?.[SERVICE_NAME_LABEL], ports, readyAddresses };
}
