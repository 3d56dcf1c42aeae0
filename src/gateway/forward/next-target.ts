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
import { CONNECT_FAILURES, mapUpstreamError, tooLarge, unavailable } from './upstream-errors.js';

export abstract class NextTarget extends RequestBody implements Held, Queued {
  protected llm: LlmRequest | undefined;
  /** The backend call of the last try, if one was made: where it went (`chosen`) and which try it was (`attempt`). */
  protected call: UpstreamCall | undefined;
  /** Made on the first wait (the hold or the fair queue) or fallback: most requests make none. */
  private detour: Detour | undefined;

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
      const turn = this.detour?.passed === route.id ? room : this.waitTurn(route);
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
    const body = this.bodyData;
    if (!queues || route.kind !== 'llm' || !(body === null || Buffer.isBuffer(body))) return undefined;
    const key = this.key!;
    const at = queues.enter(route, this, {
      priority: key.priority ?? route.priority ?? 'standard',
      tenant: key.tenant ?? `${key.namespace}/${key.secretName ?? key.name}`,
      weight: key.weight ?? 1,
      bytes: Buffer.isBuffer(body) ? body.length : 0,
    });
    if (at === undefined) return queues.roomiest(route);
    if (at === 'queued') this.startWaiting('queued');
    return 'waits';
  }

  private startWaiting(where: 'held' | 'queued'): Detour {
    const wait = (this.detour ??= new Detour());
    wait.where = where;
    wait.since = performance.now();
    return wait;
  }

  /** The wait does not count against the deadline (SPEC §10). */
  private waited(wait: Detour): void {
    wait.where = undefined;
    if (this.call) this.call.deadlineAt += performance.now() - wait.since;
  }

  protected stopWaiting(): void {
    const wait = this.detour;
    if (!wait?.where) return;
    if (wait.where === 'held') this.ctx.holds.remove(this);
    else this.ctx.queues?.remove(this);
    wait.where = undefined;
  }

  dispatch(room: Target): void {
    const wait = this.detour;
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
    if (this.detour) this.detour.where = undefined;
    this.guarded(this.refuse, err);
  }

  /** A body still coming is read while held, counted as it arrives: past the queue's byte bound, 503 at once. */
  private hold(route: Route): void {
    const data = this.bodyData;
    const bytes = Buffer.isBuffer(data) ? data.length : 0;
    if (this.ctx.holds.add(route, this, bytes, route.holdMs!)) return this.holdFull();
    const wait = this.startWaiting('held');
    if (data && !Buffer.isBuffer(data)) {
      const body = this.body!;
      const room = (body.room ??= this.ctx.bodies.reservation());
      wait.unhold = readWhileHeld(
        data,
        // Counted only while held: answered or gone (the hold's timeout, a 408), its room was given back, and what the
        // client still sends while the connection lingers must not take room again, which nothing would give back.
        (n) => wait.where === 'held' && this.ctx.holds.grow(this, n) && room.resize(room.bytes + n),
        () => {
          if (wait.where === 'held') this.holdFull();
        },
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
    const wait = this.detour!;
    this.waited(wait);
    if (wait.unhold) {
      const body = this.body!;
      const data = (body.data = wait.unhold());
      if (Buffer.isBuffer(data)) body.length = data.length;
      wait.unhold = undefined;
    }
    if (this.budgetRanOut()) return true;
    this.route = route;
    this.callPhase(chosen, 1);
    return true;
  }

  expire(): void {
    if (this.detour) this.detour.where = undefined;
    const route = this.route;
    if (this.ended || !this.admission || !route) return;
    this.ctx.metrics.upstreamErrors.inc({ cause: 'hold_timeout' });
    this.refuse(unavailable(route, 'hold_timeout'));
  }

  /** The answer has started: nothing held for another target is needed. */
  protected noOtherTarget(): void {
    if (this.detour) this.detour.unhold = undefined;
  }

  /**
   * Each try waits for the answer's head what is left of the whole chain's deadline: set by the first try, at the first
   * deployment's timeoutSeconds even when that try is a fallback's (the first deployment had no ready endpoint).
   */
  protected deadlineFor(route: Route): number {
    return this.call?.deadlineAt ?? performance.now() + (this.detour?.firstRoute ?? route).timeoutMs;
  }

  /** A fallback was taken: the rest of the first deployment's list may still be tried. */
  protected inFallback(): boolean {
    return this.detour?.firstRoute !== undefined;
  }

  protected namesDeployment(route: Route): boolean {
    return route.fallbacks !== undefined || this.detour?.named(route) === true;
  }

  protected retried(code: string): boolean {
    const body = this.bodyData;
    const replayable = !this.bodyLetGo && (body === null || Buffer.isBuffer(body));
    const last = this.call;
    // Nothing reached it: later requests pass it over for a while (targets.ts, unreachable).
    if (last && CONNECT_FAILURES.has(code)) this.ctx.picker.unreachable(last.chosen.target.address);
    if (!last || !shouldRetry({ code, answerStarted: this.res.headersSent, replayable, attempts: last.attempt }))
      return false;
    const avoid = last.chosen.target.origin.slice(7);
    this.ctx.logger.debug({ requestId: this.requestId, err: code, target: avoid }, 'connect failed, retrying once');
    setTimeout(() => this.pickPhase(avoid), RETRY.delayMs);
    return true;
  }

  protected unreached(code: string, err: Error): void {
    const route = this.route!;
    const mapped = mapUpstreamError(code, route, this.detour?.firstRoute);
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

  /**
   * The next fallback the key may use (SPEC §12), while nothing reached the client and the deadline has not passed —
   * or the try timed out (`reason` timeout): SPEC §12 names `timeoutSeconds` among the failures that fall back, and a
   * timed-out try has used the deadline up by definition.
   */
  protected nextFallback(reason?: FallbackReason): Route | undefined {
    const route = this.route;
    if (!this.admission || !route) return undefined;
    const body = this.bodyData;
    if (this.res.headersSent || this.bodyLetGo || !(body === null || Buffer.isBuffer(body))) return undefined;
    if (!route.fallbacks && !this.inFallback()) return undefined;
    if (reason !== 'timeout' && this.call && performance.now() >= this.call.deadlineAt) return undefined;
    return (this.detour ??= new Detour()).peek(this.ctx.store.current(), route, this.key!);
  }

  protected fallback(reason: FallbackReason): boolean {
    if (this.ended) return true;
    const to = this.nextFallback(reason);
    if (!to) return false;
    // After a timeout the fallback gets its own timeoutSeconds from now (the chain's deadline was spent); the other
    // reasons leave it to what is left of the chain's deadline.
    if (reason === 'timeout' && this.call) this.call.deadlineAt = performance.now() + to.timeoutMs;
    const from = this.detour!.take(this.route!, to);
    const ref = `${to.project}/${to.deployment}`;
    this.ctx.metrics.fallbacks.inc({ project: from.project, deployment: from.deployment, to: ref, reason });
    this.ctx.logger.info(
      { requestId: this.requestId, project: from.project, deployment: from.deployment, to: to.id, reason },
      'falling back',
    );
    const { llm, body } = this;
    if (llm?.keepsBody && body && Buffer.isBuffer(body.data)) {
      // The edit of the deployment before goes first: one edited copy at a time (within what was reserved).
      body.data = null;
      const data = llm.forFallback(to)!;
      if (llm.decoded) this.head!.forward = withoutHeader(this.head!.forward, 'content-encoding');
      body.data = data;
      body.length = data.length;
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

/**
 * What a request that does not go straight to its first pick keeps: the fallbacks taken, and its wait in the
 * scale-from-zero hold or the fair queue (since `since`).
 */
class Detour extends Fallbacks {
  where: 'held' | 'queued' | undefined = undefined;
  since = 0;
  /** Ends reading a streamed body while held: the body as read so far, then the rest. */
  unhold: (() => Buffer | Readable) | undefined = undefined;
  /** The route whose fair queue this request has passed: it does not queue again for it. */
  passed: string | undefined = undefined;
}
