// The data plane's socket code: carries bytes between client and backend according to decide()'s answer.
// Streams responses chunk by chunk, ends the upstream request when the client hangs up, maps failures to errors.
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Transform, type Readable } from 'node:stream';
import type { Dispatcher } from 'undici';
import type { Config } from '../config/schema.js';
import type { Logger } from '../log.js';
import type { RouteStore } from '../routing/store.js';
import type { Route } from '../routing/types.js';
import type { EndpointResolver } from '../sources/types.js';
import { corsPolicy, isPreflight, preflightHeaders, responseCorsHeaders, type CorsPolicy } from './cors.js';
import { decide, type Accepted } from './decide.js';
import { gatewayError, renderError, type Dialect, type GatewayError } from './errors.js';
import { clientRequestId, downstreamHeaders, upstreamHeaders } from './headers.js';
import type { Metrics } from './metrics.js';
import { validateBody } from './protocol.js';
import { RateLimiter } from './ratelimit.js';
import { Pools, TargetPicker, type Target } from './upstream.js';
import { forwardUpgrade } from './upgrade.js';
import type { Socket } from 'node:net';

const BODY_TOO_LARGE = 'SERVEGATE_BODY_TOO_LARGE';

/** Errors from connecting: nothing reached the backend, so the request may be sent again. */
const CONNECT_FAILURES = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'UND_ERR_CONNECT_TIMEOUT', 'ECONNABORTED']);

export interface GatewayDeps {
  config: Config;
  store: RouteStore;
  metrics: Metrics;
  logger: Logger;
  endpoints?: EndpointResolver;
}

export class Gateway {
  readonly cors: CorsPolicy;
  readonly pools = new Pools();
  private readonly picker: TargetPicker;
  private readonly limiter: RateLimiter;
  private readonly maxBody: number;
  private readonly idleMs: number;
  /** Set by shutdown(): answers carry Connection: close. */
  draining = false;
  /** Responses being forwarded now, each with the function that ends it (used at the shutdown deadline). */
  private readonly active = new Map<ServerResponse, () => void>();

  constructor(private readonly deps: GatewayDeps) {
    this.cors = corsPolicy(deps.config.cors);
    this.picker = new TargetPicker(deps.endpoints);
    this.limiter = new RateLimiter(deps.config.limits.rateLimitPerKey, deps.config.limits.rateLimitBurst);
    this.maxBody = deps.config.limits.maxRequestBodyBytes;
    this.idleMs = deps.config.limits.streamIdleTimeoutSeconds * 1000;
  }

