// Assembles one servegate process: a route source feeding the store, the gateway listener and the admin listener,
// and the graceful shutdown that drains them.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { Server as NetServer, type AddressInfo } from 'node:net';
import type { Config } from './config/schema.js';
import { adminHandler } from './gateway/admin.js';
import { Gateway } from './gateway/gateway.js';
import { Metrics } from './gateway/metrics.js';
import { silentLogger, type Logger } from './log.js';
import { RouteStore } from './routing/store.js';
import type { EndpointResolver, RouteSource } from './sources/types.js';

export interface ServeOptions {
  config: Config;
  source: RouteSource;
  endpoints?: EndpointResolver;
  /** 0 = ephemeral. */
  port: number;
  adminPort: number;
  /** Listen address; default: all interfaces (IPv6 dual-stack where available). */
  host?: string;
  logger?: Logger;
  /** Default true; tests with many servers in one process may turn process metrics off. */
  processMetrics?: boolean;
  /**
   * Called with the store and metrics before the source starts (so it sees the first build): the Kubernetes mode
   * attaches the status controller here. Its stop() runs when the server stops.
   */
  attach?: (ctx: { store: RouteStore; metrics: Metrics; logger: Logger }) => { stop(): Promise<void> };
}

export interface Servegate {
  port: number;
  adminPort: number;
  store: RouteStore;
  metrics: Metrics;
  gateway: Gateway;
  /** Graceful stop: readiness 503, Connection: close, in-flight requests finish, streams end at the deadline. */
  shutdown(drainMs?: number): Promise<void>;
  /** Immediate stop. */
  close(): Promise<void>;
}

