// Turns YAML/JSON manifest text into the neutral resources of a Snapshot: ServingDeployments, API-key Secrets and
// KServe InferenceServices. Other kinds are ignored; a malformed document of our kinds is a ReadError, never a throw.
import { isMap, isScalar, isSeq, parseAllDocuments, type Node as YamlNode } from 'yaml';
import {
  API_GROUP,
  API_VERSION,
  KEY_LABEL,
  KIND,
  type InferenceServiceResource,
  type KeySecretResource,
  type ObjectMeta,
  type ReadError,
  type ServingDeploymentResource,
} from '../routing/types.js';
import { isObject, readMeta as readObjectMeta } from '../kube/objects.js';
import { isDnsLabel, isDnsSubdomain } from '../routing/names.js';
import { quoted, shown } from '../routing/quote.js';
import { copyWith } from '../same-shape.js';

export const KSERVE_GROUP = 'serving.kserve.io';
export const KSERVE_API_VERSION = `${KSERVE_GROUP}/v1beta1`;
/** Namespace of a ServingDeployment or InferenceService written without one, as kubectl does. */
export const DEFAULT_NAMESPACE = 'default';

export interface ManifestResources {
  deployments: ServingDeploymentResource[];
  inferenceServices: InferenceServiceResource[];
  keySecrets: KeySecretResource[];
}

export interface ParsedManifests extends ManifestResources {
  /** Problems with single documents; the other documents of the text still count. */
  errors: ReadError[];
  /** Set when the text is not valid YAML as a whole: then no resource of it was used. */
  syntaxError?: ReadError;
}

export interface ManifestOptions {
  /** Where the text came from (a file path); document origins are "<origin>#<n>", n from 1. */
  origin: string;
  /** Namespace of a key Secret written without one. */
  keysNamespace: string;
}

/** What one object is to servegate. */
export type Classified =
  | { kind: 'deployment'; resource: ServingDeploymentResource }
  | { kind: 'inferenceService'; resource: InferenceServiceResource }
  | { kind: 'keySecret'; resource: KeySecretResource }
  | { kind: 'ignored' }
  | { kind: 'error'; message: string };

export function emptyResources(): ManifestResources {
  return { deployments: [], inferenceServices: [], keySecrets: [] };
}

/** Parses a multi-document YAML (or JSON) text. Never throws. */
export function parseManifests(text: string, opts: ManifestOptions): ParsedManifests {
  const out: ParsedManifests = copyWith(emptyResources(), { errors: [] });
  let docs: ReturnType<typeof parseAllDocuments>;
  try {
    // An empty text gives an empty array (yaml's EmptyStream).
    docs = parseAllDocuments(text, { prettyErrors: true, uniqueKeys: true });
  } catch (err) {
    out.syntaxError = { origin: opts.origin, message: `not valid YAML: ${firstLine(err)}` };
    return out;
  }

  // The whole text is refused when any document has a syntax error: a half-written file is never half-applied.
  const values: unknown[] = [];
  for (let i = 0; i < docs.length; i++) {
    const doc = docs[i];
    const origin = `${opts.origin}#${i + 1}`;
    if (doc.errors.length > 0) {
      out.syntaxError = { origin, message: `not valid YAML: ${firstLine(doc.errors[0])}` };
      return copyWith(emptyResources(), { errors: [], syntaxError: out.syntaxError });
    }
    try {
      values.push(doc.toJS({ maxAliasCount: 100 }));
    } catch (err) {
      out.syntaxError = { origin, message: `not valid YAML: ${firstLine(err)}` };
      return copyWith(emptyResources(), { errors: [], syntaxError: out.syntaxError });
    }
  }

  for (let i = 0; i < docs.length; i++) {
    const origin = `${opts.origin}#${i + 1}`;
    const value = values[i];
    const node = docs[i].contents as YamlNode | null;
    if (isObject(value) && value.kind === 'List' && 'items' in value) {
      if (!Array.isArray(value.items)) {
        if (value.items !== null && value.items !== undefined)
          out.errors.push({ origin, message: 'a List needs items: a sequence of objects' });
        continue;
      }
      const itemsNode = isMap(node) ? node.get('items', true) : undefined;
      const itemNodes: unknown[] = isSeq(itemsNode) ? itemsNode.items : [];
      value.items.forEach((item, j) => {
        add(
          out,
          `${origin}.items[${j}]`,
          classifyObject(
            item,
            { origin: `${origin}.items[${j}]`, keysNamespace: opts.keysNamespace },
            itemNodes[j] as YamlNode | undefined,
          ),
        );
      });
      continue;
    }
    add(out, origin, classifyObject(value, { origin, keysNamespace: opts.keysNamespace }, node ?? undefined));
  }
  return out;
}

