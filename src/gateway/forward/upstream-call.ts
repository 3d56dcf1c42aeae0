// One call to a backend and the answer it gives, as undici dispatch handlers. UpstreamCall writes the backend's status
// and headers (the gateway's own added), then each body chunk as it arrives with back-pressure both ways, reads LLM
// usage as the bytes pass, counts the call in flight and tells its owner (the exchange) how the call ended; it keeps
// nothing of the request but what the answer needs. UpgradeCall makes a websocket handshake.
//
// undici's v7 handler methods (onConnect/onHeaders/onData/onComplete/onError) on purpose: they hand over the raw
// header lines, where onResponse* parse every answer's headers into an object first, a cost per request for nothing.
import type { ServerResponse } from 'node:http';
import type { Duplex, Readable } from 'node:stream';
import type { Dispatcher } from 'undici';
import type { Metrics } from '../../observe/metrics.js';
import { sendRelayedHead } from '../http/answers.js';
import { downstreamHeaders, removeHeader } from '../http/headers.js';
import { JsonUsageMeter, SseUsageMeter, type UsageMeter } from '../openai/usage-meter.js';
import type { Pools } from './pools.js';
import type { Chosen } from './targets.js';
import { UnsupportedCoding } from './upstream-errors.js';

/** A 5xx or 429 answer that a fallback deployment takes over: dropped, never passed on. */
export class Diverted extends Error {
  readonly code = 'SERVEGATE_DIVERTED';
}

/** What the call reports to the exchange that made it. */
export interface CallOwner {
  /** The backend answered 5xx or 429: true when the owner sends the request elsewhere (this answer is dropped). */
  divert(call: UpstreamCall, status: number): boolean;
  /** The backend's answer ended: completely, or cut (`cut` names why). */
  callEnded(call: UpstreamCall, cut: string | undefined): void;
  /** The backend's answer started: its status and headers are written to the client. */
  answering(call: UpstreamCall): void;
  /** The call failed: before the answer started (the owner answers) or during it (the owner cuts). */
  callFailed(call: UpstreamCall, err: Error): void;
}

export interface CallOptions {
  res: ServerResponse;
  /** Header lines every answer gets from the gateway (request id, CORS, rate-limit, variant): flat [name, value, ...]. */
  extra: readonly string[];
  /** Read usage and first-token time (LLM deployments, not HEAD). */
  meter: boolean;
  /** The gateway asked for usage the client did not: it is taken out of the stream. */
  stripUsage: boolean;
  /** The gateway answers CORS: the backend's own CORS headers are dropped. */
  stripCors: boolean;
  /**
   * Read when the answer's head is written, not when the call starts: a request in flight when SIGTERM comes gets
   * Connection: close too, so its client does not send another request on a connection about to close.
   */
  drain: { readonly draining: boolean };
  head: boolean;
}

/** In-flight counts per endpoint (the picker's). */
export interface EndpointLoads {
  begin(origin: string): void;
  end(origin: string): void;
}

/** Media types are case-insensitive (RFC 9110 §8.3.1): `Text/Event-Stream` is an event stream too. */
const isEventStream = (type: string): boolean =>
  type.length >= 17 && type.slice(0, 17).toLowerCase() === 'text/event-stream';

const NO_BODY_STATUS = (s: number): boolean => s === 204 || s === 304 || (s >= 100 && s < 200);
const JSON_TYPE = /^application\/(?:[\w.+-]*\+)?json\b/i;

