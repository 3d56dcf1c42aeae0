// One request from arrival to the end of its answer: admit → body → pick → call → answer → record (docs/gateway.md).
// The steps are its base classes': request-start.ts (start, record; shared with upgrades), request-body.ts, and
// next-target.ts (the pick and every later target); openai/llm-request.ts is what an LLM request adds. One object.
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import type { Dispatcher } from 'undici';
import type { Route } from '../../routing/types.js';
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
import { BODY_RATE_WINDOW_MS } from '../http/body-clock.js';
import { gatewayError, GatewayError } from '../http/errors.js';
import { setHeader, withoutHeader } from '../http/headers.js';
import { CONTINUE, expectationOf, readHead } from '../http/request-head.js';
import { breakStream, closeSocket, sendEmpty, sendError, sendJson } from '../http/answers.js';
import { chargedUsage } from '../openai/usage-meter.js';
import { LlmRequest } from '../openai/llm-request.js';
import { copyWith } from '../../same-shape.js';
import type { Conn, Job } from './job.js';
import { NextTarget } from './next-target.js';
import type { Chosen } from './targets.js';
import { bodyForUndici, Diverted, LET_GO_MIN, UpstreamCall, type CallOwner } from './upstream-call.js';
import { BODY_TOO_LARGE, ClientGone, tooLarge } from './upstream-errors.js';

/** The gateway ended the backend call itself (body timeout, a parse error in the body) and answers on its own. */
class EndedByGateway extends Error {
  readonly code = 'SERVEGATE_ENDED';
}

export class Exchange extends NextTarget implements Job, CallOwner {
  constructor(
    conn: Conn,
    protected readonly res: ServerResponse,
  ) {
    super(conn);
  }

  /** The request the answer is for (Node keeps it on the answer). */
  protected get req(): IncomingMessage {
    return this.res.req;
  }

  start(): void {
    (this.res as Answer)[kExchange] = this;
    this.res.on('close', answerClosed);
    this.startClock();
    this.guarded(this.admitPhase, undefined);
  }

  drop(): void {
    this.stopWaiting();
    this.ended = 'over';
    this.release();
  }

  tick(now: number): void {
    if (this.ended) return;
    // A held request's body is timed too.
    const late = this.bodyLate(now);
    if (late) return this.bodyTimedOut(late);
    // A client that stops reading holds the backend as long as a stalled stream would, not longer.
    const since = this.call?.drainSince;
    if (since && now - since >= this.ctx.streamIdleMs) {
      this.error = 'client stopped reading';
      this.call!.abort(new ClientGone());
      this.res.destroy();
    }
  }

  /** Shutdown deadline: the answer is cut, an event stream after one last event (SPEC §6). */
  deadline(): void {
    const res = this.res;
    if (this.ended === 'over') return;
    this.ended = 'gone';
    const sse = this.call?.sse === true;
    this.call?.abort(new ClientGone());
    this.error = 'answer cut at the shutdown deadline';
    if (sse && res.headersSent)
      this.breakOff('the gateway is shutting down: the answer is incomplete', 'shutting_down');
    else res.destroy();
  }

  /** Node's parser failed on this request's own body: refused, never forwarded short. */
  interrupt(err: GatewayError): boolean {
    if (this.ended === 'over' || this.req.complete) return false;
    this.error = err.message;
    this.call?.abort(new EndedByGateway(err.message));
    if (this.res.headersSent) this.res.destroy();
    else this.refuse(err, true);
    return true;
  }

  private admitPhase(): void {
    const head = readHead(this.req, this.ctx.head);
    const expectation = expectationOf(head, this.req);
    this.settle(this.admitHead(head, false, expectation === CONTINUE ? undefined : expectation), this.admitted);
  }

  private admitted(decided: Admission): void {
    if (this.ended) return;
    if (decided.kind === 'preflight') {
      decided.headers.push('x-request-id', this.requestId);
      return sendEmpty(this.res, 204, decided.headers, this.ctx.drain.draining);
    }
    this.took(decided);
    if (!decided.ok) return this.refuse(decided.error, decided.close);
    if (decided.kind === 'by-model') return this.baseUrlPhase(decided);
    if (decided.route.kind === 'llm') this.llm = new LlmRequest();
    this.bodyPhase(decided.check === 'none', this.continueAsked());
  }

