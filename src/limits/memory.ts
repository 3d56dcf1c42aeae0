// In-process limit store (one replica): token buckets in a Map, swept of full buckets so memory follows the keys in use.
import {
  admits,
  chargeable,
  floorOf,
  refill,
  stateOf,
  waitOf,
  type Admission,
  type BucketSpec,
  type LimitStore,
} from './buckets.js';

interface Level {
  level: number;
  limit: number;
  at: number;
}

export class MemoryLimitStore implements LimitStore {
  private readonly levels = new Map<string, Level>();

  constructor(
    private readonly now: () => number = Date.now,
    /** Past this many buckets, a write sweeps out the ones that have refilled. */
    private readonly sweepAt = 50_000,
  ) {}

  private levelOf(id: string, limit: number, now: number): number {
    const l = this.levels.get(id);
    return l ? refill(l.level, limit, now - l.at) : limit;
  }

  async admit(specs: readonly BucketSpec[]): Promise<Admission> {
    return this.admitNow(specs);
  }

  /** Synchronous form of `admit` (the gateway's hot path without Redis). */
  admitNow(specs: readonly BucketSpec[]): Admission {
    const now = this.now();
    const levels = specs.map((s) => this.levelOf(s.id, s.limit, now));
    const allowed = specs.every((s, i) => admits(levels[i], s.cost));
    if (!allowed) {
      const retryAfterMs = Math.max(...specs.map((s, i) => waitOf(s.limit, levels[i], s.cost)));
      return { allowed, retryAfterMs, buckets: specs.map((s, i) => stateOf(s.id, s.limit, levels[i])) };
    }
    specs.forEach((s, i) => {
      levels[i] -= s.cost;
      this.set(s.id, s.limit, levels[i], now);
    });
    return { allowed, retryAfterMs: 0, buckets: specs.map((s, i) => stateOf(s.id, s.limit, levels[i])) };
  }

  async charge(id: string, limit: number, amount: number): Promise<void> {
    this.chargeNow(id, limit, amount);
  }

  /** Charges at most MAX_CHARGE whole tokens (NaN, infinite, negative: nothing); the debt stops at one window. */
  chargeNow(id: string, limit: number, amount: number): void {
    const units = chargeable(amount);
    if (units === 0 || !(limit > 0) || !Number.isFinite(limit)) return;
    const now = this.now();
    this.set(id, limit, Math.max(floorOf(limit), this.levelOf(id, limit, now) - units), now);
  }

  problem(): string | undefined {
    return undefined;
  }

  async close(): Promise<void> {
    this.levels.clear();
  }

  /** Buckets held now (tests: memory follows use). */
  get size(): number {
    return this.levels.size;
  }

  private set(id: string, limit: number, level: number, now: number): void {
    if (level >= limit) this.levels.delete(id);
    else this.levels.set(id, { level, limit, at: now });
    if (this.levels.size > this.sweepAt) this.sweep(now);
  }

  /** Drops buckets that have refilled since they were last written (a full bucket is the same as none). */
  private sweep(now: number): void {
    for (const [id, l] of this.levels) if (refill(l.level, l.limit, now - l.at) >= l.limit) this.levels.delete(id);
  }
}
