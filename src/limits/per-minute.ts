// Requests and tokens per minute (SPEC §9): which buckets a request must pass, its 429, the `x-ratelimit-*` headers
// and the charge of reported tokens. The counting is the LimitStore's (in process or Redis).
import { chargeable, type Admission, type BucketSpec, type BucketState, type LimitStore } from './buckets.js';
import { MemoryLimitStore } from './memory.js';
import { gatewayError, type GatewayError } from '../gateway/http/errors.js';

export interface PerMinute {
  requestsPerMinute?: number;
  tokensPerMinute?: number;
}

/** What the limits need of a key record: its identity and its Secret's own `rpm`/`tpm`. */
export interface LimitedKey {
  namespace: string;
  name: string;
  /** The Secret's own name, when `name` is a display name (a key outside the keys namespace). */
  secretName?: string;
  limits?: PerMinute;
}

/** What the limits need of a route: its identity and `spec.limits`. */
export interface LimitedRoute {
  project: string;
  deployment: string;
  namespace: string;
  name: string;
  limits?: PerMinute;
}

export interface Charge {
  /** Bucket id and limit of every token bucket the request passed. */
  tokens: Array<{ id: string; limit: number }>;
}

/** The key's token buckets of a charge (a deployment's left out): undefined when it has none. */
export function keyCharge(charge: Charge | undefined): Charge | undefined {
  const tokens = charge?.tokens.filter((t) => t.id.startsWith('key:'));
  return tokens?.length ? { tokens } : undefined;
}

export type LimitDecision =
  | { ok: true; headers: Record<string, string>; charge: Charge | undefined; unavailable?: string }
  | {
      ok: false;
      error: GatewayError;
      unavailable?: string;
      spent: Array<{ scope: 'key' | 'deployment'; kind: 'requests' | 'tokens' }>;
    };

export class PerMinuteLimits {
  constructor(
    private readonly store: LimitStore,
    private readonly defaults: { requestsPerMinute: number; tokensPerMinute: number },
  ) {}

  /** The buckets this request must pass (key's, deployment's; either may be left out); empty when no limit applies. */
  specs(route: LimitedRoute | undefined, key: LimitedKey | undefined): BucketSpec[] {
    const specs: BucketSpec[] = [];
    // Ids are built only for a limit that applies: no limit is the common case.
    if (key) {
      const rpm = key.limits?.requestsPerMinute ?? this.defaults.requestsPerMinute;
      const tpm = key.limits?.tokensPerMinute ?? this.defaults.tokensPerMinute;
      if (rpm > 0 || tpm > 0) {
        const id = `key:${key.namespace}/${key.secretName ?? key.name}`;
        if (rpm > 0) specs.push({ id: `${id}:rpm`, limit: rpm, cost: 1 });
        if (tpm > 0) specs.push({ id: `${id}:tpm`, limit: tpm, cost: 0 });
      }
    }
    const d = route?.limits;
    if (!d || (!d.requestsPerMinute && !d.tokensPerMinute)) return specs;
    const id = `deployment:${route!.namespace}/${route!.name}`;
    if (d.requestsPerMinute) specs.push({ id: `${id}:rpm`, limit: d.requestsPerMinute, cost: 1 });
    if (d.tokensPerMinute) specs.push({ id: `${id}:tpm`, limit: d.tokensPerMinute, cost: 0 });
    return specs;
  }

  /** Synchronous for the in-process store (no promise on the hot path), a promise for Redis. */
  decide(specs: BucketSpec[]): LimitDecision | Promise<LimitDecision> {
    if (specs.length === 0) return { ok: true, headers: {}, charge: undefined };
    if (this.store instanceof MemoryLimitStore) return this.answer(specs, this.store.admitNow(specs));
    return this.store.admit(specs).then((a) => this.answer(specs, a));
  }

  /** Charges reported tokens to the request's token buckets; the figure is bounded as `chargeable` (not trusted). */
  charge(charge: Charge | undefined, tokens: number): void {
    const units = chargeable(tokens);
    if (!charge || units === 0) return;
    for (const b of charge.tokens) {
      if (this.store instanceof MemoryLimitStore) this.store.chargeNow(b.id, b.limit, units);
      else void this.store.charge(b.id, b.limit, units);
    }
  }

