// What the limiter tests share: a clock they move by hand, and the in-process store's answer taken as it is.
import type { LimitDecision } from '../../src/limits/per-minute.js';

/** A clock at `start` ms that moves only when told. */
export function clock(start = 1_000_000): { now: () => number; advance: (ms: number) => number } {
  let t = start;
  return { now: () => t, advance: (ms: number) => (t += ms) };
}

/** The in-process store answers synchronously: a promise here is a bug. */
export function sync(d: LimitDecision | Promise<LimitDecision>): LimitDecision {
  if (d instanceof Promise) throw new Error('the in-process store must answer synchronously');
  return d;
}
