// The start and end every request shares, plain (exchange.ts) or an upgrade (websocket.ts): head → facts → the
// admission decision settled → what it gives the request; a trace span and one access-log line at the end.
// A base class so that neither adds an object per request for it.
import type { IncomingMessage } from 'node:http';
import type { Dispatcher } from 'undici';
import type { ApiKeyRecord, Route } from '../../routing/types.js';
import type { RequestTrace } from '../../observe/tracing.js';
import { recordAnswer, type LlmFigures } from '../../observe/record.js';
import { admit, type Accepted, type Admission } from '../admit/pipeline.js';
import type { Dialect } from '../http/errors.js';
import { clientRequestId, upstreamHeaders } from '../http/headers.js';
import { pathOf } from '../http/path.js';
import { newRequestId } from '../http/request-id.js';
import { clientAddress, headProblem, type RequestHead } from '../http/request-head.js';
import type { Conn } from './job.js';
import type { PlaneContext } from './context.js';
import type { Target, Variant } from './targets.js';

/** Every decision of admission but a preflight's (answered at once). */
export type Decision = Exclude<Admission, { kind: 'preflight' }>;

export abstract class RequestStart {
  protected readonly started = performance.now();
  protected requestId = '';
  protected trace: RequestTrace | undefined;
  protected head: RequestHead | undefined;
  /** Where the request goes now (a fallback's, once taken); for a refusal, as far as admission got. */
  protected route: Route | undefined;
  /** Admission's decision as it stands: the model's or a fallback's replaces the first once they pass. */
  protected decision: Decision | undefined;
  /** Lines every answer of this request carries: request id, CORS, rate-limit, variant. */
  protected answerHeaders: string[] = [];
  protected error: string | undefined;

  constructor(protected readonly conn: Conn) {}

  protected abstract readonly req: IncomingMessage;

  /** The connection's data plane. */
  protected get ctx(): PlaneContext {
    return this.conn.ctx;
  }

  /** The key admission found, also for the log line of a refusal. */
  protected get key(): ApiKeyRecord | undefined {
    return this.decision?.key;
  }

  protected get dialect(): Dialect {
    return this.decision?.dialect ?? 'kserve';
  }

  /** Admitted for one deployment (for the OpenAI base URL, once `model` is read). */
  protected get admission(): Accepted | undefined {
    const decision = this.decision;
    return decision?.kind === 'route' ? decision : undefined;
  }

  /** A throw in a step, or a limit store that failed: the gateway's fault. */
  protected abstract internalError(): void;

  /** The request id and trace, then admission's decision on the head's facts. `upgrade`: a websocket. */
  protected admitHead(head: RequestHead, upgrade: boolean, expectation?: string): Admission | Promise<Admission> {
    const { ctx, req } = this;
    this.head = head;
    this.requestId = clientRequestId(head.requestId) ?? newRequestId();
    this.answerHeaders.push('x-request-id', this.requestId);
    this.trace = ctx.tracing?.start(head.method, pathOf(req.url), head.traceparent, head.tracestate, this.conn.client);
    return admit(
      {
        method: head.method,
        url: req.url ?? '/',
        host: head.authority,
        authorization: head.authorization,
        contentType: upgrade ? undefined : head.contentType,
        now: Date.now(),
        client: this.clientOf(head),
        origin: head.origin,
        preflight: !upgrade && head.method === 'OPTIONS' && !!head.origin && head.acrMethod,
        acrHeaders: upgrade ? undefined : head.acrHeaders,
        headProblem: headProblem(head, req, ctx.maxHeaders),
        expectation,
        upgrade,
      },
      ctx.admission,
    );
  }

  /** The address failed authentications and tunnels count against (the peer, or the trusted X-Forwarded-For hop). */
  protected clientOf(head: RequestHead): string {
    return clientAddress(this.conn.client, head, this.ctx.head.trustForwarded);
  }

  /** Goes on with `step` now, or when the shared limit store answers. */
  protected settle<T>(decision: T | Promise<T>, step: (this: this, decided: T) => void): void {
    if (!(decision instanceof Promise)) return step.call(this, decision);
    decision.then(
      (decided) => this.guarded(step, decided),
      (err: unknown) => {
        this.ctx.logger.error({ err }, 'rate-limit check failed');
        this.internalError();
      },
    );
  }

  /** Runs a step; a throw in it is logged and answered 500. */
  protected guarded<T>(step: (this: this, arg: T) => void, arg: T): void {
    try {
      step.call(this, arg);
    } catch (err) {
      this.ctx.logger.error({ err, url: this.req.url }, 'request handling failed');
      this.internalError();
    }
  }

  /** What a decision other than a preflight gives the request: its answer lines, dialect, deployment and key. */
  protected took(decided: Decision): void {
    const lines = decided.headers;
    for (let i = 0; i < lines.length; i++) this.answerHeaders.push(lines[i]);
    this.decision = decided;
    if (decided.kind !== 'by-model') this.route = decided.route;
  }

  /** The backend's header list (http/headers.ts). `identity`: the answer is read (LLM usage), so asked uncompressed. */
  protected headersFor(route: Route, target: Target, identity: boolean, contentLength?: number): string[] {
    const { conn, trace } = this;
    return upstreamHeaders(this.head!, {
      clientIp: conn.client,
      proto: conn.proto,
      requestId: this.requestId,
      project: route.project,
      deployment: route.deployment,
      keyName: this.key!.name,
      backendAuthority: target.authority,
      trustForwarded: this.ctx.head.trustForwarded,
      contentLength,
      identity,
      traceparent: trace?.traceparent,
      tracestate: trace?.tracestate,
    });
  }

  /** Sends the request through `target`'s pool; a throw there is the call's error. */
  protected dispatchTo(
    target: Target,
    options: Dispatcher.DispatchOptions,
    call: Dispatcher.DispatchHandler & { onError(err: Error): void },
  ): void {
    try {
      this.ctx.pools.get(target.origin).dispatch(options, call);
    } catch (err) {
      call.onError(err as Error);
    }
  }

  /** Ends the trace and counts and logs the answer (observe/record.ts). */
  protected recordAs(
    status: number,
    upstream: string,
    bytesIn: number,
    bytesOut: number,
    pick?: string,
    llm?: LlmFigures,
    variant?: Variant,
  ): void {
    const { trace, route } = this;
    if (trace) {
      if (route) trace.route(route.project, route.deployment);
      trace.end(status, this.error);
    }
    recordAnswer(this.ctx, {
      req: this.req,
      client: this.conn.client,
      requestId: this.requestId,
      route,
      keyName: this.key?.name ?? '',
      status,
      started: this.started,
      upstream,
      pick,
      bytesIn,
      bytesOut,
      error: this.error,
      llm,
      variant,
    });
  }
}