  /** The 'request' handler; also the 'checkContinue' handler (then continueRequested is true). */
  handle(req: IncomingMessage, res: ServerResponse, continueRequested = false): void {
    const started = performance.now();
    const requestId = clientRequestId(req.headers['x-request-id']) ?? randomUUID();
    res.setHeader('x-request-id', requestId);
    if (this.draining) res.setHeader('connection', 'close');
    const origin = req.headers.origin;

    if (isPreflight(req.method, req.headers)) {
      const h = preflightHeaders(this.cors, origin, headerString(req.headers['access-control-request-headers']));
      res.writeHead(204, h);
      res.end();
      this.finish(req, res, started, undefined, 204, requestId);
      return;
    }
    const cors = responseCorsHeaders(this.cors, origin);
    if (cors) for (const k in cors) res.setHeader(k, cors[k]);

    const d = decide(
      {
        method: req.method ?? 'GET',
        url: req.url ?? '/',
        host: req.headers.host,
        authorization: req.headers.authorization,
        contentType: req.headers['content-type'],
        now: Date.now(),
      },
      this.deps.store.current(),
    );
    if (!d.ok) {
      if (d.authFailure) this.deps.metrics.authFailures.inc({ reason: d.authFailure });
      else if (d.error.code === 'project_forbidden') this.deps.metrics.authFailures.inc({ reason: 'forbidden' });
      this.refuse(req, res, d.error, d.dialect, started, requestId, d.route);
      return;
    }
    const wait = this.limiter.take(`${d.key.namespace}/${d.key.name}`, Date.now());
    if (wait > 0) {
      this.refuse(req, res, gatewayError('rate_limited', `rate limit of ${this.deps.config.limits.rateLimitPerKey} requests/s for this API key exceeded`, { 'retry-after': String(wait) }), d.dialect, started, requestId, d.route);
      return;
    }
    const declared = contentLength(req);
    if (declared !== undefined && declared > this.maxBody) {
      res.setHeader('connection', 'close');
      this.refuse(req, res, tooLarge(this.maxBody), d.dialect, started, requestId, d.route);
      return;
    }
    if (continueRequested) res.writeContinue();

    if (d.check === 'none') {
      const hasBody = declared !== undefined ? declared > 0 : req.headers['transfer-encoding'] !== undefined;
      const body = !hasBody ? null : declared !== undefined ? req : limitStream(req, this.maxBody);
      this.forward(req, res, d, body, declared, started, requestId, 0, undefined);
      return;
    }
    readBody(req, this.maxBody).then(
      (buf) => {
        if (buf === undefined) {
          res.setHeader('connection', 'close');
          this.refuse(req, res, tooLarge(this.maxBody), d.dialect, started, requestId, d.route);
          return;
        }
        const invalid = validateBody(d.check, buf);
        if (invalid) {
          this.refuse(req, res, invalid, d.dialect, started, requestId, d.route);
          return;
        }
        this.forward(req, res, d, buf, buf.length, started, requestId, 0, undefined);
      },
      () => {
        // The client went away while sending its body: nothing to answer.
        res.destroy();
      },
    );
  }

