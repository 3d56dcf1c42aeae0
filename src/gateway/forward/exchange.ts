// One request from arrival to the end of its answer, as a sequence of phases (docs/gateway.md draws it):
//
//   admit → body → pick → call → answer → record
//
// admit: the admission pipeline (admit/pipeline.ts) decides before the body is read. body: streamed through, or read
// whole and checked (decoded when it has a Content-Encoding); on the OpenAI base URL `model` then names the
// deployment. pick: a backend endpoint by the route's policy (targets.ts), or the scale-from-zero hold, or 503. call:
// one UpstreamCall (upstream-call.ts) per try; a try that reached nothing is made again (retry.ts), and a deployment
// that fails before answering hands the request to its fallbacks (fallback.ts). answer: the backend's, streamed by
// the call, or the gateway's own (http/answers.ts). record: one metric and one access-log line when the answer is
// complete or the client is gone. Every phase starts with the one guard `if (this.ended) return`.
// A class rather than closures: one object is made per request, and it drops its references when it is over.
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import { Transform, type Readable } from 'node:stream';
import type { Dispatcher } from 'undici';
import { llmFigures } from '../../observe/record.js';
import {
  admitModel,
  modelRefused,
  type Accepted,
  type Admission,
  type ByModel,
  type Refused,
} from '../admit/pipeline.js';
import { isBinaryContentType, validateBody } from '../admit/kind-rules.js';
import { BODY_RATE_WINDOW_MS, BodyClock } from '../http/body-clock.js';
import { collectBody } from '../http/body-collect.js';
import { gatewayError, GatewayError, type Dialect } from '../http/errors.js';
import { setHeader, upstreamHeaders, withoutHeader } from '../http/headers.js';
import { readHead } from '../http/request-head.js';
import { closeSocket, sendEmpty, sendError, sendJson } from '../http/answers.js';
import { chargedUsage } from '../openai/usage-meter.js';
import { LlmRequest } from '../openai/llm-request.js';
import { copyWith } from '../../same-shape.js';
import { bodyBudgetFull } from './body-budget.js';
import type { PlaneContext } from './context.js';
import type { Conn, Job } from './job.js';
import { NextTarget } from './next-target.js';
import type { Chosen, Variant } from './targets.js';
import { bodyForUndici, Diverted, UpstreamCall, type CallOwner } from './upstream-call.js';
import { BODY_TOO_LARGE, ClientGone, tooLarge } from './upstream-errors.js';

/** The gateway ended the backend call itself (body timeout, a parse error in the body) and answers on its own. */
class EndedByGateway extends Error {
  readonly code = 'SERVEGATE_ENDED';
}

export class Exchange extends NextTarget implements Job, CallOwner {
  /** Stops reading a body being read whole. */
  private stopBody: (() => void) | undefined;
  private variant: Variant | undefined;
  /** The backend call of the current try. */
  private call: UpstreamCall | undefined;
  private closeAfter = false;
  /** The body's idle and rate clocks (started with the request: the sweep reads them once a second). */
  private clock: BodyClock | undefined;

  constructor(
    ctx: PlaneContext,
    conn: Conn,
    req: IncomingMessage,
    protected readonly res: ServerResponse,
    private readonly continueRequested: boolean,
    /** An Expect header other than 100-continue (Node's 'checkExpectation'): refused with 417. */
    private readonly expectation?: string,
  ) {
    super(ctx, conn, req);
  }

  // ---- the connection's view (Job) --------------------------------------------------------------------------------

  start(): void {
    (this.res as Answer)[kExchange] = this;
    this.res.on('close', answerClosed);
    // The body idle clock starts now: the sweep then fires between bodyIdleMs and bodyIdleMs + its 1 s period.
    const { bodyIdleMs, bodyMinRate } = this.ctx;
    this.clock = new BodyClock(this.conn.socket.bytesRead, Date.now(), bodyIdleMs, bodyMinRate);
    this.guarded(this.admitPhase, undefined);
  }

  drop(): void {
    this.stopWaiting();
    this.ended = 'over';
    this.release();
  }

  /** The body is let go: what it held goes back to the budget. */
  private letGoOfBody(): void {
    this.stopBody?.();
    this.stopBody = undefined;
    this.room?.release();
    this.room = undefined;
  }

