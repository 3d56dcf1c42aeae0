// Upgrade requests. A websocket upgrade goes through the same admission as any request and, once the backend agrees,
// the two sockets are joined; every refusal is answered in the route's dialect and the socket is closed properly.
// Any other Upgrade token (h2c, ...) is not tunnelled: the request is handed back to the HTTP server without it and
// served as plain HTTP/1.1, as RFC 9110 §7.8 allows and as nginx does.
import { randomUUID } from 'node:crypto';
import { request as httpRequest, type IncomingMessage, type Server } from 'node:http';
import type { Socket } from 'node:net';
import { admit, type Accepted, type ByModel, type Refusal } from '../admit/pipeline.js';
import type { Conn, Job } from '../listen/connection.js';
import { responseCorsList } from '../admit/cors.js';
import { gatewayError, type Dialect, type GatewayError } from '../http/errors.js';
import { clientAddress, pathOf, recordAnswer, type PlaneContext } from './exchange.js';
import type { LimitDecision } from '../../limits/per-minute.js';
import type { RequestTrace } from '../../observe/tracing.js';
import { clientRequestId, downstreamHeaders, upstreamHeaders } from '../http/headers.js';
import { closeSocket, rawHead, sendRawError } from '../http/answers.js';
import { headProblem, readHead, type RequestHead } from '../http/request-head.js';
import { mapUpstreamError, unavailable } from './upstream-errors.js';
import type { Route, RouteTable } from '../../routing/types.js';
import { acceptByModel, selectModel, servedModel } from '../openai/by-model.js';

/** Longest error body from a backend that declines an upgrade that is passed on. */
const DECLINE_BODY_MAX = 65_536;

export class UpgradeJob implements Job {
  private readonly started = performance.now();
  private requestId = '';
  private trace: RequestTrace | undefined;
  private route: Route | undefined;
  private keyName = '';
  private upstream: ReturnType<typeof httpRequest> | undefined;
  private tunnel: Socket | undefined;
  private finished = false;

  constructor(
    private readonly ctx: PlaneContext,
    private readonly conn: Conn,
    private readonly server: Server,
    private readonly req: IncomingMessage,
    private readonly socket: Socket,
    private readonly head: Buffer,
  ) {}

