// Failed-authentication throttling (SPEC §9), per replica and client address so a guesser never slows other
// addresses' keys. Past `maxAddresses` the oldest windows go: memory bounded by forgiving, never by blocking.

interface Window {
  start: number;
  failures: number;
}

export interface AuthFailureOptions {
  maxFailures: number;
  windowSeconds: number;
  maxAddresses?: number;
}

export class AuthFailureLimiter {
  private readonly windows = new Map<string, Window>();
  private readonly windowMs: number;
  private readonly maxAddresses: number;

  constructor(
    private readonly options: AuthFailureOptions,
    private readonly now: () => number = Date.now,
  ) {
    this.windowMs = options.windowSeconds * 1000;
    this.maxAddresses = options.maxAddresses ?? 100_000;
  }

  get enabled(): boolean {
    return this.options.maxFailures > 0;
  }

  /** Milliseconds until `address` may try again; 0 when it may try now. */
  blockedFor(address: string): number {
    if (!this.enabled) return 0;
    const w = this.windows.get(address);
    if (!w) return 0;
    const left = w.start + this.windowMs - this.now();
    if (left <= 0) {
      this.windows.delete(address);
      return 0;
    }
    return w.failures > this.options.maxFailures ? left : 0;
  }

  /** Records one failed authentication from `address`. */
  failed(address: string): void {
    if (!this.enabled) return;
    const now = this.now();
    const w = this.windows.get(address);
    if (w && now - w.start < this.windowMs) {
      w.failures++;
      return;
    }
    if (w) this.windows.delete(address);
    this.windows.set(address, { start: now, failures: 1 });
    if (this.windows.size > this.maxAddresses) this.sweep(now);
  }

  /** Addresses tracked now (tests: memory stays bounded). */
  get size(): number {
    return this.windows.size;
  }

  private sweep(now: number): void {
    for (const [a, w] of this.windows) if (now - w.start >= this.windowMs) this.windows.delete(a);
    // Still too many live windows: drop the oldest (Map order is insertion order, windows are re-inserted when new).
    for (const a of this.windows.keys()) {
      if (this.windows.size <= this.maxAddresses) break;
      this.windows.delete(a);
    }
  }
}
