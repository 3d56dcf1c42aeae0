// Keep-alive connections per backend origin, plus what undici does not tell a handler (was the connection reset) and
// cannot take (an unasked `100 Continue`, which it treats as a broken connection). A free list of undici Clients, not
// a Pool: an unbounded Pool walks every client it ever made twice per request (43 % of the gateway's CPU while 9,900
// streams opened) and keeps them; here a pick is O(1) and a closed connection's client goes at once.
import { connect as netConnect, type NetConnectOpts, type Socket } from 'node:net';
import { buildConnector, Client, Dispatcher, errors } from 'undici';
import { copyWith } from '../../same-shape.js';

/** The options of every backend connection. */
const CLIENT_OPTIONS = {
  pipelining: 1,
  keepAliveTimeout: 4_000,
  keepAliveMaxTimeout: 60_000,
} as const;

const CONNECT_TIMEOUT_MS = 5_000;

/**
 * A TCP connection made as undici's connector makes it, but whose connect listeners go once connected: undici's keep
 * a closure and timer on the socket for life (~0.3 KB per open stream). The caller's error listener goes on first.
 */
export function connectPlain(
  opts: buildConnector.Options,
  cb: buildConnector.Callback,
  timeoutMs = CONNECT_TIMEOUT_MS,
): void {
  const port = Number(opts.port) || 80;
  // highWaterMark: a Duplex option Node's net takes, missing from its connect options' type.
  const options: NetConnectOpts & { highWaterMark: number } = {
    highWaterMark: 64 * 1024,
    host: opts.hostname,
    port,
    localAddress: opts.localAddress ?? undefined,
  };
  const socket = netConnect(options);
  socket.setKeepAlive(true, 60_000);
  socket.setNoDelay(true);
  const timer = setTimeout(() => {
    socket.destroy(
      new errors.ConnectTimeoutError(
        `Connect Timeout Error (attempted address: ${opts.hostname}:${port}, timeout: ${timeoutMs}ms)`,
      ),
    );
  }, timeoutMs);
  const connected = (): void => {
    clearTimeout(timer);
    socket.off('error', failed);
    cb(null, socket);
  };
  const failed = (err: Error): void => {
    clearTimeout(timer);
    socket.off('connect', connected);
    cb(err, null);
  };
  socket.once('connect', connected);
  socket.once('error', failed);
}

/** One backend connection: an undici Client with what the origin's list knows of it (no object of its own). */
class Conn extends Client {
  /** Date.now() when it was made (its connection is opened at once, for its first request). */
  readonly bornAt = Date.now();
  /** Its index in the origin's free list, -1 while it serves a request (or is gone). */
  free = -1;
  /** Its connection closed or failed: never used again. */
  gone = false;
}

/** A listener that hands `fn` the connection that emitted the event. */
function onEmitter(fn: (c: Conn) => void): (this: Conn) => void {
  return function (this: Conn) {
    fn(this);
  };
}

/** The connections to one backend origin: a free list, the newest-freed first. A Dispatcher, as a Pool is. */
export class OriginPool extends Dispatcher {
  private readonly freeList: Conn[] = [];
  private readonly all = new Set<Conn>();
  private closing = false;
  // One listener of each kind for all the origin's connections (an emitter calls its listeners with itself as `this`).
  private readonly onDrain: (this: Conn) => void;
  private readonly onGone: (this: Conn) => void;

  /** Parsed once: every Client of the origin shares it (from a string each would parse its own). */
  private readonly url: URL;

  constructor(
    origin: string,
    private readonly connector: buildConnector.connector,
    private readonly clientTtlMs: number,
  ) {
    super();
    this.url = new URL(origin);
    this.onDrain = onEmitter((c) => this.release(c));
    this.onGone = onEmitter((c) => this.drop(c));
  }

  /** Client objects the origin holds (each one connection, open or opening). */
  get clients(): number {
    return this.all.size;
  }

  override dispatch(opts: Dispatcher.DispatchOptions, handler: Dispatcher.DispatchHandler): boolean {
    if (this.closing) {
      handler.onError?.(new Error('the connections to this backend are closed'));
      return false;
    }
    const now = Date.now();
    let c = this.freeList.pop();
    while (c && (c.gone || now - c.bornAt > this.clientTtlMs)) {
      if (!c.gone) {
        c.free = -1;
        this.drop(c);
      }
      c = this.freeList.pop();
    }
    if (c) c.free = -1;
    else c = this.open();
    // A request undici refuses on the spot gets no 'drain' (nor 'disconnect' from a client never connected): the
    // client goes back at once.
    if (c.dispatch(opts, handler) || c.stats.size === 0) this.release(c);
    return true;
  }

  private open(): Conn {
    const c = new Conn(this.url, copyWith(CLIENT_OPTIONS, { connect: this.connector }));
    this.all.add(c);
    c.on('drain', this.onDrain);
    c.on('disconnect', this.onGone);
    c.on('connectionError', this.onGone);
    return c;
  }

  /** The connection's request is done: it goes back on the free list, unless it is gone or older than the TTL. */
  private release(c: Conn): void {
    if (c.gone || c.free !== -1) return;
    if (this.closing || Date.now() - c.bornAt > this.clientTtlMs) return this.drop(c);
    c.free = this.freeList.length;
    this.freeList.push(c);
  }

