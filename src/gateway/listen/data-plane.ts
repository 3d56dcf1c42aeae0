// The data-plane listener: Node's HTTP server with its events wired to connections and exchanges. Every request and
// upgrade becomes a job on its connection; parse errors are answered in their place in the pipeline; a once-a-second
// sweep over the connections (not over requests) runs the body and slow-reader timeouts.
import {
  createServer,
  maxHeaderSize,
  type IncomingMessage,
  type Server,
  type ServerOptions,
  type ServerResponse,
} from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { Socket } from 'node:net';
import type { Config } from '../../config/schema.js';
import type { Route, RouteTable } from '../../routing/types.js';
import type { EndpointView } from '../../admin/page.js';
import { logWriter, type Logger } from '../../log.js';
import type { RouteStore } from '../../routing/store.js';
import type { EndpointResolver } from '../../sources/types.js';
import { AccessLog } from '../../observe/access-log.js';
import { Conn } from './connection.js';
import { ALLOWED_METHODS, corsPolicy, responseCorsList } from '../admit/cors.js';
import type { Drain } from './drain.js';
import { gatewayError } from '../http/errors.js';
import { Exchange } from '../forward/exchange.js';
import { DecodeBudget } from '../http/body-encoding.js';
import type { PlaneContext } from '../forward/context.js';
import type { Metrics } from '../../observe/metrics.js';
import { PerSecondLimiter } from '../../limits/per-second.js';
import { destroyOnError, sendRawError } from '../http/answers.js';
import type { Tracing } from '../../observe/tracing.js';
import { AuthFailureLimiter } from '../../limits/auth-failures.js';
import type { LimitStore } from '../../limits/buckets.js';
import { MemoryLimitStore } from '../../limits/memory.js';
import { PerMinuteLimits } from '../../limits/per-minute.js';
import { Budgets, MemoryBudgetStore, type BudgetStore } from '../../limits/budgets.js';
import { UpgradeJob } from '../forward/websocket.js';
import { BodyBudget } from '../forward/body-budget.js';
import type { HoldQueues } from '../forward/scale-from-zero.js';
import type { EndpointStats, ScrapeTarget } from '../forward/endpoint-stats.js';
import { Pools } from '../forward/pools.js';
import { TargetPicker } from '../forward/targets.js';
import { FairQueues } from '../forward/fair-queue.js';
import { TunnelCounts } from '../forward/tunnels.js';
import { copyWith } from '../../same-shape.js';
import { capIdleParsers } from './parser-pool.js';
import { guessDialect } from '../admit/route.js';

export interface DataPlaneDeps {
  config: Config;
  store: RouteStore;
  metrics: Metrics;
  logger: Logger;
  drain: Drain;
  /** The scale-from-zero queues (made by the caller, which also reads them for servegate_pending_requests). */
  holds: HoldQueues;
  /** What LLM endpoints report about their load (made by the caller, which also reads it for the metrics). */
  endpointStats?: EndpointStats;
  endpoints?: EndpointResolver;
  /** Tracing on (tracing.otlpEndpoint set). */
  tracing?: Tracing;
  /** Where per-minute limits count (Redis with limits.redis.url); default in process. */
  limitStore?: LimitStore;
  /** Budgets per key and project (SPEC §14); default: from the configuration, counted in process. */
  budgets?: Budgets;
  /** The certificate pair: the main listener speaks https (and `plain` is the optional extra http one). */
  tls?: { cert: Buffer; key: Buffer; plain: boolean };
}

export interface DataPlane {
  /** The main listener: https with `tls`, else http. */
  server: Server;
  /** With `tls.plain`: the extra plain-http listener, served the same way. */
  plain?: Server;
  /** Every listener, for listen and drain. */
  servers: Server[];
  /** A deployment's endpoints with their in-flight requests and last reported figures (/deployments, the page). */
  endpointsOf(route: Route): EndpointView[] | undefined;
  /** Swaps the certificate for new TLS connections (connections already open keep theirs). */
  setCertificate(pair: { cert: Buffer; key: Buffer }): void;
  ctx: PlaneContext;
  /** Closes the backend connection pools and stops the sweep. */
  close(): Promise<void>;
}

