// The data-plane listener: Node's HTTP server with its events wired to connections and exchanges. Every request and
// upgrade becomes a job on its connection; parse errors are answered in their place in the pipeline; a once-a-second
// sweep over the connections (not over requests) runs the body and slow-reader timeouts.
// The data-plane listener: Node's HTTP server with its events wired to connections and exchanges. Every request and
// upgrade becomes a job on its connection; parse errors are answered in their place in the pipeline (parse-errors.ts);
// a once-a-second sweep over the connections (not over requests) runs the body and slow-reader timeouts. The context
// every job shares is made in plane-context.ts.
import { createServer, type IncomingMessage, type Server, type ServerOptions, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { Socket } from 'node:net';
import type { EndpointView } from '../../admin/page.js';
import type { Config } from '../../config/schema.js';
import type { Route } from '../../routing/types.js';
import { copyWith } from '../../same-shape.js';
import { ALLOWED_METHODS } from '../admit/cors.js';
import type { PlaneContext } from '../forward/context.js';
import { Exchange } from '../forward/exchange.js';
import { UpgradeJob } from '../forward/websocket.js';
import { destroyOnError, sendRawError } from '../http/answers.js';
import { gatewayError } from '../http/errors.js';
import { Conn } from './connection.js';
import type { Drain } from './drain.js';
import { capIdleParsers } from './parser-pool.js';
import { parseErrorAnswer } from './parse-errors.js';
import { buildPlaneContext, endpointViews, startScraping, type PlaneDeps } from './plane-context.js';

export interface DataPlaneDeps extends PlaneDeps {
  drain: Drain;
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

function serverOptions(limits: Config['limits']): ServerOptions {
  return {
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
}

export function createDataPlane(deps: DataPlaneDeps): DataPlane {
  const { config, drain, store, holds } = deps;
  const limits = config.limits;
  const ctx = buildPlaneContext(deps);
  const { picker, queues, cors } = ctx;
  startScraping(deps, picker);

  // Held requests look again when endpoints change or a new table is in (an InferenceService became ready).
  const unsubscribe = [
    deps.endpoints?.onEndpointsChanged?.(() => holds.changed()),
    store.onBuild(() => holds.changed()),
  ];

  const options = serverOptions(limits);
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
      const c = new Conn(socket, drain, ctx);
      drain.track(c);
      return c;
    };
    // A TLS connection is tracked once its handshake is done (its requests come on the TLSSocket, not the TCP one); a
    // failed handshake is dropped without a word (there is no HTTP to answer in).
    server.on(cleartext ? 'connection' : 'secureConnection', (socket: Socket) => {
      if (!Conn.of(socket)) track(socket);
    });
    if (!cleartext) server.on('tlsClientError', (_err: Error, socket: Socket) => socket.destroy());
    const onRequest = (req: IncomingMessage, res: ServerResponse): void => {
      const conn = connOf(req.socket);
      conn.submit(new Exchange(conn, res));
    };
    server.on('request', onRequest);
    // Requests with an Expect header: the exchange answers 100 Continue once admitted, any other expectation 417.
    server.on('checkContinue', onRequest);
    server.on('checkExpectation', onRequest);
    server.on('upgrade', (req: IncomingMessage, socket: Socket, head: Buffer) => {
      // Node hands the socket over without its error listener: one until the job takes it (it may wait its turn).
      socket.on('error', destroyOnError);
      const conn = connOf(socket);
      conn.submit(new UpgradeJob(conn, server, req, socket, head));
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
      const answer = socket.writable ? parseErrorAnswer(err, cors, limits.headersTimeoutSeconds) : undefined;
      if (answer === undefined) {
        socket.destroy();
        return;
      }
      const conn = Conn.of(socket);
      if (conn) conn.fail(answer.error, answer.dialect, answer.headers);
      else sendRawError(socket, answer.error, answer.dialect, answer.headers);
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
    endpointsOf: (route) => endpointViews(route, picker, deps.endpointStats),
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