  /** The connection closed, failed, or aged: its client is closed and nothing keeps it. */
  private drop(c: Conn): void {
    if (c.gone) return;
    c.gone = true;
    this.all.delete(c);
    const i = c.free;
    if (i !== -1) {
      // Swapped out of the free list in O(1).
      const last = this.freeList.pop()!;
      if (last !== c) {
        this.freeList[i] = last;
        last.free = i;
      }
      c.free = -1;
    }
    // Closed once whatever it still runs is over (after a disconnect it runs nothing: undici failed that request).
    c.close().catch(() => undefined);
  }

  override async close(): Promise<void> {
    this.closing = true;
    await Promise.all([...this.all].map((c) => c.close().catch(() => undefined)));
  }

  override async destroy(): Promise<void> {
    this.closing = true;
    await Promise.all([...this.all].map((c) => c.destroy().catch(() => undefined)));
  }
}

export class Pools {
  private pools = new Map<string, { pool: OriginPool; used: number }>();
  private sweeper: NodeJS.Timeout;
  // undici ends a close-delimited answer cleanly on a reset too, completing it inside its own 'error' listener: this
  // one, added first, runs just before, so a handler completing in that turn sees `resetNow` (a cut, not an end).
  private resetting = false;
  private readonly connect: buildConnector.connector;

  constructor(
    private readonly idleCloseMs = 300_000,
    /** A connection older than this is closed once its request is done (a backend's new replicas get traffic). */
    private readonly clientTtlMs = 60_000,
  ) {
    this.sweeper = setInterval(() => this.sweep(), Math.min(60_000, idleCloseMs)).unref();
    // https backends: undici's connector (TLS sessions, servername); http ones: connectPlain, which keeps nothing of
    // the connect on the socket once it is made.
    const tls = buildConnector({ timeout: CONNECT_TIMEOUT_MS });
    const base: buildConnector.connector = (opts, cb) =>
      opts.protocol === 'http:' ? connectPlain(opts, cb) : tls(opts, cb);
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

  get(origin: string): OriginPool {
    const e = this.pools.get(origin);
    if (e) {
      e.used = Date.now();
      return e.pool;
    }
    const pool = new OriginPool(origin, this.connect, this.clientTtlMs);
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

/** An interim answer (100, 102 or 103, reason phrase optional) at the start of `b`: never 101, an upgrade's answer. */
const isInterim = (b: Buffer): boolean =>
  b[9] === 0x31 &&
  b[10] === 0x30 &&
  (b[11] === 0x30 || b[11] === 0x32 || b[11] === 0x33) &&
  (b[12] === 0x20 || b[12] === 0x0d) &&
  b.toString('latin1', 0, 7) === 'HTTP/1.';

const HEAD_END = Buffer.from('\r\n\r\n');

/** Per backend socket: the interim-answer filter's state (on the socket itself: no closures per connection). */
interface Filtered extends Socket {
  /** A request head was written and no byte of its answer read yet. */
  [kAtStart]?: boolean;
  /** The start of an answer too short to tell yet, kept until more bytes come. */
  [kHeld]?: Buffer;
}
const kAtStart = Symbol('servegate.atStart');
const kHeld = Symbol('servegate.held');

/**
 * Takes interim answers (never forwarded) out of the bytes before undici reads them: a client must accept any 1xx
 * (RFC 9110 §15.2), but undici, never sending Expect, destroys the connection on a 100 after the backend processed it.
 */
function dropUnaskedContinue(socket: Socket): void {
  const s = socket as Filtered;
  s[kAtStart] = false;
  s[kHeld] = undefined;
  socket.write = filteredWrite;
  socket.read = filteredRead;
}

// Fixed arity (write(chunk[, encoding][, cb])): no rest array per write.
function filteredWrite(this: Filtered, chunk: unknown, encoding?: unknown, cb?: unknown): boolean {
  // undici writes a request's head as one string starting with its method (upper case); the other strings it
  // writes are chunk-size lines ("\r\n1f\r\n"), and bodies are buffers.
  if (typeof chunk === 'string' && chunk.charCodeAt(0) >= 65 && chunk.charCodeAt(0) <= 90) this[kAtStart] = true;
  const write = (Object.getPrototypeOf(this) as { write: (c: unknown, e?: unknown, f?: unknown) => boolean }).write;
  return write.call(this, chunk, encoding, cb);
}

function filteredRead(this: Filtered, size?: number): Buffer | null {
  const read = (Object.getPrototypeOf(this) as Socket).read;
  let chunk = read.call(this, size) as Buffer | null;
  const held = this[kHeld];
  if (held) {
    chunk = chunk ? Buffer.concat([held, chunk]) : held;
    this[kHeld] = undefined;
  }
  while (this[kAtStart] && chunk !== null) {
    if (chunk.length < 13) {
      // Not enough to tell: kept, read again when more comes.
      this[kHeld] = chunk;
      return null;
    }
    if (!isInterim(chunk)) {
      this[kAtStart] = false;
      break;
    }
    const end = chunk.indexOf(HEAD_END);
    if (end === -1) {
      // A 100 whose head has not ended yet.
      this[kHeld] = chunk;
      return null;
    }
    const rest = chunk.subarray(end + 4);
    chunk = rest.length ? rest : (read.call(this, size) as Buffer | null);
  }
  return chunk;
}