  /**
   * Once the body is checked and edited: the reservation shrinks to the buffers this exchange still holds. A body kept
   * for a fallback keeps what was reserved (the fallback's edit is a copy).
   */
  private settleRoom(): void {
    const room = this.room;
    if (!room || this.llm?.keepsBody) return;
    const body = this.body;
    const held = Buffer.isBuffer(body) ? body.buffer.byteLength : 0;
    if (held < room.bytes) room.resize(held);
  }

  tick(now: number): void {
    const req = this.req;
    if (this.ended || !req) return;
    // The body's clocks run while it is held too: a held request that sends nothing is timed out like any other.
    if (!req.complete) {
      const late = this.clock!.look(now, this.conn.socket.bytesRead, req.readableLength > 0);
      if (late) return this.bodyTimedOut(late);
    } else this.clock = undefined;
    // A client that stops reading its answer holds the backend as long as a stalled stream would, not longer.
    const since = this.call?.drainSince;
    if (since && now - since >= this.ctx.streamIdleMs) {
      this.error = 'client stopped reading';
      this.call!.abort(new ClientGone());
      this.res.destroy();
    }
  }

  /**
   * Shutdown deadline: the answer is cut. An event stream gets one last event in the route's dialect first, as for any
   * other break (SPEC §6), so that an SDK raises an error instead of returning a silently shortened answer; then the
   * connection closes, never with a clean end.
   */
  deadline(): void {
    const res = this.res;
    if (this.ended === 'over' || !res) return;
    this.ended = 'gone';
    const sse = this.call?.sse === true;
    this.call?.abort(new ClientGone());
    this.error = 'answer cut at the shutdown deadline';
    if (sse && res.headersSent && !res.destroyed && res.writable) {
      const message = 'the gateway is shutting down: the answer is incomplete';
      res.write(streamErrorEvent(this.dialect, message, 'shutting_down'), () => res.destroy());
      return;
    }
    res.destroy();
  }

  /** Node's parser failed on this request's own body (bad chunk, ...): it is refused, never forwarded short. */
  interrupt(err: GatewayError): boolean {
    const req = this.req;
    if (this.ended === 'over' || !req || req.complete) return false;
    this.error = err.message;
    this.call?.abort(new EndedByGateway(err.message));
    if (this.res.headersSent) this.res.destroy();
    else this.refuse(err, true);
    return true;
  }

  // ---- admit -------------------------------------------------------------------------------------------------------

  private admitPhase(): void {
    this.settle(this.admitHead(readHead(this.req, this.ctx.head), false, this.expectation), this.admitted);
  }

  private admitted(a: Admission): void {
    if (this.ended) return;
    if (a.kind === 'preflight') {
      a.headers.push('x-request-id', this.requestId);
      return sendEmpty(this.res, 204, a.headers, this.ctx.drain.draining);
    }
    this.took(a);
    if (!a.ok) return this.refuse(a.error, a.close);
    if (a.kind === 'by-model') return this.byModelPhase(a);
    this.admission = a;
    if (a.route.kind === 'llm') this.llm = new LlmRequest();
    this.bodyPhase(a.check === 'none');
  }

  /** The OpenAI base URL before `model` is read: the model list is the gateway's own answer; the rest is JSON. */
  private byModelPhase(b: ByModel): void {
    const head = this.head!;
    const llm = (this.llm = new LlmRequest());
    const models = llm.models(this.ctx.store.current(), b, head.method);
    const unread = head.chunked || (head.contentLength ?? 0) > 0;
    if (models instanceof Error) return this.refuseModel(models, unread);
    if (models !== undefined) return this.answerJson(models, unread);
    const upload = llm.unroutable(head.contentType, isBinaryContentType(head.contentType));
    if (upload) return this.refuse(upload, true);
    this.bodyPhase(false, b);
  }

  /** The gateway's own JSON answer (the model list). */
  private answerJson(body: string, unread: boolean): void {
    this.ended = 'answered';
    const closing = unread || this.ctx.drain.draining;
    if (closing) this.closeAfter = true;
    sendJson(this.res, 200, body, this.answerHeaders, closing, this.head!.method === 'HEAD');
  }

  // ---- body --------------------------------------------------------------------------------------------------------

