// The gateway-wide budget of request-body bytes held in memory (limits.maxBufferedBodyBytes). Buffers live outside
// V8's heap, so --max-old-space-size does not bound them: eight near-limit bodies took the gateway past the chart's
// memory limit (docs/install.md, "Memory"). No room within `waitMs`: 503; a request alone always fits.
import { gatewayError, type GatewayError } from '../http/errors.js';

interface Waiter {
  r: Reservation;
  bytes: number;
  done: (ok: boolean) => void;
  timer: NodeJS.Timeout;
}

export class BodyBudget {
  /** Bytes reserved now, by every request. */
  used = 0;
  /** Reservations waiting for room, in arrival order. */
  private readonly waiting: Waiter[] = [];

  constructor(
    /** Bytes that may be reserved at once (a single reservation may pass it when it is the only one). */
    readonly limit: number,
    /** How long a reservation waits for room before it is refused. */
    readonly waitMs: number,
  ) {}

  reservation(): Reservation {
    return new Reservation(this);
  }

  /** Requests waiting for room. */
  get queued(): number {
    return this.waiting.length;
  }

  /** `r` may hold `bytes` in all now. A new reservation does not pass those already waiting. */
  fits(r: Reservation, bytes: number, waiter?: Waiter): boolean {
    if (bytes <= r.bytes) return true;
    if (r.bytes === 0 && this.waiting.length > 0 && this.waiting[0] !== waiter) return false;
    const others = this.used - r.bytes;
    return others === 0 || others + bytes <= this.limit;
  }

  /** Sets `r` to `bytes`; room freed goes to those waiting. */
  set(r: Reservation, bytes: number): void {
    const shrunk = bytes < r.bytes;
    this.used += bytes - r.bytes;
    r.bytes = bytes;
    if (shrunk) this.wake();
  }

  wait(r: Reservation, bytes: number, done: (ok: boolean) => void): void {
    const w: Waiter = {
      r,
      bytes,
      done,
      timer: setTimeout(() => {
        this.forget(r);
        done(false);
      }, this.waitMs),
    };
    w.timer.unref?.();
    this.waiting.push(w);
  }

  /** Takes `r` out of the queue (its request ended, or its wait did). */
  forget(r: Reservation): void {
    const i = this.waiting.findIndex((w) => w.r === r);
    if (i === -1) return;
    clearTimeout(this.waiting[i].timer);
    this.waiting.splice(i, 1);
    if (i === 0) this.wake();
  }

  /** Grants the waiting reservations that fit now, first come first served. */
  private wake(): void {
    while (this.waiting.length > 0) {
      const w = this.waiting[0];
      if (!this.fits(w.r, w.bytes, w)) return;
      this.waiting.shift();
      clearTimeout(w.timer);
      this.set(w.r, w.bytes);
      w.done(true);
    }
  }
}

/** One request's share of the budget. */
export class Reservation {
  /** Bytes held now. */
  bytes = 0;
  private waitingFor = false;

  constructor(private readonly budget: BodyBudget) {}

  /** Holds `bytes` in all when that fits now (or is less than held); false, and nothing changed, otherwise. */
  resize(bytes: number): boolean {
    if (!this.budget.fits(this, bytes)) return false;
    this.budget.set(this, bytes);
    return true;
  }

  /** Holds `bytes` in all, now or once room is freed (`done(true)`), or `done(false)` after the budget's wait. */
  acquire(bytes: number, done: (ok: boolean) => void): void {
    if (this.resize(bytes)) return done(true);
    this.waitingFor = true;
    this.budget.wait(this, bytes, (ok) => {
      this.waitingFor = false;
      done(ok);
    });
  }

  /** Lets go of everything (and of a wait). */
  release(): void {
    if (this.waitingFor) {
      this.waitingFor = false;
      this.budget.forget(this);
    }
    if (this.bytes) this.budget.set(this, 0);
  }
}

/** The 503 of a body that found no room in the budget within its wait. */
export function bodyBudgetFull(budget: BodyBudget): GatewayError {
  return gatewayError(
    'server_busy',
    `the gateway holds as many request bodies as it may (limits.maxBufferedBodyBytes = ${budget.limit} bytes) and none was freed within ${budget.waitMs / 1000}s; retry later`,
    { 'retry-after': '1' },
  );
}
