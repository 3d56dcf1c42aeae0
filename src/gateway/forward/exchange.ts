// One request from arrival to the end of its answer: admission, the body (checked or streamed), the backend call as
// an undici dispatch handler (chunks written as they arrive, back-pressure both ways), one retry when nothing reached
// the backend, the gateway's own errors, and exactly one access-log line and metric when it is over.
// A class rather than closures: one object is made per request, and it drops its references when it is over.
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Transform, type Readable } from 'node:stream';
import type { Dispatcher } from 'undici';
import type { Logger } from '../../log.js';
import type { RouteStore } from '../../routing/store.js';
import type { Route, RouteTable } from '../../routing/types.js';
import type { AccessLog } from '../../observe/access-log.js';
import { admit, type Accepted, type ByModel } from '../admit/pipeline.js';
import type { Conn, Job } from '../listen/connection.js';
import {
  ALLOWED_METHODS,
  isPreflightHead,
  preflightHeaderList,
  responseCorsList,
  type CorsPolicy,
} from '../admit/cors.js';
import type { Drain } from '../listen/drain.js';
import { gatewayError, type Dialect, type GatewayError } from '../http/errors.js';
import { clientRequestId, downstreamHeaders, upstreamHeaders } from '../http/headers.js';
import type { Metrics } from '../../observe/metrics.js';
import { decodeBody } from '../http/body-encoding.js';
import type { RequestTrace, Tracing } from '../../observe/tracing.js';
import type { AuthFailureLimiter } from '../../limits/auth-failures.js';
import type { Charge, LimitDecision, RequestLimits } from '../../limits/per-minute.js';
import { acceptByModel, modelRetrieve, modelsList, prepareBody } from '../openai/by-model.js';
import { isBinaryContentType, validateBody, type BodyCheck } from '../admit/kind-rules.js';
import type { RateLimiter } from '../../limits/per-second.js';
import { sendError, sendJson, closeSocket } from '../http/answers.js';
import { headProblem, readHead, type HeadOptions, type RequestHead } from '../http/request-head.js';
import {
  BODY_TOO_LARGE,
  ClientGone,
  CONNECT_FAILURES,
  mapUpstreamError,
  tooLarge,
  unavailable,
} from './upstream-errors.js';
import { upstreamReset, type Chosen, type Pools, type Target, type TargetPicker, type Variant } from './targets.js';
import type { Held, HoldQueues } from './scale-from-zero.js';
import { JsonUsageMeter, SseUsageMeter, type TokenUsage, type UsageMeter } from '../openai/usage-meter.js';

/** What every exchange shares: read-only settings and the services it calls. */
export interface PlaneContext {
  store: RouteStore;
  metrics: Metrics;
  logger: Logger;
  access: AccessLog | undefined;
  cors: CorsPolicy;
  limiter: RateLimiter;
  picker: TargetPicker;
  pools: Pools;
  drain: Drain;
  head: HeadOptions;
  maxBody: number;
  maxHeaders: number;
  streamIdleMs: number;
  bodyIdleMs: number;
  /** Set when tracing.otlpEndpoint is: a span per request (src/observe/tracing.ts). */
  tracing?: Tracing;
  /** Requests and tokens per minute per key and per deployment (SPEC §9). */
  limits: RequestLimits;
  /** Failed-authentication throttling per client address. */
  authFailures: AuthFailureLimiter;
  /** Requests waiting for a first ready endpoint (scale from zero). */
  holds: HoldQueues;
}

/** The gateway ended the backend call itself (body timeout, a parse error in the body) and answers on its own. */
class EndedByGateway extends Error {
  readonly code = 'SERVEGATE_ENDED';
}

const NO_BODY_STATUS = (s: number): boolean => s === 204 || s === 304 || (s >= 100 && s < 200);

