// Where a request goes: the backend (and canary variant) and the address for this request, round-robin over the
// ready endpoints.
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