  private forward(
    req: IncomingMessage,
    res: ServerResponse,
    d: Accepted,
    body: Buffer | Readable | null,
    length: number | undefined,
    started: number,
    requestId: string,
    attempt: number,
    avoid: string | undefined,
  ): void {
    const { route } = d;
    const target = this.picker.pick(route.backend, avoid);
    if (!target) {
      this.deps.metrics.upstreamErrors.inc({ cause: 'no_ready_endpoint' });
      this.refuse(req, res, gatewayError('no_ready_endpoint', `deployment ${route.project}/${route.deployment} has no ready endpoint`, { 'retry-after': '5' }), d.dialect, started, requestId, route);
      return;
    }
    const headers = upstreamHeaders(req.headers, {
      clientIp: clientIp(req),
      proto: (req.socket as { encrypted?: boolean }).encrypted ? 'https' : 'http',
      host: req.headers.host,
      requestId,
      project: route.project,
      deployment: route.deployment,
      keyName: d.key.name,
      backendAuthority: target.authority,
      trustForwarded: this.deps.config.trustForwardedHeaders,
      contentLength: length,
    });
    const gw = this;
    let controller: Dispatcher.DispatchController | undefined;
    let clientGone = false;
    let responded = false;
    const onClose = (): void => {
      if (res.writableFinished) return;
      clientGone = true;
      if (controller && !controller.aborted) controller.abort(new ClientGone());
    };
    res.on('close', onClose);
    this.active.set(res, () => {
      clientGone = true;
      if (controller && !controller.aborted) controller.abort(new ClientGone());
      // An event stream can end cleanly at an event boundary; anything else is cut so it is not mistaken for complete.
      if (res.headersSent && String(res.getHeader('content-type') ?? '').startsWith('text/event-stream')) res.end();
      else res.destroy();
    });
    this.deps.metrics.inflight.inc();
    const done = (): void => {
      this.active.delete(res);
      this.deps.metrics.inflight.dec();
      res.off('close', onClose);
    };

    const handler: Dispatcher.DispatchHandler = {
      onRequestStart(c) {
        controller = c;
        if (clientGone) c.abort(new ClientGone());
      },
      onResponseStart(c, status, upstream) {
        if (status < 200) return; // 1xx informational: not passed on
        responded = true;
        const out = downstreamHeaders(upstream, gw.cors.enabled);
        for (const k in out) res.setHeader(k, out[k]!);
        res.statusCode = status;
        const ct = upstream['content-type'];
        if (typeof ct === 'string' && ct.startsWith('text/event-stream')) {
          res.setHeader('x-accel-buffering', 'no');
          res.setHeader('cache-control', upstream['cache-control'] ?? 'no-cache');
          res.flushHeaders();
        }
      },
      onResponseData(c, chunk) {
        if (clientGone) return;
        if (!res.write(chunk)) {
          c.pause();
          res.once('drain', () => c.resume());
        }
      },
      onResponseEnd() {
        done();
        res.end();
        gw.finish(req, res, started, route, res.statusCode, requestId);
      },
      onResponseError(_c, err) {
        done();
        if (clientGone || err instanceof ClientGone) {
          gw.deps.metrics.upstreamErrors.inc({ cause: 'client_abort' });
          gw.finish(req, res, started, route, 499, requestId);
          return;
        }
        const code = (err as { code?: string }).code ?? '';
        const retryable = !responded && CONNECT_FAILURES.has(code) && (body === null || Buffer.isBuffer(body)) && attempt < 1;
        if (retryable) {
          gw.deps.logger.debug({ requestId, err: code, target: target.origin }, 'connect failed, retrying once');
          setTimeout(() => gw.forward(req, res, d, body, length, started, requestId, attempt + 1, target.origin.slice(7)), 25);
          return;
        }
        if (responded || res.headersSent) {
          // Mid-response failure: cut the connection so the client sees an incomplete response, never a silent truncation.
          const cause = code === 'UND_ERR_BODY_TIMEOUT' ? 'stream_idle_timeout' : 'reset';
          gw.deps.metrics.upstreamErrors.inc({ cause });
          gw.deps.logger.warn({ requestId, project: route.project, deployment: route.deployment, cause }, 'backend response ended early');
          res.destroy();
          gw.finish(req, res, started, route, res.statusCode, requestId);
          return;
        }
        if (code === BODY_TOO_LARGE) {
          res.setHeader('connection', 'close');
          gw.refuse(req, res, tooLarge(gw.maxBody), d.dialect, started, requestId, route);
          return;
        }
        const mapped = mapUpstreamError(code, route, target);
        gw.deps.metrics.upstreamErrors.inc({ cause: mapped.cause });
        gw.deps.logger.warn({ requestId, project: route.project, deployment: route.deployment, cause: mapped.cause, err: code || err.message }, 'backend failed');
        gw.refuse(req, res, mapped.error, d.dialect, started, requestId, route);
      },
    };

    try {
      const pool = this.pools.get(target.origin);
      pool.dispatch(
        {
          path: target.basePath + d.upstreamPath,
          method: (req.method ?? 'GET') as Dispatcher.HttpMethod,
          headers,
          body,
          headersTimeout: route.timeoutMs,
          bodyTimeout: this.idleMs,
          idempotent: false,
        },
        handler,
      );
    } catch (err) {
      handler.onResponseError!(undefined as never, err as Error);
    }
  }

  private refuse(req: IncomingMessage, res: ServerResponse, err: GatewayError, dialect: Dialect, started: number, requestId: string, route?: Route): void {
    if (res.headersSent || res.destroyed) {
      res.destroy();
      return;
    }
    const body = renderError(err, dialect);
    for (const k in err.headers) res.setHeader(k, err.headers[k]);
    res.setHeader('content-type', 'application/json');
    res.setHeader('content-length', Buffer.byteLength(body));
    res.statusCode = err.status;
    res.end(body);
    if (req.readable && !req.readableEnded) {
      // The body was not read: do not keep the connection for a request we did not consume.
      if (!res.hasHeader('connection')) res.shouldKeepAlive = false;
      req.resume();
    }
    this.finish(req, res, started, route, err.status, requestId, err.message);
  }