  problem(): string | undefined {
    return this.store.problem();
  }

  close(): Promise<void> {
    return this.store.close();
  }

  private answer(specs: BucketSpec[], a: Admission): LimitDecision {
    const unavailable = a.unavailable;
    if (a.buckets.length === 0) {
      // The store could not be asked: its fail-open/fail-closed answer, without figures.
      if (a.allowed) return { ok: true, headers: {}, charge: undefined, unavailable };
      const error = gatewayError(
        'limits_unavailable',
        'rate limits cannot be checked now (their store is unreachable); retry shortly',
        { 'retry-after': retryAfter(a.retryAfterMs) },
      );
      return { ok: false, error, unavailable, spent: [] };
    }
    const headers = rateLimitHeaders(specs, a.buckets);
    if (a.allowed) {
      const tokens = specs.filter((s) => s.cost === 0).map((s) => ({ id: s.id, limit: s.limit }));
      return { ok: true, headers, charge: tokens.length ? { tokens } : undefined, unavailable };
    }
    const refusing = specs.filter((s, i) =>
      s.cost > 0 ? a.buckets[i].remaining < s.cost : a.buckets[i].remaining <= 0,
    );
    headers['retry-after'] = retryAfter(a.retryAfterMs);
    const error = gatewayError(
      'rate_limit_exceeded',
      `rate limit exceeded: ${refusing.map(describe).join(', ')}; retry after ${headers['retry-after']} s`,
      headers,
    );
    const spent = refusing.map((s) => ({
      scope: s.id.startsWith('key:') ? ('key' as const) : ('deployment' as const),
      kind: s.cost > 0 ? ('requests' as const) : ('tokens' as const),
    }));
    return { ok: false, error, unavailable, spent };
  }
}

/** The longest a per-minute limit makes anyone wait: a bucket at its floor admits again within one window. */
const MAX_RETRY_AFTER_S = 60;

/** `Retry-After` in whole seconds, 1 to 60, whatever a store answered: never 0, exponent notation or NaN. */
export function retryAfter(ms: number): string {
  if (Number.isNaN(ms)) return '1';
  return String(Math.min(MAX_RETRY_AFTER_S, Math.max(1, Math.ceil(ms / 1000))));
}

function describe(s: BucketSpec): string {
  const [owner, name, kind] = s.id.split(':');
  const what = kind === 'rpm' ? 'requests' : 'tokens';
  return `${s.limit} ${what} per minute for ${owner === 'key' ? 'API key' : 'deployment'} ${name}`;
}

/** OpenAI's `x-ratelimit-*` headers; of a key's and a deployment's bucket, the tighter (it refuses first) is shown. */
export function rateLimitHeaders(
  specs: readonly BucketSpec[],
  buckets: readonly BucketState[],
): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const [cost, what] of [
    [1, 'requests'],
    [0, 'tokens'],
  ] as const) {
    let tightest: BucketState | undefined;
    specs.forEach((s, i) => {
      if (s.cost !== cost) return;
      const b = buckets[i];
      if (!tightest || b.remaining < tightest.remaining) tightest = b;
    });
    if (!tightest) continue;
    headers[`x-ratelimit-limit-${what}`] = String(tightest.limit);
    headers[`x-ratelimit-remaining-${what}`] = String(tightest.remaining);
    headers[`x-ratelimit-reset-${what}`] = duration(tightest.resetMs);
  }
  return headers;
}

/** A duration as OpenAI writes it: `250ms`, `1.5s`, `6m0s`. */
export function duration(ms: number): string {
  if (ms < 1000) return `${Math.max(0, Math.ceil(ms))}ms`;
  if (ms < 60_000) return `${Math.round(ms / 100) / 10}s`;
  const m = Math.floor(ms / 60_000);
  return `${m}m${Math.round((ms - m * 60_000) / 1000)}s`;
}