export class Exchange implements Job, Dispatcher.DispatchHandler, Held {
  private readonly started = performance.now();
  private requestId = '';
  /** Tracing on: this request's server span. */
  private trace: RequestTrace | undefined;
  /** The token buckets this request passed, charged with the tokens its answer reports. */
  private charge: Charge | undefined;
  private head: RequestHead | undefined;
  private d: Accepted | undefined;
  /** A request on the OpenAI base URL until its `model` is read (then `d` is set like any other). */
  private byModel: ByModel | undefined;
  private table: RouteTable | undefined;
  /** The gateway asked the backend for usage the client did not ask for: it is taken out of the answer. */
  private stripUsage = false;
  /** LLM answers: reads usage and the first token's time as the bytes pass. */
  private meter: UsageMeter | undefined;
  private endAt = 0;
  /** The route and key name as far as admission got (for the metric and the log line of a refusal too). */
  private routeOf: Route | undefined;
  private keyName = '';
  private dialect: Dialect = 'kserve';
  private extra: string[] = [];
  private body: Buffer | Readable | null = null;
  private bodyLength: number | undefined;
  private target: Target | undefined;
  /** The backend (and canary variant) this request was sent to. */
  private chosen: Chosen | undefined;
  private variant: Variant | undefined;
  /** Waiting in the hold queue for a first ready endpoint. */
  private held = false;
  private attempt = 0;
  private abortUpstream: ((err?: Error) => void) | undefined;
  private abortReason: Error | undefined;
  private resumeUpstream: (() => void) | undefined;
  private gone = false;
  private over = false;
  /** The gateway's own answer was written: nothing else may be. */
  private answered = false;
  /** Counted in the in-flight gauge (from dispatch to the end of the backend call). */
  private inflight = false;
  private closeDelimited = false;
  private sse = false;
  private closeAfter = false;
  private error: string | undefined;
  private bytesOut = 0;
  // Body idle watch: the connection's bytes read at the last tick, and when they last moved.
  private seenBytes = -1;
  private seenAt = 0;
  private drainSince = 0;

  constructor(
    private readonly ctx: PlaneContext,
    private conn: Conn,
    private req: IncomingMessage,
    private res: ServerResponse,
    private readonly continueRequested: boolean,
    /** An Expect header other than 100-continue (Node's 'checkExpectation'): refused with 417. */
    private readonly expectation?: string,
  ) {}

  // ---- Job -------------------------------------------------------------------------------------------------------

  start(): void {
    this.res.once('close', this.onClose);
    // The body idle clock starts now: the sweep then fires between bodyIdleMs and bodyIdleMs + its 1 s period.
    this.seenBytes = this.conn.socket.bytesRead;
    this.seenAt = Date.now();
    try {
      this.admitAndForward();
    } catch (err) {
      this.ctx.logger.error({ err, url: this.req.url }, 'request handling failed');
      this.fail500();
    }
  }

  drop(): void {
    this.over = true;
    if (this.held) this.ctx.holds.remove(this);
    this.release();
  }

  tick(now: number): void {
    const req = this.req;
    if (!req || this.over || this.held) return;
    // Idle only when the client is the slow side: data waiting in the request's buffer means we are (back-pressure).
    if (!req.complete && !this.gone && !this.answered && req.readableLength === 0) {
      const read = this.conn.socket.bytesRead;
      if (read !== this.seenBytes) {
        this.seenBytes = read;
        this.seenAt = now;
      } else if (now - this.seenAt >= this.ctx.bodyIdleMs) {
        this.bodyTimedOut();
        return;
      }
    }
    // A client that stops reading its answer holds the backend as long as a stalled stream would, not longer.
    if (this.drainSince && now - this.drainSince >= this.ctx.streamIdleMs) {
      this.error = 'client stopped reading';
      this.abort(new ClientGone());
      this.res.destroy();
    }
  }

  /** Shutdown deadline: an event stream ends cleanly at an event boundary; anything else is cut. */
  deadline(): void {
    const res = this.res;
    if (this.over || !res) return;
    this.gone = true;
    this.abort(new ClientGone());
    if (res.headersSent && this.sse) res.end();
    else res.destroy();
  }

  /** Node's parser failed on this request's own body (bad chunk, ...): it is refused, never forwarded short. */
  interrupt(err: GatewayError): boolean {
    const req = this.req;
    if (this.over || !req || req.complete) return false;
    this.error = err.message;
    this.abort(new EndedByGateway(err.message));
    if (this.res.headersSent) this.res.destroy();
    else this.refuse(err, true);
    return true;
  }

  // ---- admission and body ----------------------------------------------------------------------------------------

