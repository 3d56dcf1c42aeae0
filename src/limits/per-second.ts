// Token bucket per API key (limits.rateLimitPerKey requests/s, limits.rateLimitBurst burst); 0 disables it.
export class RateLimiter {
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

  /** Takes a token for this key; returns 0 when allowed, else the seconds to wait. */
  take(key: string, now: number): number {
    if (!this.enabled) return 0;
    let b = this.buckets.get(key);
    if (!b) {
      b = { tokens: this.burst, at: now };
      this.buckets.set(key, b);
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
