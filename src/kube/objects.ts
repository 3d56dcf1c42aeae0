// Kubernetes object helpers, one home for each: the plain-object test, reading ObjectMeta, a Secret's data, the
// HTTP status of an API error, the field manager servegate writes as, and metav1.Time formatting. Used by the
// Kubernetes source, the controller, the files source and the CLI alike, so they never disagree.
import type { ObjectMeta } from '../routing/types.js';

/** A JSON/YAML mapping: not null, not an array, not a Date (YAML reads unquoted timestamps as Dates). */
export function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v) && !(v instanceof Date);
}

/** The field manager of every write servegate makes (status patches, the leader Lease). */
export const FIELD_MANAGER = 'servegate-controller';

/** metav1.Time: RFC 3339, UTC, whole seconds (milliseconds dropped, as the API server serialises). */
export function formatTime(t: Date | number): string {
  const ms = typeof t === 'number' ? t : t.getTime();
  return new Date(Math.floor(ms / 1000) * 1000).toISOString().replace('.000Z', 'Z');
}

/** A creationTimestamp as written: a string, or a Date (the client's deserialised form, or a YAML timestamp). */
export function timestampText(t: unknown): string | undefined {
  if (t instanceof Date) return Number.isNaN(t.getTime()) ? undefined : t.toISOString();
  return typeof t === 'string' ? t : undefined;
}

/** Labels and annotations: string values (a YAML `tier: 1` written without quotes is read as the string "1"). */
function stringMap(v: unknown): Record<string, string> | undefined {
  if (!isObject(v)) return undefined;
  const out: Record<string, string> = {};
  for (const [k, val] of Object.entries(v)) {
    if (typeof val === 'string') out[k] = val;
    else if (typeof val === 'number' || typeof val === 'boolean') out[k] = String(val);
  }
  return out;
}

/**
 * The ObjectMeta servegate uses, read from an object as the API server or a manifest gives it; undefined when the name
 * (or, for namespaced kinds, the namespace) is missing.
 */
export function readMeta(raw: unknown, namespaced = true): ObjectMeta | undefined {
  if (!isObject(raw) || !isObject(raw.metadata)) return undefined;
  const m = raw.metadata;
  if (typeof m.name !== 'string' || m.name === '') return undefined;
  if (namespaced && (typeof m.namespace !== 'string' || m.namespace === '')) return undefined;
  const meta: ObjectMeta = { name: m.name, namespace: typeof m.namespace === 'string' ? m.namespace : '' };
  if (typeof m.uid === 'string') meta.uid = m.uid;
  if (typeof m.generation === 'number') meta.generation = m.generation;
  if (typeof m.resourceVersion === 'string') meta.resourceVersion = m.resourceVersion;
  const created = timestampText(m.creationTimestamp);
  if (created !== undefined) meta.creationTimestamp = created;
  const labels = stringMap(m.labels);
  if (labels) meta.labels = labels;
  const annotations = stringMap(m.annotations);
  if (annotations) meta.annotations = annotations;
  return meta;
}

/**
 * A Secret's fields: `data` base64-decoded, then `stringData` on top (it wins, as the API server merges them).
 * Non-string values are skipped; the files source, which must report them, checks its documents before this.
 */
export function secretData(obj: Record<string, unknown>): Record<string, string> {
  const out: Record<string, string> = {};
  if (isObject(obj.data)) {
    for (const [k, v] of Object.entries(obj.data))
      if (typeof v === 'string') out[k] = Buffer.from(v, 'base64').toString('utf8');
  }
  if (isObject(obj.stringData)) {
    for (const [k, v] of Object.entries(obj.stringData)) if (typeof v === 'string') out[k] = v;
  }
  return out;
}

/**
 * The HTTP status an API call failed with, whichever client made it: @kubernetes/client-node's ApiException (`code`),
 * its Watch (`statusCode`), or servegate's own ApiStatusError (`code`). undefined for network errors.
 */
export function apiStatus(err: unknown): number | undefined {
  if (!err || typeof err !== 'object') return undefined;
  const e = err as { statusCode?: unknown; code?: unknown };
  if (typeof e.statusCode === 'number') return e.statusCode;
  if (typeof e.code === 'number') return e.code;
  return undefined;
}
