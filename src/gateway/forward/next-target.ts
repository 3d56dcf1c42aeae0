// Where an admitted request goes next: an endpoint (targets.ts), a wait in the fair queue or the scale-from-zero hold,
// another address after a try that reached nothing (retry.ts), the next fallback (fallback.ts), else 503 or 502/504.
// A base class of the exchange, so that a request makes no object more for it.
import type { Readable } from 'node:stream';
import type { Route } from '../../routing/types.js';
import { admitFallback, budgetRunOut, type Accepted, type Refused } from '../admit/pipeline.js';
import type { GatewayError } from '../http/errors.js';
import { withoutHeader, withoutRateHeaders } from '../http/headers.js';
import type { LlmRequest } from '../openai/llm-request.js';
import { copyWith } from '../../same-shape.js';
import type { Queued } from './fair-queue.js';
import { Fallbacks, type FallbackReason } from './fallback.js';
import { RequestBody } from './request-body.js';
import { RETRY, shouldRetry } from './retry.js';
import { readWhileHeld, type Held } from './scale-from-zero.js';
import type { Chosen, Target } from './targets.js';
import type { UpstreamCall } from './upstream-call.js';
import { mapUpstreamError, tooLarge, unavailable } from './upstream-errors.js';

export abstract class NextTarget extends RequestBody implements Held, Queued {
  protected llm: LlmRequest | undefined;
  /** The backend call of the last try, if one was made: where it went (`chosen`) and which try it was (`attempt`). */
  protected call: UpstreamCall | undefined;
  /** performance.now() by which the answer's head must have come, for the whole chain of tries; 0: no try yet. */
  protected deadlineAt = 0;
  /** Made only for a request that waits (the hold or the fair queue). */
  private wait: Waiting | undefined;
  private fallbacks: Fallbacks | undefined;

  /** `attempt`: the try at this deployment (1; 2 for the one retry, at another address). */
  protected abstract callPhase(chosen: Chosen, attempt: number): void;

  protected abstract cut(cause: string): void;

  /** `avoid`: the address a failed try reached nothing at; `room`: one the fair queue knows has room. */
  protected pickPhase(avoid: string | undefined, room?: Target): void {
    const { ctx, route } = this;
    if (this.ended || !this.admission || !route) return;
    let chosen: Chosen | undefined;
    const last = avoid !== undefined ? this.call : undefined;
    if (last && avoid !== undefined) {
      // The same backend (and variant), another address when it has one.
      const target = ctx.picker.pick(route, last.chosen.backend, avoid, this.llm?.prefix);
      chosen = target && copyWith(last.chosen, { target });
    } else if (!route.notReady) {
      const turn = this.wait?.passed === route.id ? room : this.waitTurn(route);
      if (turn === 'waits') return;
      chosen = this.choose(route, turn);
    }
    if (chosen) return this.callPhase(chosen, last ? last.attempt + 1 : 1);
    if (avoid === undefined && route.holdMs) return this.hold(route);
    ctx.metrics.upstreamErrors.inc({ cause: route.notReady ? 'not_ready' : 'no_ready_endpoint' });
    if (this.fallback('no_endpoint')) return;
    this.refuse(unavailable(route));
  }

  /** The picker's choice, or `room` if the pick has none (the picker reads only the endpoints' reports). */
  private choose(route: Route, room: Target | undefined): Chosen | undefined {
    const { ctx } = this;
    let chosen = ctx.picker.choose(route, this.llm?.prefix);
    if (room && chosen && chosen.backend === route.backend && !ctx.queues!.hasRoom(chosen.target))
      chosen = copyWith(chosen, { target: room });
    if (chosen?.reason) ctx.metrics.endpointPick(route.project, route.deployment, chosen.reason, route);
    return chosen;
  }