  /** Expect: 100-continue, answered once the request is admitted. */
  private continueAsked(): boolean {
    return expectationOf(this.head!, this.req) === CONTINUE;
  }

  /** The OpenAI base URL before `model` is read: the model list is the gateway's own answer. */
  private baseUrlPhase(base: ByModel): void {
    const head = this.head!;
    const llm = (this.llm = new LlmRequest());
    const models = llm.models(this.ctx.store.current(), base, head.method);
    const unread = head.chunked || (head.contentLength ?? 0) > 0;
    if (models instanceof Error) return this.refuseModel(models, unread);
    if (models !== undefined) {
      this.ended = 'answered';
      const closing = unread || this.ctx.drain.draining;
      return sendJson(this.res, 200, models, this.answerHeaders, closing, head.method === 'HEAD');
    }
    const upload = llm.unroutable(head.contentType, isBinaryContentType(head.contentType));
    if (upload) return this.refuse(upload, true);
    this.bodyPhase(false, this.continueAsked(), base);
  }

  protected bodyChecked(wire: Buffer, plain: Buffer, base: ByModel | undefined): void {
    if (base) return this.routeByModel(base, wire, plain);
    const admission = this.admission!;
    const llm = this.llm;
    if (llm?.reads(admission, plain)) {
      const refused = llm.checked(this.ctx.store.current(), admission, this.head!.contentType ?? '', wire, plain);
      if (refused) return this.refuseModel(refused);
    } else {
      const invalid = validateBody(admission.check, plain);
      if (invalid) return this.refuse(invalid);
    }
    // Checked decoded, forwarded as sent, with its Content-Encoding.
    this.holdBody(wire, this.llm?.keepsBody === true);
    this.pickPhase(undefined);
  }

  /** The OpenAI base URL: `model` names the deployment, whose limits apply now; the body goes on rewritten. */
  private routeByModel(base: ByModel, wire: Buffer, plain: Buffer): void {
    const llm = this.llm!;
    const route = llm.route(this.ctx.store.current(), base, this.head!.contentType, plain);
    if (route instanceof Error) return this.refuseModel(route);
    this.route = route;
    const body = llm.routed(base, route, wire, plain);
    if (body instanceof Error) return this.refuse(body);
    if (llm.decoded) this.head!.forward = withoutHeader(this.head!.forward, 'content-encoding');
    this.holdBody(body, llm.keepsBody);
    this.settle(admitModel(base, route, base.search, this.ctx.admission), this.modelAdmitted);
  }

  private modelAdmitted(decided: Accepted | Refused): void {
    if (this.ended) return;
    if (!decided.ok) return this.refuse(decided.error, decided.close);
    // The deployment's rate-limit lines are merged into admission's.
    this.answerHeaders = ['x-request-id', this.requestId, ...decided.headers];
    this.decision = decided;
    this.pickPhase(undefined);
  }

  /** A refused `model` counts as a failed authorisation where admission says so (SPEC §9). */
  private refuseModel(err: GatewayError, close = false): void {
    modelRefused(err, this.clientOf(this.head!), this.ctx.admission);
    this.refuse(err, close);
  }

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

