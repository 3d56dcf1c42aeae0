// A fault-injecting HTTPS proxy in front of the real kube-apiserver, for the faults the real server will not make on
// demand: a watch that hangs without data, a 500 in the middle of a paged list, a connection cut mid-watch, an API
// server that cannot be reached. TLS is terminated with the API server's own serving certificate (IP 127.0.0.1, from
// the cluster's CA), so a kubeconfig that trusts the cluster trusts the proxy; requests are forwarded as they came,
// Authorization header included (use a bearer token: a client certificate would end at the proxy). It also records
// what passed: every request (method, path, query, status) and the type and resourceVersion of every watch event.
import { readFileSync, writeFileSync } from 'node:fs';
import { createServer, request, type Server } from 'node:https';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { join } from 'node:path';
import type { KubeCluster } from './kube.js';

export interface ProxiedRequest {
  method: string;
  /** The path without the query. */
  path: string;
  query: URLSearchParams;
  watch: boolean;
  /** The status sent to the client (0 while unknown; a reset connection stays 0). */
  status: number;
  /** Watch events passed to the client, in order. */
  events: WatchEvent[];
}

export interface WatchEvent {
  type: string;
  name?: string;
  resourceVersion?: string;
  /** An ERROR event's status code. */
  code?: number;
}

interface ListFault {
  status: number;
  count: number;
  match: (r: ProxiedRequest) => boolean;
}

export class KubeFaultProxy {
  readonly requests: ProxiedRequest[] = [];
  private readonly sockets = new Set<Socket>();
  private readonly watches = new Set<{ res: ServerResponse; upstream?: IncomingMessage; rec: ProxiedRequest }>();
  private listFaults: ListFault[] = [];
  private blocked = false;
  private hanging = false;
  private watchTimeoutSeconds: number | undefined;
  /** Runs before a request is forwarded (after it is recorded): a test makes a concurrent change here. */
  beforeForward: ((r: ProxiedRequest) => Promise<void> | void) | undefined;

  private constructor(
    private readonly server: Server,
    private readonly cluster: KubeCluster,
    private readonly ca: Buffer,
  ) {}

  static async start(cluster: KubeCluster): Promise<KubeFaultProxy> {
    const pki = join(cluster.state.dir, 'pki');
    const server = createServer({
      cert: readFileSync(join(pki, 'apiserver.crt')),
      key: readFileSync(join(pki, 'apiserver.key')),
    });
    const proxy = new KubeFaultProxy(server, cluster, readFileSync(cluster.state.ca));
    server.on('connection', (s: Socket) => {
      proxy.sockets.add(s);
      s.on('close', () => proxy.sockets.delete(s));
    });
    server.on('secureConnection', (s: Socket) => {
      if (proxy.blocked) s.destroy();
    });
    server.on('request', (req: IncomingMessage, res: ServerResponse) => proxy.handle(req, res));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return proxy;
  }

