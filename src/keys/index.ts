// API keys: generation, hashing, --expires parsing and the Secret manifest that stores a key's hash (SPEC §4).
// Pure helpers shared by `servegate keys` and the tests; the same rules as buildKeys in src/routing/build.ts.
import { createHash, randomBytes } from 'node:crypto';
import { Document, isScalar } from 'yaml';
import { KeyError } from '../errors.js';
import { formatTime, isObject, secretData } from '../kube/objects.js';
import { isDnsSubdomain, KEY_PREFIX, KEY_SHA256, PROJECT_NAME } from '../routing/names.js';
import { KEY_LABEL } from '../routing/types.js';
import { parseBudgetPeriod } from '../limits/budgets.js';
import { quoted } from '../routing/quote.js';

export const PREFIX_LENGTH = 16;
/** 43 url-safe characters: 32 random bytes in base64url. */
export const SECRET_LENGTH = 43;
const ALNUM = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

export { KeyError };

export interface GeneratedKey {
  /** The whole key "<prefix>.<secret>": shown once, never stored. */
  key: string;
  prefix: string;
  /** Lowercase hex SHA-256 of the whole key. */
  sha256: string;
}

/** A fresh key from crypto randomness: 16 alphanumerics (rejection-sampled, no bias), a dot, 43 base64url characters. */
export function generateKey(): GeneratedKey {
  let prefix = '';
  while (prefix.length < PREFIX_LENGTH) {
    for (const b of randomBytes(32)) {
      // 248 = 62 * 4: bytes at or above it would favour the first letters.
      if (b < 248 && prefix.length < PREFIX_LENGTH) prefix += ALNUM[b % 62];
    }
  }
  const key = `${prefix}.${randomBytes(32).toString('base64url')}`;
  return { key, prefix, sha256: hashKey(key) };
}

/** Lowercase hex SHA-256 of the whole key "<prefix>.<secret>", as stored in the Secret. */
export function hashKey(key: string): string {
  return createHash('sha256').update(key, 'utf8').digest('hex');
}

/** undefined when `name` is a valid Secret name, else why not. */
export function keyNameProblem(name: string): string | undefined {
  if (!name) return 'a key needs a name (--name)';
  if (!isDnsSubdomain(name)) {
    return `invalid key name ${quoted(name)}: a key is stored as a Secret, whose name must be a DNS-1123 subdomain (lower-case a-z, 0-9, '-' and '.', starting and ending with a letter or digit, at most 253 characters)`;
  }
  return undefined;
}

/** "a,b" → ['a','b']; "*" → '*'. Throws KeyError naming the bad project. */
export function parseProjects(raw: string | undefined): '*' | string[] {
  const text = (raw ?? '').trim();
  if (!text)
    throw new KeyError('--projects is required: a comma-separated list of project names, or "*" for every project');
  if (text === '*') return '*';
  const list = text.split(',').map((p) => p.trim());
  const out: string[] = [];
  for (const p of list) {
    if (p === '') throw new KeyError(`--projects ${quoted(text)} has an empty project name`);
    if (p === '*') throw new KeyError('--projects "*" grants every project and cannot be combined with project names');
    if (p.length > 63 || !PROJECT_NAME.test(p)) {
      throw new KeyError(
        `invalid project name ${quoted(p)} in --projects: 1-63 letters, digits, '_' or '-', starting and ending with a letter or digit`,
      );
    }
    if (!out.includes(p)) out.push(p);
  }
  return out;
}

const DURATION = /^(\d+)(m|h|d|w)$/;
const UNIT_MS: Record<string, number> = { m: 60_000, h: 3_600_000, d: 86_400_000, w: 7 * 86_400_000 };
const RFC3339 = /^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/;