  protected callPhase(chosen: Chosen, attempt: number): void {
    const { ctx, req, admission, route } = this;
    if (this.ended || !admission || !route) return;
    const target = chosen.target;
    if (chosen.variant) setHeader(this.answerHeaders, 'x-servegate-variant', chosen.variant);
    // A fallback without a canary: the answer names no variant (the deployment before may have named one).
    else if (this.inFallback()) this.answerHeaders = withoutHeader(this.answerHeaders, 'x-servegate-variant');
    if (this.namesDeployment(route))
      setHeader(this.answerHeaders, 'x-servegate-deployment', `${route.project}/${route.deployment}`);
    const headers = this.headersFor(route, target, route.kind === 'llm', this.body?.length);
    const head = req.method === 'HEAD';
    const deadlineAt = this.deadlineFor(route);
    const call = (this.call = new UpstreamCall(
      this,
      {
        res: this.res,
        extra: this.answerHeaders,
        meter: route.kind === 'llm' && !head,
        stripUsage: this.llm?.stripUsage ?? false,
        stripCors: ctx.cors.enabled,
        drain: ctx.drain,
        head,
      },
      chosen,
      attempt,
      ctx.metrics,
      ctx.pools,
      ctx.picker,
    ));
    call.deadlineAt = deadlineAt;
    this.dispatchTo(
      target,
      {
        path: target.basePath + (route.pathPrefix ?? '') + admission.upstreamPath,
        method: req.method as Dispatcher.HttpMethod,
        headers,
        body: bodyForUndici(this.bodyData, this.letsGo(route) ? () => this.bodyWritten(call) : undefined),
        headersTimeout: Math.max(1, Math.ceil(deadlineAt - performance.now())),
        bodyTimeout: ctx.streamIdleMs,
        idempotent: false,
      },
      call,
    );
  }

  /** A body undici lets go of once written (upstream-call.ts's SentOnce): no closure for any other. */
  private letsGo(route: Route): boolean {
    const body = this.bodyData;
    // A fallback's own list is not followed, the first deployment's is: on a fallback, the rest of it may need the body.
    return !route.fallbacks && !this.inFallback() && Buffer.isBuffer(body) && body.length >= LET_GO_MIN;
  }

  /** Written whole, with no fallback to need it again: let go now, not when a minutes-long answer ends. */
  private bodyWritten(call: UpstreamCall): void {
    const body = this.body;
    if (call !== this.call || !body || !Buffer.isBuffer(body.data)) return;
    body.data = null;
    this.letGoOfBody();
  }

  /** The backend's answer is on its way: what only a retry, a fallback or the gateway's own answer needs goes now. */
  answering(call: UpstreamCall): void {
    if (call !== this.call) return;
    // Node keeps the client's lines (the API key among them) as long as the request lasts; nothing reads them now.
    this.req.rawHeaders = NO_LINES;
    this.req.headers = NO_HEADERS;
    // Node builds it from rawHeaders on first read, with the old count of lines.
    this.req.headersDistinct = NO_DISTINCT;
    this.head = undefined;
    if (this.body) this.body.data = null;
    this.llm?.letGo();
    this.noOtherTarget();
    this.answerHeaders = [];
    this.letGoOfBody();
  }

  callEnded(_call: UpstreamCall, cut: string | undefined): void {
    if (cut) this.cut(cut);
  }

  /** The backend answered 5xx or 429, nothing sent yet: true when a fallback takes the request instead. */
  divert(call: UpstreamCall, status: number): boolean {
    if (call !== this.call || this.ended || !this.nextFallback()) return false;
    const reason = status === 429 ? '429' : '5xx';
    setImmediate(() => this.fallback(reason));
    return true;
  }

  callFailed(call: UpstreamCall, err: Error): void {
    if (this.ended === 'over' || this.ended === 'gone' || call !== this.call) return;
    if (err instanceof ClientGone || err instanceof EndedByGateway || err instanceof Diverted) return;
    const code = (err as { code?: string }).code ?? '';
    if (this.retried(code)) return;
    if (this.res.headersSent) return this.cut(code === 'UND_ERR_BODY_TIMEOUT' ? 'stream_idle_timeout' : 'reset');
    if (code === BODY_TOO_LARGE) return this.refuse(tooLarge(this.ctx.maxBody), true);
    this.unreached(code, err);
  }

  protected cut(cause: string): void {
    const route = this.route!;
    this.ctx.metrics.upstreamErrors.inc({ cause });
    this.ctx.logger.warn(
      { requestId: this.requestId, project: route.project, deployment: route.deployment, cause },
      'backend answer ended early',
    );
    this.error = `backend answer cut (${cause})`;
    if (!this.call?.sse) return void this.res.destroy();
    const message =
      cause === 'stream_idle_timeout'
        ? `the backend sent nothing for ${this.ctx.streamIdleMs / 1000}s: the answer is incomplete`
        : 'the backend broke off its answer: the answer is incomplete';
    this.breakOff(message, cause);
  }

