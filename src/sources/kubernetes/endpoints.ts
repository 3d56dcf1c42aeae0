// Ready endpoints per Service from EndpointSlices, indexed by namespace/service. Answers come from a cache and are
// the same array instance until a slice or the Service itself changes (the gateway round-robins over it).
import type { Backend, ServiceResource } from '../../routing/types.js';
import type { EndpointAddress } from '../types.js';
import type { ParsedSlice } from './convert.js';

type ServiceBackend = Extract<Backend, { kind: 'service' }>;

interface CacheEntry {
  version: number;
  addresses: readonly EndpointAddress[];
}

/** A backend object's last answer, kept on the object itself (a hidden property): see EndpointIndex.resolve. */
interface BackendEntry extends CacheEntry {
  owner: EndpointIndex;
}

const ENTRY = Symbol('servegate.endpoints');

const EMPTY: readonly EndpointAddress[] = Object.freeze([]);

export class EndpointIndex {
  /** "ns/service" → slice name → slice. */
  private readonly byService = new Map<string, Map<string, ParsedSlice>>();
  /** "ns/slice" → "ns/service" it was filed under. */
  private readonly sliceOwner = new Map<string, string>();
  /** "ns/service" → change counter (slices or the Service changed). */
  private readonly versions = new Map<string, number>();
  /** "ns/service" → port key → cached answer. */
  private readonly cache = new Map<string, Map<string, CacheEntry>>();
  private nextVersion = 1;

  constructor(
    private readonly services: (key: string) => ServiceResource | undefined,
    /** Called after the slices or the Service of "ns/service" changed. */
    private readonly onChange?: (svcKey: string) => void,
    /** The Service's primary IP family (spec.ipFamilies[0]), when known. */
    private readonly primaryFamily: (svcKey: string) => string | undefined = () => undefined,
  ) {}

  /** Whether any slice of "ns/service" lists a ready address (on any port). */
  hasReady(svcKey: string): boolean {
    const slices = this.byService.get(svcKey);
    if (!slices) return false;
    for (const s of slices.values()) if (s.readyAddresses.length > 0) return true;
    return false;
  }

  upsertSlice(slice: ParsedSlice): void {
    const sliceKey = `${slice.namespace}/${slice.name}`;
    const prevOwner = this.sliceOwner.get(sliceKey);
    const owner = slice.service ? `${slice.namespace}/${slice.service}` : undefined;
    if (prevOwner && prevOwner !== owner) this.removeFrom(prevOwner, slice.name);
    if (!owner) {
      this.sliceOwner.delete(sliceKey);
      return;
    }
    this.sliceOwner.set(sliceKey, owner);
    let slices = this.byService.get(owner);
    if (!slices) {
      slices = new Map();
      this.byService.set(owner, slices);
    }
    slices.set(slice.name, slice);
    this.touch(owner);
  }

  deleteSlice(namespace: string, name: string): void {
    const sliceKey = `${namespace}/${name}`;
    const owner = this.sliceOwner.get(sliceKey);
    if (!owner) return;
    this.sliceOwner.delete(sliceKey);
    this.removeFrom(owner, name);
  }

  /** The Service object changed (ports may map differently now). */
  serviceChanged(namespace: string, name: string): void {
    this.touch(`${namespace}/${name}`);
  }

  /** Number of slices indexed (for tests and debugging). */
  sliceCount(): number {
    return this.sliceOwner.size;
  }

  /**
   * A backend's ready addresses, its last answer kept on the backend object (a map lookup per request is a cache miss
   * with thousands of routes): in a steady cluster a request reads one object and builds no key string.
   */
  resolve(backend: ServiceBackend): readonly EndpointAddress[] {
    const held = (backend as { [ENTRY]?: BackendEntry })[ENTRY];
    if (held && held.owner === this && held.version === this.nextVersion) return held.addresses;
    const addresses = this.resolveByKey(backend);
    if (held) {
      held.owner = this;
      held.version = this.nextVersion;
      held.addresses = addresses;
    } else if (Object.isExtensible(backend)) {
      const entry: BackendEntry = { owner: this, version: this.nextVersion, addresses };
      Object.defineProperty(backend, ENTRY, { value: entry, enumerable: false, writable: false, configurable: true });
    }
    return addresses;
  }

