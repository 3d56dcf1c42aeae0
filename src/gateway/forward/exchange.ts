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
import type { Route } from '../../routing/types.js';
import { llmFigures } from '../../observe/record.js';
import {
  admitFallback,
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
import { upstreamHeaders, withoutHeader } from '../http/headers.js';
import { readHead, type RequestHead } from '../http/request-head.js';
import { closeSocket, sendEmpty, sendError, sendJson } from '../http/answers.js';
import type { Conn, Job } from './job.js';
import { chargedUsage } from '../openai/usage-meter.js';
import { LlmRequest } from '../openai/llm-request.js';
import type { PlaneContext } from './context.js';
import { RequestStart } from './request-start.js';
import { RETRY, shouldRetry } from './retry.js';
import { readWhileHeld, type Held } from './scale-from-zero.js';
import type { Queued } from './fair-queue.js';
import type { Chosen, Target, Variant } from './targets.js';
import { bodyForUndici, Diverted, UpstreamCall, type CallOwner } from './upstream-call.js';
import { bodyBudgetFull, type Reservation } from './body-budget.js';
import { Fallbacks, type FallbackReason } from './fallback.js';
import { BODY_TOO_LARGE, ClientGone, mapUpstreamError, tooLarge, unavailable } from './upstream-errors.js';
import { copyWith } from '../../same-shape.js';

/** The gateway ended the backend call itself (body timeout, a parse error in the body) and answers on its own. */
class EndedByGateway extends Error {
  readonly code = 'SERVEGATE_ENDED';
}

/**
 * Why nothing more is to be done: the gateway wrote its own answer, the client went away (or the shutdown deadline
 * ended it), or the exchange is over (recorded and released). Unset while the request is being served.
 */
type Ended = 'answered' | 'gone' | 'over';

export class Exchange extends RequestStart implements Job, Held, CallOwner, Queued {
  private ended: Ended | undefined;
  private head: RequestHead | undefined;
  /** Admitted for one deployment (once the OpenAI base URL's `model` is read, too); `route` says where it goes now. */
  private admission: Accepted | undefined;
  /** What an LLM request adds: its body's reading and edits, prompt estimate and key (LLM routes only). */
  private llm: LlmRequest | undefined;
  /** Where the request goes when its deployment fails before answering. */
  private fallbacks: Fallbacks | undefined;
  private body: Buffer | Readable | null = null;
  private bodyLength: number | undefined;
  /** Bytes of request body held in memory, in the gateway-wide budget (forward/body-budget.ts). */
  private room: Reservation | undefined;
  /** Stops reading a body being read whole. */
  private stopBody: (() => void) | undefined;
  /** The body was written whole to the backend and let go (no fallback could need it): it cannot be sent again. */
  private bodySent = false;
  private chosen: Chosen | undefined;
  private variant: Variant | undefined;
  /** The backend call of the current try. */
  private call: UpstreamCall | undefined;
  private attempts = 0;
  /**
   * performance.now() by which the answer's headers must have come: the first deployment's `timeoutSeconds` from its
   * first forward, for the whole chain of retries and fallbacks (each try gets what is left); 0 = not forwarded yet.
   */
  private deadlineAt = 0;
  /** performance.now() when a hold for scale from zero began (a hold does not count against the deadline). */
  private heldSince = 0;
  /** Waiting in the scale-from-zero queue for a first ready endpoint. */
  private held = false;
  /** Waiting in a saturated deployment's fair queue (fair-queue.ts), since `queuedSince`. */
  private queued = false;
  private queuedSince = 0;
  /** The route whose queue this request has passed (it does not queue again for it). */
  private dequeued: string | undefined;
  /** An endpoint with room, named by the fair queue that let this request go. */
  private roomAt: Target | undefined;
  /** Held with its body still coming: stops reading it and gives the body to forward. */
  private unhold: (() => Buffer | Readable) | undefined;
  private closeAfter = false;
  /** The body's idle and rate clocks (started with the request: the sweep reads them once a second). */
  private clock: BodyClock | undefined;

  constructor(
    ctx: PlaneContext,
    conn: Conn,
    req: IncomingMessage,
    private readonly res: ServerResponse,
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
    if (this.held) this.ctx.holds.remove(this);
    if (this.queued) this.ctx.queues?.remove(this);
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
    const head = (this.head = readHead(this.req, this.ctx.head));
    this.settle(this.admitHead(head, false, this.expectation), this.admitted);
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

  // ---- pick --------------------------------------------------------------------------------------------------------

  /** A backend address; `avoid`: the address of a try that failed to connect (the retry goes elsewhere if it can). */
  private pickPhase(avoid: string | undefined): void {
    const { ctx, route } = this;
    if (this.ended || !this.admission || !route) return;
    let chosen: Chosen | undefined;
    if (avoid !== undefined && this.chosen) {
      // The retry: the same backend (and variant), another address when it has one.
      const target = ctx.picker.pick(route, this.chosen.backend, avoid, this.llm?.prefix);
      chosen = target && copyWith(this.chosen, { target });
    } else if (!route.notReady) {
      if (this.dequeued !== route.id && this.waitTurn(route)) return;
      chosen = ctx.picker.choose(route, this.llm?.prefix);
      // Let go by the fair queue: to an endpoint with room, if the pick has none (§12's picker reads only the reports).
      const room = this.roomAt;
      this.roomAt = undefined;
      if (room && chosen && chosen.backend === route.backend && !ctx.queues!.hasRoom(chosen.target))
        chosen = copyWith(chosen, { target: room });
      if (chosen?.reason) ctx.metrics.endpointPick(route.project, route.deployment, chosen.reason, route);
    }
    if (chosen) return this.callPhase(chosen);
    if (avoid === undefined && route.holdMs) return this.hold(route);
    ctx.metrics.upstreamErrors.inc({ cause: route.notReady ? 'not_ready' : 'no_ready_endpoint' });
    if (this.fallback('no_endpoint')) return;
    this.refuse(unavailable(route));
  }

  /**
   * Fair queueing (SPEC §14): true when the request waits its turn in its saturated deployment's queue (dispatch goes
   * on), or was refused there (shed answers). Only a body held whole waits (LLM bodies are).
   */
  private waitTurn(route: Route): boolean {
    const queues = this.ctx.queues;
    if (!queues || route.kind !== 'llm' || !(this.body === null || Buffer.isBuffer(this.body))) return false;
    const key = this.key!;
    const at = queues.enter(route, this, {
      priority: key.priority ?? route.priority ?? 'standard',
      tenant: key.tenant ?? `${key.namespace}/${key.secretName ?? key.name}`,
      weight: key.weight ?? 1,
      bytes: Buffer.isBuffer(this.body) ? this.body.length : 0,
    });
    if (at === 'queued') {
      this.queued = true;
      this.queuedSince = performance.now();
    }
    // Straight on: where there is room, should the pick have none.
    if (at === undefined && route.kind === 'llm') this.roomAt = queues.roomiest(route);
    return at !== undefined;
  }

  /** Its turn in the fair queue: on to pick an endpoint (the wait does not count against the deadline). */
  dispatch(room: Target): void {
    if (!this.queued) return;
    this.queued = false;
    this.dequeued = this.route?.id;
    this.roomAt = room;
    if (this.deadlineAt) this.deadlineAt += performance.now() - this.queuedSince;
    this.guarded(this.pickPhase, undefined);
  }

  /** Refused by the fair queue: 429 or 503 `overloaded`. */
  shed(err: GatewayError): void {
    this.queued = false;
    this.guarded(this.refuse, err);
  }

  /**
   * Scale from zero: waits in the deployment's queue until an endpoint is ready (tryForward) or the hold ends. A body
   * still coming is read while it waits and counted as it arrives (bytes received, never bytes declared): past the
   * queue's byte bound the request is answered 503 at once.
   */
  private hold(route: Route): void {
    const body = this.body;
    const bytes = Buffer.isBuffer(body) ? body.length : 0;
    const full = this.ctx.holds.add(route, this, bytes, route.holdMs!);
    if (full) {
      this.ctx.metrics.upstreamErrors.inc({ cause: 'hold_queue_full' });
      return this.refuse(unavailable(route, 'hold_full'));
    }
    this.held = true;
    this.heldSince = performance.now();
    if (body && !Buffer.isBuffer(body)) {
      const room = (this.room ??= this.ctx.bodies.reservation());
      this.unhold = readWhileHeld(
        body,
        (n) => this.ctx.holds.grow(this, n) && room.resize(room.bytes + n),
        () => {
          this.ctx.metrics.upstreamErrors.inc({ cause: 'hold_queue_full' });
          this.refuse(unavailable(route, 'hold_full'));
        },
        () => this.refuse(tooLarge(this.ctx.maxBody), true),
      );
    }
  }

  /** Held: forwards now if the deployment (as the current table has it) has a ready endpoint. */
  tryForward(): boolean {
    const old = this.route;
    if (this.ended || !this.admission || !old) return true;
    const current = this.ctx.store.current().byPath.get(`${old.project}/${old.deployment}`);
    const route = current && current.id === old.id ? current : old;
    const chosen = route.notReady ? undefined : this.ctx.picker.choose(route, this.llm?.prefix);
    if (!chosen) return false;
    this.held = false;
    // A fallback held for scale from zero: the hold does not count against the chain's deadline (SPEC §10).
    if (this.deadlineAt) this.deadlineAt += performance.now() - this.heldSince;
    if (this.unhold) {
      const body = (this.body = this.unhold());
      if (Buffer.isBuffer(body)) this.bodyLength = body.length;
      this.unhold = undefined;
    }
    this.route = route;
    this.callPhase(chosen);
    return true;
  }

  /** Held as long as the deployment allows: 503 with Retry-After. */
  expire(): void {
    this.held = false;
    const route = this.route;
    if (this.ended || !this.admission || !route) return;
    this.ctx.metrics.upstreamErrors.inc({ cause: 'hold_timeout' });
    this.refuse(unavailable(route, 'hold_timeout'));
  }

  // ---- call --------------------------------------------------------------------------------------------------------

  private callPhase(chosen: Chosen): void {
    const { ctx, req, admission, route } = this;
    if (this.ended || !admission || !route) return;
    const target = chosen.target;
    this.chosen = chosen;
    if (chosen.variant && !this.variant) {
      this.variant = chosen.variant;
      this.answerHeaders.push('x-servegate-variant', chosen.variant);
    }
    if (route.fallbacks || this.fallbacks?.named(route))
      this.setExtra('x-servegate-deployment', `${route.project}/${route.deployment}`);
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
    this.unhold = undefined;
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

  /**
   * The next fallback deployment the key may use (SPEC §12), when this request can still go to one: nothing reached
   * the client, and the chain's deadline has not passed.
   */
  private nextFallback(): Route | undefined {
    const route = this.route;
    if (!this.admission || !route) return undefined;
    if (this.res.headersSent || this.bodySent || !(this.body === null || Buffer.isBuffer(this.body))) return undefined;
    if (!route.fallbacks && !this.fallbacks) return undefined;
    if (this.deadlineAt && performance.now() >= this.deadlineAt) return undefined;
    return (this.fallbacks ??= new Fallbacks()).peek(this.ctx.store.current(), route, this.key!);
  }

  /** Sends the request to the next fallback deployment; false when there is none. */
  private fallback(reason: FallbackReason): boolean {
    if (this.ended) return true;
    const to = this.nextFallback();
    if (!to) return false;
    const from = this.fallbacks!.take(this.route!, to);
    const ref = `${to.project}/${to.deployment}`;
    this.ctx.metrics.fallbacks.inc({ project: from.project, deployment: from.deployment, to: ref, reason });
    this.ctx.logger.info(
      { requestId: this.requestId, project: from.project, deployment: from.deployment, to: to.id, reason },
      'falling back',
    );
    const llm = this.llm;
    if (llm?.keepsBody && Buffer.isBuffer(this.body)) {
      // The edit of the deployment before goes first: one edited copy at a time (within what was reserved).
      this.body = null;
      const body = llm.forFallback(to)!;
      if (llm.decoded) this.head!.forward = withoutHeader(this.head!.forward, 'content-encoding');
      this.body = body;
      this.bodyLength = body.length;
    }
    this.route = to;
    this.chosen = undefined;
    this.attempts = 0;
    // The fallback's own per-minute limits, checked and charged as a direct call's (SPEC §9).
    this.settle(admitFallback(this.admission!, to, this.answerHeaders, this.ctx.admission), this.fallbackAdmitted);
    return true;
  }

  /** A fallback past its own limits is skipped like one that failed; the last one's 429 is the answer. */
  private fallbackAdmitted(x: Accepted | Refused): void {
    if (this.ended) return;
    if (!x.ok) {
      const route = this.route!;
      this.ctx.logger.info(
        { requestId: this.requestId, project: route.project, deployment: route.deployment, err: x.error.message },
        'fallback refused by its limits',
      );
      if (this.fallback('rate_limited')) return;
      // The refusal's own x-ratelimit-* lines replace those of the deployments before it.
      this.answerHeaders = withoutRateHeaders(this.answerHeaders);
      return this.refuse(x.error);
    }
    this.admission = x;
    this.answerHeaders = x.headers;
    this.pickPhase(undefined);
  }

  /** What the try being made may wait for answer headers: what is left of the chain's deadline (at least 1 ms). */
  private headersTimeout(route: Route): number {
    const now = performance.now();
    if (!this.deadlineAt) this.deadlineAt = now + route.timeoutMs;
    return Math.max(1, Math.ceil(this.deadlineAt - now));
  }

  callFailed(call: UpstreamCall, err: Error): void {
    if (this.ended === 'over' || this.ended === 'gone' || call !== this.call) return;
    // Answered by whoever ended it; or the answer was a 5xx/429 and a fallback deployment takes the request.
    if (err instanceof ClientGone || err instanceof EndedByGateway || err instanceof Diverted) return;
    const { ctx } = this;
    const route = this.route!;
    const code = (err as { code?: string }).code ?? '';
    const replayable = !this.bodySent && (this.body === null || Buffer.isBuffer(this.body));
    if (shouldRetry({ code, answerStarted: this.res.headersSent, replayable, attempts: this.attempts })) {
      // Nothing reached the backend: another try, on another address when there is one.
      const avoid = this.chosen?.target.origin.slice(7) ?? '';
      ctx.logger.debug({ requestId: this.requestId, err: code, target: avoid }, 'connect failed, retrying once');
      setTimeout(() => this.pickPhase(avoid), RETRY.delayMs);
      return;
    }
    if (this.res.headersSent) return this.cut(code === 'UND_ERR_BODY_TIMEOUT' ? 'stream_idle_timeout' : 'reset');
    if (code === BODY_TOO_LARGE) return this.refuse(tooLarge(ctx.maxBody), true);
    const mapped = mapUpstreamError(code, route, this.fallbacks?.firstRoute);
    ctx.metrics.upstreamErrors.inc({ cause: mapped.cause });
    if (this.fallback(code === 'UND_ERR_HEADERS_TIMEOUT' ? 'timeout' : 'connect')) return;
    ctx.logger.warn(
      {
        requestId: this.requestId,
        project: route.project,
        deployment: route.deployment,
        cause: mapped.cause,
        err: code || err.message,
      },
      'backend failed',
    );
    this.refuse(mapped.error);
  }

  /** A failure after the answer started: the connection is cut so the client sees an incomplete answer. */
  private cut(cause: string): void {
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

  /** Sets one header line of `extra` (replacing an earlier value). */
  private setExtra(name: string, value: string): void {
    for (let i = 0; i < this.answerHeaders.length; i += 2) {
      if (this.answerHeaders[i] === name) {
        this.answerHeaders[i + 1] = value;
        return;
      }
    }
    this.answerHeaders.push(name, value);
  }

  /** The gateway's own answer. `close`: the connection closes after it (a body not read, or not to be trusted). */
  private refuse(err: GatewayError, close = false): void {
    const res = this.res;
    if (this.ended || !res) return;
    if (res.headersSent || res.destroyed) {
      res.destroy();
      return;
    }
    this.ended = 'answered';
    if (this.held) {
      this.held = false;
      this.ctx.holds.remove(this);
    }
    if (this.queued) {
      this.queued = false;
      this.ctx.queues?.remove(this);
    }
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
    if (this.held) {
      this.held = false;
      this.ctx.holds.remove(this);
    }
    if (this.queued) {
      this.queued = false;
      this.ctx.queues?.remove(this);
    }
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

/** A flat [name, value, ...] list without the x-ratelimit-* and retry-after lines. */
function withoutRateHeaders(list: string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < list.length; i += 2)
    if (!list[i].startsWith('x-ratelimit-') && list[i] !== 'retry-after') out.push(list[i], list[i + 1]);
  return out;
}