  private admitAndForward(): void {
    const { ctx, req, res } = this;
    const head = (this.head = readHead(req, ctx.head));
    this.requestId = clientRequestId(head.requestId) ?? randomUUID();
    this.extra.push('x-request-id', this.requestId);
    this.trace = ctx.tracing?.start(head.method, pathOf(req.url), head.traceparent, head.tracestate, this.conn.client);

    // Framing and identity facts first: nothing about such a request can be trusted.
    const bad = headProblem(head, req, ctx.maxHeaders);
    if (bad) return this.refuse(bad, true);
    if (this.expectation !== undefined) {
      return this.refuse(
        gatewayError('expectation_failed', `Expect: ${this.expectation} is not supported (only 100-continue)`),
        true,
      );
    }
    if (head.method === 'TRACE' || head.method === 'TRACK') {
      // TRACE would reflect the request (cookies included) back: never forwarded.
      return this.refuse(
        gatewayError('method_not_allowed', `${head.method} is not allowed`, { allow: ALLOWED_METHODS }),
      );
    }

    if (isPreflightHead(head)) {
      const h = preflightHeaderList(ctx.cors, head.origin, head.acrHeaders);
      h.push('x-request-id', this.requestId, 'content-length', '0');
      if (ctx.drain.draining) h.push('connection', 'close');
      res.writeHead(204, h);
      res.end();
      return;
    }
    const cors = responseCorsList(ctx.cors, head.origin);
    if (cors) for (let i = 0; i < cors.length; i++) this.extra.push(cors[i]);

    const table = (this.table = ctx.store.current());
    const d = admit(
      {
        method: head.method,
        url: req.url ?? '/',
        host: head.authority,
        authorization: head.authorization,
        contentType: head.contentType,
        now: Date.now(),
      },
      table,
      ctx.limiter,
    );
    this.dialect = d.dialect;
    // A client address that failed authentication too often is refused whatever it sends now (SPEC §9).
    const client = clientAddress(this.conn.client, head, ctx.head.trustForwarded);
    const blocked = ctx.authFailures.blockedFor(client);
    if (blocked > 0) {
      ctx.metrics.rateLimited.inc({ scope: 'client', kind: 'auth_failures' });
      this.routeOf = d.route;
      const s = Math.ceil(blocked / 1000);
      return this.refuse(
        gatewayError('rate_limit_exceeded', `too many failed authentications from ${client}; retry after ${s} s`, {
          'retry-after': String(s),
        }),
      );
    }
    if (!d.ok) {
      if (d.authMetric) ctx.metrics.authFailures.inc({ reason: d.authMetric });
      if (d.authFailure) ctx.authFailures.failed(client);
      this.routeOf = d.route;
      this.keyName = d.key?.name ?? '';
      return this.refuse(d.error);
    }
    this.keyName = d.key.name;
    if (!d.byModel) {
      // Per-minute limits before the body is read; /openai/v1 checks them once `model` has picked the route.
      const specs = ctx.limits.specs(d.route, d.key);
      if (specs.length) return this.limited(ctx.limits.decide(specs), () => this.admitted(d, table));
    }
    this.admitted(d, table);
  }

  /** Applies a limit decision (now, or when the shared store answers), then goes on with `next`. */
  private limited(decision: LimitDecision | Promise<LimitDecision>, next: () => void): void {
    const apply = (dec: LimitDecision): void => {
      if (this.over || this.gone || this.answered) return;
      if (!dec.ok) {
        for (const s of dec.spent) this.ctx.metrics.rateLimited.inc(s);
        return this.refuse(dec.error);
      }
      for (const [k, v] of Object.entries(dec.headers)) this.extra.push(k, v);
      this.charge = dec.charge;
      next();
    };
    if (!(decision instanceof Promise)) return apply(decision);
    decision.then(apply, (err: unknown) => {
      this.ctx.logger.error({ err }, 'rate-limit check failed');
      this.fail500();
    });
  }

