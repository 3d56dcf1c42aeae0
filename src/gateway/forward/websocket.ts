// Websocket upgrades: admitted and started like any request (request-start.ts), joined to the backend's socket once it
// agrees. Not held for scale from zero: a websocket client retries on its own. Any other Upgrade token (h2c) is served
// as plain HTTP/1.1, as RFC 9110 §7.8 allows and nginx does. On LLM routes each client response.create passes the
// limits first (openai/realtime-gate.ts).
import type { IncomingMessage, Server } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { Dispatcher } from 'undici';
import type { LimitDecision } from '../../limits/per-minute.js';
import type { BudgetDecision } from '../../limits/budgets.js';
import { copyWith } from '../../same-shape.js';
import { RealtimeMeter } from '../openai/realtime-meter.js';
import { closeFrame, errorEvent, FrameCursor, RealtimeGate } from '../openai/realtime-gate.js';
import type { Admission } from '../admit/pipeline.js';
import { gatewayError, type GatewayError } from '../http/errors.js';
import { downstreamHeaders, removeHeader } from '../http/headers.js';
import { readHead } from '../http/request-head.js';
import { sendRawAnswer, sendRawError, writeRawHead } from '../http/answers.js';
import type { Conn, Job } from './job.js';
import { BodyBudget, type Reservation } from './body-budget.js';
import { RequestStart } from './request-start.js';
import { DECLINE_BODY_MAX, UpgradeCall, type UpgradeOwner } from './upstream-call.js';
import { ClientGone, mapUpstreamError, unavailable } from './upstream-errors.js';

/**
 * Once a tunnel is over (either side ended or closed), how long the other side has to close before both sockets are
 * destroyed: enough for a backend's last close frame, bounded so that a peer holding its socket open costs nothing.
 */
const TUNNEL_GRACE_MS = 5_000;

/** Per budget of buffered bytes (a data plane's): the quarter of it that realtime sessions' held messages may take. */
const realtimeBudgets = new WeakMap<BodyBudget, BodyBudget>();

/** An LLM tunnel's own writes to the client: they wait for the backend's stream to be between messages. */
interface Inject {
  cursor: FrameCursor;
  pending: Buffer[];
  closing: { code: number; reason: string; why: string } | undefined;
}

export class UpgradeJob extends RequestStart implements Job, UpgradeOwner {
  private call: UpgradeCall | undefined;
  private tunnel: Duplex | undefined;
  /** A realtime message held until whole, in the budget of buffered bytes (realtime sessions: a quarter of it). */
  private room: { all: Reservation; realtime: Reservation } | undefined;
  private finished = false;
  /** The tunnel counts against its key and client address (tunnels.ts), from admission on. */
  private client = '';
  /** Whether it was counted. */
  private counted = false;
  private status = 0;
  private upstream = '';
  private bytesIn = 0;
  private bytesOut = 0;
  private lastActive = 0;
  private inject: Inject | undefined;
  /** Set once the tunnel is over (`over` or `shut`): destroys both sockets when its time is up. */
  private closing: NodeJS.Timeout | undefined;
  /** Client response.create events admitted by the limits whose response.created has not passed yet. */
  private admittedCreates = 0;

  constructor(
    conn: Conn,
    private readonly server: Server,
    protected readonly req: IncomingMessage,
    private readonly socket: Socket,
    /** What the client sent after the head: the tunnel's first bytes. */
    private readonly firstBytes: Buffer,
  ) {
    super(conn);
  }

  start(): void {
    const { socket } = this;
    socket.on('error', () => socket.destroy());
    socket.once('close', () => {
      if (this.tunnel) this.over();
      else this.call?.abort(new ClientGone());
      this.end();
    });
    try {
      this.run();
    } catch (err) {
      this.ctx.logger.error({ err, url: this.req.url }, 'upgrade handling failed');
      socket.destroy();
    }
  }