  private finish(req: IncomingMessage, res: ServerResponse, started: number, route: Route | undefined, status: number, requestId: string, error?: string): void {
    const seconds = (performance.now() - started) / 1000;
    const project = route?.project ?? '';
    const deployment = route?.deployment ?? '';
    this.deps.metrics.requests.inc({ project, deployment, status: String(status) });
    this.deps.metrics.duration.observe({ project, deployment }, seconds);
    const log = this.deps.logger;
    if (log.isLevelEnabled('info')) {
      log.info(
        { requestId, method: req.method, path: pathOnly(req.url), project, deployment, status, ms: Math.round(seconds * 10000) / 10, error },
        'request',
      );
    }
  }

  /** The 'upgrade' handler: websockets (and other upgrades) for python and LLM deployments. */
  handleUpgrade(req: IncomingMessage, socket: Socket, head: Buffer): void {
    forwardUpgrade(this, this.deps, this.picker, req, socket, head);
  }

  /** Ends every response still being forwarded (shutdown deadline). */
  endAll(): void {
    for (const end of [...this.active.values()]) end();
  }

  async close(): Promise<void> {
    await this.pools.close();
  }
}

class ClientGone extends Error {
  constructor() {
    super('client closed the connection');
  }
}

function mapUpstreamError(code: string, route: Route, target: Target): { error: GatewayError; cause: string } {
  const where = `deployment ${route.project}/${route.deployment}`;
  if (code === 'UND_ERR_HEADERS_TIMEOUT') {
    return { cause: 'headers_timeout', error: gatewayError('backend_timeout', `${where} did not answer within ${route.timeoutMs / 1000}s`) };
  }
  if (CONNECT_FAILURES.has(code)) {
    return { cause: 'connect_refused', error: gatewayError('backend_unavailable', `${where}: the backend refused the connection (${code})`) };
  }
  void target;
  return { cause: 'reset', error: gatewayError('backend_error', `${where}: the backend closed the connection before answering${code ? ` (${code})` : ''}`) };
}

/** The peer address, without the IPv4-mapped IPv6 prefix. */
export function clientIp(req: IncomingMessage): string {
  const a = req.socket.remoteAddress ?? '';
  return a.startsWith('::ffff:') ? a.slice(7) : a;
}

function tooLarge(max: number): GatewayError {
  return gatewayError('body_too_large', `request body is larger than the limit of ${max} bytes`);
}

function contentLength(req: IncomingMessage): number | undefined {
  const v = req.headers['content-length'];
  if (v === undefined) return undefined;
  const n = Number(v);
  return Number.isFinite(n) && n >= 0 ? n : undefined;
}

function headerString(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v.join(',') : v;
}

function pathOnly(url: string | undefined): string {
  if (!url) return '/';
  const q = url.indexOf('?');
  return q === -1 ? url : url.slice(0, q);
}

/** Reads a whole body up to max bytes; undefined when it is larger. */
function readBody(req: IncomingMessage, max: number): Promise<Buffer | undefined> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let over = false;
    req.on('data', (c: Buffer) => {
      if (over) return;
      size += c.length;
      if (size > max) {
        over = true;
        chunks.length = 0;
        resolve(undefined);
        return;
      }
      chunks.push(c);
    });
    req.on('end', () => {
      if (!over) resolve(chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, size));
    });
    req.on('error', reject);
    req.on('close', () => {
      if (!req.complete && !over) reject(new Error('client aborted'));
    });
  });
}

/** Streams a chunked body through, failing once it passes max bytes. */
function limitStream(req: IncomingMessage, max: number): Readable {
  let size = 0;
  const t = new Transform({
    transform(chunk: Buffer, _enc, cb) {
      size += chunk.length;
      if (size > max) cb(Object.assign(new Error(`request body is larger than the limit of ${max} bytes`), { code: BODY_TOO_LARGE }));
      else cb(null, chunk);
    },
  });
  req.on('error', (e) => t.destroy(e));
  req.on('close', () => {
    if (!req.complete) t.destroy(new Error('client aborted'));
  });
  return req.pipe(t);
}