  /** An event stream ends with one last event in the route's dialect, so that an SDK raises an error. */
  private breakOff(message: string, code: string): void {
    const res = this.res;
    if (!res.destroyed && res.writable) breakStream(res, this.dialect, message, code);
    else res.destroy();
  }

  /** The gateway's own answer. `close`: the connection closes after it (a body not read, or not to be trusted). */
  protected refuse(err: GatewayError, close = false): void {
    const { res, req, head } = this;
    if (this.ended) return;
    if (res.headersSent || res.destroyed) return void res.destroy();
    this.ended = 'answered';
    this.stopWaiting();
    // A body not read (or waiting for 100-continue) must not be taken for the next request.
    const unread = !req.complete && (head?.chunked || (head?.contentLength ?? 0) > 0);
    const closing = close || unread || this.ctx.drain.draining;
    if (unread) {
      // The socket lingers after the answer, so that a reset does not erase it.
      this.conn.lastAnswer();
      // A piped body is unpiped and read on: Node drops an unread body only when nothing consumed it.
      req.unpipe();
      req.resume();
    }
    this.error = err.message;
    this.letGoOfBody();
    sendError(res, err, this.dialect, this.answerHeaders, closing);
  }

  protected internalError(): void {
    const res = this.res;
    if (res.headersSent || res.destroyed) return void res.destroy();
    this.refuse(gatewayError('internal_error', 'internal gateway error'), true);
  }

  closed(): void {
    if (this.ended === 'over') return;
    const { res, req, call } = this;
    // The gateway's own answer to a request whose body is still coming: the connection closes after it (refuse).
    const closeAfter = this.ended === 'answered' && !req.complete;
    this.stopWaiting();
    if (!res.writableFinished) {
      this.ended = 'gone';
      call?.abort(new ClientGone());
      if (!this.error) this.error = 'client closed the connection';
      if (!res.headersSent) this.ctx.metrics.upstreamErrors.inc({ cause: 'client_abort' });
    }
    this.ended = 'over';
    this.record(!res.writableFinished && !res.headersSent ? 499 : res.statusCode);
    if (closeAfter) closeSocket(this.conn.socket);
    this.conn.done(this);
    this.release();
  }

  private record(status: number): void {
    const { call, admission } = this;
    const chosen = call?.chosen;
    const meter = call?.meter;
    // Reported usage, raised to what the gateway saw when that is more or no report came.
    const charged = meter && chargedUsage(meter, this.llm?.promptEstimate ?? 0);
    const usage = charged?.tokens;
    if (admission?.charge && usage) this.ctx.perMinute.charge(admission.charge, usage.prompt + usage.completion);
    // Budgets are charged at the prices of the deployment that answered (SPEC §14).
    if (admission?.budget && usage)
      this.ctx.admission.budgets?.charge(admission.budget, usage.prompt, usage.completion, this.route!.pricing);
    const llm = meter
      ? copyWith(llmFigures(meter, this.started, call.endAt, usage), {
          estimated: charged?.estimated,
          reported: charged?.reported,
        })
      : undefined;
    const upstream = chosen?.target.origin.slice(7) ?? '';
    this.recordAs(status, upstream, this.body?.length ?? 0, call?.bytesOut ?? 0, chosen?.reason, llm, chosen?.variant);
  }

  /** undici may keep a finished handler queued for a while: the call lets go of this exchange. */
  private release(): void {
    this.call?.release();
    this.letGoOfBody();
  }
}

/** Shared, read by nobody: what an answering request's header lines and headers become. */
const NO_LINES: string[] = Object.freeze([]) as unknown as string[];
const NO_HEADERS: IncomingHttpHeaders = Object.freeze({});
const NO_DISTINCT: NodeJS.Dict<string[]> = Object.freeze({});

/** The exchange on its answer: one shared 'close' listener instead of one per request. */
const kExchange = Symbol('servegate.exchange');
type Answer = ServerResponse & { [kExchange]?: Exchange };

function answerClosed(this: Answer): void {
  const exchange = this[kExchange];
  this[kExchange] = undefined;
  exchange?.closed();
}