  get url(): string {
    return `https://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  /** A kubeconfig for the proxy with this bearer token (the cluster's CA, which signed the proxy's certificate). */
  writeKubeconfig(token: string, file: string): string {
    const text = [
      'apiVersion: v1',
      'kind: Config',
      `clusters: [{name: proxy, cluster: {server: "${this.url}", certificate-authority: "${this.cluster.state.ca}"}}]`,
      `users: [{name: token, user: {token: "${token}"}}]`,
      'contexts: [{name: proxy, context: {cluster: proxy, user: token, namespace: default}}]',
      'current-context: proxy',
      '',
    ].join('\n');
    writeFileSync(file, text, { mode: 0o600 });
    return file;
  }

  /** Answers the next `count` list requests that `match` (default: a page after the first) with `status`. */
  failLists(status: number, count: number, match: (r: ProxiedRequest) => boolean = (r) => r.query.has('continue')) {
    this.listFaults.push({ status, count, match });
  }

  /** Open watches stop passing data to the client (the connection stays open); so do new ones, until resume(). */
  hangWatches(): void {
    this.hanging = true;
  }

  resumeWatches(): void {
    this.hanging = false;
  }

  /** Cuts the client connections of every open watch mid-stream (no last chunk, no TLS close_notify). */
  cutWatches(): number {
    let n = 0;
    for (const w of this.watches) {
      const s = w.res.socket;
      if (s && !s.destroyed) {
        s.destroy();
        n++;
      }
    }
    return n;
  }

  /** Like an API server that cannot be reached: every connection is dropped, new ones as soon as they are made. */
  block(): void {
    this.blocked = true;
    for (const s of this.sockets) s.destroy();
  }

  unblock(): void {
    this.blocked = false;
  }

  /** Forwarded watches get this timeoutSeconds instead of the client's (the server ends them, with a bookmark first). */
  setWatchTimeoutSeconds(seconds: number | undefined): void {
    this.watchTimeoutSeconds = seconds;
  }

  /** Watch requests open now. */
  openWatches(): number {
    return this.watches.size;
  }

  async stop(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    const u = new URL(req.url ?? '/', 'https://proxy');
    const watch = u.searchParams.get('watch') === 'true' || u.searchParams.get('watch') === '1';
    const rec: ProxiedRequest = {
      method: req.method ?? 'GET',
      path: u.pathname,
      query: new URLSearchParams(u.searchParams),
      watch,
      status: 0,
      events: [],
    };
    this.requests.push(rec);
    if (this.blocked) {
      req.socket.destroy();
      return;
    }
    const fault = !watch && rec.method === 'GET' ? this.listFaults.find((f) => f.count > 0 && f.match(rec)) : undefined;
    if (fault) {
      fault.count--;
      rec.status = fault.status;
      res.writeHead(fault.status, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          kind: 'Status',
          apiVersion: 'v1',
          status: 'Failure',
          message: 'injected by the fault proxy',
          reason: 'InternalError',
          code: fault.status,
        }),
      );
      return;
    }
    if (watch && this.watchTimeoutSeconds !== undefined)
      u.searchParams.set('timeoutSeconds', String(this.watchTimeoutSeconds));
    const hook = this.beforeForward;
    if (hook) {
      req.pause();
      Promise.resolve()
        .then(() => hook(rec))
        .then(
          () => this.forward(req, res, u, rec),
          () => req.socket.destroy(),
        );
      return;
    }
    this.forward(req, res, u, rec);
  }

  private forward(req: IncomingMessage, res: ServerResponse, u: URL, rec: ProxiedRequest): void {
    const watch = rec.watch;
    const target = new URL(this.cluster.server);
    const headers = { ...req.headers, host: target.host };
    const up = request(
      {
        host: target.hostname,
        port: target.port,
        method: req.method,
        path: `${u.pathname}${u.search}`,
        headers,
        ca: this.ca,
      },
      (upRes) => {
        rec.status = upRes.statusCode ?? 0;
        res.writeHead(upRes.statusCode ?? 502, upRes.headers);
        if (!watch) {
          upRes.pipe(res);
          return;
        }
        res.flushHeaders(); // as the API server does: a watch is open (and a hung one looks open) before its first event
        const entry = { res, upstream: upRes, rec };
        this.watches.add(entry);
        const done = () => this.watches.delete(entry);
        res.on('close', () => {
          done();
          upRes.destroy();
        });
        upRes.on('close', done);
        let buffered = '';
        upRes.on('data', (chunk: Buffer) => {
          if (this.hanging) return; // swallowed: the client sees an open, silent watch
          buffered += chunk.toString('utf8');
          let nl: number;
          while ((nl = buffered.indexOf('\n')) >= 0) {
            const line = buffered.slice(0, nl);
            buffered = buffered.slice(nl + 1);
            rec.events.push(eventOf(line));
          }
          res.write(chunk);
        });
        upRes.on('end', () => {
          if (!this.hanging) res.end();
        });
        upRes.on('error', () => res.destroy());
      },
    );
    up.on('error', () => {
      // The API server is gone or reset the connection: so does the proxy, to its client.
      res.destroy();
    });
    // The client went away (its request's 'close' only says the body was read): so does the upstream request.
    res.on('close', () => {
      if (!res.writableFinished) up.destroy();
    });
    req.pipe(up);
  }
}

function eventOf(line: string): WatchEvent {
  try {
    const e = JSON.parse(line) as {
      type?: string;
      object?: { code?: number; metadata?: { name?: string; resourceVersion?: string } };
    };
    return {
      type: e.type ?? '?',
      name: e.object?.metadata?.name,
      resourceVersion: e.object?.metadata?.resourceVersion,
      code: e.object?.code,
    };
  } catch {
    return { type: 'unparseable' };
  }
}