export class UpstreamCall implements Dispatcher.DispatchHandler {
  /** An event stream (text/event-stream): flushed at once, cut with an error event at the shutdown deadline. */
  sse = false;
  meter: UsageMeter | undefined;
  bytesOut = 0;
  /** performance.now() when the backend's answer completed (0: it did not). */
  endAt = 0;
  /** Since when the client has not taken what was written (0: it keeps up). */
  drainSince = 0;
  /**
   * performance.now() by which the answer's head must have come: set for the first try, carried to each later one (a
   * retry, a fallback), so the whole chain has one deadline; a wait in the fair queue or the hold moves it on.
   */
  deadlineAt = 0;
  private closeDelimited = false;
  /** The answer is a 204 or a 304: no body, whatever its head says. */
  private noBody = false;
  /**
   * A close-delimited event stream: its last four bytes so far, read to tell whether the stream ended at an event
   * boundary (0: nothing yet; -1: not tracked, every other answer).
   */
  private tail = -1;
  private inflight = true;
  private over = false;
  /** Aborted: nothing more is written to the client. */
  private stopped = false;
  private abortFn: ((err?: Error) => void) | undefined;
  private abortReason: Error | undefined;
  private resumeFn: (() => void) | undefined;
  /** The client's answer (opts.res; opts itself is let go once the answer's head is written). */
  private res: ServerResponse | undefined;

  constructor(
    private owner: CallOwner | undefined,
    private opts: CallOptions | undefined,
    /** Where the call goes (backend, variant, endpoint: counted in flight there while the call lasts). */
    readonly chosen: Chosen,
    /** Its try of the request at this deployment: 1, or 2 for the one retry after a connect failure. */
    readonly attempt: number,
    private readonly metrics: Metrics,
    private readonly pools: Pools,
    private readonly loads: EndpointLoads,
  ) {
    metrics.inflightNow++;
    this.res = opts!.res;
    loads.begin(chosen.target.origin);
  }

  /** Ends the call now, or as soon as it starts. */
  abort(err: Error): void {
    this.stopped = true;
    this.abortReason ??= err;
    this.abortFn?.(err);
  }

  onConnect(abort: (err?: Error) => void): void {
    this.abortFn = abort;
    if (this.abortReason) abort(this.abortReason);
  }

  onHeaders(status: number, raw: Buffer[], resume: () => void): boolean {
    if (status < 200) return true; // 1xx: interim answers are the gateway's business (100-continue), not passed on
    const opts = this.opts;
    if (this.stopped || this.over || !opts || opts.res.destroyed) return false;
    if ((status >= 500 || status === 429) && this.owner?.divert(this, status)) {
      this.abort(new Diverted());
      return false;
    }
    const res = opts.res;
    this.resumeFn = resume;
    const down = downstreamHeaders(raw, opts.stripCors);
    if (down.codings !== undefined && !NO_BODY_STATUS(status) && !opts.head) {
      // Passed on, gzip bytes would reach the client as the body itself: refused (502) before anything is written.
      this.abort(new UnsupportedCoding(down.codings));
      return false;
    }
    const list = down.list;
    for (let i = 0; i < opts.extra.length; i++) list.push(opts.extra[i]);
    const sse = (this.sse = down.contentType !== undefined && isEventStream(down.contentType));
    if (sse) {
      list.push('x-accel-buffering', 'no');
      if (!down.cacheControl) list.push('cache-control', 'no-cache');
    }
    if (opts.drain.draining) list.push('connection', 'close');
    if (opts.meter && status < 300) {
      if (sse) {
        this.meter = new SseUsageMeter(opts.stripUsage);
        // Taking the usage event out changes the length: the answer goes chunked instead.
        if (opts.stripUsage && down.length) removeHeader(list, 'content-length');
      } else if (down.contentType !== undefined && JSON_TYPE.test(down.contentType)) {
        this.meter = new JsonUsageMeter();
      }
    }
    this.closeDelimited = !down.length && !down.chunked && !NO_BODY_STATUS(status) && !opts.head;
    this.noBody = status === 204 || status === 304;
    // A 204 has no body and no Content-Length (RFC 9110 §8.6); a 304's says what the full answer would weigh.
    if (status === 204 && down.length) removeHeader(list, 'content-length');
    if (this.closeDelimited && sse) this.tail = 0;
    sendRelayedHead(res, status, list, sse);
    this.opts = undefined;
    this.owner?.answering(this);
    return true;
  }

