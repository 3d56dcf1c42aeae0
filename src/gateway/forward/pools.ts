// One keep-alive undici Pool per backend origin (pools unused for a while are closed), the one fact undici does not
// tell a response's handler (whether the connection it ended on was reset), and the one answer undici cannot take
// (a `100 Continue` nobody asked for, which it treats as a broken connection).
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

  constructor(
    private readonly idleCloseMs = 300_000,
    /**
     * A connection older than this is closed once its request is done (checked when the pool picks a connection).
     * undici's pool otherwise keeps one client object per connection it ever opened at once: after a burst of 10,000
     * concurrent streams, 10,000 of them, for as long as the pool is used.
     */
    private readonly clientTtlMs = 60_000,
  ) {
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
        if (socket) {
          (socket as Socket).on('error', markReset);
          dropUnaskedContinue(socket as Socket);
        }
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
      clientTtl: this.clientTtlMs,
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

/**
 * An interim answer at the start of `b` (13 bytes or more): "HTTP/1.x 100 ", "102 " or "103 " — never 101, which
 * is the answer a websocket upgrade waits for.
 */
const isInterim = (b: Buffer): boolean =>
  b[9] === 0x31 &&
  b[10] === 0x30 &&
  (b[11] === 0x30 || b[11] === 0x32 || b[11] === 0x33) &&
  b[12] === 0x20 &&
  b.toString('latin1', 0, 7) === 'HTTP/1.';

const HEAD_END = Buffer.from('\r\n\r\n');

/**
 * A backend may send `100 Continue` before its answer without being asked (RFC 9110 §15.2: a client must accept any
 * number of 1xx answers). undici never sends Expect, so it takes an unasked 100 for a broken connection and destroys
 * it — after the backend processed the request. The gateway does not forward interim answers, so every 100, 102 or
 * 103 before the final answer is taken out of the bytes before undici reads them (a 100 after a 103 included).
 */
function dropUnaskedContinue(socket: Socket): void {
  const read = socket.read.bind(socket);
  const write = socket.write.bind(socket) as (chunk: unknown, encoding?: unknown, cb?: unknown) => boolean;
  /** A request head was written and no byte of its answer read yet. */
  let atStart = false;
  // Fixed arity (write(chunk[, encoding][, cb])): no rest array per write.
  socket.write = ((chunk: unknown, encoding?: unknown, cb?: unknown) => {
    // undici writes a request's head as one string starting with its method (upper case); the other strings it
    // writes are chunk-size lines ("\r\n1f\r\n"), and bodies are buffers.
    if (typeof chunk === 'string' && chunk.charCodeAt(0) >= 65 && chunk.charCodeAt(0) <= 90) atStart = true;
    return write(chunk, encoding, cb);
  }) as typeof socket.write;
  /** The start of an answer too short to tell yet, kept until more bytes come. */
  let held: Buffer | undefined;
  socket.read = ((size?: number) => {
    let chunk = read(size) as Buffer | null;
    if (held) {
      chunk = chunk ? Buffer.concat([held, chunk]) : held;
      held = undefined;
    }
    while (atStart && chunk !== null) {
      if (chunk.length < 13) {
        // Not enough to tell: kept, read again when more comes.
        held = chunk;
        return null;
      }
      if (!isInterim(chunk)) {
        atStart = false;
        break;
      }
      const end = chunk.indexOf(HEAD_END);
      if (end === -1) {
        // A 100 whose head has not ended yet.
        held = chunk;
        return null;
      }
      const rest = chunk.subarray(end + 4);
      chunk = rest.length ? rest : (read(size) as Buffer | null);
    }
    return chunk;
  }) as typeof socket.read;
}
