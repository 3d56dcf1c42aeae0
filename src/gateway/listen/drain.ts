// The drain: the `draining` flag, every client connection and how many are being answered, and the graceful stop
// (readiness off, Connection: close, wait for answers in flight, end the rest at the deadline, close every socket).
import type { Server } from 'node:http';
import { Server as NetServer } from 'node:net';
import type { Logger } from '../../log.js';

/** What the drain needs of a client connection (listen/connection.ts). */
export interface Tracked {
  /** About once a second (the data plane's sweep): timeouts. */
  tick(now: number): void;
  /** Shutdown deadline: end what is still running. */
  deadline(): void;
  destroy(): void;
}

export class Drain {
  draining = false;
  /** Connections holding a request being answered (or a tunnel). */
  private held = 0;
  /** Every open client connection; per connection, not per request. */
  private readonly open = new Set<Tracked>();
  private waiters: Array<() => void> = [];

  get busy(): number {
    return this.held;
  }

  get connections(): ReadonlySet<Tracked> {
    return this.open;
  }

  track(c: Tracked): void {
    this.open.add(c);
  }

  /** The connection closed. */
  forget(c: Tracked): void {
    this.open.delete(c);
  }

  /** A connection started answering a request (or holding a tunnel). */
  hold(): void {
    this.held++;
  }

  /** A connection's answer (or tunnel) is over. */
  release(): void {
    this.held--;
    if (this.held === 0 && this.waiters.length) {
      const w = this.waiters;
      this.waiters = [];
      for (const f of w) f();
    }
  }

  private idle(ms: number): Promise<void> {
    if (this.busy === 0 || ms <= 0) return Promise.resolve();
    return new Promise((resolve) => {
      const t = setTimeout(resolve, ms);
      this.waiters.push(() => {
        clearTimeout(t);
        resolve();
      });
    });
  }

  /** Graceful stop of the listeners; resolves once every connection is closed. */
  async run(servers: readonly Server[], drainMs: number, acceptMs: number, logger: Logger): Promise<void> {
    this.draining = true;
    const deadline = Date.now() + drainMs;
    logger.info({ busy: this.busy, drainMs }, 'shutting down: draining requests');
    // For a short while new connections are still accepted (load balancers take a moment to stop sending); each
    // answer carries Connection: close. net.Server's close stops listening without touching open connections.
    if (acceptMs > 0) await new Promise((r) => setTimeout(r, Math.min(acceptMs, drainMs)));
    const stopped = Promise.all(
      servers.map((server) => new Promise<void>((resolve) => NetServer.prototype.close.call(server, () => resolve()))),
    );
    await this.idle(deadline - Date.now());
    if (this.busy > 0) {
      logger.warn({ busy: this.busy }, 'drain deadline reached: ending the remaining answers');
      // What is still running ends now (an event stream with one last error event).
      for (const c of this.connections) c.deadline();
      await new Promise((r) => setTimeout(r, 50)); // let ended streams flush
    }
    for (const c of this.connections) c.destroy();
    await stopped;
  }
}