  /** `stream`: forwarded as it comes (unchecked kinds); else read whole and checked. `b`: the base URL's request. */
  private bodyPhase(stream: boolean, b?: ByModel): void {
    const { ctx, req, res } = this;
    const head = this.head!;
    const declared = head.contentLength;
    if (declared !== undefined && declared > ctx.maxBody) return this.refuse(tooLarge(ctx.maxBody), true);
    const hasBody = head.chunked || (declared !== undefined && declared > 0);
    if (stream) {
      if (this.continueRequested) res.writeContinue();
      this.body = !hasBody ? null : declared !== undefined ? req : limitStream(req, ctx.maxBody);
      this.bodyLength = hasBody ? declared : undefined;
      return this.pickPhase(undefined);
    }
    if (!hasBody) {
      if (this.continueRequested) res.writeContinue();
      return this.bodyRead(Buffer.alloc(0), b);
    }
    // Read whole into one buffer, within the budget of buffered bodies: room for the most this request may hold of
    // what has come (the body, an edited copy), grown as the body grows; room for a decoded form is asked for once the
    // body is in (bodyRead). Never for what a Content-Length only declares, nor the decoded bound of a body still
    // coming: one client trickling a near-limit body (or a few compressed bytes) would hold every tenant's room.
    const room = (this.room = ctx.bodies.reservation());
    const coding = head.contentEncoding;
    const coded = coding !== undefined && coding !== 'identity';
    const most = (wire: number): number => wire + (this.edited(b) && !coded ? wire : 0);
    if (this.continueRequested) res.writeContinue();
    this.stopBody = collectBody(
      req,
      declared,
      ctx.maxBody,
      (capacity, go) => room.acquire(most(capacity), go),
      (end) => {
        this.stopBody = undefined;
        if ('body' in end) return this.bodyRead(end.body, b);
        if (end.problem === 'no_room') return this.bodyBusy();
        this.refuse(tooLarge(ctx.maxBody), true);
      },
    );
  }

  /** Whether the body may be edited (a copy made): through the base URL, or kept for a fallback. */
  private edited(b: ByModel | undefined): boolean {
    return b !== undefined || (this.route?.kind === 'llm' && this.route.fallbacks !== undefined);
  }

  /** No room in the budget of buffered bodies within its wait: 503. */
  private bodyBusy(): void {
    this.ctx.metrics.upstreamErrors.inc({ cause: 'body_budget_full' });
    this.refuse(bodyBudgetFull(this.ctx.bodies), true);
  }

  /**
   * The whole body is in: decoded for the check when it has a Content-Encoding, once the budget has room for the
   * decoded form (up to maxDecodedBodyBytes) and, when it may be edited, a copy of it.
   */
  private bodyRead(wire: Buffer, b: ByModel | undefined): void {
    if (this.ended) return;
    const coding = this.head!.contentEncoding;
    if (coding === undefined || coding === 'identity' || wire.length === 0) return this.bodyChecked(wire, wire, b);
    const { maxDecoded } = this.ctx;
    const room = this.room!;
    room.acquire(room.bytes + maxDecoded * (this.edited(b) ? 2 : 1), (ok) => {
      if (this.ended) return;
      if (!ok) return this.guarded(this.bodyBusy, undefined);
      this.ctx.decoder.decode(wire, coding, maxDecoded, (err, plain) => {
        if (this.ended) return;
        if (err) return this.refuse(err);
        this.bodyChecked(wire, plain!, b);
      });
    });
  }

  /** `wire`: the body as sent; `plain`: decoded (the same buffer without a Content-Encoding). */
  private bodyChecked(wire: Buffer, plain: Buffer, b: ByModel | undefined): void {
    if (b) return this.routeByModel(b, wire, plain);
    const d = this.admission!;
    const llm = this.llm;
    if (llm?.reads(d, plain)) {
      const refused = llm.checked(this.ctx.store.current(), d, this.head!.contentType ?? '', wire, plain);
      if (refused) return this.refuseModel(refused);
    } else {
      const invalid = validateBody(d.check, plain);
      if (invalid) return this.refuse(invalid);
    }
    // Checked decoded, forwarded as sent: the backend gets the client's bytes and their Content-Encoding.
    this.holdBody(wire);
    this.pickPhase(undefined);
  }