/** Errors of the peer's socket itself: nothing can be answered. */
const SOCKET_ERRORS = new Set(['ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'ECONNABORTED', 'ERR_STREAM_DESTROYED']);

/** The target of the request line that starts `packet` (the bytes Node's parser failed on), if it does. */
function requestTargetOf(packet: unknown): string | undefined {
  if (!Buffer.isBuffer(packet)) return undefined;
  const m = REQUEST_LINE.exec(packet.toString('latin1', 0, Math.min(packet.length, 8192)));
  return m?.[1];
}
/** The first Origin header line's value in the head that starts `packet` (looked for in its first 16 KB). */
function originOf(packet: Buffer): string | undefined {
  const head = packet.toString('latin1', 0, Math.min(packet.length, 16_384));
  const end = head.indexOf('\r\n\r\n');
  const m = ORIGIN_LINE.exec(end === -1 ? head : head.slice(0, end));
  return m?.[1].trim();
}
const ORIGIN_LINE = /\r\norigin:[ \t]*([^\r\n]{1,2048})/i;
const REQUEST_LINE = /^[A-Z]{1,20} (\/[^\s]{0,8000}) HTTP\/1\.[01]\r?\n/;

/** The budgets of a configuration, counted in `store`, their spend in the budget gauges. */
export function budgetsOf(config: Config, store: BudgetStore, metrics: Metrics): Budgets {
  return new Budgets(
    store,
    { perProject: config.limits.perProject, projects: config.limits.projects },
    {
      failOpen: config.limits.redis.failOpen,
      onSpent: (spec, spent) => {
        metrics.budgetSpentTokens.set({ scope: spec.scope, name: spec.name }, spent.tokens);
        metrics.budgetSpentCost.set({ scope: spec.scope, name: spec.name }, spent.costMicros / 1e6);
      },
    },
  );
}

export function createDataPlane(deps: DataPlaneDeps): DataPlane {
  const { config, drain, logger, store, metrics, holds } = deps;
  const limits = config.limits;
  const cors = corsPolicy(config.cors);
  const perMinute = new PerMinuteLimits(deps.limitStore ?? new MemoryLimitStore(), limits.perKey);
  const picker = new TargetPicker(deps.endpoints, deps.endpointStats, config.balancing);
  // Fair, prioritized queueing of saturated LLM deployments (SPEC §14): told of every request at every endpoint.
  const q = config.queueing;
  const queues = new FairQueues(
    {
      enabled: q.enabled,
      maxWaitSeconds: q.maxWaitSeconds,
      maxQueued: q.maxQueued,
      maxQueuedBytes: q.maxQueuedBytes,
      maxWaiting: config.balancing.maxWaiting,
      maxKvCache: config.balancing.maxKvCache,
    },
    picker,
    deps.endpointStats,
    metrics,
  );
  picker.watcher = queues;
  // The endpoints of every deployment picked by its servers' load: their metrics are scraped in the background.
  // With fair queueing on, a deployment of one endpoint is scraped too: its saturation decides whether requests queue.
  const scrapeFrom = config.queueing.enabled ? 1 : 2;
  deps.endpointStats?.start(() => scrapeTargets(llmRoutes(store.current()), picker, scrapeFrom));
  const ctx: PlaneContext = {
    store,
    metrics,
    logger,
    access: config.accessLog && logger.isLevelEnabled('info') ? new AccessLog(logWriter(logger)) : undefined,
    cors,
    admission: {
      get table() {
        return store.current();
      },
      cors,
      perSecond: new PerSecondLimiter(limits.rateLimitPerKey, limits.rateLimitBurst),
      perMinute,
      budgets: deps.budgets ?? budgetsOf(config, new MemoryBudgetStore(), metrics),
      authFailures: new AuthFailureLimiter(config.auth.failureLimit),
      counters: {
        authFailure: (reason) => metrics.authFailures.inc({ reason }),
        rateLimited: (labels) => metrics.rateLimited.inc(labels),
      },
    },
    perMinute,
    picker,
    pools: new Pools(),
    drain,
    head: {
      trustForwarded: config.trustForwardedHeaders,
      forwardUnderscore: config.forwardUnderscoreHeaders,
      tracing: deps.tracing !== undefined,
    },
    tracing: deps.tracing,
    holds,
    queues,
    maxBody: limits.maxRequestBodyBytes,
    maxDecoded: Math.min(limits.maxDecodedBodyBytes, limits.maxRequestBodyBytes),
    decoder: new DecodeBudget(limits.decodeConcurrency),
    bodies: new BodyBudget(limits.maxBufferedBodyBytes, limits.bufferedBodyWaitSeconds * 1000),
    bodyMinRate: limits.requestBodyMinBytesPerSecond,
    maxHeaders: limits.maxRequestHeaders,
    streamIdleMs: limits.streamIdleTimeoutSeconds * 1000,
    bodyIdleMs: limits.requestBodyIdleTimeoutSeconds * 1000,
    websocketIdleMs: limits.websocketIdleTimeoutSeconds * 1000,
    tunnels: new TunnelCounts(limits.websocketsPerKey, limits.websocketsPerClient),
  };

  // Held requests look again when endpoints change or a new table is in (an InferenceService became ready).
  const unsubscribe = [
    deps.endpoints?.onEndpointsChanged?.(() => holds.changed()),
    store.onBuild(() => holds.changed()),
  ];

  const options: ServerOptions = {
    noDelay: true,
    keepAlive: true,
    requestTimeout: 0, // uploads and streams may be long; slow bodies have their own idle timeout
    headersTimeout: limits.headersTimeoutSeconds * 1000,
    // How often Node checks the headers timeout (its default, 30 s, would let a slow client hold a socket that long).
    connectionsCheckingInterval: Math.min(1000, limits.headersTimeoutSeconds * 500),
    keepAliveTimeout: 75_000,
    // The gateway answers a missing Host itself, as JSON.
    requireHostHeader: false,
  };
  // Node keeps up to 1,000 idle request parsers after a burst of connections; the gateway keeps fewer (parser-pool.ts).
  capIdleParsers();
  const tls = deps.tls;
  const server: Server = tls
    ? (createHttpsServer(
        copyWith(options, {
          cert: tls.cert,
          key: tls.key,
          minVersion: 'TLSv1.2' as const,
          // A handshake not done within the headers timeout is dropped (Node's default, 120 s, would let a client that
          // never finishes its ClientHello hold a socket that long). It runs from the connection, however slowly the
          // peer trickles its bytes in; the headers timeout then starts once the handshake is done.
          handshakeTimeout: limits.headersTimeoutSeconds * 1000,
        }),
      ) as unknown as Server)
    : createServer(options);
  const plain = tls?.plain ? createServer(options) : undefined;
  const servers = plain ? [server, plain] : [server];
  for (const s of servers) wire(s, s !== server || !tls);

  function wire(server: Server, cleartext: boolean): void {
    // One more than the limit, so that a request over it is seen (and refused) instead of silently cut short: Node drops
    // the header lines past maxHeadersCount, the framing ones included.
    server.maxHeadersCount = limits.maxRequestHeaders + 1;

    const connOf = (socket: Socket): Conn => Conn.of(socket) ?? track(socket);
    const track = (socket: Socket): Conn => {
      const c = new Conn(socket, drain);
      drain.track(c);
      return c;
    };
    // A TLS connection is tracked once its handshake is done (its requests come on the TLSSocket, not the TCP one); a
    // failed handshake is dropped without a word (there is no HTTP to answer in).
    server.on(cleartext ? 'connection' : 'secureConnection', (socket: Socket) => {
      if (!Conn.of(socket)) track(socket);
    });
    if (!cleartext) server.on('tlsClientError', (_err: Error, socket: Socket) => socket.destroy());
    server.on('request', (req: IncomingMessage, res: ServerResponse) => {
      const conn = connOf(req.socket);
      conn.submit(new Exchange(ctx, conn, req, res, false));
    });
    server.on('checkContinue', (req: IncomingMessage, res: ServerResponse) => {
      const conn = connOf(req.socket);
      conn.submit(new Exchange(ctx, conn, req, res, true));
    });
    server.on('checkExpectation', (req: IncomingMessage, res: ServerResponse) => {
      const conn = connOf(req.socket);
      conn.submit(new Exchange(ctx, conn, req, res, false, String(req.headers.expect ?? '')));
    });
    server.on('upgrade', (req: IncomingMessage, socket: Socket, head: Buffer) => {
      // Node hands the socket over without its error listener: one until the job takes it (it may wait its turn).
      socket.on('error', destroyOnError);
      const conn = connOf(socket);
      conn.submit(new UpgradeJob(ctx, conn, server, req, socket, head));
    });
    server.on('connect', (_req: IncomingMessage, socket: Socket) => {
      // CONNECT would make the gateway a TCP proxy: never.
      sendRawError(
        socket,
        gatewayError('method_not_allowed', 'CONNECT is not supported: servegate is not a forward proxy', {
          allow: ALLOWED_METHODS,
        }),
        'kserve',
        [],
      );
    });
    server.on('clientError', (err: NodeJS.ErrnoException, socket: Socket) => {
      const code = err.code ?? '';
      if (SOCKET_ERRORS.has(code) || !socket.writable) {
        socket.destroy();
        return;
      }
      const reason = (err as { reason?: string }).reason;
      const e =
        code === 'HPE_HEADER_OVERFLOW'
          ? gatewayError(
              'headers_too_large',
              `request line and headers are larger than the limit of ${Math.round(maxHeaderSize / 1024)} KB`,
            )
          : code === 'ERR_HTTP_REQUEST_TIMEOUT'
            ? gatewayError('request_timeout', `request headers not received within ${limits.headersTimeoutSeconds}s`)
            : gatewayError(
                'bad_request',
                `malformed HTTP request (${code || 'parse error'}${reason ? `: ${reason}` : ''})`,
              );
      // In the dialect the request's target reads as, with the CORS headers of its allowed Origin, when the bytes Node
      // failed on start with the request line.
      const packet = (err as { rawPacket?: unknown }).rawPacket;
      const target = requestTargetOf(packet);
      const dialect = target === undefined ? 'kserve' : guessDialect(target, undefined, '');
      const origin = target === undefined ? undefined : originOf(packet as Buffer);
      const headers = (origin !== undefined && responseCorsList(cors, origin)) || [];
      const conn = Conn.of(socket);
      if (conn) conn.fail(e, dialect, headers);
      else sendRawError(socket, e, dialect, headers);
    });
  }

  const sweep = setInterval(() => {
    const now = Date.now();
    for (const c of drain.connections) c.tick(now);
  }, 1000).unref();

  return {
    server,
    plain,
    servers,
    setCertificate(pair) {
      (server as unknown as { setSecureContext(o: object): void }).setSecureContext({
        cert: pair.cert,
        key: pair.key,
        minVersion: 'TLSv1.2',
      });
    },
    ctx,
    endpointsOf(route) {
      const list = picker.targets(route.backend);
      if (!list) return undefined;
      const picks = picker.picksOf(list);
      const total = picks.reduce((n, p) => n + p.picks, 0);
      return list.map((t, i) => {
        const s = deps.endpointStats?.fresh(t.origin);
        const errors = deps.endpointStats?.errorsAt(t.origin) ?? 0;
        return {
          address: t.address,
          inflight: picker.inflightAt(t.origin),
          ...(s ? { waiting: s.waiting, running: s.running, kvCacheUsage: s.kv } : {}),
          ...(errors ? { scrapeErrors: errors } : {}),
          picks: picks[i].picks,
          share: total ? picks[i].picks / total : 0,
          ...(route.balancing.policy === 'llm' ? { weight: picks[i].weight } : {}),
        };
      });
    },
    async close() {
      clearInterval(sweep);
      for (const u of unsubscribe) u?.();
      holds.close();
      queues.close();
      await deps.endpointStats?.close();
      ctx.access?.flush();
      await ctx.pools.close();
    },
  };
}

/** Per table: the routes picked by their servers' load (walked every scrape round, so not every route each time). */
const llmRouteLists = new WeakMap<RouteTable, Route[]>();

function llmRoutes(table: RouteTable): Route[] {
  let list = llmRouteLists.get(table);
  if (!list) {
    list = table.routes.filter((r) => r.balancing.policy === 'llm');
    llmRouteLists.set(table, list);
  }
  return list;
}

/**
 * Where the metrics of each endpoint of an llm-policy deployment are (its serving port, or balancing.metricsPort), for
 * deployments of at least `from` endpoints.
 */
function* scrapeTargets(routes: Iterable<Route>, picker: TargetPicker, from = 2): Iterable<ScrapeTarget> {
  for (const r of routes) {
    if (r.balancing.policy !== 'llm') continue;
    for (const backend of r.canary ? [r.backend, r.canary.backend] : [r.backend]) {
      const list = picker.targets(backend);
      if (!list || list.length < from) continue;
      for (const t of list) {
        const u = new URL(t.origin);
        if (r.balancing.metricsPort) u.port = String(r.balancing.metricsPort);
        yield { origin: t.origin, address: t.address, metricsUrl: `${u.origin}${r.balancing.metricsPath}` };
      }
    }
  }
}
