// Requests per second per API key (limits.rateLimitPerKey, burst limits.rateLimitBurst): a token bucket per key, in
// process; 0 turns it off. Its refusal is a 429 with Retry-After.
import { gatewayError, type GatewayError } from '../gateway/http/errors.js';

export class PerSecondLimiter {
  private buckets = new Map<string, { tokens: number; at: number }>();
  private readonly burst: number;

  constructor(
    readonly perSecond: number,
    burst: number,
  ) {
    this.burst = burst > 0 ? burst : Math.max(1, Math.ceil(perSecond));
  }

  get enabled(): boolean {
    return this.perSecond > 0;
  }

  /** Takes a token for this key: undefined when allowed, else the 429 to answer. */
  take(key: { namespace: string; name: string; secretName?: string }, now: number): GatewayError | undefined {
    if (!this.enabled) return undefined;
    const wait = this.wait(`${key.namespace}/${key.secretName ?? key.name}`, now);
    if (wait === 0) return undefined;
    return gatewayError('rate_limit_exceeded', `rate limit of ${this.perSecond} requests/s for this API key exceeded`, {
      'retry-after': String(wait),
    });
  }

  /** Takes a token for `id`; returns 0 when allowed, else the seconds to wait. */
  wait(id: string, now: number): number {
    if (!this.enabled) return 0;
    let b = this.buckets.get(id);
    if (!b) {
      b = { tokens: this.burst, at: now };
      this.buckets.set(id, b);
      if (this.buckets.size > 100_000) this.buckets.clear(); // bounded memory; a reset only forgives
    }
    b.tokens = Math.min(this.burst, b.tokens + ((now - b.at) / 1000) * this.perSecond);
    b.at = now;
    if (b.tokens >= 1) {
      b.tokens -= 1;
      return 0;
    }
    return Math.max(1, Math.ceil((1 - b.tokens) / this.perSecond));
  }
}