  /** The OpenAI base URL: `model` picks the deployment, whose limits apply now; the body goes on with it rewritten. */
  private routeByModel(b: ByModel, wire: Buffer, plain: Buffer): void {
    const llm = this.llm!;
    const route = llm.route(this.ctx.store.current(), b, this.head!.contentType, plain);
    if (route instanceof Error) return this.refuseModel(route);
    this.route = route;
    const body = llm.routed(b, route, wire, plain);
    if (body instanceof Error) return this.refuse(body);
    if (llm.decoded) this.head!.forward = withoutHeader(this.head!.forward, 'content-encoding');
    this.holdBody(body);
    this.settle(admitModel(b, route, b.search, this.ctx.admission), this.modelAdmitted);
  }

  private modelAdmitted(x: Accepted | Refused): void {
    if (this.ended) return;
    if (!x.ok) return this.refuse(x.error, x.close);
    // The headers admission gave so far, with the deployment's rate limits merged in.
    this.answerHeaders = ['x-request-id', this.requestId, ...x.headers];
    this.admission = x;
    this.pickPhase(undefined);
  }

  /** The body to forward, held in memory. */
  private holdBody(body: Buffer): void {
    this.body = body;
    this.bodyLength = body.length;
    this.settleRoom();
  }

  /** A refused `model` counts as a failed authorisation where admission says so (SPEC §9). */
  private refuseModel(err: GatewayError, close = false): void {
    modelRefused(err, this.client, this.ctx.admission);
    this.refuse(err, close);
  }

  /** The body stopped (`idle`) or trickles (`slow`): 408, and the backend's request is aborted. */
  private bodyTimedOut(why: 'idle' | 'slow'): void {
    const { ctx } = this;
    const message =
      why === 'idle'
        ? `the request body sent no data for ${ctx.bodyIdleMs / 1000}s`
        : `the request body arrived slower than ${ctx.bodyMinRate} bytes/s over ${BODY_RATE_WINDOW_MS / 1000}s`;
    this.error = why === 'idle' ? 'request body idle timeout' : 'request body too slow';
    ctx.metrics.upstreamErrors.inc({ cause: why === 'idle' ? 'client_body_timeout' : 'client_body_too_slow' });
    this.call?.abort(new EndedByGateway(this.error));
    if (this.res.headersSent) this.res.destroy();
    else this.refuse(gatewayError('request_timeout', message), true);
  }

  // ---- call --------------------------------------------------------------------------------------------------------

  protected callPhase(chosen: Chosen): void {
    const { ctx, req, admission, route } = this;
    if (this.ended || !admission || !route) return;
    const target = chosen.target;
    this.chosen = chosen;
    if (chosen.variant && !this.variant) {
      this.variant = chosen.variant;
      this.answerHeaders.push('x-servegate-variant', chosen.variant);
    }
    if (this.namesDeployment(route))
      setHeader(this.answerHeaders, 'x-servegate-deployment', `${route.project}/${route.deployment}`);
    const headers = upstreamHeaders(this.head!, {
      clientIp: this.conn.client,
      proto: this.conn.proto,
      requestId: this.requestId,
      project: route.project,
      deployment: route.deployment,
      keyName: this.key!.name,
      backendAuthority: target.authority,
      trustForwarded: ctx.head.trustForwarded,
      contentLength: this.bodyLength,
      identity: route.kind === 'llm',
      traceparent: this.trace?.traceparent,
      tracestate: this.trace?.tracestate,
    });
    this.attempts++;
    const call = (this.call = new UpstreamCall(
      this,
      {
        res: this.res,
        extra: this.answerHeaders,
        meter: route.kind === 'llm' && req.method !== 'HEAD',
        stripUsage: this.llm?.stripUsage ?? false,
        stripCors: ctx.cors.enabled,
        closing: ctx.drain.draining,
        head: req.method === 'HEAD',
        origin: target.origin,
      },
      ctx.metrics,
      ctx.pools,
      ctx.picker,
    ));
    try {
      ctx.pools.get(target.origin).dispatch(
        {
          path: target.basePath + (route.pathPrefix ?? '') + admission.upstreamPath,
          method: req.method as Dispatcher.HttpMethod,
          headers,
          body: bodyForUndici(this.body, route.fallbacks ? undefined : () => this.bodyWritten(call)),
          headersTimeout: this.headersTimeout(route),
          bodyTimeout: ctx.streamIdleMs,
          idempotent: false,
        },
        call,
      );
    } catch (err) {
      call.onError(err as Error);
    }
  }