/** `--expires`: a duration from now (`90m`, `12h`, `30d`, `2w`) or an RFC 3339 time in the future. */
export function parseExpires(raw: string, now: number = Date.now()): Date {
  const text = raw.trim();
  const d = DURATION.exec(text);
  if (d) {
    const n = Number(d[1]);
    if (n <= 0) throw new KeyError(`--expires ${quoted(raw)} must be a positive duration`);
    const at = now + n * UNIT_MS[d[2]];
    if (!Number.isFinite(at) || at > Date.parse('9999-12-31T23:59:59Z'))
      throw new KeyError(`--expires ${quoted(raw)} is too far away`);
    return new Date(at);
  }
  if (RFC3339.test(text)) {
    const at = Date.parse(text);
    if (Number.isNaN(at)) throw new KeyError(`--expires ${quoted(raw)} is not a valid RFC 3339 time`);
    if (at <= now) throw new KeyError(`--expires ${quoted(raw)} is in the past`);
    return new Date(at);
  }
  throw new KeyError(
    `invalid --expires ${quoted(raw)}: give a duration like 90m, 12h, 30d or 2w, or an RFC 3339 time like 2027-01-01T00:00:00Z`,
  );
}

export { formatTime };

export interface KeySecretManifest {
  apiVersion: 'v1';
  kind: 'Secret';
  metadata: { name: string; namespace?: string; labels: Record<string, string> };
  type: 'Opaque';
  stringData: { prefix: string; sha256: string; projects: string; expiresAt?: string } & KeyFields;
}

/** The optional fields of a key Secret that `keys create` and `keys update` set (SPEC §9, §14). */
export type KeyFields = {
  rpm?: string;
  tpm?: string;
  budgetTokens?: string;
  budgetCost?: string;
  budgetPeriod?: string;
  tenant?: string;
  priority?: string;
  weight?: string;
};

export interface KeyFieldOptions {
  rpm?: number;
  tpm?: number;
  budgetTokens?: number;
  budgetCost?: string;
  budgetPeriod?: string;
  tenant?: string;
  priority?: string;
  weight?: string;
}

/** The optional fields as Secret strings, checked as the gateway will read them. */
export function keyFields(o: KeyFieldOptions): KeyFields {
  const out: KeyFields = {};
  for (const f of ['rpm', 'tpm', 'budgetTokens'] as const) {
    const v = o[f];
    if (v === undefined) continue;
    if (!Number.isSafeInteger(v) || v < 0) throw new KeyError(`${f} must be a whole number 0 or more, got ${v}`);
    out[f] = String(v);
  }
  if (o.budgetCost !== undefined) {
    if (!/^\d{1,12}(\.\d{1,6})?$/.test(o.budgetCost))
      throw new KeyError(`--budget-cost must be a decimal 0 or more (at most 6 places), got ${quoted(o.budgetCost)}`);
    out.budgetCost = o.budgetCost;
  }
  if (o.budgetPeriod !== undefined) {
    const p = parseBudgetPeriod(o.budgetPeriod);
    if (typeof p === 'string') throw new KeyError(p);
    // Written as the gateway reads it (it trims): `keys list` and the Secret show "12h", not " 12h".
    out.budgetPeriod = o.budgetPeriod.trim();
  }
  if (o.tenant !== undefined) {
    const tenant = o.tenant.trim();
    if (tenant.length === 0 || tenant.length > 253) throw new KeyError('--tenant must be 1-253 characters');
    out.tenant = tenant;
  }
  if (o.priority !== undefined) {
    if (!['critical', 'standard', 'sheddable'].includes(o.priority))
      throw new KeyError(`--priority must be critical, standard or sheddable, got ${quoted(o.priority)}`);
    out.priority = o.priority;
  }
  if (o.weight !== undefined) {
    if (!/^\d{1,6}(\.\d{1,3})?$/.test(o.weight) || !(Number(o.weight) > 0))
      throw new KeyError(`--weight must be a number above 0, got ${quoted(o.weight)}`);
    out.weight = o.weight;
  }
  return out;
}

export interface KeySecretOptions {
  name: string;
  /** Omitted in the files source: a document without a namespace belongs to the keys namespace. */
  namespace?: string;
  prefix: string;
  sha256: string;
  projects: '*' | readonly string[];
  expiresAt?: Date;
  /** This key's requests and tokens per minute (SPEC §9), budget and queueing fields (SPEC §14). */
  fields?: KeyFieldOptions;
  rpm?: number;
  tpm?: number;
}

