// The API-key Secret processor: each labelled Secret read into a key record (or a problem naming the bad field, the
// Secret skipped), indexed by prefix. Bad keys never affect other keys or routes.
import { createHash } from 'node:crypto';
import { KEY_PREFIX, KEY_SHA256, PROJECT_NAME, projectNamespaceForm } from '../names.js';
import type { ApiKeyRecord, KeyBudget, KeyProblem, KeySecretResource, PerMinuteLimits, Priority } from '../types.js';
import { parseBudgetPeriod } from '../../limits/budgets.js';
import { BuildCache, type KeysResult, type ParsedKey } from '../cache.js';
import { cmp } from './order.js';
import { quoted } from '../quote.js';

/** Parses API-key Secrets. A bad one is reported and skipped, never fatal. */
export function buildKeys(
  secrets: readonly KeySecretResource[],
  keysNamespace: string,
  cache: BuildCache = new BuildCache(),
  projectNamespaceKeys = false,
): { keys: Map<string, ApiKeyRecord[]>; problems: KeyProblem[] } {
  const { keys, problems } = buildKeysWithDigests(secrets, scopeOf(keysNamespace, projectNamespaceKeys), cache);
  return { keys, problems };
}

/** Sources hand over the same array while no key changed: then the key index is reused as it is. */
export function buildKeysCached(
  secrets: readonly KeySecretResource[],
  keysNamespace: string,
  cache: BuildCache,
  projectNamespaceKeys = false,
): KeysResult {
  const scope = scopeOf(keysNamespace, projectNamespaceKeys);
  const hit = cache.keysByArray.get(secrets);
  if (hit && hit.scope === scope) return hit.result;
  const result = buildKeysWithDigests(secrets, scope, cache);
  cache.keysByArray.set(secrets, { scope, result });
  return result;
}

/**
 * Where keys may live, as one string (it keys the caches): the keys namespace, and whether a key Secret in a project's
 * namespace may grant that project (auth.projectNamespaceKeys, SPEC §11; off by default).
 */
function scopeOf(keysNamespace: string, projectNamespaceKeys: boolean): string {
  return `${projectNamespaceKeys ? '+' : '-'}${keysNamespace}`;
}

function buildKeysWithDigests(secrets: readonly KeySecretResource[], scope: string, cache: BuildCache): KeysResult {
  const keys = new Map<string, ApiKeyRecord[]>();
  const problems: KeyProblem[] = [];
  const parsed: Array<{ s: KeySecretResource; p: ParsedKey }> = [];
  for (const s of secrets) {
    let p = cache.parsedKeys.get(s);
    if (!p || p.scope !== scope) {
      const value = parseKeySecret(s, scope.slice(1), scope.startsWith('+'));
      const digest =
        typeof value === 'string'
          ? ''
          : createHash('sha1')
              .update(
                JSON.stringify([
                  value.name,
                  value.namespace,
                  value.prefix,
                  value.sha256.toString('hex'),
                  value.projects === '*' ? '*' : [...value.projects].sort(),
                  value.expiresAt ?? null,
                  value.scopeNamespace ?? null,
                  value.limits ?? null,
                  value.budget ?? null,
                  value.tenant ?? null,
                  value.priority ?? null,
                  value.weight ?? null,
                ]),
              )
              .digest('base64');
      p = { scope, id: `${s.metadata.namespace}/${s.metadata.name}`, value, digest };
      cache.parsedKeys.set(s, p);
    }
    parsed.push({ s, p });
  }
  parsed.sort((a, b) => cmp(a.p.id, b.p.id));
  const digests: string[] = [];
  for (const { s, p } of parsed) {
    if (typeof p.value === 'string') {
      problems.push({ id: p.id, origin: s.origin, message: p.value });
      continue;
    }
    digests.push(p.digest);
    const list = keys.get(p.value.prefix);
    if (list) list.push(p.value);
    else keys.set(p.value.prefix, [p.value]);
  }
  return { keys, problems, digests };
}