  private admitted(d: Accepted | ByModel, table: RouteTable): void {
    const { ctx, req, res } = this;
    const head = this.head!;
    let check: BodyCheck;
    if (d.byModel) {
      this.byModel = d;
      if (d.modelId !== undefined || d.rest === '/v1/models' || d.rest === '/v1/models/')
        return this.answerModels(d, table);
      if (isBinaryContentType(head.contentType)) {
        return this.refuse(
          gatewayError(
            'invalid_body',
            `a ${head.contentType} upload cannot be routed by "model" through /openai/v1: send it to the deployment's own URL (/v1/<project>/<deployment>/v1/...)`,
          ),
          true,
        );
      }
      check = 'json';
    } else {
      this.d = d;
      this.routeOf = d.route;
      check = d.check;
    }

    const declared = head.contentLength;
    if (declared !== undefined && declared > ctx.maxBody) return this.refuse(tooLarge(ctx.maxBody), true);
    if (this.continueRequested) res.writeContinue();

    const hasBody = head.chunked || (declared !== undefined && declared > 0);
    if (check === 'none') {
      this.body = !hasBody ? null : declared !== undefined ? req : limitStream(req, ctx.maxBody);
      this.bodyLength = hasBody ? declared : undefined;
      return this.dispatch(undefined);
    }
    if (!hasBody) return this.checked(Buffer.alloc(0));
    this.readWhole();
  }

