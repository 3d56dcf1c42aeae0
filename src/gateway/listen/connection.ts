// One client connection: requests are served one at a time in arrival order, as HTTP/1.1 pipelining means (a
// pipelined request is not forwarded before the previous answer is done), parse errors are answered in their place
// in the pipeline, and everything queued is dropped when the connection closes.
import type { Socket } from 'node:net';
import type { Drain } from './drain.js';
import type { Dialect, GatewayError } from '../http/errors.js';
import { lingerAfterAnswer, sendRawError } from '../http/answers.js';
import { BodyClock } from '../http/body-clock.js';
import type { PlaneContext } from '../forward/context.js';
import type { Conn as JobConn, Job } from '../forward/job.js';

/** Pipelined requests parsed ahead of the request being served, beyond which the connection stops reading. */
const MAX_QUEUED = 16;

const kConn = Symbol('servegate.conn');

export class Conn implements JobConn {
  active: Job | undefined;
  private queue: Job[] | undefined;
  private paused = false;
  private closed = false;
  /** The answer being written is the connection's last: nothing after it is served. */
  private last = false;
  /** A parse error seen while earlier requests were still being answered: answered after them. */
  private pendingError:
    { err: GatewayError; dialect: Dialect; headers: readonly string[]; answered: boolean } | undefined;

  /** The clocks of the body the active request reads (BodyClock), made for the first and reset for each later one. */
  private clock: BodyClock | undefined;

  /** The peer address (without the IPv4-mapped IPv6 prefix) and scheme, read once per connection. */
  readonly client: string;
  readonly proto: 'http' | 'https';

  constructor(
    readonly socket: Socket,
    private readonly drain: Drain,
    readonly ctx: PlaneContext,
  ) {
    const a = socket.remoteAddress ?? '';
    this.client = a.startsWith('::ffff:') ? a.slice(7) : a;
    this.proto = (socket as { encrypted?: boolean }).encrypted ? 'https' : 'http';
    (socket as unknown as Record<symbol, Conn>)[kConn] = this;
    socket.on('close', Conn.socketClosed);
  }

  static of(socket: Socket): Conn | undefined {
    return (socket as unknown as Record<symbol, Conn | undefined>)[kConn];
  }

  submit(job: Job): void {
    if (this.last) {
      // A request parsed after the refused body (so that body was read whole), on a connection the answer closed: not
      // served, and the connection ends here. Lingering is for a client still sending its body; one that pipelines
      // past it would have Node parse and keep every request it sends until the linger's time is up.
      job.drop();
      this.socket.destroy();
      return;
    }
    if (this.closed) return job.drop();
    if (this.active !== undefined) {
      (this.queue ??= []).push(job);
      if (this.queue.length > MAX_QUEUED && !this.paused) {
        this.paused = true;
        this.socket.pause();
      }
      return;
    }
    this.begin(job);
  }

  private begin(job: Job): void {
    this.active = job;
    this.drain.hold();
    job.start();
  }

  /**
   * The active answer is the last: nothing parsed after it is served (it may be body bytes read as a request), and the
   * socket lingers rather than being reset under the client's unread answer.
   */
  lastAnswer(): void {
    if (this.last) return;
    this.last = true;
    const queued = this.queue;
    this.queue = undefined;
    if (queued) for (const j of queued) j.drop();
    lingerAfterAnswer(this.socket);
  }

  /** The job's answer is complete (or abandoned): the next one may go. */
  done(job: Job): void {
    if (this.active !== job) return;
    this.active = undefined;
    this.drain.release();
    if (this.closed || this.last) return;
    const next = this.queue?.shift();
    if (next) {
      if (this.paused && this.queue!.length <= MAX_QUEUED / 2) {
        this.paused = false;
        this.socket.resume();
      }
      this.begin(next);
    } else if (this.pendingError && !this.pendingError.answered) {
      this.answerError();
    }
  }

  /** Node's parser failed (malformed, or headers too slow): answered in its place in the pipeline, after earlier ones. */
  fail(err: GatewayError, dialect: Dialect = 'kserve', headers: readonly string[] = []): void {
    if (this.closed || this.pendingError || this.last) return;
    const answered = this.active?.interrupt?.(err) ?? false;
    this.pendingError = { err, dialect, headers, answered };
    if (this.active === undefined) this.answerError();
  }

  private answerError(): void {
    const p = this.pendingError!;
    sendRawError(this.socket, p.err, p.dialect, p.headers);
  }

  tick(now: number): void {
    this.active?.tick(now);
  }

  clockBody(now: number, idleMs: number, minBytesPerSecond: number): void {
    const read = this.socket.bytesRead;
    if (this.clock) this.clock.reset(read, now, idleMs, minBytesPerSecond);
    else this.clock = new BodyClock(read, now, idleMs, minBytesPerSecond);
  }

  bodyLate(now: number, backpressured: boolean): 'idle' | 'slow' | undefined {
    return this.clock?.look(now, this.socket.bytesRead, backpressured);
  }

  deadline(): void {
    this.active?.deadline();
  }

  /** One shared listener for every socket's 'close' (an emitter calls it with itself as `this`). */
  private static socketClosed(this: Socket): void {
    Conn.of(this)?.onClose();
  }

  private onClose(): void {
    this.closed = true;
    const q = this.queue;
    this.queue = undefined;
    if (q) for (const j of q) j.drop();
    this.drain.forget(this);
  }

  /** Shutdown deadline or immediate close. */
  destroy(): void {
    this.socket.destroy();
  }
}