function parseKeySecret(
  s: KeySecretResource,
  keysNamespace: string,
  projectNamespaceKeys: boolean,
): ApiKeyRecord | string {
  const scoped = s.metadata.namespace !== keysNamespace;
  if (scoped && !projectNamespaceKeys)
    return (
      `ignored: it is in namespace ${quoted(s.metadata.namespace)}, not the keys namespace "${keysNamespace}" ` +
      '(set auth.projectNamespaceKeys: true to let a key Secret in a project namespace grant that project)'
    );
  const d = s.data;
  const prefix = (d.prefix ?? '').trim();
  if (!KEY_PREFIX.test(prefix)) return 'prefix must be 16 characters [A-Za-z0-9]';
  const sha = (d.sha256 ?? '').trim().toLowerCase();
  if (!KEY_SHA256.test(sha)) return 'sha256 must be 64 hex characters (SHA-256 of the whole key "<prefix>.<secret>")';
  const projectsRaw = (d.projects ?? '').trim();
  if (!projectsRaw) return 'projects is required: a comma-separated list of project names, or "*"';
  let projects: '*' | Set<string>;
  if (projectsRaw === '*') projects = '*';
  else {
    const list = projectsRaw
      .split(',')
      .map((p) => p.trim())
      .filter(Boolean);
    const bad = list.find((p) => !PROJECT_NAME.test(p));
    if (bad !== undefined || list.length === 0)
      return `projects has an invalid project name ${quoted(bad ?? projectsRaw)}`;
    projects = new Set(list.map(projectNamespaceForm));
  }
  let expiresAt: number | undefined;
  if (d.expiresAt !== undefined && d.expiresAt.trim() !== '') {
    expiresAt = Date.parse(d.expiresAt.trim());
    if (Number.isNaN(expiresAt)) return `expiresAt ${quoted(d.expiresAt)} is not an RFC 3339 time`;
  }
  const limits: PerMinuteLimits = {};
  for (const [field, name] of [
    ['rpm', 'requestsPerMinute'],
    ['tpm', 'tokensPerMinute'],
  ] as const) {
    const raw = d[field]?.trim();
    if (raw === undefined || raw === '') continue;
    if (!/^\d+$/.test(raw) || !Number.isSafeInteger(Number(raw)))
      return `${field} must be a whole number 0 or more (per minute), got ${quoted(d[field])}`;
    limits[name] = Number(raw);
  }
  const budget = parseKeyBudget(d);
  if (typeof budget === 'string') return budget;
  const fair = parseFairFields(d);
  if (typeof fair === 'string') return fair;
  return {
    // Unique among keys: a Secret outside the keys namespace is named with its namespace (see ApiKeyRecord.name).
    name: scoped ? `${s.metadata.namespace}/${s.metadata.name}` : s.metadata.name,
    namespace: s.metadata.namespace,
    secretName: s.metadata.name,
    prefix,
    sha256: Buffer.from(sha, 'hex'),
    projects,
    expiresAt,
    scopeNamespace: scoped ? s.metadata.namespace : undefined,
    ...(Object.keys(limits).length ? { limits } : {}),
    ...(budget ? { budget } : {}),
    ...fair,
  };
}

/** budgetTokens (whole number), budgetCost (decimal), budgetPeriod (default month); undefined when neither limit. */
function parseKeyBudget(d: Record<string, string | undefined>): KeyBudget | undefined | string {
  const tokensRaw = d.budgetTokens?.trim();
  const costRaw = d.budgetCost?.trim();
  const periodRaw = d.budgetPeriod?.trim();
  const budget: KeyBudget = { period: { kind: 'month' } };
  if (tokensRaw) {
    if (!/^\d+$/.test(tokensRaw) || !Number.isSafeInteger(Number(tokensRaw)))
      return `budgetTokens must be a whole number 0 or more, got ${quoted(d.budgetTokens)}`;
    if (Number(tokensRaw) > 0) budget.tokens = Number(tokensRaw);
  }
  if (costRaw) {
    if (!/^\d{1,12}(\.\d{1,6})?$/.test(costRaw))
      return `budgetCost must be a decimal 0 or more (at most 6 places), got ${quoted(d.budgetCost)}`;
    if (Number(costRaw) > 0) budget.cost = Number(costRaw);
  }
  if (periodRaw) {
    const period = parseBudgetPeriod(periodRaw);
    if (typeof period === 'string') return period;
    budget.period = period;
  }
  return budget.tokens !== undefined || budget.cost !== undefined ? budget : undefined;
}

/** tenant, priority and weight: a key's place in a saturated deployment's queue (SPEC §14). */
function parseFairFields(
  d: Record<string, string | undefined>,
): { tenant?: string; priority?: Priority; weight?: number } | string {
  const out: { tenant?: string; priority?: Priority; weight?: number } = {};
  const tenant = d.tenant?.trim();
  if (tenant) {
    if (tenant.length > 253) return 'tenant must be at most 253 characters';
    out.tenant = tenant;
  }
  const priority = d.priority?.trim();
  if (priority) {
    if (priority !== 'critical' && priority !== 'standard' && priority !== 'sheddable')
      return `priority must be critical, standard or sheddable, got ${quoted(d.priority)}`;
    out.priority = priority;
  }
  const weight = d.weight?.trim();
  if (weight) {
    const w = Number(weight);
    if (!/^\d{1,6}(\.\d{1,3})?$/.test(weight) || !(w > 0))
      return `weight must be a number above 0 (default 1), got ${quoted(d.weight)}`;
    out.weight = w;
  }
  return out;
}