  onData(data: Buffer): boolean {
    const res = this.res;
    if (this.stopped || this.over || !res || res.destroyed) return false;
    let chunk: Buffer | undefined = data;
    if (this.tail >= 0) this.tail = tailOf(this.tail, data);
    const meter = this.meter;
    if (meter) {
      // The clock is read only while the first token is still to come: after it, the meter reads no time.
      chunk = meter.push(data, meter.firstAt ? 0 : performance.now());
      if (!chunk) return true;
    }
    this.bytesOut += chunk.length;
    if (res.write(chunk)) return true;
    this.drainSince = Date.now();
    // Made only when the client falls behind (most calls never need it).
    res.once('drain', () => {
      this.drainSince = 0;
      this.resumeFn?.();
    });
    return false;
  }

  onComplete(trailers: string[] | null): void {
    const res = this.res;
    if (this.over || !res) return;
    this.settle();
    this.endAt = performance.now();
    const owner = this.owner!;
    // The backend reset a close-delimited answer: the client must see it cut, never a clean end.
    if (this.closeDelimited && this.pools.resetNow) return owner.callEnded(this, 'reset');
    // Nothing but the connection's end frames a close-delimited answer, so an event stream that ends in the middle of
    // an event (what a backend process that died mid-answer leaves) is cut, not complete.
    if (this.tail > 0 && !endsAtEvent(this.tail)) return owner.callEnded(this, 'cut_mid_event');
    if (trailers && trailers.length && res.chunkedEncoding) {
      const t: Array<[string, string]> = [];
      for (let i = 0; i < trailers.length; i += 2) t.push([String(trailers[i]), String(trailers[i + 1])]);
      res.addTrailers(t);
    }
    const held = this.meter?.end();
    if (held) {
      this.bytesOut += held.length;
      res.write(held);
    }
    res.end();
    owner.callEnded(this, undefined);
  }

  onError(err: Error): void {
    if (this.over) return;
    // A 204 or 304 ends with its head whatever its Content-Length says (RFC 9112 §6.3); undici takes that length for a
    // body it never got and fails the answer. The client gets the answer as it is: complete.
    if (this.noBody && (err as { code?: string }).code === 'UND_ERR_RES_CONTENT_LENGTH_MISMATCH' && this.res) {
      return this.onComplete(null);
    }
    this.settle();
    this.owner?.callFailed(this, err);
  }

  /** The exchange is over: the call keeps nothing of it (undici may hold a finished handler queued for a while). */
  release(): void {
    this.settle();
    this.over = true;
    this.owner = this.opts = this.res = this.abortFn = this.resumeFn = undefined;
  }

  private settle(): void {
    if (!this.inflight) return;
    this.inflight = false;
    this.metrics.inflightNow--;
    this.loads.end(this.chosen.target.origin);
  }
}

/** `tail` with the last bytes of `b` shifted in: the last four bytes of everything seen, as one number. */
function tailOf(tail: number, b: Buffer): number {
  const n = b.length;
  for (let i = n > 4 ? n - 4 : 0; i < n; i++) tail = ((tail << 8) | b[i]) >>> 0;
  return tail;
}

/** The last bytes end an event: a line end followed by an empty line, in any of the three line ends SSE allows. */
function endsAtEvent(tail: number): boolean {
  const two = tail & 0xffff;
  const three = tail & 0xffffff;
  // \n\n, \r\r, \n\r\n, \r\r\n, \r\n\r\n
  return two === 0x0a0a || two === 0x0d0d || three === 0x0a0d0a || three === 0x0d0d0a || tail === 0x0d0a0d0a;
}

/**
 * Bodies from this size on are handed to undici in a form it lets go of once written (see `SentOnce`). Below it the
 * Buffer goes as it is: undici writes the head and a Buffer body in one go, and a small body held a while costs little.
 */
export const LET_GO_MIN = 4096;