  drop(): void {}

  tick(now: number): void {
    if (!this.tunnel || this.finished) return;
    const idle = this.ctx.websocketIdleMs;
    if (now - this.lastActive >= idle) this.shut(1001, `idle for ${idle / 1000} s`, 'websocket idle timeout');
  }

  deadline(): void {
    this.tunnel?.destroy();
    this.socket.destroy();
  }

  private end(): void {
    if (this.finished) return;
    this.finished = true;
    this.room?.all.release();
    this.room?.realtime.release();
    if (this.counted) this.ctx.tunnels.close(this.key!.name, this.client);
    if (this.tunnel) this.record(this.status);
    this.conn.done(this);
  }

  /** A close frame each way, then both sockets end (destroyed if they do not within a second). */
  private shut(code: number, reason: string, why: string): void {
    const { socket, tunnel } = this;
    if (!tunnel || this.error !== undefined || this.closing) return;
    this.error = why;
    this.inject = undefined;
    tunnel.unpipe(socket);
    socket.unpipe(tunnel);
    tunnel.removeAllListeners('data');
    socket.removeAllListeners('data');
    if (socket.writable) socket.end(closeFrame(code, reason, false));
    if (tunnel.writable) tunnel.end(closeFrame(code, reason, true));
    this.closing = setTimeout(() => {
      socket.destroy();
      tunnel.destroy();
    }, 1000).unref();
  }

  /**
   * One side ended (its FIN) or closed: the tunnel is over, as nginx has it. The other side is ended after what it was
   * already sent (a client's FIN passed on to the backend, a backend's to the client), nothing more is carried, both
   * sockets are destroyed if still open TUNNEL_GRACE_MS later, and the tunnel is recorded now, once.
   */
  private over(): void {
    const { socket, tunnel } = this;
    if (!tunnel || this.closing) return;
    this.inject = undefined;
    tunnel.unpipe(socket);
    socket.unpipe(tunnel);
    tunnel.removeAllListeners('data');
    socket.removeAllListeners('data');
    // Whatever still arrives is read and dropped, so that each side's FIN is seen and its socket can close.
    tunnel.resume();
    socket.resume();
    if (socket.writable) socket.end();
    if (tunnel.writable) tunnel.end();
    this.closing = setTimeout(() => {
      socket.destroy();
      tunnel.destroy();
    }, TUNNEL_GRACE_MS).unref();
    this.end();
  }

  private run(): void {
    const head = readHead(this.req, this.ctx.head);
    if (head.upgrade !== 'websocket') return this.asPlainRequest();
    this.settle(this.admitHead(head, true), this.admitted);
  }

  protected internalError(): void {
    this.refuse(gatewayError('internal_error', 'internal gateway error'));
  }

