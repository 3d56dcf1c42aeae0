// Per-minute limits as token buckets of `limit`, refilled at limit/60 s; a full bucket is no bucket (no state kept).
// Tokens are charged after the answer and may leave a debt that refuses until repaid, as OpenAI does; the debt stops
// at one window (`floorOf`) so one answer refuses a key for at most 60 s.

/** The most tokens one answer can charge, whatever its backend reported. */
export const MAX_CHARGE = 1_000_000_000;

/** The tokens to charge for a reported count: floored, at most MAX_CHARGE; NaN, infinite or negative: 0 (ignored). */
export function chargeable(tokens: number): number {
  if (typeof tokens !== 'number' || !Number.isFinite(tokens) || tokens < 1) return 0;
  return Math.min(MAX_CHARGE, Math.floor(tokens));
}

/** One window a request must pass: `cost` 1 takes a request; `cost` 0 only checks that budget is left (tokens). */
export interface BucketSpec {
  /** Stable id, e.g. `key:<name>:rpm` or `deployment:<project>/<name>:tpm`. */
  id: string;
  /** Per minute; > 0. */
  limit: number;
  cost: 0 | 1;
}

export interface BucketState {
  id: string;
  limit: number;
  /** Whole units left after this admission (0 when in debt). */
  remaining: number;
  /** Milliseconds until the bucket is full again ("resets to its initial state"). */
  resetMs: number;
}

export interface Admission {
  allowed: boolean;
  /** One per spec, in the same order; empty when the store could not be asked (fail-open/closed). */
  buckets: BucketState[];
  /** When refused: milliseconds until every refusing bucket admits again. */
  retryAfterMs: number;
  /** Set when the store was unreachable and the answer is the configured fail-open/fail-closed default. */
  unavailable?: string;
}

export interface LimitStore {
  /** Admits when every bucket has budget; only then takes each bucket's cost (all or nothing). */
  admit(specs: readonly BucketSpec[]): Promise<Admission>;
  /** Charges `amount` units (tokens) to a bucket after the fact, bounded as `chargeable`; never refuses. */
  charge(id: string, limit: number, amount: number): Promise<void>;
  /** `undefined` when healthy, else why not (shown on /readyz detail). */
  problem(): string | undefined;
  close(): Promise<void>;
}

/** Units per millisecond. */
export function rateOf(limit: number): number {
  return limit / 60_000;
}

/** One window of debt less one millisecond's refill: a bucket at the floor admits again within 60 s. */
export function floorOf(limit: number): number {
  return rateOf(limit) - limit;
}

/** `level` brought into [floorOf(limit), limit]; not a number: a full bucket (nothing known against it). */
export function bounded(level: number, limit: number): number {
  if (Number.isNaN(level)) return limit;
  return Math.min(limit, Math.max(floorOf(limit), level));
}

/** The level of a bucket `elapsedMs` after it was `level`: refilled, capped at the limit. */
export function refill(level: number, limit: number, elapsedMs: number): number {
  return Math.min(limit, bounded(level, limit) + Math.max(0, elapsedMs) * rateOf(limit));
}

/** What a refusing or admitting bucket reports; `level` is after any cost was taken. */
export function stateOf(id: string, limit: number, level: number): BucketState {
  level = bounded(level, limit);
  return {
    id,
    limit,
    remaining: Math.max(0, Math.floor(level)),
    resetMs: Math.ceil((limit - Math.min(limit, level)) / rateOf(limit)),
  };
}

/** Milliseconds until a bucket at `level` admits a request of `cost` (1 unit for requests, > 0 for tokens). */
export function waitOf(limit: number, level: number, cost: number): number {
  level = bounded(level, limit);
  if (admits(level, cost)) return 0;
  // Requests need the level to reach `cost`; token checks need it above 0, so one millisecond past reaching 0.
  return cost > 0 ? Math.ceil((cost - level) / rateOf(limit)) : Math.floor(-level / rateOf(limit)) + 1;
}

/** True when a bucket at `level` admits `cost`: requests need a whole unit, token checks need a positive level. */
export function admits(level: number, cost: number): boolean {
  return cost > 0 ? level >= cost : level > 0;
}