export async function startServegate(opts: ServeOptions): Promise<Servegate> {
  const { config, source } = opts;
  const logger = opts.logger ?? silentLogger;
  const metrics = new Metrics(opts.processMetrics ?? true);
  const store = new RouteStore({
    publicUrl: config.publicUrl,
    serverlessDomain: config.serverlessDomain,
    keysNamespace: config.auth.keysNamespace,
    defaultTimeoutMs: config.limits.requestTimeoutSeconds * 1000,
  });
  let loggedProblems = new Set<string>();
  store.onBuild(({ changed, result }, snapshot) => {
    metrics.reloads.inc({ result: changed ? 'changed' : 'unchanged' });
    metrics.routes.set(result.table.routes.length);
    let keyCount = 0;
    for (const list of result.table.keys.values()) keyCount += list.length;
    metrics.keys.set(keyCount);
    const byReason: Record<string, number> = { InvalidSpec: 0, Conflict: 0, BackendNotFound: 0, InvalidKey: result.keyProblems.length, ReadError: snapshot.readErrors?.length ?? 0 };
    for (const s of result.statuses) if (!s.ready) byReason[s.reason] = (byReason[s.reason] ?? 0) + 1;
    for (const [reason, n] of Object.entries(byReason)) metrics.invalidResources.set({ reason }, n);
    if (changed) logger.info({ routes: result.table.routes.length, keys: keyCount, hash: result.table.hash }, 'route table updated');
    // Problems are logged when they appear, even when the table itself did not change (a bad key adds no route).
    const problems = [
      ...result.statuses.filter((s) => !s.ready).map((s) => ({ at: { resource: `${s.resourceKind} ${s.id}`, reason: s.reason }, msg: s.message })),
      ...result.keyProblems.map((p) => ({ at: { secret: p.id, origin: p.origin }, msg: `API-key Secret ignored: ${p.message}` })),
      ...(snapshot.readErrors ?? []).map((e) => ({ at: { origin: e.origin }, msg: e.message })),
    ];
    const seen = new Set<string>();
    for (const p of problems) {
      const sig = JSON.stringify(p);
      seen.add(sig);
      if (!loggedProblems.has(sig)) logger.warn(p.at, p.msg);
    }
    loggedProblems = seen;
  });

  const gateway = new Gateway({ config, store, metrics, logger, endpoints: opts.endpoints });
  let draining = false;
  let started = false;

  const admin = createServer(
    adminHandler({ store, source, metrics, isDraining: () => draining, started: () => started }),
  );
  await listen(admin, opts.adminPort, opts.host);

  const health = setInterval(() => {
    const h = source.health();
    metrics.sourceSynced.set(h.synced ? 1 : 0);
    metrics.sourceStaleness.set(h.stalenessMs / 1000);
  }, 1000).unref();

  let attached: { stop(): Promise<void> } | undefined;
  try {
    attached = opts.attach?.({ store, metrics, logger });
    await source.start((snapshot) => {
      try {
        store.apply(snapshot);
      } catch (err) {
        logger.error({ err }, 'could not build the route table; keeping the last one');
      }
    });
  } catch (err) {
    clearInterval(health);
    await attached?.stop().catch(() => undefined);
    await closeServer(admin);
    throw err;
  }
  started = true;

  let inflight = 0;
  const responses = new Set<ServerResponse>();
  let idleWaiters: Array<() => void> = [];
  const track = (res: ServerResponse): void => {
    inflight++;
    responses.add(res);
    res.once('close', () => {
      inflight--;
      responses.delete(res);
      if (inflight === 0) {
        const w = idleWaiters;
        idleWaiters = [];
        for (const f of w) f();
      }
    });
  };

  const server = createServer({
    noDelay: true,
    keepAlive: true,
    requestTimeout: 0, // uploads and streams may be long; slow clients are bounded by headersTimeout
    headersTimeout: config.limits.headersTimeoutSeconds * 1000,
    // How often Node checks the headers timeout (its default, 30 s, would let a slow client hold a socket that long).
    connectionsCheckingInterval: Math.min(1000, config.limits.headersTimeoutSeconds * 500),
    keepAliveTimeout: 75_000,
  });
  // A bug in one request's handling must not take the process (and every other request) down.
  const handle = (req: IncomingMessage, res: ServerResponse, continueRequested: boolean): void => {
    track(res);
    try {
      gateway.handle(req, res, continueRequested);
    } catch (err) {
      logger.error({ err, url: req.url }, 'request handling failed');
      if (!res.headersSent && !res.destroyed) {
        const body = JSON.stringify({ error: 'internal gateway error' });
        res.writeHead(500, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), connection: 'close' });
        res.end(body);
      } else res.destroy();
    }
  };
  server.on('request', (req: IncomingMessage, res: ServerResponse) => handle(req, res, false));
  server.on('checkContinue', (req: IncomingMessage, res: ServerResponse) => handle(req, res, true));
  server.on('upgrade', (req, socket, head) => {
    try {
      gateway.handleUpgrade(req, socket as import('node:net').Socket, head);
    } catch (err) {
      logger.error({ err, url: req.url }, 'upgrade handling failed');
      socket.destroy();
    }
  });
  server.on('clientError', (err: NodeJS.ErrnoException, socket) => {
    if (!socket.writable) return socket.destroy();
    const status = err.code === 'HPE_HEADER_OVERFLOW' ? 431 : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 408 : 400;
    const body = JSON.stringify({ error: status === 408 ? 'request headers not received in time' : `malformed HTTP request (${err.code ?? 'parse error'})` });
    socket.end(`HTTP/1.1 ${status} ${status === 431 ? 'Request Header Fields Too Large' : status === 408 ? 'Request Timeout' : 'Bad Request'}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`);
  });
  await listen(server, opts.port, opts.host);
  logger.info({ port: port(server), adminPort: port(admin), routes: store.current().routes.length }, 'servegate listening');

  let closed = false;
  const close = async (): Promise<void> => {
    if (closed) return;
    closed = true;
    clearInterval(health);
    server.closeAllConnections();
    await attached?.stop().catch((err: unknown) => logger.warn({ err }, 'stopping the controller failed'));
    await Promise.all([closeServer(server), closeServer(admin), source.stop().catch(() => undefined), gateway.close()]);
  };

  const shutdown = async (drainMs = config.shutdown.drainSeconds * 1000): Promise<void> => {
    if (draining || closed) return;
    draining = true;
    gateway.draining = true;
    logger.info({ inflight, drainMs }, 'shutting down: draining requests');
    const deadline = Date.now() + drainMs;
    // Every answer from now on carries "Connection: close"; for a short while new connections are still accepted
    // (load balancers take a moment to stop sending), then the listener closes.
    for (const res of responses) if (!res.headersSent) res.setHeader('connection', 'close');
    const acceptMs = Math.min(config.shutdown.acceptSeconds * 1000, drainMs);
    if (acceptMs > 0) await new Promise((r) => setTimeout(r, acceptMs));
    // net.Server's close stops listening without touching open connections (http.Server's would drop idle keep-alive
    // connections, racing clients that are just sending on them).
    const stopped = new Promise<void>((resolve) => NetServer.prototype.close.call(server, () => resolve()));
    const remaining = deadline - Date.now();
    if (inflight > 0 && remaining > 0) {
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, remaining);
        idleWaiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
    if (inflight > 0) {
      logger.warn({ inflight }, 'drain deadline reached: ending the remaining responses');
      gateway.endAll();
      for (const res of responses) if (!res.writableEnded) res.destroy();
      await new Promise((r) => setTimeout(r, 50)); // let the ended streams flush
    }
    server.closeAllConnections();
    await stopped;
    await close();
    logger.info('servegate stopped');
  };

  return {
    port: port(server),
    adminPort: port(admin),
    store,
    metrics,
    gateway,
    shutdown,
    close,
  };
}

function listen(server: Server, p: number, host?: string): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(p, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
}

function closeServer(server: Server): Promise<void> {
  return new Promise((resolve) => {
    if (!server.listening) return resolve();
    server.close(() => resolve());
  });
}

function port(server: Server): number {
  return (server.address() as AddressInfo).port;
}
