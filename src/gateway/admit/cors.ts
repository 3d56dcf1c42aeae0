// CORS decisions: which headers a preflight or an actual response gets, from the configured origins.
import type { Config } from '../../config/schema.js';

export interface CorsPolicy {
  /** False when the list is empty: the gateway adds no CORS headers at all and leaves the backend's alone. */
  enabled: boolean;
  any: boolean;
  exact: ReadonlySet<string>;
  /** "https://*.example.com" → { scheme: "https:", suffix: ".example.com", port: "" } */
  wildcards: ReadonlyArray<{ scheme: string; suffix: string; port: string }>;
  maxAge: string;
  /** Lower-case; empty = echo what the browser asks for. */
  allowedHeaders: readonly string[];
  exposedHeaders: string;
}

const ALWAYS_ALLOWED = ['authorization', 'content-type'];
/** The methods the gateway forwards: CORS preflights and the Allow header of its 405s say the same. */
export const ALLOWED_METHODS = 'GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS';
/**
 * What a page's script may read of every answer: besides the request id and Retry-After, the gateway's own headers —
 * which deployment answered, the per-minute limits (SPEC §9), the budgets (SPEC §14) and x-should-retry, which the
 * OpenAI SDKs obey (a budget's 429 says false, so that they do not retry it).
 */
const DEFAULT_EXPOSED = [
  'x-request-id',
  'retry-after',
  'www-authenticate',
  'x-should-retry',
  'x-servegate-deployment',
  'x-servegate-variant',
  ...['requests', 'tokens'].flatMap((k) => ['limit', 'remaining', 'reset'].map((f) => `x-ratelimit-${f}-${k}`)),
  ...['tokens', 'cost'].flatMap((k) => ['limit', 'remaining', 'reset'].map((f) => `x-servegate-budget-${f}-${k}`)),
];

export function corsPolicy(cors: Config['cors']): CorsPolicy {
  const exact = new Set<string>();
  const wildcards: Array<{ scheme: string; suffix: string; port: string }> = [];
  let any = false;
  for (const o of cors.allowedOrigins) {
    if (o === '*') any = true;
    else {
      const m = /^(https?:)\/\/\*(\.[^:]+)(?::(\d+))?$/i.exec(o);
      if (m) wildcards.push({ scheme: m[1].toLowerCase(), suffix: m[2].toLowerCase(), port: m[3] ?? '' });
      else exact.add(o.toLowerCase().replace(/\/$/, ''));
    }
  }
  return {
    enabled: cors.allowedOrigins.length > 0,
    any,
    exact,
    wildcards,
    maxAge: String(cors.maxAgeSeconds),
    allowedHeaders: cors.allowedHeaders.length
      ? [...new Set([...ALWAYS_ALLOWED, ...cors.allowedHeaders.map((h) => h.toLowerCase())])]
      : [],
    exposedHeaders: [...new Set([...DEFAULT_EXPOSED, ...cors.exposedHeaders.map((h) => h.toLowerCase())])].join(', '),
  };
}

/** The value for Access-Control-Allow-Origin, or undefined when the origin is not allowed. */
export function allowedOrigin(policy: CorsPolicy, origin: string | undefined): string | undefined {
  if (!policy.enabled || !origin) return undefined;
  const o = origin.toLowerCase();
  if (policy.exact.has(o)) return origin;
  for (const w of policy.wildcards) {
    const m = /^(https?:)\/\/([^/:]+)(?::(\d+))?$/.exec(o);
    if (m && m[1] === w.scheme && (m[3] ?? '') === w.port && m[2].endsWith(w.suffix) && m[2].length > w.suffix.length)
      return origin;
  }
  if (policy.any) return '*';
  return undefined;
}

export function isPreflight(
  method: string | undefined,
  headers: { origin?: string; 'access-control-request-method'?: string | string[] },
): boolean {
  return method === 'OPTIONS' && !!headers.origin && headers['access-control-request-method'] !== undefined;
}

/** Headers for a preflight answer (204). Empty when the origin is not allowed. */
export function preflightHeaders(
  policy: CorsPolicy,
  origin: string | undefined,
  requestedHeaders: string | undefined,
): Record<string, string> {
  const allow = allowedOrigin(policy, origin);
  if (!allow) return policy.enabled ? { vary: 'Origin' } : {};
  const h: Record<string, string> = {
    'access-control-allow-origin': allow,
    'access-control-allow-methods': ALLOWED_METHODS,
    'access-control-max-age': policy.maxAge,
  };
  if (allow !== '*') {
    h['access-control-allow-credentials'] = 'true';
    h.vary = 'Origin, Access-Control-Request-Method, Access-Control-Request-Headers';
  }
  let headers: string[];
  if (policy.allowedHeaders.length) headers = [...policy.allowedHeaders];
  else {
    const asked = (requestedHeaders ?? '')
      .split(',')
      .map((s) => s.trim().toLowerCase())
      .filter((s) => /^[!#$%&'*+.^_`|~0-9a-z-]+$/.test(s));
    headers = [...new Set([...ALWAYS_ALLOWED, ...asked])];
  }
  h['access-control-allow-headers'] = headers.join(', ');
  return h;
}

/** Preflight test on the facts of one pass over the headers. */
export function isPreflightHead(head: { method: string; origin: string | undefined; acrMethod: boolean }): boolean {
  return head.method === 'OPTIONS' && !!head.origin && head.acrMethod;
}

/** preflightHeaders as a flat [name, value, ...] list. */
export function preflightHeaderList(
  policy: CorsPolicy,
  origin: string | undefined,
  requestedHeaders: string | undefined,
): string[] {
  return flat(preflightHeaders(policy, origin, requestedHeaders));
}

/** responseCorsHeaders as a flat list; undefined when CORS is off. */
export function responseCorsList(policy: CorsPolicy, origin: string | undefined): string[] | undefined {
  const h = responseCorsHeaders(policy, origin);
  return h && flat(h);
}

function flat(h: Record<string, string>): string[] {
  const out: string[] = [];
  for (const k in h) out.push(k, h[k]);
  return out;
}

/** Headers added to an actual (non-preflight) response, the gateway's own errors included. */
export function responseCorsHeaders(
  policy: CorsPolicy,
  origin: string | undefined,
): Record<string, string> | undefined {
  if (!policy.enabled) return undefined;
  // With "*" every origin is allowed, so the answer is the same with or without an Origin header.
  if (!origin && policy.any)
    return { 'access-control-allow-origin': '*', 'access-control-expose-headers': policy.exposedHeaders };
  const allow = allowedOrigin(policy, origin);
  if (!allow) return { vary: 'Origin' };
  const h: Record<string, string> = {
    'access-control-allow-origin': allow,
    'access-control-expose-headers': policy.exposedHeaders,
  };
  if (allow !== '*') {
    h['access-control-allow-credentials'] = 'true';
    h.vary = 'Origin';
  }
  return h;
}