  /** Fair queueing (SPEC §14): 'waits' (dispatch or shed goes on), else where there is room. Only whole bodies wait. */
  private waitTurn(route: Route): Target | 'waits' | undefined {
    const queues = this.ctx.queues;
    if (!queues || route.kind !== 'llm' || !(this.body === null || Buffer.isBuffer(this.body))) return undefined;
    const key = this.key!;
    const at = queues.enter(route, this, {
      priority: key.priority ?? route.priority ?? 'standard',
      tenant: key.tenant ?? `${key.namespace}/${key.secretName ?? key.name}`,
      weight: key.weight ?? 1,
      bytes: Buffer.isBuffer(this.body) ? this.body.length : 0,
    });
    if (at === undefined) return queues.roomiest(route);
    if (at === 'queued') this.startWaiting('queued');
    return 'waits';
  }

  private startWaiting(where: 'held' | 'queued'): Waiting {
    const wait = (this.wait ??= new Waiting());
    wait.where = where;
    wait.since = performance.now();
    return wait;
  }

  /** The wait does not count against the deadline (SPEC §10). */
  private waited(wait: Waiting): void {
    wait.where = undefined;
    if (this.deadlineAt) this.deadlineAt += performance.now() - wait.since;
  }

  protected stopWaiting(): void {
    const wait = this.wait;
    if (!wait?.where) return;
    if (wait.where === 'held') this.ctx.holds.remove(this);
    else this.ctx.queues?.remove(this);
    wait.where = undefined;
  }

  dispatch(room: Target): void {
    const wait = this.wait;
    if (wait?.where !== 'queued') return;
    this.waited(wait);
    wait.passed = this.route?.id;
    this.guarded(this.turnCame, room);
  }

  private turnCame(room: Target): void {
    if (this.budgetRanOut()) return;
    this.pickPhase(undefined, room);
  }

  /** A budget checked on arrival may have run out while the request waited (SPEC §14: checked before forwarding). */
  private budgetRanOut(): boolean {
    const runOut = budgetRunOut(this.admission, this.answerHeaders, this.ctx.admission);
    if (!runOut) return false;
    this.answerHeaders = runOut.headers;
    this.refuse(runOut.error);
    return true;
  }

  shed(err: GatewayError): void {
    if (this.wait) this.wait.where = undefined;
    this.guarded(this.refuse, err);
  }

  /** A body still coming is read while held, counted as it arrives: past the queue's byte bound, 503 at once. */
  private hold(route: Route): void {
    const body = this.body;
    const bytes = Buffer.isBuffer(body) ? body.length : 0;
    if (this.ctx.holds.add(route, this, bytes, route.holdMs!)) return this.holdFull();
    const wait = this.startWaiting('held');
    if (body && !Buffer.isBuffer(body)) {
      const room = (this.room ??= this.ctx.bodies.reservation());
      wait.unhold = readWhileHeld(
        body,
        (n) => this.ctx.holds.grow(this, n) && room.resize(room.bytes + n),
        () => this.holdFull(),
        () => this.refuse(tooLarge(this.ctx.maxBody), true),
      );
    }
  }

  private holdFull(): void {
    this.ctx.metrics.upstreamErrors.inc({ cause: 'hold_queue_full' });
    this.refuse(unavailable(this.route!, 'hold_full'));
  }

  /** The deployment as the current table has it may have a ready endpoint now. */
  tryForward(): boolean {
    const old = this.route;
    if (this.ended || !this.admission || !old) return true;
    const current = this.ctx.store.current().byPath.get(`${old.project}/${old.deployment}`);
    const route = current && current.id === old.id ? current : old;
    const chosen = route.notReady ? undefined : this.ctx.picker.choose(route, this.llm?.prefix);
    if (!chosen) return false;
    const wait = this.wait!;
    this.waited(wait);
    if (wait.unhold) {
      const body = (this.body = wait.unhold());
      if (Buffer.isBuffer(body)) this.bodyLength = body.length;
      wait.unhold = undefined;
    }
    if (this.budgetRanOut()) return true;
    this.route = route;
    this.callPhase(chosen, 1);
    return true;
  }

  expire(): void {
    if (this.wait) this.wait.where = undefined;
    const route = this.route;
    if (this.ended || !this.admission || !route) return;
    this.ctx.metrics.upstreamErrors.inc({ cause: 'hold_timeout' });
    this.refuse(unavailable(route, 'hold_timeout'));
  }