  /** Reads a body that must be checked before forwarding (predictive and LLM JSON). */
  private readWhole(): void {
    const req = this.req;
    const max = this.ctx.maxBody;
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (c: Buffer): void => {
      size += c.length;
      if (size > max) {
        req.off('data', onData);
        req.off('end', onEnd);
        this.refuse(tooLarge(max), true);
        return;
      }
      chunks.push(c);
    };
    const onEnd = (): void => {
      this.checked(chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, size));
    };
    req.on('data', onData);
    req.on('end', onEnd);
  }

  private checked(buf: Buffer): void {
    if (this.over || this.gone || this.answered) return;
    const coding = this.head!.contentEncoding;
    if (coding === undefined || coding === 'identity' || buf.length === 0) return this.checkedPlain(buf, buf);
    decodeBody(buf, coding, this.ctx.maxBody, (err, plain) => {
      if (this.over || this.gone || this.answered) return;
      if (err) return this.refuse(err);
      this.checkedPlain(buf, plain!);
    });
  }

  /** `wire`: the body as sent; `plain`: decoded (the same buffer without a Content-Encoding). */
  private checkedPlain(wire: Buffer, plain: Buffer): void {
    if (this.byModel) return this.routeByModel(this.byModel, plain, wire !== plain);
    const invalid = validateBody(this.d!.check, plain);
    if (invalid) return this.refuse(invalid);
    // Checked decoded, forwarded as sent: the backend gets the client's bytes and their Content-Encoding.
    this.body = wire;
    this.bodyLength = wire.length;
    this.dispatch(undefined);
  }

  /** The OpenAI base URL: `model` picks the deployment; the body goes on with `model` rewritten (openai-base.ts). */
  private routeByModel(b: ByModel, buf: Buffer, decoded = false): void {
    const p = prepareBody(this.table!, b, buf);
    if (p instanceof Error) {
      if (p.code === 'model_forbidden') this.ctx.metrics.authFailures.inc({ reason: 'forbidden' });
      return this.refuse(p);
    }
    this.byModel = undefined;
    this.d = acceptByModel(b, p.route, b.search);
    this.routeOf = p.route;
    this.stripUsage = p.stripUsage;
    // The rewritten body goes on decoded: its Content-Encoding no longer applies.
    if (decoded) this.head!.forward = withoutHeader(this.head!.forward, 'content-encoding');
    this.body = p.body;
    this.bodyLength = p.body.length;
    const specs = this.ctx.limits.specs(p.route, b.key);
    if (specs.length) return this.limited(this.ctx.limits.decide(specs), () => this.dispatch(undefined));
    this.dispatch(undefined);
  }

  /** `GET /openai/v1/models` and `/models/<id>`: answered by the gateway from the route table. */
  private answerModels(b: ByModel, table: RouteTable): void {
    const method = this.head!.method;
    const unread = this.head!.chunked || (this.head!.contentLength ?? 0) > 0;
    if (method !== 'GET' && method !== 'HEAD') {
      return this.refuse(
        gatewayError('method_not_allowed', `${method} is not allowed on /openai/v1/models; use GET`, {
          allow: 'GET, HEAD',
        }),
        unread,
      );
    }
    const body = b.modelId !== undefined ? modelRetrieve(table, b.key, b.modelId) : modelsList(table, b.key);
    if (body instanceof Error) {
      if (body.code === 'model_forbidden') this.ctx.metrics.authFailures.inc({ reason: 'forbidden' });
      return this.refuse(body, unread);
    }
    this.answered = true;
    const closing = unread || this.ctx.drain.draining;
    if (closing) this.closeAfter = true;
    sendJson(this.res, 200, body, this.extra, closing, method === 'HEAD');
  }

  private bodyTimedOut(): void {
    const idle = this.ctx.bodyIdleMs / 1000;
    this.error = 'request body idle timeout';
    this.ctx.metrics.upstreamErrors.inc({ cause: 'client_body_timeout' });
    this.abort(new EndedByGateway('request body idle timeout'));
    if (this.res.headersSent) this.res.destroy();
    else this.refuse(gatewayError('request_timeout', `the request body sent no data for ${idle}s`), true);
  }

  // ---- the backend call --------------------------------------------------------------------------------------------

  private dispatch(avoid: string | undefined): void {
    const { ctx, d } = this;
    if (this.over || this.gone || this.answered || !d) return;
    const route = d.route;
    let chosen: Chosen | undefined;
    if (avoid !== undefined && this.chosen) {
      // The retry after a failed connect: the same backend (and variant), another address when it has one.
      const target = ctx.picker.pick(this.chosen.backend, avoid);
      chosen = target && { ...this.chosen, target };
    } else if (!route.notReady) {
      chosen = ctx.picker.choose(route);
    }
    if (chosen) return this.forward(chosen);
    if (avoid === undefined && route.holdMs) return this.hold(route);
    ctx.metrics.upstreamErrors.inc({ cause: route.notReady ? 'not_ready' : 'no_ready_endpoint' });
    this.refuse(unavailable(route));
  }

  /** Scale from zero: waits in the deployment's queue until an endpoint is ready (tryForward) or the hold ends. */
  private hold(route: Route): void {
    const full = this.ctx.holds.add(route, this, this.bodyLength ?? 0, route.holdMs!);
    if (full) {
      this.ctx.metrics.upstreamErrors.inc({ cause: 'hold_queue_full' });
      return this.refuse(unavailable(route, 'hold_full'));
    }
    this.held = true;
  }

  /** Held: forwards now if the deployment (as the current table has it) has a ready endpoint. */
  tryForward(): boolean {
    const d = this.d;
    if (this.over || this.gone || this.answered || !d) return true;
    const old = d.route;
    const current = this.ctx.store.current().byPath.get(`${old.project}/${old.deployment}`);
    const route = current && current.id === old.id ? current : old;
    const chosen = route.notReady ? undefined : this.ctx.picker.choose(route);
    if (!chosen) return false;
    this.held = false;
    d.route = this.routeOf = route;
    this.forward(chosen);
    return true;
  }

  /** Held as long as the deployment allows: 503 with Retry-After. */
  expire(): void {
    this.held = false;
    const d = this.d;
    if (this.over || this.gone || this.answered || !d) return;
    this.ctx.metrics.upstreamErrors.inc({ cause: 'hold_timeout' });
    this.refuse(unavailable(d.route, 'hold_timeout'));
  }

  private forward(chosen: Chosen): void {
    const { ctx, req, d } = this;
    if (this.over || this.gone || this.answered || !d) return;
    const route = d.route;
    const target = (this.target = chosen.target);
    this.chosen = chosen;
    if (chosen.variant && !this.variant) {
      this.variant = chosen.variant;
      this.extra.push('x-servegate-variant', chosen.variant);
    }
    const headers = upstreamHeaders(this.head!, {
      clientIp: this.conn.client,
      proto: this.conn.proto,
      requestId: this.requestId,
      project: route.project,
      deployment: route.deployment,
      keyName: d.key.name,
      backendAuthority: target.authority,
      trustForwarded: ctx.head.trustForwarded,
      contentLength: this.bodyLength,
      traceparent: this.trace?.traceparent,
      tracestate: this.trace?.tracestate,
    });
    this.ctx.metrics.inflightNow++;
    this.inflight = true;
    try {
      ctx.pools.get(target.origin).dispatch(
        {
          path: target.basePath + (route.pathPrefix ?? '') + d.upstreamPath,
          method: req.method as Dispatcher.HttpMethod,
          headers,
          body: this.body,
          headersTimeout: route.timeoutMs,
          bodyTimeout: ctx.streamIdleMs,
          idempotent: false,
        },
        this,
      );
    } catch (err) {
      this.onError(err as Error);
    }
  }

  onConnect(abort: (err?: Error) => void): void {
    this.abortUpstream = abort;
    if (this.abortReason) abort(this.abortReason);
  }

  onHeaders(status: number, raw: Buffer[], resume: () => void): boolean {
    if (status < 200) return true; // 1xx: interim answers are the gateway's business (100-continue), not passed on
    const res = this.res;
    if (this.gone || !res) return false;
    this.resumeUpstream = resume;
    const down = downstreamHeaders(raw, this.ctx.cors.enabled);
    const list = down.list;
    for (let i = 0; i < this.extra.length; i++) list.push(this.extra[i]);
    const sse = (this.sse = down.contentType !== undefined && down.contentType.startsWith('text/event-stream'));
    if (sse) {
      list.push('x-accel-buffering', 'no');
      if (!down.cacheControl) list.push('cache-control', 'no-cache');
    }
    if (this.ctx.drain.draining) list.push('connection', 'close');
    if (this.d!.route.kind === 'llm' && status >= 200 && status < 300 && this.req.method !== 'HEAD') {
      if (sse) {
        this.meter = new SseUsageMeter(this.stripUsage);
        // Taking the usage event out changes the length: the answer goes chunked instead.
        if (this.stripUsage && down.length)
          for (let i = list.length - 2; i >= 0; i -= 2) if (list[i] === 'content-length') list.splice(i, 2);
      } else if (down.contentType !== undefined && /^application\/(?:[\w.+-]*\+)?json\b/i.test(down.contentType)) {
        this.meter = new JsonUsageMeter();
      }
    }
    this.closeDelimited = !down.length && !down.chunked && !NO_BODY_STATUS(status) && this.req.method !== 'HEAD';
    res.writeHead(status, list);
    if (sse) res.flushHeaders();
    return true;
  }

  onData(data: Buffer): boolean {
    const res = this.res;
    if (this.gone || !res) return false;
    let chunk: Buffer | undefined = data;
    if (this.meter) {
      chunk = this.meter.push(data, performance.now());
      if (!chunk) return true;
    }
    this.bytesOut += chunk.length;
    if (res.write(chunk)) return true;
    this.drainSince = Date.now();
    res.once('drain', this.onDrain);
    return false;
  }

  private readonly onDrain = (): void => {
    this.drainSince = 0;
    this.resumeUpstream?.();
  };

  onComplete(trailers: string[] | null): void {
    if (this.over || !this.res) return;
    this.upstreamOver();
    this.endAt = performance.now();
    if (this.closeDelimited && upstreamReset()) {
      // The backend reset a close-delimited answer: the client must see it cut, never a clean end.
      return this.cut('reset');
    }
    if (trailers && trailers.length && this.res.chunkedEncoding) {
      const t: Array<[string, string]> = [];
      for (let i = 0; i < trailers.length; i += 2) t.push([String(trailers[i]), String(trailers[i + 1])]);
      this.res.addTrailers(t);
    }
    const held = this.meter?.end();
    if (held) {
      this.bytesOut += held.length;
      this.res.write(held);
    }
    this.res.end();
  }

  onError(err: Error): void {
    if (this.over || !this.res) return;
    this.upstreamOver();
    const { ctx, d } = this;
    const route = d!.route;
    if (this.gone || err instanceof ClientGone) return;
    if (err instanceof EndedByGateway) return; // answered by whoever ended it
    const code = (err as { code?: string }).code ?? '';
    if (
      !this.res.headersSent &&
      CONNECT_FAILURES.has(code) &&
      (this.body === null || Buffer.isBuffer(this.body)) &&
      this.attempt < 1
    ) {
      // Nothing reached the backend: one more try, on another endpoint when there is one.
      ctx.logger.debug(
        { requestId: this.requestId, err: code, target: this.target?.origin },
        'connect failed, retrying once',
      );
      this.attempt++;
      const avoid = this.target?.origin.slice(7) ?? '';
      setTimeout(() => this.dispatch(avoid), 25);
      return;
    }
    if (this.res.headersSent) return this.cut(code === 'UND_ERR_BODY_TIMEOUT' ? 'stream_idle_timeout' : 'reset');
    if (code === BODY_TOO_LARGE) return this.refuse(tooLarge(ctx.maxBody), true);
    const mapped = mapUpstreamError(code, route);
    ctx.metrics.upstreamErrors.inc({ cause: mapped.cause });
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
    const route = this.d!.route;
    this.ctx.metrics.upstreamErrors.inc({ cause });
    this.ctx.logger.warn(
      { requestId: this.requestId, project: route.project, deployment: route.deployment, cause },
      'backend answer ended early',
    );
    this.error = `backend answer cut (${cause})`;
    this.res.destroy();
  }

  private upstreamOver(): void {
    if (this.inflight) {
      this.inflight = false;
      this.ctx.metrics.inflightNow--;
    }
  }

  /** Ends the backend call now, or as soon as it starts. */
  private abort(err: Error): void {
    this.abortReason ??= err;
    const a = this.abortUpstream;
    if (a) a(err);
  }

  // ---- answers and the end -------------------------------------------------------------------------------------------

  /** The gateway's own answer. `close`: the connection closes after it (a body not read, or not to be trusted). */
  private refuse(err: GatewayError, close = false): void {
    const res = this.res;
    if (this.over || !res || this.answered) return;
    if (res.headersSent || res.destroyed) {
      res.destroy();
      return;
    }
    this.answered = true;
    // A body not read (or not yet sent, waiting for 100-continue) must not be taken for the next request.
    const unread = !this.req.complete && (this.head?.chunked || (this.head?.contentLength ?? 0) > 0);
    const closing = close || unread || this.ctx.drain.draining;
    if (closing) this.closeAfter = true;
    this.error = err.message;
    sendError(res, err, this.dialect, this.extra, closing);
  }

  private fail500(): void {
    const res = this.res;
    if (!res || res.headersSent || res.destroyed) {
      res?.destroy();
      return;
    }
    this.refuse(gatewayError('internal_error', 'internal gateway error'), true);
  }

  /** The answer is complete, or the client is gone: record it once, free the turn. */
  private readonly onClose = (): void => {
    if (this.over) return;
    const { res, req } = this;
    if (this.held) {
      this.held = false;
      this.ctx.holds.remove(this);
    }
    if (!res.writableFinished) {
      this.gone = true;
      this.abort(new ClientGone());
      if (!this.error) this.error = 'client closed the connection';
      if (!this.res.headersSent) this.ctx.metrics.upstreamErrors.inc({ cause: 'client_abort' });
    }
    this.upstreamOver();
    this.over = true;
    this.record(!res.writableFinished && !res.headersSent ? 499 : res.statusCode);
    if (this.closeAfter && !req.complete) closeSocket(this.conn.socket);
    this.conn.done(this);
    this.release();
  };

  private record(status: number): void {
    const usage = this.meter?.usage;
    if (this.charge && usage) this.ctx.limits.charge(this.charge, usage.prompt + usage.completion);
    if (this.trace) {
      if (this.routeOf) this.trace.route(this.routeOf.project, this.routeOf.deployment);
      this.trace.end(status, this.error);
    }
    recordAnswer(this.ctx, {
      req: this.req,
      client: this.conn.client,
      requestId: this.requestId,
      route: this.routeOf,
      keyName: this.keyName,
      status,
      started: this.started,
      upstream: this.target?.origin.slice(7) ?? '',
      bytesIn: this.bodyLength ?? 0,
      bytesOut: this.bytesOut,
      error: this.error,
      llm: this.meter ? llmFigures(this.meter, this.started, this.endAt) : undefined,
      variant: this.variant,
    });
  }

  /** Drops the references to the request's objects: undici may keep a finished handler queued for a while. */
  private release(): void {
    const self = this as unknown as Record<string, unknown>;
    self.req =
      self.res =
      self.body =
      self.conn =
      self.d =
      self.head =
      self.target =
      self.abortUpstream =
      self.resumeUpstream =
        undefined;
    self.byModel = self.table = self.meter = self.trace = self.charge = undefined;
  }
}