  /**
   * The body was written whole to the backend of a deployment without fallbacks: nothing can send it again (a retry
   * is only for a connection that failed), so it is let go now, not when the answer comes (a non-streamed answer may
   * take minutes).
   */
  private bodyWritten(call: UpstreamCall): void {
    if (call !== this.call || !Buffer.isBuffer(this.body)) return;
    this.body = null;
    this.bodySent = true;
    this.letGoOfBody();
  }

  // ---- answer ------------------------------------------------------------------------------------------------------

  /**
   * The backend's answer is on its way to the client: no retry, fallback or answer of the gateway's own can follow, so
   * what only they need goes now (the answer may last minutes: an event stream). Kept: what the cut, the shutdown and
   * the record read.
   */
  answering(call: UpstreamCall): void {
    if (call !== this.call) return;
    // Node keeps the client's header lines on the request for as long as it lasts, and the headers object its server
    // builds from them for every HTTP/1.1 request (to read host and expect): the API key among them. Nothing reads
    // either past this point (the access log line takes the method and URL).
    this.req.rawHeaders = NO_LINES;
    this.req.headers = NO_HEADERS;
    // Built from rawHeaders on first read, with the old count of lines: set in step, not left to fail on an empty
    // list.
    this.req.headersDistinct = NO_DISTINCT;
    this.head = undefined;
    this.body = null;
    this.llm?.letGo();
    this.noOtherTarget();
    this.answerHeaders = [];
    this.letGoOfBody();
  }

  callEnded(_call: UpstreamCall, cut: string | undefined): void {
    if (cut) this.cut(cut);
  }

  /**
   * The backend answered 5xx or 429 and nothing was sent to the client yet: true when a fallback deployment takes
   * the request instead (the call then drops that answer).
   */
  divert(call: UpstreamCall, status: number): boolean {
    if (call !== this.call || this.ended || !this.nextFallback()) return false;
    const reason = status === 429 ? '429' : '5xx';
    setImmediate(() => this.fallback(reason));
    return true;
  }

  callFailed(call: UpstreamCall, err: Error): void {
    if (this.ended === 'over' || this.ended === 'gone' || call !== this.call) return;
    // Answered by whoever ended it; or the answer was a 5xx/429 and a fallback deployment takes the request.
    if (err instanceof ClientGone || err instanceof EndedByGateway || err instanceof Diverted) return;
    const code = (err as { code?: string }).code ?? '';
    if (this.retried(code)) return;
    if (this.res.headersSent) return this.cut(code === 'UND_ERR_BODY_TIMEOUT' ? 'stream_idle_timeout' : 'reset');
    if (code === BODY_TOO_LARGE) return this.refuse(tooLarge(this.ctx.maxBody), true);
    this.unreached(code, err);
  }

  /** A failure after the answer started: the connection is cut so the client sees an incomplete answer. */
  protected cut(cause: string): void {
    const route = this.route!;
    this.ctx.metrics.upstreamErrors.inc({ cause });
    this.ctx.logger.warn(
      { requestId: this.requestId, project: route.project, deployment: route.deployment, cause },
      'backend answer ended early',
    );
    this.error = `backend answer cut (${cause})`;
    const res = this.res;
    // An event stream ends with one last event in the route's dialect, so that an SDK raises an error instead of
    // returning a silently shortened answer; then the connection closes (never a clean end).
    if (this.call?.sse && !res.destroyed && res.writable) {
      const message =
        cause === 'stream_idle_timeout'
          ? `the backend sent nothing for ${this.ctx.streamIdleMs / 1000}s: the answer is incomplete`
          : 'the backend broke off its answer: the answer is incomplete';
      res.write(streamErrorEvent(this.dialect, message, cause), () => res.destroy());
      return;
    }
    res.destroy();
  }

  /** The gateway's own answer. `close`: the connection closes after it (a body not read, or not to be trusted). */
  protected refuse(err: GatewayError, close = false): void {
    const res = this.res;
    if (this.ended || !res) return;
    if (res.headersSent || res.destroyed) {
      res.destroy();
      return;
    }
    this.ended = 'answered';
    this.stopWaiting();
    // A body not read (or not yet sent, waiting for 100-continue) must not be taken for the next request.
    const unread = !this.req.complete && (this.head?.chunked || (this.head?.contentLength ?? 0) > 0);
    const closing = close || unread || this.ctx.drain.draining;
    if (closing) this.closeAfter = true;
    // A body left unread: the client may still be sending it; the socket lingers after the answer so that a reset
    // does not erase it (and nothing parsed after it is served).
    if (unread) {
      this.conn.lastAnswer();
      // A body being streamed to the backend was piped: the pipe is undone and the rest read and dropped (Node drops an
      // unread body only when nothing consumed it).
      this.req.unpipe();
      this.req.resume();
    }
    this.error = err.message;
    this.letGoOfBody();
    sendError(res, err, this.dialect, this.answerHeaders, closing);
  }