/** The Secret that stores a key (never the key itself): label, prefix, sha256, projects, optional expiresAt. */
export function keySecretManifest(o: KeySecretOptions): KeySecretManifest {
  const problem = keyNameProblem(o.name);
  if (problem) throw new KeyError(problem);
  if (!KEY_PREFIX.test(o.prefix)) throw new KeyError('prefix must be 16 characters [A-Za-z0-9]');
  if (!KEY_SHA256.test(o.sha256)) throw new KeyError('sha256 must be 64 lowercase hex characters');
  const metadata: KeySecretManifest['metadata'] = o.namespace
    ? { name: o.name, namespace: o.namespace, labels: { [KEY_LABEL]: 'true' } }
    : { name: o.name, labels: { [KEY_LABEL]: 'true' } };
  const stringData: KeySecretManifest['stringData'] = {
    prefix: o.prefix,
    sha256: o.sha256,
    projects: o.projects === '*' ? '*' : o.projects.join(','),
  };
  if (o.expiresAt) stringData.expiresAt = formatTime(o.expiresAt);
  Object.assign(stringData, keyFields({ rpm: o.rpm, tpm: o.tpm, ...o.fields }));
  return { apiVersion: 'v1', kind: 'Secret', metadata, type: 'Opaque', stringData };
}

/**
 * The manifest as YAML. Every stringData value is double-quoted so that no YAML 1.1 reader (kubectl's included)
 * takes an expiry for a timestamp or a numeric prefix for a number.
 */
export function keySecretYaml(manifest: KeySecretManifest): string {
  const doc = new Document(manifest);
  for (const key of Object.keys(manifest.stringData)) {
    const node = doc.getIn(['stringData', key], true);
    if (isScalar(node)) node.type = 'QUOTE_DOUBLE';
  }
  return doc.toString();
}

/** What `keys list` shows of a key Secret: never the key, never the hash. */
export interface KeySummary {
  name: string;
  namespace?: string;
  prefix: string;
  projects: string;
  expiresAt?: string;
  expired: boolean;
  /** The key's own limits (Secret fields rpm/tpm), when set. */
  rpm?: number;
  tpm?: number;
  /** Its budget (SPEC §14), as the Secret writes it. */
  budget?: string;
  /** Where it came from (a file in files mode). */
  origin?: string;
}

/** Reads a Secret-shaped object (stringData, or base64 data) into a summary; undefined if it is not a key Secret. */
export function summarizeKeySecret(obj: unknown, now: number = Date.now(), origin?: string): KeySummary | undefined {
  if (!isObject(obj) || (obj.kind !== undefined && obj.kind !== 'Secret')) return undefined;
  const meta = isObject(obj.metadata) ? obj.metadata : {};
  const labels = isObject(meta.labels) ? meta.labels : {};
  if (labels[KEY_LABEL] !== 'true') return undefined;
  const fields = secretFields(obj);
  const expiresAt = fields.expiresAt?.trim() || undefined;
  const at = expiresAt ? Date.parse(expiresAt) : NaN;
  return {
    name: String(meta.name ?? ''),
    namespace: typeof meta.namespace === 'string' ? meta.namespace : undefined,
    prefix: fields.prefix?.trim() ?? '',
    projects: fields.projects?.trim() ?? '',
    expiresAt,
    expired: !Number.isNaN(at) && at <= now,
    rpm: wholeNumber(fields.rpm),
    tpm: wholeNumber(fields.tpm),
    budget: budgetText(fields),
    origin,
  };
}

function budgetText(f: Record<string, string | undefined>): string | undefined {
  // 0 is no budget (as the gateway reads it), not a budget of nothing: a key updated to 0 lists none.
  const set = (v: string | undefined): string => (v?.trim() && Number(v) !== 0 ? v.trim() : '');
  const parts = [
    set(f.budgetTokens) ? `${set(f.budgetTokens)} tokens` : '',
    set(f.budgetCost) ? `cost ${set(f.budgetCost)}` : '',
  ];
  const what = parts.filter(Boolean).join(', ');
  return what ? `${what} per ${f.budgetPeriod?.trim() || 'month'}` : undefined;
}

function wholeNumber(v: string | undefined): number | undefined {
  const t = v?.trim();
  return t && /^\d+$/.test(t) ? Number(t) : undefined;
}

/** `data` (base64) merged with `stringData` (which wins, as the API server does): src/kube/objects.ts. */
export const secretFields = secretData;