/**
 * A request body undici lets go of once written: undici keeps a body on its request as long as the request lasts (an
 * event stream's: minutes), so a Buffer kept every open stream's prompt (32 KB prompts: 69.0 against 14.8 KB per open
 * stream, bench Part E). Unlike a Buffer's, its headers timeout counts from the end of the write, and a connection
 * whose backend answered before the body was all written is closed instead of reused.
 */
class SentOnce implements Iterable<Buffer> {
  constructor(
    private body: Buffer | null,
    private readonly written?: () => void,
  ) {}

  *[Symbol.iterator](): Iterator<Buffer> {
    const body = this.body;
    // Sent twice (nothing does that today) would be an empty body under the old content-length: fail before any byte.
    if (!body) throw new Error('request body already sent');
    this.body = null;
    yield body;
    // undici asks for the next chunk once this one is written to the socket (and drained).
    this.written?.();
  }
}

/**
 * The body as undici gets it, made anew for each try: Buffers of LET_GO_MIN bytes or more as a `SentOnce`, anything
 * else unchanged. undici takes any iterable as a body (its request checks for one), though its type of the option does
 * not list it. `written`: called once such a body is written whole to the backend's socket.
 */
export function bodyForUndici(
  body: Buffer | Readable | null,
  written?: () => void,
): Dispatcher.DispatchOptions['body'] {
  if (Buffer.isBuffer(body) && body.length >= LET_GO_MIN)
    return new SentOnce(body, written) as unknown as Dispatcher.DispatchOptions['body'];
  return body;
}

/** What a websocket handshake's call reports to its job (websocket.ts). */
export interface UpgradeOwner {
  /** The backend switched protocols: `socket` is its side of the tunnel. */
  upgraded(status: number, raw: Buffer[], socket: Duplex): void;
  /** The backend answered without switching: its answer, whole (`body` undefined: larger than the limit). */
  declined(status: number, raw: Buffer[], statusText: string | undefined, body: Buffer | undefined): void;
  failed(err: Error): void;
}

/** Longest answer body of a backend that declines an upgrade that is passed on. */
export const DECLINE_BODY_MAX = 65_536;

/** A websocket handshake to a backend, through the same pools as every request. */
export class UpgradeCall implements Dispatcher.DispatchHandler {
  private status = 0;
  private statusText: string | undefined;
  private raw: Buffer[] = [];
  private chunks: Buffer[] = [];
  private size = 0;
  private abortFn: ((err?: Error) => void) | undefined;
  private abortReason: Error | undefined;

  constructor(private owner: UpgradeOwner | undefined) {}

  abort(err: Error): void {
    this.abortReason ??= err;
    this.abortFn?.(err);
    this.owner = undefined;
  }

  onConnect(abort: (err?: Error) => void): void {
    this.abortFn = abort;
    if (this.abortReason) abort(this.abortReason);
  }

  onUpgrade(status: number, raw: Buffer[] | string[] | null, socket: Duplex): void {
    const owner = this.owner;
    this.owner = undefined;
    if (!owner) return void socket.destroy();
    owner.upgraded(status, (raw ?? []) as Buffer[], socket);
  }

  onHeaders(status: number, raw: Buffer[], _resume: () => void, statusText?: string): boolean {
    if (status < 200) return true;
    this.status = status;
    this.raw = raw;
    this.statusText = statusText;
    return true;
  }

  onData(data: Buffer): boolean {
    this.size += data.length;
    if (this.size <= DECLINE_BODY_MAX) this.chunks.push(data);
    return true;
  }

  onComplete(): void {
    const owner = this.owner;
    this.owner = undefined;
    owner?.declined(
      this.status,
      this.raw,
      this.statusText,
      this.size > DECLINE_BODY_MAX ? undefined : Buffer.concat(this.chunks, this.size),
    );
  }

  onError(err: Error): void {
    const owner = this.owner;
    this.owner = undefined;
    owner?.failed(err);
  }
}