  private resolveByKey(backend: ServiceBackend): readonly EndpointAddress[] {
    const svcKey = `${backend.namespace}/${backend.service}`;
    const portKey = `${backend.port}|${backend.portName ?? ''}|${backend.targetPort ?? ''}`;
    const version = this.versions.get(svcKey) ?? 0;
    let perService = this.cache.get(svcKey);
    const hit = perService?.get(portKey);
    if (hit && hit.version === version) return hit.addresses;
    const fresh = this.compute(svcKey, backend);
    const addresses =
      hit && sameAddresses(hit.addresses, fresh) ? hit.addresses : fresh.length === 0 ? EMPTY : Object.freeze(fresh);
    if (!perService) {
      perService = new Map();
      this.cache.set(svcKey, perService);
    }
    perService.set(portKey, { version, addresses });
    return addresses;
  }

  private compute(svcKey: string, backend: ServiceBackend): EndpointAddress[] {
    const slices = this.byService.get(svcKey);
    if (!slices || slices.size === 0) return [];
    // Which Service port: by number (as written in the spec), else by the name the route carries.
    const svc = this.services(svcKey);
    let portName = backend.portName;
    let targetPort = backend.targetPort;
    if (svc) {
      const sp =
        svc.ports.find((p) => p.port === backend.port) ??
        (portName ? svc.ports.find((p) => p.name === portName) : undefined);
      if (sp) {
        portName = sp.name;
        targetPort = sp.targetPort;
      }
    }
    const wanted = portName ?? '';
    const seen = new Set<string>();
    const out: EndpointAddress[] = [];
    const family = this.familyOf(svcKey, slices);
    for (const slice of slices.values()) {
      if (slice.readyAddresses.length === 0 || (slice.addressType ?? 'IPv4') !== family) continue;
      // The endpoint port is the slice port with the Service port's name; else a numeric targetPort;
      // else (no targetPort at all) the Service port itself, as Kubernetes defaults targetPort to port.
      let port = slice.ports.find((p) => p.name === wanted && p.port !== undefined)?.port;
      if (port === undefined && typeof targetPort === 'number') port = targetPort;
      if (port === undefined && targetPort === undefined && slice.ports.length === 0) port = backend.port;
      if (port === undefined) continue;
      for (const host of slice.readyAddresses) {
        const id = `${host}|${port}`;
        if (seen.has(id)) continue;
        seen.add(id);
        out.push({ host, port });
      }
    }
    out.sort((a, b) => (a.host < b.host ? -1 : a.host > b.host ? 1 : a.port - b.port));
    return out;
  }

  /**
   * The one address family read for a Service: a dual-stack Service has an IPv4 and an IPv6 slice for the same
   * endpoints, and reading both would make each pod two endpoints (twice the share of round-robin, its load split in
   * two for least-request and the LLM picker). The Service's primary family when it has slices of it, else IPv4,
   * else whichever family has them (IPv6, FQDN).
   */
  private familyOf(svcKey: string, slices: Map<string, ParsedSlice>): string {
    const families = new Set<string>();
    for (const s of slices.values()) if (s.readyAddresses.length > 0) families.add(s.addressType ?? 'IPv4');
    if (families.size <= 1) return families.values().next().value ?? 'IPv4';
    const primary = this.primaryFamily(svcKey);
    if (primary !== undefined && families.has(primary)) return primary;
    if (families.has('IPv4')) return 'IPv4';
    return families.has('IPv6') ? 'IPv6' : [...families].sort()[0];
  }

  private removeFrom(owner: string, sliceName: string): void {
    const slices = this.byService.get(owner);
    if (!slices) return;
    slices.delete(sliceName);
    if (slices.size === 0) this.byService.delete(owner);
    this.touch(owner);
  }

  private touch(svcKey: string): void {
    this.versions.set(svcKey, this.nextVersion++);
    if (!this.byService.has(svcKey) && !this.services(svcKey)) {
      // Nothing left to answer about: drop the bookkeeping (a later answer recomputes to []).
      this.versions.delete(svcKey);
      this.cache.delete(svcKey);
    }
    this.onChange?.(svcKey);
  }
}

function sameAddresses(a: readonly EndpointAddress[], b: readonly EndpointAddress[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i].host !== b[i].host || a[i].port !== b[i].port) return false;
  return true;
}
