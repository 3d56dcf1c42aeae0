// Where a request goes: the backend's address for this request (round-robin over ready endpoints) and a
// keep-alive connection pool per address.
import type { Socket } from 'node:net';
import { buildConnector, Pool } from 'undici';
import type { Backend, Route } from '../../routing/types.js';
import type { EndpointAddress, EndpointResolver } from '../../sources/types.js';

export interface Target {
  origin: string;
  /** Host header value for the backend. */
  authority: string;
  /** Path prefix of a url backend ("" for services). */
  basePath: string;
}

export type Variant = 'primary' | 'canary';

export interface Chosen {
  target: Target;
  backend: Backend;
  /** Set when the route has a canary: which backend answers. */
  variant?: Variant;
}

/** Picks the backend address for one request. undefined = the Service has no ready endpoint. */
export class TargetPicker {
  private rr = new WeakMap<readonly EndpointAddress[], number>();
  private urlTargets = new Map<string, Target>();
  /** Per canaried route: the canary's share accumulated so far, in percent (a smooth weighted split, see choose). */
  private credit = new WeakMap<Route, number>();

  constructor(private readonly endpoints?: EndpointResolver) {}

  /**
   * The backend and address for one request of `route`. With a canary, `percent` of the requests go to it, spread
   * evenly (every request adds `percent` to a credit; one that brings it to 100 goes to the canary and takes 100
   * off), so 0 and 100 are exact and any share holds within one request over any run. A variant with no ready
   * endpoint hands its request to the other. undefined: no ready endpoint anywhere.
   */
  choose(route: Route): Chosen | undefined {
    const canary = route.canary;
    if (!canary) {
      const target = this.pick(route.backend);
      return target && { target, backend: route.backend };
    }
    const credit = (this.credit.get(route) ?? 0) + canary.percent;
    const toCanary = credit >= 100;
    this.credit.set(route, toCanary ? credit - 100 : credit);
    const first = toCanary ? canary.backend : route.backend;
    const t1 = this.pick(first);
    if (t1) return { target: t1, backend: first, variant: toCanary ? 'canary' : 'primary' };
    const second = toCanary ? route.backend : canary.backend;
    const t2 = this.pick(second);
    return t2 && { target: t2, backend: second, variant: toCanary ? 'primary' : 'canary' };
  }

  pick(backend: Backend, avoid?: string): Target | undefined {
    if (backend.kind === 'url') {
      let t = this.urlTargets.get(backend.url);
      if (!t) {
        const u = new URL(backend.url);
        t = { origin: u.origin, authority: u.host, basePath: u.pathname === '/' ? '' : u.pathname };
        this.urlTargets.set(backend.url, t);
      }
      return t;
    }
    if (backend.externalName) {
      // Knative serverless: the Service's external name (its gateway), with the Host Knative routes on.
      const key = `${backend.externalName}|${backend.port}|${backend.service}.${backend.namespace}`;
      let t = this.urlTargets.get(key);
      if (!t) {
        const host = backend.externalName.includes(':') ? `[${backend.externalName}]` : backend.externalName;
        t = {
          origin: `http://${host}:${backend.port}`,
          authority: `${backend.service}.${backend.namespace}.svc.cluster.local`,
          basePath: '',
        };
        this.urlTargets.set(key, t);
      }
      return t;
    }
    const list = this.endpoints?.endpoints(backend);
    if (list === undefined) {
      // No endpoint tracking (files source): go through cluster DNS, as kube-proxy would.
      const authority = `${backend.service}.${backend.namespace}.svc:${backend.port}`;
      return { origin: `http://${authority}`, authority, basePath: '' };
    }
    if (list.length === 0) return undefined;
    let i = this.rr.get(list) ?? 0;
    let ep = list[i % list.length];
    if (avoid && list.length > 1 && addr(ep) === avoid) {
      i++;
      ep = list[i % list.length];
    }
    this.rr.set(list, (i + 1) % list.length);
    const a = addr(ep);
    return {
      origin: `http://${a}`,
      authority: `${backend.service}.${backend.namespace}.svc:${backend.port}`,
      basePath: '',
    };
  }
}

function addr(ep: EndpointAddress): string {
  return ep.host.includes(':') ? `[${ep.host}]:${ep.port}` : `${ep.host}:${ep.port}`;
}

// undici ends a close-delimited response (no length, not chunked) on the socket's close, also when the close was a
// reset: the client would get a clean end of a cut answer. undici reports the reset from its own 'error' listener,
// and it completes the response synchronously inside that listener; this listener runs just before it (added
// before undici's), so the answer's handler can tell a reset from a clean close while it completes.
let resetting = false;
const clearReset = (): void => {
  resetting = false;
};
function markReset(err: NodeJS.ErrnoException): void {
  if (err.code === 'ECONNRESET' || err.code === 'EPIPE') {
    resetting = true;
    process.nextTick(clearReset);
  }
}

/** True while undici completes a response because its connection was reset (see markReset). */
export function upstreamReset(): boolean {
  return resetting;
}

const baseConnect = buildConnector({ timeout: 5_000 });
const connect: buildConnector.connector = (opts, cb) =>
  baseConnect(opts, (err, socket) => {
    if (socket) (socket as Socket).on('error', markReset);
    cb(err, socket as never);
  });

/** One undici Pool per backend origin; pools unused for a while are closed. */
export class Pools {
  private pools = new Map<string, { pool: Pool; used: number }>();
  private sweeper: NodeJS.Timeout;

  constructor(private readonly idleCloseMs = 300_000) {
    this.sweeper = setInterval(() => this.sweep(), Math.min(60_000, idleCloseMs)).unref();
  }

  get(origin: string): Pool {
    const e = this.pools.get(origin);
    if (e) {
      e.used = Date.now();
      return e.pool;
    }
    const pool = new Pool(origin, {
      connections: null,
      pipelining: 1,
      keepAliveTimeout: 4_000,
      keepAliveMaxTimeout: 60_000,
      connect,
    });
    this.pools.set(origin, { pool, used: Date.now() });
    return pool;
  }

  private sweep(): void {
    const cutoff = Date.now() - this.idleCloseMs;
    for (const [origin, e] of this.pools) {
      if (e.used < cutoff) {
        this.pools.delete(origin);
        e.pool.close().catch(() => undefined);
      }
    }
  }

  async close(): Promise<void> {
    clearInterval(this.sweeper);
    const all = [...this.pools.values()];
    this.pools.clear();
    await Promise.all(all.map((e) => e.pool.destroy().catch(() => undefined)));
  }
}
