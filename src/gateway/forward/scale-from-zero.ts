// Scale from zero (SPEC §10): requests of a deployment with no ready endpoint wait here in arrival order until one is
// ready, else 503 after the hold time; bounded per deployment in requests and held body bytes, so memory is too.
import { PassThrough, type Readable } from 'node:stream';
import type { Route } from '../../routing/types.js';
import { BODY_TOO_LARGE } from './upstream-errors.js';

/** A held request, as the queue sees it (the Exchange). */
export interface Held {
  /** Tries to forward now; true when it left the queue's care (forwarded, or already over). */
  tryForward(): boolean;
  /** The hold time passed: answer 503. */
  expire(): void;
}

interface Entry {
  held: Held;
  bytes: number;
  timer: NodeJS.Timeout;
}

interface Queue {
  project: string;
  deployment: string;
  entries: Entry[];
  bytes: number;
}

export interface HoldLimits {
  maxQueue: number;
  maxQueueBytes: number;
}

export type HoldRefusal = 'count' | 'bytes';

export class HoldQueues {
  /** Route id → its queue (present only while it holds something). */
  private readonly queues = new Map<string, Queue>();
  private readonly where = new Map<Held, string>();
  private sweep: NodeJS.Timeout | undefined;
  private wakeScheduled = false;

  constructor(private readonly limits: HoldLimits) {}

  /** Holds `held` for route `route` up to `ms`; a refusal says which bound it passed. */
  add(route: Route, held: Held, bytes: number, ms: number): HoldRefusal | undefined {
    let q = this.queues.get(route.id);
    if (q && q.entries.length >= this.limits.maxQueue) return 'count';
    if ((q?.bytes ?? 0) + bytes > this.limits.maxQueueBytes) return 'bytes';
    if (!q) {
      q = { project: route.project, deployment: route.deployment, entries: [], bytes: 0 };
      this.queues.set(route.id, q);
    }
    const timer = setTimeout(() => {
      if (this.remove(held)) held.expire();
    }, ms);
    q.entries.push({ held, bytes, timer });
    q.bytes += bytes;
    this.where.set(held, route.id);
    // A look once a second while anything is held: catches what no event announced (readiness from a resource).
    this.sweep ??= setInterval(() => this.wake(), 1000);
    return undefined;
  }

  /** `held` received `bytes` more of its body: false when that passes the byte bound (the caller answers 503). */
  grow(held: Held, bytes: number): boolean {
    const id = this.where.get(held);
    if (id === undefined) return true;
    const q = this.queues.get(id)!;
    const e = q.entries.find((x) => x.held === held);
    if (!e) return true;
    e.bytes += bytes;
    q.bytes += bytes;
    return q.bytes <= this.limits.maxQueueBytes;
  }

  /** Takes `held` out (its client left, or it was forwarded); false when it was not held. */
  remove(held: Held): boolean {
    const id = this.where.get(held);
    if (id === undefined) return false;
    this.where.delete(held);
    const q = this.queues.get(id)!;
    const i = q.entries.findIndex((e) => e.held === held);
    if (i !== -1) {
      const [e] = q.entries.splice(i, 1);
      clearTimeout(e.timer);
      q.bytes -= e.bytes;
    }
    if (q.entries.length === 0) this.queues.delete(id);
    this.idle();
    return true;
  }

  /** Endpoints or routes changed: look again soon (events of one tick are looked at once). */
  changed(): void {
    if (this.wakeScheduled || this.queues.size === 0) return;
    this.wakeScheduled = true;
    setImmediate(() => {
      this.wakeScheduled = false;
      this.wake();
    });
  }

  /** Forwards, oldest first, what can go now; the first of a deployment that cannot go stops that deployment's turn. */
  wake(): void {
    for (const [id, q] of [...this.queues]) {
      while (q.entries.length > 0) {
        const e = q.entries[0];
        // Out of the queue before it is forwarded: forwarding may end the exchange synchronously (a refusal).
        q.entries.shift();
        q.bytes -= e.bytes;
        this.where.delete(e.held);
        if (e.held.tryForward()) {
          clearTimeout(e.timer);
          continue;
        }
        // Not yet: back at the head, its timer still running.
        q.entries.unshift(e);
        q.bytes += e.bytes;
        this.where.set(e.held, id);
        break;
      }
      if (q.entries.length === 0) this.queues.delete(id);
    }
    this.idle();
  }

  /** Held requests per deployment with a queue now. */
  counts(): Map<string, { project: string; deployment: string; count: number }> {
    const m = new Map<string, { project: string; deployment: string; count: number }>();
    for (const [id, q] of this.queues)
      m.set(id, { project: q.project, deployment: q.deployment, count: q.entries.length });
    return m;
  }

  /** servegate_pending_requests, 0 for every deployment that can hold: an autoscaler (KEDA) sees it before a request. */
  pending(routes: Iterable<Route>): Array<{ project: string; deployment: string; count: number }> {
    const out: Array<{ project: string; deployment: string; count: number }> = [];
    for (const r of routes)
      if (r.holdMs || this.queues.has(r.id))
        out.push({ project: r.project, deployment: r.deployment, count: this.queues.get(r.id)?.entries.length ?? 0 });
    return out;
  }

  /** Answers every held request 503 (shutdown) and stops the look. */
  close(): void {
    for (const q of [...this.queues.values()]) for (const e of [...q.entries]) if (this.remove(e.held)) e.held.expire();
    this.idle();
  }

  private idle(): void {
    if (this.queues.size === 0 && this.sweep) {
      clearInterval(this.sweep);
      this.sweep = undefined;
    }
  }
}

/**
 * A held request's body, read and counted while it waits (`grow` false: past the byte bound). Returns what to call
 * when it is forwarded: the body whole when it all came, else what came followed by the rest.
 */
export function readWhileHeld(
  body: Readable,
  grow: (bytes: number) => boolean,
  full: () => void,
  tooLarge: () => void,
): () => Buffer | Readable {
  const kept: Buffer[] = [];
  let size = 0;
  let ended = false;
  const onData = (c: Buffer): void => {
    kept.push(c);
    size += c.length;
    if (grow(c.length)) return;
    stop();
    full();
  };
  const onEnd = (): void => {
    ended = true;
  };
  const onError = (err: NodeJS.ErrnoException): void => {
    stop();
    if (err.code === BODY_TOO_LARGE) tooLarge();
    // Anything else is the client going away: the response's close ends the exchange.
  };
  const stop = (): void => {
    body.off('data', onData).off('end', onEnd).off('error', onError);
  };
  body.on('data', onData).on('end', onEnd).on('error', onError);
  return () => {
    stop();
    if (ended) return kept.length === 1 ? kept[0] : Buffer.concat(kept, size);
    body.pause();
    const out = new PassThrough();
    for (const c of kept) out.write(c);
    body.once('error', (err) => out.destroy(err));
    body.pipe(out);
    return out;
  };
}