function add(out: ParsedManifests, origin: string, c: Classified): void {
  switch (c.kind) {
    case 'deployment':
      out.deployments.push(c.resource);
      break;
    case 'inferenceService':
      out.inferenceServices.push(c.resource);
      break;
    case 'keySecret':
      out.keySecrets.push(c.resource);
      break;
    case 'error':
      out.errors.push({ origin, message: c.message });
      break;
    case 'ignored':
      break;
  }
}

/**
 * Classifies one decoded object. `node` (the YAML node it came from) lets Secret stringData values written as plain
 * numbers or booleans keep their source text (`prefix: 0123...` stays a string, as the user meant).
 */
export function classifyObject(obj: unknown, opts: ManifestOptions, node?: YamlNode): Classified {
  if (!isObject(obj)) return { kind: 'ignored' };
  const { apiVersion, kind } = obj;
  if (typeof apiVersion !== 'string' || typeof kind !== 'string') return { kind: 'ignored' };
  const group = apiVersion.includes('/') ? apiVersion.slice(0, apiVersion.lastIndexOf('/')) : '';

  if (kind === KIND && group === API_GROUP) {
    if (apiVersion !== API_VERSION)
      return err(`${KIND} apiVersion ${quoted(apiVersion)} is not supported (use ${API_VERSION})`);
    const meta = readMeta(obj.metadata, DEFAULT_NAMESPACE, KIND);
    if (typeof meta === 'string') return err(meta);
    const resource: ServingDeploymentResource = {
      apiVersion,
      kind: KIND,
      metadata: meta,
      spec: obj.spec,
      origin: opts.origin,
    };
    if (obj.status !== undefined) resource.status = obj.status;
    return { kind: 'deployment', resource };
  }

  if (kind === 'InferenceService' && group === KSERVE_GROUP) {
    if (apiVersion !== KSERVE_API_VERSION)
      return err(`InferenceService apiVersion ${quoted(apiVersion)} is not supported (use ${KSERVE_API_VERSION})`);
    const meta = readMeta(obj.metadata, DEFAULT_NAMESPACE, 'InferenceService');
    if (typeof meta === 'string') return err(meta);
    return {
      kind: 'inferenceService',
      resource: { apiVersion, kind: 'InferenceService', metadata: meta, spec: obj.spec, origin: opts.origin },
    };
  }

  if (kind === 'Secret' && apiVersion === 'v1') {
    if (!isKeySecret(obj.metadata)) return { kind: 'ignored' };
    const meta = readMeta(obj.metadata, opts.keysNamespace, 'key Secret');
    if (typeof meta === 'string') return err(meta);
    if (!isDnsSubdomain(meta.name))
      return err(
        `key Secret metadata.name ${quoted(meta.name)} must be a DNS-1123 subdomain (lower-case a-z, 0-9, '-', '.')`,
      );
    const data = secretData(obj, node);
    if (typeof data === 'string') return err(`key Secret ${meta.namespace}/${meta.name}: ${data}`);
    return { kind: 'keySecret', resource: { metadata: meta, data, origin: opts.origin } };
  }
  return { kind: 'ignored' };
}

function err(message: string): Classified {
  return { kind: 'error', message };
}

function isKeySecret(metadata: unknown): boolean {
  if (!isObject(metadata) || !isObject(metadata.labels)) return false;
  const v = metadata.labels[KEY_LABEL];
  return v === 'true' || v === true;
}