export interface Answer {
  req: IncomingMessage;
  client: string;
  requestId: string;
  route: Route | undefined;
  keyName: string;
  status: number;
  /** performance.now() at arrival. */
  started: number;
  upstream: string;
  bytesIn: number;
  bytesOut: number;
  error: string | undefined;
  /** LLM answers that completed: what their usage and timing said. */
  llm?: LlmFigures;
  /** Deployments with a canary: the variant that answered (none when the gateway answered before choosing). */
  variant?: Variant;
}

export interface LlmFigures {
  tokens: TokenUsage | undefined;
  /** Seconds from arrival to the first token. */
  ttft: number | undefined;
  /** Seconds per output token after the first (streams). */
  tpot: number | undefined;
}

/**
 * TTFT: to the first data event of a stream; for a non-streamed answer, to its first byte when it reports generated
 * tokens (an embedding has no first token). Time per output token: streams that completed (`endAt`, else 0) with
 * more than one completion token. An answer cut short gives what it reported before it ended.
 */
function llmFigures(m: UsageMeter, started: number, endAt: number): LlmFigures {
  const tokens = m.usage;
  const first = m.firstAt && (m.streamed || (tokens !== undefined && tokens.completion > 0)) ? m.firstAt : 0;
  const ttft = first ? (first - started) / 1000 : undefined;
  const tpot =
    m.streamed && first && endAt && tokens && tokens.completion > 1
      ? (endAt - first) / 1000 / (tokens.completion - 1)
      : undefined;
  return { tokens, ttft, tpot };
}

