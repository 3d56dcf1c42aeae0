// A request's body, streamed through or read whole within the budget of buffered bodies (body-budget.ts), and its
// clock. The phase is a base class of the exchange; what it keeps of a body is a ClientBody, made only when there is one.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Transform, type Readable } from 'node:stream';
import type { ByModel } from '../admit/pipeline.js';
import { sendContinue } from '../http/answers.js';
import { collectBody } from '../http/body-collect.js';
import type { GatewayError } from '../http/errors.js';
import { bodyBudgetFull, type Reservation } from './body-budget.js';
import { RequestStart } from './request-start.js';
import { BODY_TOO_LARGE, tooLarge } from './upstream-errors.js';

/** Why nothing more is to be done: the gateway answered, the client or the shutdown ended it, or recorded. */
export type Ended = 'answered' | 'gone' | 'over';

/** What a request with a body keeps of it. */
export class ClientBody {
  /** The request itself or a limit on it (streamed), a buffer (read whole), null while read or once let go. */
  data: Buffer | Readable | null = null;
  /** Declared (streamed) or read; undefined for a chunked body streamed. */
  length: number | undefined = undefined;
  /** Its room in the budget of buffered bodies: while it is read whole, held or kept. */
  room: Reservation | undefined = undefined;
  /** Stops reading it whole. */
  stop: (() => void) | undefined = undefined;
}

export abstract class RequestBody extends RequestStart {
  protected ended: Ended | undefined;
  /** Undefined: the request has no body. */
  protected body: ClientBody | undefined;

  /** The whole body is in: `wire` as sent, `plain` decoded (the same buffer without a Content-Encoding). */
  protected abstract bodyChecked(wire: Buffer, plain: Buffer, base: ByModel | undefined): void;
  protected abstract pickPhase(avoid: string | undefined): void;
  protected abstract refuse(err: GatewayError, close?: boolean): void;
  protected abstract readonly res: ServerResponse;

  /**
   * Let go of after it was sent (written whole with no fallback to need it, or the answer came): it cannot be sent
   * again. A body that was never there has no length, or 0.
   */
  protected get bodyLetGo(): boolean {
    const body = this.body;
    return body !== undefined && body.data === null && (body.length ?? 0) > 0;
  }

  /** The bytes to send: null when there are none (or no more). */
  protected get bodyData(): Buffer | Readable | null {
    return this.body?.data ?? null;
  }

  /** The body's clock (the connection's) starts with the request; the sweep fires between bodyIdleMs and + 1 s. */
  protected startClock(): void {
    this.conn.clockBody(Date.now(), this.ctx.bodyIdleMs, this.ctx.bodyMinRate);
  }

  protected bodyLate(now: number): 'idle' | 'slow' | undefined {
    const req = this.req;
    return req.complete ? undefined : this.conn.bodyLate(now, req.readableLength > 0);
  }

  /** `stream`: forwarded as it comes (unchecked kinds); else read whole and checked. */
  protected bodyPhase(stream: boolean, continueRequested: boolean, base?: ByModel): void {
    const { ctx, req } = this;
    const head = this.head!;
    const declared = head.contentLength;
    if (declared !== undefined && declared > ctx.maxBody) return this.refuse(tooLarge(ctx.maxBody), true);
    const hasBody = head.chunked || (declared !== undefined && declared > 0);
    if (continueRequested) sendContinue(this.res);
    if (stream) {
      if (hasBody) {
        const body = (this.body = new ClientBody());
        body.data = declared !== undefined ? req : limitStream(req, ctx.maxBody);
        body.length = declared;
      }
      return this.pickPhase(undefined);
    }
    if (!hasBody) return this.bodyRead(Buffer.alloc(0), base);
    // Room for what has come (and an edited copy), never for what is only declared: a trickled near-limit body
    // would hold every tenant's room. A decoded form's room is asked for once the body is in.
    const body = (this.body = new ClientBody());
    const room = (body.room = ctx.bodies.reservation());
    const coding = head.contentEncoding;
    const copies = this.edited(base) && (coding === undefined || coding === 'identity') ? 2 : 1;
    body.stop = collectBody(
      req,
      declared,
      ctx.maxBody,
      (capacity, go) => room.acquire(capacity * copies, go),
      (end) => {
        body.stop = undefined;
        if ('body' in end) return this.bodyRead(end.body, base);
        if (end.problem === 'no_room') return this.bodyBusy();
        this.refuse(tooLarge(ctx.maxBody), true);
      },
    );
  }

  /** Whether a copy of the body may be made: through the base URL, or to edit for a fallback. */
  private edited(base: ByModel | undefined): boolean {
    return base !== undefined || (this.route?.kind === 'llm' && this.route.fallbacks !== undefined);
  }

  private bodyBusy(): void {
    this.ctx.metrics.upstreamErrors.inc({ cause: 'body_budget_full' });
    this.refuse(bodyBudgetFull(this.ctx.bodies), true);
  }

  /** Decoded for the check once the budget has room for the decoded form (and a copy). */
  private bodyRead(wire: Buffer, base: ByModel | undefined): void {
    if (this.ended) return;
    const coding = this.head!.contentEncoding;
    if (coding === undefined || coding === 'identity' || wire.length === 0) return this.bodyChecked(wire, wire, base);
    const { maxDecoded } = this.ctx;
    const room = this.body!.room!;
    room.acquire(room.bytes + maxDecoded * (this.edited(base) ? 2 : 1), (ok) => {
      if (this.ended) return;
      if (!ok) return this.guarded(this.bodyBusy, undefined);
      this.ctx.decoder.decode(wire, coding, maxDecoded, (err, plain) => {
        if (this.ended) return;
        if (err) return this.refuse(err);
        this.bodyChecked(wire, plain!, base);
      });
    });
  }

  /** The body held whole; its room shrinks to its buffer unless kept (`keep`) for a fallback's edited copy. */
  protected holdBody(data: Buffer, keep: boolean): void {
    if (data.length === 0 && !this.body) return;
    const body = (this.body ??= new ClientBody());
    body.data = data;
    body.length = data.length;
    const room = body.room;
    if (room && !keep && data.buffer.byteLength < room.bytes) room.resize(data.buffer.byteLength);
  }

  /** Stops reading it and gives its room back (the bytes stay where they are still sent from). */
  protected letGoOfBody(): void {
    const body = this.body;
    if (!body) return;
    body.stop?.();
    body.stop = undefined;
    body.room?.release();
    body.room = undefined;
  }
}

/** Streams a chunked body through, failing once it passes `max` bytes. */
function limitStream(req: IncomingMessage, max: number): Readable {
  let size = 0;
  const limited = new Transform({
    transform(chunk: Buffer, _enc, cb) {
      size += chunk.length;
      if (size > max)
        cb(Object.assign(new Error(`request body is larger than the limit of ${max} bytes`), { code: BODY_TOO_LARGE }));
      else cb(null, chunk);
    },
  });
  req.on('error', (e) => limited.destroy(e));
  req.on('close', () => {
    if (!req.complete) limited.destroy(new Error('client aborted'));
  });
  return req.pipe(limited);
}
