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
import { clientRequestId, upstreamHeaders } from './headers.js';
import type { Metrics } from './metrics.js';
import { validateBody } from './protocol.js';
import { RateLimiter } from './ratelimit.js';
import { Forwarding } from './forwarding.js';
import { BODY_TOO_LARGE, tooLarge } from './upstream-errors.js';
import { Pools, TargetPicker, type Target } from './upstream.js';
import { forwardUpgrade } from './upgrade.js';
import type { Socket } from 'node:net';

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
  readonly maxBody: number;
  private readonly idleMs: number;
  /** Set by shutdown(): answers carry Connection: close. */
  draining = false;
  /** Requests being forwarded now (ended at the shutdown deadline). */
  private readonly active = new Set<Forwarding>();

  constructor(readonly deps: GatewayDeps) {
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

  /** Sends the request to the backend (a Forwarding per attempt) — or 503 when the Service has no ready endpoint. */
  forward(req: IncomingMessage, res: ServerResponse, d: Accepted, body: Buffer | Readable | null, length: number | undefined, started: number, requestId: string, attempt: number, avoid: string | undefined): void {
    const { route } = d;
    const target = this.picker.pick(route.backend, avoid);
    if (!target) {
      this.deps.metrics.upstreamErrors.inc({ cause: 'no_ready_endpoint' });
      this.refuse(req, res, gatewayError('no_ready_endpoint', `deployment ${route.project}/${route.deployment} has no ready endpoint`, { 'retry-after': '5' }), d.dialect, started, requestId, route);
      return;
    }
    const headers = this.upstreamHeadersFor(req, d, target, requestId, { contentLength: length });
    const f = new Forwarding(this, req, res, d, body, length, started, requestId, attempt, target);
    this.active.add(f);
    this.deps.metrics.inflight.inc();
    try {
      this.pools.get(target.origin).dispatch(
        {
          path: target.basePath + d.upstreamPath,
          method: (req.method ?? 'GET') as Dispatcher.HttpMethod,
          headers,
          body,
          headersTimeout: route.timeoutMs,
          bodyTimeout: this.idleMs,
          idempotent: false,
        },
        f,
      );
    } catch (err) {
      f.onResponseError(undefined, err as Error);
    }
  }

  /** The headers the backend gets for an accepted request (SPEC §3), for plain requests and upgrades alike. */
  upstreamHeadersFor(req: IncomingMessage, d: Accepted, target: Target, requestId: string, extra: { contentLength?: number; upgrade?: boolean }): Record<string, string | string[]> {
    return upstreamHeaders(req.headers, {
      clientIp: clientIp(req),
      proto: (req.socket as { encrypted?: boolean }).encrypted ? 'https' : 'http',
      host: req.headers.host,
      requestId,
      project: d.route.project,
      deployment: d.route.deployment,
      keyName: d.key.name,
      backendAuthority: target.authority,
      trustForwarded: this.deps.config.trustForwardedHeaders,
      ...extra,
    });
  }

  /** Called by a Forwarding when it is over. */
  settled(f: Forwarding): void {
    this.active.delete(f);
    this.deps.metrics.inflight.dec();
  }

  refuse(req: IncomingMessage, res: ServerResponse, err: GatewayError, dialect: Dialect, started: number, requestId: string, route?: Route): void {
    if (res.headersSent || res.destroyed) {
      res.destroy();
      return;
    }
    const body = renderError(err, dialect);
    for (const k in err.headers) res.setHeader(k, err.headers[k]);
    res.setHeader('content-type', 'application/json');
    res.setHeader('content-length', Buffer.byteLength(body));
    // A body we did not read (or that the client has not sent yet, waiting for 100-continue) is not read now:
    // the connection closes after the answer instead of carrying unread bytes into the next request.
    const unread = !req.complete && ((contentLength(req) ?? 0) > 0 || req.headers['transfer-encoding'] !== undefined);
    if (unread) res.setHeader('connection', 'close');
    res.statusCode = err.status;
    res.end(body);
    if (unread) req.resume();
    this.finish(req, res, started, route, err.status, requestId, err.message);
  }

  finish(req: IncomingMessage, res: ServerResponse, started: number, route: Route | undefined, status: number, requestId: string, error?: string): void {
    const seconds = (performance.now() - started) / 1000;
    const project = route?.project ?? '';
    const deployment = route?.deployment ?? '';
    this.deps.metrics.observeRequest(project, deployment, status, seconds);
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
    forwardUpgrade(this, this.picker, req, socket, head);
  }

  /** Ends every response still being forwarded (shutdown deadline). */
  endAll(): void {
    for (const f of [...this.active]) f.end();
  }

  async close(): Promise<void> {
    await this.pools.close();
  }
}

/** The peer address, without the IPv4-mapped IPv6 prefix. */
export function clientIp(req: IncomingMessage): string {
  const a = req.socket.remoteAddress ?? '';
  return a.startsWith('::ffff:') ? a.slice(7) : a;
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