/** The one place an answered request is counted and logged (plain requests and upgrades). */
export function recordAnswer(ctx: PlaneContext, a: Answer): void {
  const seconds = (performance.now() - a.started) / 1000;
  const project = a.route?.project ?? '';
  const deployment = a.route?.deployment ?? '';
  ctx.metrics.observeRequest(project, deployment, a.status, seconds, a.variant);
  const llm = a.llm;
  if (llm && (llm.tokens || llm.ttft !== undefined))
    ctx.metrics.observeLlm(project, deployment, a.keyName, llm.tokens, llm.ttft, llm.tpot);
  const access = ctx.access;
  if (!access) return;
  const url = a.req.url ?? '/';
  const q = url.indexOf('?');
  access.log({
    requestId: a.requestId,
    method: a.req.method ?? '',
    path: q === -1 ? url : url.slice(0, q),
    status: a.status,
    ms: Math.round(seconds * 10000) / 10,
    project,
    deployment,
    key: a.keyName,
    client: a.client,
    upstream: a.upstream,
    bytesIn: a.bytesIn,
    bytesOut: a.bytesOut,
    error: a.error,
    promptTokens: llm?.tokens?.prompt,
    completionTokens: llm?.tokens?.completion,
    ttftMs: llm?.ttft !== undefined ? Math.round(llm.ttft * 10000) / 10 : undefined,
  });
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

/** A flat [name, value, ...] list without the lines named `name` (lower case). */
function withoutHeader(list: string[], name: string): string[] {
  const out: string[] = [];
  for (let i = 0; i < list.length; i += 2) if (list[i] !== name) out.push(list[i], list[i + 1]);
  return out;
}

/** The path of a request target, without its query (span names and attributes never carry query strings). */
export function pathOf(url: string | undefined): string {
  const u = url ?? '/';
  const q = u.indexOf('?');
  return q === -1 ? u : u.slice(0, q);
}

/** The address failed-authentication throttling counts: the peer, or behind a trusted proxy the last X-Forwarded-For hop. */
export function clientAddress(peer: string, head: RequestHead, trustForwarded: boolean): string {
  if (!trustForwarded || !head.xff) return peer;
  const last = head.xff.slice(head.xff.lastIndexOf(',') + 1).trim();
  return last || peer;
}
