// One keep-alive undici Pool per backend origin (pools unused for a while are closed), and the one fact undici does
// not tell a response's handler: whether the connection it ended on was reset.
import type { Socket } from 'node:net';
import { buildConnector, Pool } from 'undici';

export class Pools {
  private pools = new Map<string, { pool: Pool; used: number }>();
  private sweeper: NodeJS.Timeout;
  // undici ends a close-delimited response (no length, not chunked) on the socket's close, also when the close was a
  // reset: the client would get a clean end of a cut answer. undici reports the reset from its own 'error' listener
  // and completes the response synchronously inside it; the listener added here runs just before undici's (it is
  // added first), so a handler completing in that same turn can tell a reset from a clean close (`resetNow`).
  private resetting = false;
  private readonly connect: buildConnector.connector;

  constructor(private readonly idleCloseMs = 300_000) {
    this.sweeper = setInterval(() => this.sweep(), Math.min(60_000, idleCloseMs)).unref();
    const base = buildConnector({ timeout: 5_000 });
    const clear = (): void => {
      this.resetting = false;
    };
    const markReset = (err: NodeJS.ErrnoException): void => {
      if (err.code === 'ECONNRESET' || err.code === 'EPIPE') {
        this.resetting = true;
        process.nextTick(clear);
      }
    };
    this.connect = (opts, cb) =>
      base(opts, (err, socket) => {
        if (socket) (socket as Socket).on('error', markReset);
        cb(err, socket as never);
      });
  }

  /** True while undici completes a response because its connection was reset. */
  get resetNow(): boolean {
    return this.resetting;
  }

  get(origin: string): Pool {
    const e = this.pools.get(origin);
    if (e) {
      e.used = Date.now();
      return e.pool;
    }
    const pool = new Pool(origin, {
      connections: null,
      pipelining: 1,
      keepAliveTimeout: 4_000,
      keepAliveMaxTimeout: 60_000,
      connect: this.connect,
    });
    this.pools.set(origin, { pool, used: Date.now() });
    return pool;
  }

  private sweep(): void {
    const cutoff = Date.now() - this.idleCloseMs;
    for (const [origin, e] of this.pools) {
      if (e.used < cutoff) {
        this.pools.delete(origin);
        e.pool.close().catch(() => undefined);
      }
    }
  }

  async close(): Promise<void> {
    clearInterval(this.sweeper);
    const all = [...this.pools.values()];
    this.pools.clear();
    await Promise.all(all.map((e) => e.pool.destroy().catch(() => undefined)));
  }
}