  private admitted(decided: Admission): void {
    if (this.finished || this.socket.destroyed) return this.end();
    // admit() settles the OpenAI base URL's model and never answers a preflight for an upgrade.
    if (decided.kind === 'preflight' || decided.kind === 'by-model') return this.internalError();
    this.took(decided);
    if (!decided.ok) return this.refuse(decided.error);

    const { ctx } = this;
    const route = decided.route;
    this.client = this.clientOf(this.head!);
    const tooMany = ctx.tunnels.open(decided.key.name, this.client);
    if (tooMany) {
      ctx.metrics.rateLimited.inc({ scope: tooMany.scope, kind: 'websockets', reason: 'open_websockets' });
      return this.refuse(tooMany.error);
    }
    this.counted = true;
    const chosen = route.notReady ? undefined : ctx.picker.choose(route);
    if (!chosen) {
      ctx.metrics.upstreamErrors.inc({ cause: 'no_ready_endpoint' });
      return this.refuse(unavailable(route));
    }
    const target = chosen.target;
    this.upstream = target.origin.replace(/^https?:\/\//, '');
    if (chosen.variant) this.answerHeaders.push('x-servegate-variant', chosen.variant);
    const headers = this.headersFor(route, target, false);
    // An LLM websocket is metered from its frames: a compressed extension would hide them, so none is offered.
    if (route.kind === 'llm') removeHeader(headers, 'sec-websocket-extensions');
    const path = target.basePath + (route.pathPrefix ?? '') + decided.upstreamPath;
    const method = this.req.method as Dispatcher.HttpMethod;
    this.call = new UpgradeCall(this);
    this.dispatchTo(
      target,
      { path, method, headers, upgrade: 'websocket', headersTimeout: route.timeoutMs },
      this.call,
    );
  }

  upgraded(status: number, raw: Buffer[], up: Duplex): void {
    const { socket } = this;
    if (socket.destroyed) return void up.destroy();
    // A switch to another protocol (h2c) is no websocket: a client must fail it (RFC 6455 §4.1), so it is not passed on.
    const to = switchedTo(raw);
    if (to !== 'websocket') {
      up.destroy();
      this.upstreamErrors('bad_answer');
      return this.refuse(
        gatewayError('backend_error', `the backend switched to ${to || 'no protocol'}, not to websocket`),
      );
    }
    this.tunnel = up;
    this.status = status;
    this.lastActive = Date.now();
    const list: string[] = [];
    for (let i = 0; i < raw.length; i += 2) list.push(raw[i].toString('latin1'), raw[i + 1].toString('latin1'));
    writeRawHead(socket, status, list);
    // Either side's FIN, error or close ends the tunnel (`over`); the client's socket's close is start()'s.
    up.on('error', () => this.over());
    up.on('end', () => this.over());
    up.on('close', () => this.over());
    socket.on('end', () => this.over());
    // A ping or a pong is activity too.
    up.on('data', (chunk: Buffer) => {
      this.bytesOut += chunk.length;
      this.lastActive = Date.now();
    });
    socket.on('data', (chunk: Buffer) => {
      this.bytesIn += chunk.length;
      this.lastActive = Date.now();
    });
    this.bytesIn += this.firstBytes.length;
    const route = this.route;
    if (route?.kind !== 'llm') {
      if (this.firstBytes.length) up.write(this.firstBytes);
      // Not ended by the pipes: `over` ends each side once either has ended.
      up.pipe(socket, { end: false });
      socket.pipe(up, { end: false });
      return;
    }
    // Realtime: each response.done's usage is charged as it passes, each client response.create is limited first.
    const { metrics, perMinute } = this.ctx;
    const meter = new RealtimeMeter(
      (usage) => {
        metrics.observeLlm(route.project, route.deployment, this.key!.name, usage, undefined, undefined);
        perMinute.charge(this.admission!.charge, usage.prompt + usage.completion);
        this.ctx.admission.budgets?.charge(this.admission!.budget, usage.prompt, usage.completion, route.pricing);
      },
      () => this.responseStarted(),
    );
    const inject: Inject = (this.inject = { cursor: new FrameCursor(), pending: [], closing: undefined });
    up.on('data', (chunk: Buffer) => {
      meter.push(chunk);
      this.toClient(chunk, inject);
    });
    socket.on('drain', () => up.resume());
    let held = false;
    let full = false;
    const gate = new RealtimeGate({
      forward: (message) => {
        if (!up.write(message) && !full) {
          full = true;
          socket.pause();
        }
      },
      decide: (take) => this.decide(take),
      refused: (err, eventId) => {
        this.toClient(errorEvent(err, eventId), inject, true);
      },
      hold: (on) => {
        held = on;
        if (on) socket.pause();
        else if (!full) socket.resume();
      },
      room: (bytes) => this.holdRoom(bytes),
    });
    up.on('drain', () => {
      full = false;
      if (!held) socket.resume();
    });
    socket.on('data', (chunk: Buffer) => gate.push(chunk));
    if (this.firstBytes.length) gate.push(this.firstBytes);
  }

  /** The realtime gate would hold `bytes` in all: whether both budgets have room (see `room`). */
  private holdRoom(bytes: number): boolean {
    const { bodies } = this.ctx;
    let shared = realtimeBudgets.get(bodies);
    if (!shared) realtimeBudgets.set(bodies, (shared = new BodyBudget(Math.max(1, Math.floor(bodies.limit / 4)), 0)));
    const room = (this.room ??= { all: bodies.reservation(), realtime: shared.reservation() });
    const before = room.realtime.bytes;
    if (!room.realtime.resize(bytes)) return false;
    if (room.all.resize(bytes)) return true;
    room.realtime.resize(before);
    return false;
  }

  /** Bytes for the client on an LLM tunnel; the gateway's own (`own`) wait until the backend is between messages. */
  private toClient(chunk: Buffer, inject: Inject, own = false): void {
    const { socket } = this;
    if (this.error !== undefined) return;
    const write = (bytes: Buffer): void => {
      if (bytes.length && !socket.write(bytes)) this.tunnel?.pause();
    };
    if (own) {
      if (inject.cursor.quiet) write(chunk);
      else inject.pending.push(chunk);
      return;
    }
    if (inject.pending.length === 0 && !inject.closing) {
      inject.cursor.read(chunk, false);
      return write(chunk);
    }
    const at = inject.cursor.quiet ? 0 : inject.cursor.read(chunk, true);
    write(chunk.subarray(0, at));
    if (inject.cursor.quiet) {
      for (const pending of inject.pending.splice(0)) write(pending);
      const closing = inject.closing;
      if (closing) return this.shut(closing.code, closing.reason, closing.why);
    }
    if (at < chunk.length) this.toClient(chunk.subarray(at), inject);
  }

  /**
   * The backend started a response. One it starts on its own (server-side turn detection) is a request too: past a
   * limit the session closes with 1008 and a reason starting rate_limit_exceeded, after the message in passage.
   */
  private responseStarted(): void {
    if (this.admittedCreates > 0) {
      this.admittedCreates--;
      return;
    }
    const closeFor = (err: GatewayError | undefined): void => {
      const inject = this.inject;
      if (!err || !inject) return;
      // The error's own code: `insufficient_quota` (a budget, back only when its period resets) is no rate limit.
      const reason = `${err.code}: ${err.message}`;
      const why =
        err.code === 'insufficient_quota'
          ? 'budget exhausted inside the session'
          : 'rate limit exceeded inside the session';
      if (inject.cursor.quiet) this.shut(1008, reason, why);
      else inject.closing = { code: 1008, reason, why };
    };
    const refused = this.decide(true, false);
    if (refused instanceof Promise) void refused.then(closeFor);
    else closeFor(refused);
  }

  /** The per-minute windows for a response.create (`take`) or an unreadable message; `fromClient`: counted. */
  private decide(take: boolean, fromClient = true): GatewayError | undefined | Promise<GatewayError | undefined> {
    // A spent budget refuses before the per-minute windows are asked.
    const budgets = this.ctx.admission.budgets;
    const budget = this.admission?.budget;
    const decision = take && budget?.length ? budgets?.decide(budget.slice()) : undefined;
    if (!decision) return this.decidePerMinute(take, fromClient);
    const after = (decided: BudgetDecision): GatewayError | undefined | Promise<GatewayError | undefined> => {
      if (decided.ok) return this.decidePerMinute(take, fromClient);
      for (const s of decided.refusing)
        this.ctx.metrics.rateLimited.inc({
          scope: s.scope,
          kind: s.limit.tokens ? 'tokens' : 'cost',
          reason: 'budget',
        });
      return decided.error;
    };
    return decision instanceof Promise ? decision.then(after) : after(decision);
  }

  private decidePerMinute(
    take: boolean,
    fromClient: boolean,
  ): GatewayError | undefined | Promise<GatewayError | undefined> {
    const { ctx, route } = this;
    const specs = ctx.perMinute.specs(route, this.key);
    if (specs.length === 0) return undefined;
    const answer = (decided: LimitDecision): GatewayError | undefined => {
      if (decided.ok) {
        if (take && fromClient) this.admittedCreates++;
        return undefined;
      }
      for (const s of decided.spent)
        ctx.metrics.rateLimited.inc({ scope: s.scope, kind: s.kind, reason: 'per_minute' });
      return decided.error;
    };
    const decision = ctx.perMinute.decide(take ? specs : specs.map((s) => copyWith(s, { cost: 0 })));
    return decision instanceof Promise ? decision.then(answer) : answer(decision);
  }

  /** The backend declined: its answer is passed on (one too large to hold is refused), then the socket closes. */
  declined(status: number, raw: Buffer[], statusText: string | undefined, body: Buffer | undefined): void {
    const { ctx, socket } = this;
    if (socket.destroyed) return;
    const route = this.route!;
    if (!body) {
      ctx.metrics.upstreamErrors.inc({ cause: 'reset' });
      return this.refuse(
        gatewayError(
          'backend_error',
          `deployment ${route.project}/${route.deployment} declined the upgrade with an answer larger than ${DECLINE_BODY_MAX} bytes`,
        ),
      );
    }
    const down = downstreamHeaders(raw, ctx.cors.enabled);
    const list = down.list;
    if (!down.length) list.push('content-length', String(body.length));
    list.push('connection', 'close', ...this.answerHeaders);
    sendRawAnswer(socket, status, list, body, statusText);
    this.record(status);
    this.end();
  }

  failed(err: Error): void {
    if (this.socket.destroyed || this.tunnel || err instanceof ClientGone) return;
    const mapped = mapUpstreamError((err as { code?: string }).code ?? '', this.route!);
    this.upstreamErrors(mapped.cause);
    this.refuse(mapped.error);
  }

  private upstreamErrors(cause: string): void {
    this.ctx.metrics.upstreamErrors.inc({ cause });
  }

  private refuse(err: GatewayError): void {
    sendRawError(this.socket, err, this.dialect, this.answerHeaders);
    this.error = err.message;
    this.record(err.status);
    this.end();
  }

  private record(status: number): void {
    this.recordAs(status, this.upstream, this.bytesIn, this.bytesOut);
  }

  /** Serves the request as plain HTTP/1.1 on the same connection: its head again, without the upgrade, and the rest. */
  private asPlainRequest(): void {
    const { req, socket } = this;
    const raw = req.rawHeaders;
    let text = `${req.method} ${req.url} HTTP/${req.httpVersion}\r\n`;
    for (let i = 0; i < raw.length; i += 2) {
      const name = raw[i].toLowerCase();
      if (name === 'upgrade' || name === 'http2-settings') continue;
      if (name === 'connection') {
        const keep = raw[i + 1]
          .split(',')
          .map((t) => t.trim())
          .filter((t) => t && !/^(upgrade|http2-settings)$/i.test(t));
        if (keep.length) text += `${raw[i]}: ${keep.join(', ')}\r\n`;
        continue;
      }
      text += `${raw[i]}: ${raw[i + 1]}\r\n`;
    }
    text += '\r\n';
    this.finished = true;
    this.conn.done(this);
    socket.unshift(Buffer.concat([Buffer.from(text, 'latin1'), this.firstBytes]));
    this.server.emit('connection', socket);
  }
}

/** The protocol a 101's Upgrade header names, lower case ('' when it names none). */
function switchedTo(raw: Buffer[]): string {
  for (let i = 0; i < raw.length; i += 2)
    if (raw[i].toString('latin1').toLowerCase() === 'upgrade')
      return raw[i + 1].toString('latin1').trim().toLowerCase();
  return '';
}