  start(): void {
    const { socket } = this;
    socket.on('error', () => socket.destroy());
    socket.once('close', () => {
      this.upstream?.destroy();
      this.tunnel?.destroy();
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

  tick(): void {}

  deadline(): void {
    this.socket.destroy();
  }

  private end(): void {
    if (this.finished) return;
    this.finished = true;
    this.conn.done(this);
  }

  private run(): void {
    const { ctx, req } = this;
    const h = readHead(req, ctx.head);
    if (h.upgrade !== 'websocket') return this.asPlainRequest();

    this.requestId = clientRequestId(h.requestId) ?? randomUUID();
    this.trace = ctx.tracing?.start(h.method, pathOf(req.url), h.traceparent, h.tracestate, this.conn.client);
    const extra = ['x-request-id', this.requestId, ...(responseCorsList(ctx.cors, h.origin) ?? [])];
    const bad = headProblem(h, req, ctx.maxHeaders);
    if (bad) return this.refuse(bad, 'kserve', extra);

    const table = ctx.store.current();
    const admitted = admit(
      {
        method: h.method,
        url: req.url ?? '/',
        host: h.authority,
        authorization: h.authorization,
        contentType: undefined,
        now: Date.now(),
      },
      table,
      ctx.limiter,
    );
    // The OpenAI base URL: a websocket (the realtime API) names its model in the query, `?model=<project>/<deployment>`.
    const d = admitted.ok && admitted.byModel ? upgradeByModel(table, admitted) : admitted;
    const client = clientAddress(this.conn.client, h, ctx.head.trustForwarded);
    const blocked = ctx.authFailures.blockedFor(client);
    if (blocked > 0) {
      ctx.metrics.rateLimited.inc({ scope: 'client', kind: 'auth_failures' });
      const s = Math.ceil(blocked / 1000);
      return this.refuse(
        gatewayError('rate_limit_exceeded', `too many failed authentications from ${client}; retry after ${s} s`, {
          'retry-after': String(s),
        }),
        d.dialect,
        extra,
      );
    }
    if (!d.ok) {
      if (d.authMetric) ctx.metrics.authFailures.inc({ reason: d.authMetric });
      if ('authFailure' in d && d.authFailure) ctx.authFailures.failed(client);
      this.route = d.route;
      return this.refuse(d.error, d.dialect, extra);
    }
    this.route = d.route;
    this.keyName = d.key.name;
    const specs = ctx.limits.specs(d.route, d.key);
    if (specs.length) {
      const decision = ctx.limits.decide(specs);
      const apply = (dec: LimitDecision): void => {
        if (this.finished || this.socket.destroyed) return this.end();
        if (!dec.ok) {
          for (const s of dec.spent) ctx.metrics.rateLimited.inc(s);
          return this.refuse(dec.error, d.dialect, extra);
        }
        for (const [k, v] of Object.entries(dec.headers)) extra.push(k, v);
        this.forward(h, d, extra);
      };
      if (decision instanceof Promise) {
        decision.then(apply, () =>
          this.refuse(gatewayError('internal_error', 'internal gateway error'), d.dialect, extra),
        );
        return;
      }
      return apply(decision);
    }
    this.forward(h, d, extra);
  }

  private forward(h: RequestHead, d: Accepted, extra: string[]): void {
    const { ctx, req, socket } = this;
    if (d.route.kind === 'predictive') {
      return this.refuse(
        gatewayError('not_found', 'predictive deployments do not accept upgrade (websocket) requests'),
        d.dialect,
        extra,
      );
    }
    // Upgrades are not held while a deployment scales from zero: a websocket client retries on its own.
    const chosen = d.route.notReady ? undefined : ctx.picker.choose(d.route);
    if (!chosen) {
      ctx.metrics.upstreamErrors.inc({ cause: 'no_ready_endpoint' });
      return this.refuse(unavailable(d.route), d.dialect, extra);
    }
    const target = chosen.target;
    if (chosen.variant) extra.push('x-servegate-variant', chosen.variant);
    const headers = upstreamHeaders(h, {
      clientIp: this.conn.client,
      proto: this.conn.proto,
      requestId: this.requestId,
      project: d.route.project,
      deployment: d.route.deployment,
      keyName: d.key.name,
      backendAuthority: target.authority,
      trustForwarded: ctx.head.trustForwarded,
      upgrade: 'websocket',
      traceparent: this.trace?.traceparent,
      tracestate: this.trace?.tracestate,
    });
    const u = new URL(target.origin);
    const upstream = (this.upstream = httpRequest({
      host: u.hostname.replace(/^\[|\]$/g, ''),
      port: Number(u.port || 80),
      method: req.method,
      path: target.basePath + (d.route.pathPrefix ?? '') + d.upstreamPath,
      headers,
      timeout: d.route.timeoutMs,
      agent: false,
    }));
    const route = d.route;
    const dialect = d.dialect;
    upstream.on('upgrade', (res, up: Socket, upHead: Buffer) => {
      if (socket.destroyed) return up.destroy();
      this.tunnel = up;
      const list: string[] = [];
      for (let i = 0; i < res.rawHeaders.length; i += 2) list.push(res.rawHeaders[i], res.rawHeaders[i + 1]);
      socket.write(rawHead(res.statusCode ?? 101, list, res.statusMessage));
      if (upHead.length) socket.write(upHead);
      if (this.head.length) up.write(this.head);
      up.on('error', () => socket.destroy());
      up.on('close', () => socket.destroy());
      up.pipe(socket);
      socket.pipe(up);
      this.record(101);
    });
    upstream.on('response', (res) => {
      // The backend declined the upgrade: its answer is passed on as a normal response (headers filtered as for any
      // answer), then the socket closes. An answer too large to hold is refused rather than passed on cut short.
      const down = downstreamHeaders(res.rawHeaders, ctx.cors.enabled);
      const chunks: Buffer[] = [];
      let size = 0;
      res.on('data', (c: Buffer) => {
        size += c.length;
        if (size <= DECLINE_BODY_MAX) chunks.push(c);
      });
      res.on('error', () => socket.destroy());
      res.on('end', () => {
        if (size > DECLINE_BODY_MAX) {
          ctx.metrics.upstreamErrors.inc({ cause: 'reset' });
          return this.refuse(
            gatewayError(
              'backend_error',
              `deployment ${route.project}/${route.deployment} declined the upgrade with an answer larger than ${DECLINE_BODY_MAX} bytes`,
            ),
            dialect,
            extra,
          );
        }
        const body = Buffer.concat(chunks, size);
        const list = down.list;
        if (!down.length) list.push('content-length', String(size));
        list.push('connection', 'close', ...extra);
        closeSocket(
          socket,
          Buffer.concat([Buffer.from(rawHead(res.statusCode ?? 502, list, res.statusMessage), 'latin1'), body]),
        );
        this.record(res.statusCode ?? 502);
        this.end();
      });
    });
    upstream.on('timeout', () =>
      upstream.destroy(Object.assign(new Error('timeout'), { code: 'UND_ERR_HEADERS_TIMEOUT' })),
    );
    upstream.on('error', (err: NodeJS.ErrnoException) => {
      if (socket.destroyed || this.tunnel) return;
      const mapped = mapUpstreamError(err.code ?? '', route);
      ctx.metrics.upstreamErrors.inc({ cause: mapped.cause });
      this.refuse(mapped.error, dialect, extra);
    });
    upstream.end();
  }

  private refuse(err: GatewayError, dialect: Dialect, extra: string[]): void {
    sendRawError(this.socket, err, dialect, extra);
    this.record(err.status, err.message);
    this.end();
  }

  private record(status: number, error?: string): void {
    if (this.trace) {
      if (this.route) this.trace.route(this.route.project, this.route.deployment);
      this.trace.end(status, error);
    }
    recordAnswer(this.ctx, {
      req: this.req,
      client: this.conn.client,
      requestId: this.requestId,
      route: this.route,
      keyName: this.keyName,
      status,
      started: this.started,
      upstream: '',
      bytesIn: 0,
      bytesOut: 0,
      error,
    });
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
    socket.unshift(Buffer.concat([Buffer.from(text, 'latin1'), this.head]));
    this.server.emit('connection', socket);
  }
}

/** A websocket on the OpenAI base URL: the `model` query parameter picks the deployment and is rewritten like a body's. */
function upgradeByModel(table: RouteTable, d: ByModel): Accepted | Refusal {
  const params = new URLSearchParams(d.search);
  const route = selectModel(table, d.key, params.get('model') ?? undefined);
  if (route instanceof Error) {
    return {
      ok: false,
      error: route,
      dialect: 'openai',
      key: d.key,
      authMetric: route.code === 'model_forbidden' ? 'forbidden' : undefined,
    };
  }
  params.set('model', servedModel(route));
  return acceptByModel(d, route, `?${params.toString()}`);
}