  protected internalError(): void {
    const res = this.res;
    if (!res || res.headersSent || res.destroyed) {
      res?.destroy();
      return;
    }
    this.refuse(gatewayError('internal_error', 'internal gateway error'), true);
  }

  // ---- record ------------------------------------------------------------------------------------------------------

  /** The answer is complete, or the client is gone: record it once, free the turn. */
  closed(): void {
    if (this.ended === 'over') return;
    const { res, req, call } = this;
    this.stopWaiting();
    if (!res.writableFinished) {
      this.ended = 'gone';
      call?.abort(new ClientGone());
      if (!this.error) this.error = 'client closed the connection';
      if (!res.headersSent) this.ctx.metrics.upstreamErrors.inc({ cause: 'client_abort' });
    }
    this.ended = 'over';
    this.record(!res.writableFinished && !res.headersSent ? 499 : res.statusCode);
    if (this.closeAfter && !req.complete) closeSocket(this.conn.socket);
    this.conn.done(this);
    this.release();
  }

  private record(status: number): void {
    const { call, admission } = this;
    const meter = call?.meter;
    // An LLM answer is charged its reported usage, raised to what the gateway saw when that is more or no report came
    // (cut short, the client gone, a backend that never sends it or reports too little).
    const charged = meter && chargedUsage(meter, this.llm?.promptEstimate ?? 0);
    const usage = charged?.tokens;
    if (admission?.charge && usage) this.ctx.perMinute.charge(admission.charge, usage.prompt + usage.completion);
    // Budgets (SPEC §14): the tokens, and their cost at the prices of the deployment that answered.
    if (admission?.budget && usage)
      this.ctx.admission.budgets?.charge(admission.budget, usage.prompt, usage.completion, this.route!.pricing);
    const llm = meter
      ? copyWith(llmFigures(meter, this.started, call.endAt, usage), {
          estimated: charged?.estimated,
          reported: charged?.reported,
        })
      : undefined;
    const chosen = this.chosen;
    const upstream = chosen?.target.origin.slice(7) ?? '';
    this.recordAs(status, upstream, this.bodyLength ?? 0, call?.bytesOut ?? 0, chosen?.reason, llm, this.variant);
  }

  /** The call lets go of this exchange: undici may keep a finished handler queued for a while. */
  private release(): void {
    this.call?.release();
    this.letGoOfBody();
  }
}

/** What an answering request's header lines and headers become (read by nobody; shared: nothing per request). */
const NO_LINES: string[] = Object.freeze([]) as unknown as string[];
const NO_HEADERS: IncomingHttpHeaders = Object.freeze({});
const NO_DISTINCT: NodeJS.Dict<string[]> = Object.freeze({});

/** The exchange an answer belongs to, on the answer itself: one shared 'close' listener instead of one per request. */
const kExchange = Symbol('servegate.exchange');
type Answer = ServerResponse & { [kExchange]?: Exchange };

function answerClosed(this: Answer): void {
  const x = this[kExchange];
  this[kExchange] = undefined;
  x?.closed();
}

/** Streams a chunked body through, failing once it passes max bytes. */
function limitStream(req: IncomingMessage, max: number): Readable {
  let size = 0;
  const t = new Transform({
    transform(chunk: Buffer, _enc, cb) {
      size += chunk.length;
      if (size > max)
        cb(Object.assign(new Error(`request body is larger than the limit of ${max} bytes`), { code: BODY_TOO_LARGE }));
      else cb(null, chunk);
    },
  });
  req.on('error', (e) => t.destroy(e));
  req.on('close', () => {
    if (!req.complete) t.destroy(new Error('client aborted'));
  });
  return req.pipe(t);
}

/** The last event of a broken stream, after a blank line that ends any event left open. */
function streamErrorEvent(dialect: Dialect, message: string, code: string): string {
  const error = dialect === 'openai' ? { message, type: 'upstream_error', code } : message;
  return `\n\ndata: ${JSON.stringify({ error })}\n\n`;
}