  /** The answer has started: nothing held for another target is needed. */
  protected noOtherTarget(): void {
    if (this.wait) this.wait.unhold = undefined;
  }

  /** Each try waits for the answer's head what is left of the whole chain's deadline. */
  protected headersTimeout(route: Route): number {
    const now = performance.now();
    if (!this.deadlineAt) this.deadlineAt = now + route.timeoutMs;
    return Math.max(1, Math.ceil(this.deadlineAt - now));
  }

  /** A fallback was taken: the rest of the first deployment's list may still be tried. */
  protected inFallback(): boolean {
    return this.fallbacks !== undefined;
  }

  protected namesDeployment(route: Route): boolean {
    return route.fallbacks !== undefined || this.fallbacks?.named(route) === true;
  }

  protected retried(code: string): boolean {
    const replayable = !this.bodyLetGo && (this.body === null || Buffer.isBuffer(this.body));
    const last = this.call;
    if (!last || !shouldRetry({ code, answerStarted: this.res.headersSent, replayable, attempts: last.attempt }))
      return false;
    const avoid = last.chosen.target.origin.slice(7);
    this.ctx.logger.debug({ requestId: this.requestId, err: code, target: avoid }, 'connect failed, retrying once');
    setTimeout(() => this.pickPhase(avoid), RETRY.delayMs);
    return true;
  }

  protected unreached(code: string, err: Error): void {
    const route = this.route!;
    const mapped = mapUpstreamError(code, route, this.fallbacks?.firstRoute);
    this.ctx.metrics.upstreamErrors.inc({ cause: mapped.cause });
    if (this.fallback(code === 'UND_ERR_HEADERS_TIMEOUT' ? 'timeout' : 'connect')) return;
    this.ctx.logger.warn(
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

  /** The next fallback the key may use (SPEC §12), while nothing reached the client and the deadline has not passed. */
  protected nextFallback(): Route | undefined {
    const route = this.route;
    if (!this.admission || !route) return undefined;
    if (this.res.headersSent || this.bodyLetGo || !(this.body === null || Buffer.isBuffer(this.body))) return undefined;
    if (!route.fallbacks && !this.fallbacks) return undefined;
    if (this.deadlineAt && performance.now() >= this.deadlineAt) return undefined;
    return (this.fallbacks ??= new Fallbacks()).peek(this.ctx.store.current(), route, this.key!);
  }

  protected fallback(reason: FallbackReason): boolean {
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
    // The fallback's own per-minute limits, checked and charged as a direct call's (SPEC §9).
    this.settle(admitFallback(this.admission!, to, this.answerHeaders, this.ctx.admission), this.fallbackAdmitted);
    return true;
  }

  /** A fallback past its limits is skipped like one that failed; the last one's 429 is the answer. */
  private fallbackAdmitted(decided: Accepted | Refused): void {
    if (this.ended) return;
    if (!decided.ok) {
      const route = this.route!;
      this.ctx.logger.info(
        { requestId: this.requestId, project: route.project, deployment: route.deployment, err: decided.error.message },
        'fallback refused by its limits',
      );
      if (this.fallback('rate_limited')) return;
      // The refusal's own x-ratelimit-* lines replace those of the deployments before it.
      this.answerHeaders = withoutRateHeaders(this.answerHeaders);
      return this.refuse(decided.error);
    }
    this.decision = decided;
    this.answerHeaders = decided.headers;
    this.pickPhase(undefined);
  }
}

/** A request's wait in the scale-from-zero hold or the fair queue, since `since`. */
class Waiting {
  where: 'held' | 'queued' | undefined = undefined;
  since = 0;
  /** Ends reading a streamed body while held: the body as read so far, then the rest. */
  unhold: (() => Buffer | Readable) | undefined = undefined;
  /** The route whose fair queue this request has passed: it does not queue again for it. */
  passed: string | undefined = undefined;
}