function readMeta(raw: unknown, defaultNamespace: string, what: string): ObjectMeta | string {
  if (!isObject(raw)) return `${what} has no metadata mapping (metadata.name is required)`;
  const { name, namespace } = raw;
  if (typeof name !== 'string' || name === '') return `${what} has no metadata.name`;
  let ns = defaultNamespace;
  if (namespace !== undefined && namespace !== null && namespace !== '') {
    if (typeof namespace !== 'string' || !isDnsLabel(namespace)) {
      return `${what} ${quoted(name)}: metadata.namespace ${quoted(namespace)} must be a DNS-1123 label`;
    }
    ns = namespace;
  }
  // Checked and defaulted here; read like any API object (src/kube/objects.ts).
  return readObjectMeta({ metadata: copyWith(raw, { namespace: ns }) }, false)!;
}

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

/** base64-decoded `data` merged with `stringData`; stringData wins, as the API server does. */
function secretData(obj: Record<string, unknown>, node?: YamlNode): Record<string, string> | string {
  const out: Record<string, string> = {};
  const { data, stringData } = obj;
  if (data !== undefined && data !== null) {
    if (!isObject(data)) return 'data must be a mapping of base64 strings';
    for (const [k, v] of Object.entries(data)) {
      if (v === null) {
        out[k] = '';
        continue;
      }
      if (typeof v !== 'string') return `data.${shown(k)} must be a base64 string`;
      const compact = v.replace(/\s+/g, '');
      if (compact.length % 4 !== 0 || !BASE64.test(compact))
        return `data.${shown(k)} is not valid base64 (use stringData for plain text)`;
      out[k] = Buffer.from(compact, 'base64').toString('utf8');
    }
  }
  if (stringData !== undefined && stringData !== null) {
    if (!isObject(stringData)) return 'stringData must be a mapping of strings';
    const sourceText = scalarSources(node, 'stringData');
    for (const [k, v] of Object.entries(stringData)) {
      if (v === null) continue;
      if (typeof v === 'string') out[k] = v;
      else if (typeof v === 'number' || typeof v === 'boolean') out[k] = sourceText.get(k) ?? String(v);
      else return `stringData.${shown(k)} must be a string`;
    }
  }
  return out;
}

/** Source text of the plain scalars of mapping `key` in a YAML map node (e.g. a prefix written as digits). */
function scalarSources(node: YamlNode | undefined, key: string): Map<string, string> {
  const m = new Map<string, string>();
  if (!isMap(node)) return m;
  const inner = node.get(key, true);
  if (!isMap(inner)) return m;
  for (const pair of inner.items) {
    if (isScalar(pair.key) && isScalar(pair.value) && typeof pair.value.source === 'string') {
      m.set(String(pair.key.value), pair.value.source);
    }
  }
  return m;
}

function firstLine(e: unknown): string {
  const msg = e instanceof Error ? e.message : String(e);
  return msg.split('\n')[0].trim().replace(/:$/, '');
}

/**
 * Joins the resources of several texts (files in path order). A resource defined twice (same kind, namespace and
 * name) keeps its LAST definition, as `kubectl apply -f DIR` would leave it; the earlier one is reported.
 */
export function combineManifests(parts: readonly ManifestResources[]): ManifestResources & { errors: ReadError[] } {
  const errors: ReadError[] = [];
  const dedupe = <T extends { metadata: ObjectMeta; origin?: string }>(items: T[], what: string): T[] => {
    const byId = new Map<string, T>();
    for (const item of items) {
      const id = `${item.metadata.namespace}/${item.metadata.name}`;
      const prev = byId.get(id);
      if (prev) {
        errors.push({
          origin: prev.origin ?? id,
          message: `${what} ${id} is defined again at ${item.origin ?? '?'}; this definition is replaced by that one (as kubectl apply would)`,
        });
        byId.delete(id);
      }
      byId.set(id, item);
    }
    return [...byId.values()];
  };
  return {
    deployments: dedupe(
      parts.flatMap((p) => p.deployments),
      KIND,
    ),
    inferenceServices: dedupe(
      parts.flatMap((p) => p.inferenceServices),
      'InferenceService',
    ),
    keySecrets: dedupe(
      parts.flatMap((p) => p.keySecrets),
      'key Secret',
    ),
    errors,
  };
}
