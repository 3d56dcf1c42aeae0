// The kubernetes route source: reflectors (list + watch) for ServingDeployments, API-key Secrets, Services,
// EndpointSlices and (optionally) KServe InferenceServices, folded into snapshots and an endpoint index.
import type { KubeConfig } from '@kubernetes/client-node';
import type { Config } from '../../config/schema.js';
import { silentLogger, type Logger } from '../../log.js';
import type {
  Backend,
  InferenceServiceResource,
  KeySecretResource,
  ServiceResource,
  ServingDeploymentResource,
  Snapshot,
} from '../../routing/types.js';
import { KEY_LABEL } from '../../routing/types.js';
import type { EndpointAddress, EndpointResolver, RouteSource, SourceHealth } from '../types.js';
import {
  servicePrimaryFamily,
  toInferenceService,
  toKeySecret,
  toService,
  toServingDeployment,
  toSlice,
} from './convert.js';
import { EndpointIndex } from './endpoints.js';
import { Reflector, type Backoff, type RawObject, type RestartReason } from './reflector.js';
import { copyWith } from '../../same-shape.js';

export type { RestartReason } from './reflector.js';

export interface KubernetesSourceOptions {
  /** Where API-key Secrets live (auth.keysNamespace). */
  keysNamespace: string;
  /**
   * auth.projectNamespaceKeys: also watch key Secrets in the project namespaces. Off (the default), Secrets are read in
   * the keys namespace only, so the gateway needs no Secret access anywhere else (SPEC §11).
   */
  projectNamespaceKeys?: boolean;
  /** Namespaces to watch for ServingDeployments, Services, EndpointSlices and project keys; [] = all namespaces. */
  namespaces: string[];
  /** Also read serving.kserve.io/v1beta1 InferenceServices. */
  kserve: boolean;
  /** A watch with no event or bookmark for this long is restarted. Default 150 000 (2.5 bookmark periods). */
  watchIdleTimeoutMs?: number;
  logger?: Logger;
  /** Backoff for failing lists and watches. Default { initialMs: 200, maxMs: 30 000 }. */
  backoff?: Backoff;
  /** Items per list page. Default 500. */
  pageSize?: number;
  /** Called on every watch (re)start that was not the first: for servegate_watch_restarts_total{kind,reason}. */
  onWatchRestart?: (kind: string, reason: RestartReason) => void;
  /**
   * A ServingDeployment changed in its status only (which rebuilds nothing): the status controller checks that one
   * object, so a status another writer changed is put back.
   */
  onStatusChange?: (deployment: ServingDeploymentResource) => void;
}

/** The source options that follow from the configuration (`kubernetes:` and `auth:` keys). */
export function kubernetesSourceOptions(
  config: Pick<Config, 'auth' | 'kubernetes'>,
  extra: Pick<KubernetesSourceOptions, 'logger' | 'onWatchRestart' | 'onStatusChange' | 'backoff' | 'pageSize'> = {},
): KubernetesSourceOptions {
  return {
    keysNamespace: config.auth.keysNamespace,
    projectNamespaceKeys: config.auth.projectNamespaceKeys,
    namespaces: config.kubernetes.namespaces,
    kserve: config.kubernetes.kserve.enabled,
    watchIdleTimeoutMs: config.kubernetes.watchIdleTimeoutSeconds * 1000,
    ...extra,
  };
}

/** The longest wait between two snapshots that rebuilding imposes (see KubernetesSource.changed). */
const FLUSH_GAP_MAX_MS = 400;

/** The label selector of API-key Secrets. */
export const KEY_SELECTOR = `${KEY_LABEL}=true`;

interface Watched {
  kind: string;
  /** Collection path without the namespace part: /apis/<g>/<v> or /api/v1. */
  prefix: string;
  plural: string;
  labelSelector?: string;
  optional?: boolean;
  notFoundHint?: string;
  namespaces: (string | undefined)[];
  handler: { upsert(obj: RawObject): void; delete(obj: RawObject): void };
}

type Part = 'deployments' | 'inferenceServices' | 'keySecrets' | 'services';

export class KubernetesSource implements RouteSource, EndpointResolver {
  private readonly logger: Logger;
  private readonly deployments = new Map<string, ServingDeploymentResource>();
  private readonly inferenceServices = new Map<string, InferenceServiceResource>();
  private readonly keySecrets = new Map<string, KeySecretResource>();
  private readonly services = new Map<string, ServiceResource>();
  /** "ns/service" → spec.ipFamilies[0], for dual-stack Services (EndpointIndex reads one family). */
  private readonly serviceFamilies = new Map<string, string>();
  /** Snapshot arrays, rebuilt only for the parts that changed. */
  private readonly arrays: Partial<Record<Part, unknown[]>> = {};
  private readonly index: EndpointIndex;
  private reflectors: Reflector[] = [];
  private onSnapshot: ((s: Snapshot) => void) | undefined;
  private synced = false;
  private stopped = false;
  private flushScheduled = false;
  private dirty = false;
  /** How long the last snapshot's consumer (the route-table build) took, and when it ended (performance.now()). */
  private lastFlushMs = 0;
  private lastFlushEnd = 0;
  private flushTimer: NodeJS.Timeout | undefined;
  private readonly restarts = new Map<string, number>();
  /** Objects that could not be used (no name, bad shape) or whose handling threw. */
  malformedTotal = 0;
  /** Snapshots delivered so far. */
  snapshotsTotal = 0;

  constructor(
    private readonly kc: KubeConfig,
    private readonly opts: KubernetesSourceOptions,
  ) {
    this.logger = opts.logger ?? silentLogger;
    this.index = new EndpointIndex(
      (key) => this.services.get(key),
      (key) => this.endpointsChanged(key),
      (key) => this.serviceFamilies.get(key),
    );
  }

  private endpointListeners: Array<() => void> = [];

  onEndpointsChanged(listener: () => void): () => void {
    this.endpointListeners.push(listener);
    return () => {
      this.endpointListeners = this.endpointListeners.filter((l) => l !== listener);
    };
  }

  /**
   * A Service's slices changed: held requests look again; only none↔some ready endpoints replaces the Service object
   * (rebuilding its routes, whose status says ScaledToZero / NoReadyEndpoints); other churn rebuilds nothing.
   */
  private endpointsChanged(svcKey: string): void {
    const svc = this.services.get(svcKey);
    if (svc) {
      const ready = this.index.hasReady(svcKey);
      if (svc.readyEndpoints !== ready) {
        this.services.set(svcKey, copyWith(svc, { readyEndpoints: ready }));
        this.changed('services');
      }
    }
    for (const l of this.endpointListeners) {
      try {
        l();
      } catch (err) {
        this.logger.error({ err }, 'an endpoint listener threw');
      }
    }
  }

  async start(onSnapshot: (snapshot: Snapshot) => void): Promise<void> {
    if (this.reflectors.length > 0) throw new Error('KubernetesSource.start() was already called');
    this.onSnapshot = onSnapshot;
    this.reflectors = this.watched().flatMap((w) =>
      w.namespaces.map(
        (ns) =>
          new Reflector({
            kc: this.kc,
            kind: w.kind,
            path:
              ns === undefined
                ? `${w.prefix}/${w.plural}`
                : `${w.prefix}/namespaces/${encodeURIComponent(ns)}/${w.plural}`,
            scope: ns === undefined ? 'in all namespaces' : `in namespace ${ns}`,
            labelSelector: w.labelSelector,
            optional: w.optional,
            notFoundHint: w.notFoundHint,
            pageSize: this.opts.pageSize ?? 500,
            idleTimeoutMs: this.opts.watchIdleTimeoutMs ?? 150_000,
            backoff: this.opts.backoff ?? { initialMs: 200, maxMs: 30_000 },
            logger: this.logger,
            handler: w.handler,
            onRestart: (kind, reason) => this.countRestart(kind, reason),
            onMalformed: (kind, why) => this.malformed(kind, why),
          }),
      ),
    );
    for (const r of this.reflectors) r.start();
    await Promise.all(this.reflectors.map((r) => r.synced));
    if (this.stopped) throw new Error('KubernetesSource stopped before the first full list');
    this.synced = true;
    this.dirty = true; // the first snapshot is delivered even when everything is empty
    this.logger.info(
      { watches: this.reflectors.length, deployments: this.deployments.size, keys: this.keySecrets.size },
      'kubernetes source synced',
    );
    this.flush();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.flushTimer);
    await Promise.all(this.reflectors.map((r) => r.stop()));
  }

  health(): SourceHealth {
    const now = Date.now();
    let stalenessMs = 0;
    const problems: string[] = [];
    for (const r of this.reflectors) {
      stalenessMs = Math.max(stalenessMs, r.stalenessMs(now));
      if (r.problem) problems.push(r.problem);
      else if (!r.isSynced) problems.push(`list ${r.name}: waiting for the first list`);
    }
    return { synced: this.synced, stalenessMs, problems };
  }

  /** Watch restarts so far, per kind and reason: what servegate_watch_restarts_total reports. */
  watchRestarts(): Array<{ kind: string; reason: RestartReason; count: number }> {
    return [...this.restarts].map(([k, count]) => {
      const [kind, reason] = k.split('|') as [string, RestartReason];
      return { kind, reason, count };
    });
  }

  endpoints(backend: Extract<Backend, { kind: 'service' }>): readonly EndpointAddress[] {
    return this.index.resolve(backend);
  }

  // ---------- what is watched ----------

  private watched(): Watched[] {
    const { namespaces, keysNamespace, kserve, projectNamespaceKeys } = this.opts;
    const all = namespaces.length === 0;
    const projectScopes: (string | undefined)[] = all ? [undefined] : [...new Set(namespaces)];
    const keyScopes: (string | undefined)[] = !projectNamespaceKeys
      ? [keysNamespace]
      : all
        ? [undefined]
        : [...new Set([keysNamespace, ...namespaces])];
    const list: Watched[] = [
      {
        kind: 'servingdeployments',
        prefix: '/apis/serving.servegate.dev/v1alpha1',
        plural: 'servingdeployments',
        notFoundHint:
          'the CustomResourceDefinition servingdeployments.serving.servegate.dev is not installed: ' +
          'kubectl apply -f crds/ (docs/install.md)',
        namespaces: projectScopes,
        handler: this.partHandler('deployments', this.deployments, toServingDeployment),
      },
      {
        kind: 'secrets',
        prefix: '/api/v1',
        plural: 'secrets',
        labelSelector: KEY_SELECTOR,
        namespaces: keyScopes,
        handler: this.partHandler(
          'keySecrets',
          this.keySecrets,
          toKeySecret,
          undefined,
          (obj) => obj.metadata.labels?.[KEY_LABEL] === 'true',
        ),
      },
      {
        kind: 'services',
        prefix: '/api/v1',
        plural: 'services',
        namespaces: projectScopes,
        handler: this.serviceHandler(),
      },
      {
        kind: 'endpointslices',
        prefix: '/apis/discovery.k8s.io/v1',
        plural: 'endpointslices',
        namespaces: projectScopes,
        handler: {
          upsert: (obj) => {
            const slice = toSlice(obj);
            if (!slice) return this.malformed('endpointslices', 'EndpointSlice without name or namespace');
            this.index.upsertSlice(slice);
          },
          delete: (obj) => {
            if (typeof obj.metadata.namespace === 'string')
              this.index.deleteSlice(obj.metadata.namespace, obj.metadata.name);
          },
        },
      },
    ];
    if (kserve) {
      list.push({
        kind: 'inferenceservices',
        prefix: '/apis/serving.kserve.io/v1beta1',
        plural: 'inferenceservices',
        optional: true,
        notFoundHint:
          'KServe is not installed (no serving.kserve.io/v1beta1 InferenceService API); kubernetes.kserve.enabled is on',
        namespaces: projectScopes,
        handler: this.partHandler('inferenceServices', this.inferenceServices, toInferenceService),
      });
    }
    return list;
  }

  /** Services: the snapshot part, and the primary IP family the endpoint index reads their slices in. */
  private serviceHandler(): Watched['handler'] {
    const part = this.partHandler('services', this.services, toService, (ns, name) =>
      this.index.serviceChanged(ns, name),
    );
    const familyKey = (obj: RawObject) => `${obj.metadata.namespace ?? ''}/${obj.metadata.name}`;
    return {
      upsert: (obj) => {
        const key = familyKey(obj);
        const family = servicePrimaryFamily(obj);
        // A Service update that changes nothing routing reads (labels, annotations, status.loadBalancer, another
        // controller's managedFields) rebuilds nothing: each rebuild is the whole route table (~200 ms at 10,000
        // routes), and other controllers touch Services all the time.
        const prev = this.services.get(key);
        const next = prev && family === this.serviceFamilies.get(key) ? toService(obj) : undefined;
        if (prev && next && sameRouting(prev, next)) return;
        if (family === undefined) this.serviceFamilies.delete(key);
        else this.serviceFamilies.set(key, family);
        part.upsert(obj);
      },
      delete: (obj) => {
        this.serviceFamilies.delete(familyKey(obj));
        part.delete(obj);
      },
    };
  }

  private partHandler<T>(
    part: Part,
    map: Map<string, T>,
    convert: (raw: unknown) => T | undefined,
    after?: (namespace: string, name: string) => void,
    accept?: (obj: { metadata: { labels?: Record<string, string> } }) => boolean,
  ): Watched['handler'] {
    const handler: Watched['handler'] = {
      upsert: (obj) => {
        // Objects outside the selection (an API server that ignored the label selector) count as absent.
        if (accept && !accept(obj as { metadata: { labels?: Record<string, string> } })) return handler.delete(obj);
        const key = `${obj.metadata.namespace ?? ''}/${obj.metadata.name}`;
        const res = convert(obj);
        if (!res) {
          this.malformed(part, `object ${key} without name or namespace`);
          return;
        }
        const before = map.get(key);
        map.set(key, res);
        after?.(String(obj.metadata.namespace ?? ''), obj.metadata.name);
        if (
          part === 'deployments' &&
          before !== undefined &&
          onlyStatusChanged(before as unknown as ServingDeploymentResource, res as unknown as ServingDeploymentResource)
        ) {
          // A status write (ours, mostly) changes nothing that routes: keep the fresh object for the next snapshot,
          // but do not rebuild for it — at 10k deployments a rebuild per status write would grow with n². The
          // status controller looks at this one object instead (another writer's status is put back).
          delete this.arrays[part];
          this.statusChanged(res as unknown as ServingDeploymentResource);
          return;
        }
        this.changed(part);
      },
      delete: (obj) => {
        const key = `${obj.metadata.namespace ?? ''}/${obj.metadata.name}`;
        if (!map.delete(key)) return;
        after?.(String(obj.metadata.namespace ?? ''), obj.metadata.name);
        this.changed(part);
      },
    };
    return handler;
  }

  // ---------- snapshots ----------

  private changed(part: Part): void {
    delete this.arrays[part];
    this.dirty = true;
    if (!this.synced || this.flushScheduled) return;
    this.flushScheduled = true;
    const run = () => {
      this.flushTimer = undefined;
      this.flushScheduled = false;
      this.flush();
    };
    // Rebuilds take at most about a quarter of the time: after one that took t ms (the whole route table: ~200 ms at
    // 10,000 routes), the next waits until 3t (at most 400 ms) after it ended. Without it, a steady stream of
    // changes (a readiness probe flapping, a controller editing objects) kept the event loop rebuilding back to back,
    // between the requests. A change still reaches the data plane within a second. Cheap rebuilds wait for nothing.
    const gap = this.lastFlushMs >= 10 ? Math.min(3 * this.lastFlushMs, FLUSH_GAP_MAX_MS) : 0;
    const wait = this.lastFlushEnd + gap - performance.now();
    // Coalesce the events of one tick (a watch chunk often carries many) into one snapshot.
    if (wait <= 0) setImmediate(run);
    else this.flushTimer = setTimeout(run, wait);
  }

  private flush(): void {
    if (!this.dirty || this.stopped || !this.onSnapshot) return;
    this.dirty = false;
    const snapshot: Snapshot = {
      source: 'kubernetes',
      deployments: this.array('deployments', this.deployments),
      inferenceServices: this.array('inferenceServices', this.inferenceServices),
      keySecrets: this.array('keySecrets', this.keySecrets),
      services: this.array('services', this.services),
    };
    this.snapshotsTotal++;
    const started = performance.now();
    try {
      this.onSnapshot(snapshot);
    } catch (err) {
      this.logger.error({ err }, 'the snapshot consumer threw; the source keeps running');
    }
    this.lastFlushEnd = performance.now();
    this.lastFlushMs = this.lastFlushEnd - started;
  }

  private array<T>(part: Part, map: Map<string, T>): T[] {
    let a = this.arrays[part] as T[] | undefined;
    if (!a) {
      a = [...map.values()];
      this.arrays[part] = a;
    }
    return a;
  }

  // ---------- counters ----------

  private countRestart(kind: string, reason: RestartReason): void {
    const k = `${kind}|${reason}`;
    this.restarts.set(k, (this.restarts.get(k) ?? 0) + 1);
    try {
      this.opts.onWatchRestart?.(kind, reason);
    } catch {
      // a metrics callback must not break the watch loop
    }
  }

  private statusChanged(d: ServingDeploymentResource): void {
    try {
      this.opts.onStatusChange?.(d);
    } catch (err) {
      this.logger.error({ err }, 'a status-change listener threw');
    }
  }

  private malformed(kind: string, why: string): void {
    this.malformedTotal++;
    this.logger.warn({ kind, why }, 'skipped an unusable object from the API server');
  }
}

/** True when two versions of a Service route alike: same object, type, external name and ports. */
function sameRouting(a: ServiceResource, b: ServiceResource): boolean {
  return (
    a.metadata.uid === b.metadata.uid &&
    a.type === b.type &&
    a.externalName === b.externalName &&
    JSON.stringify(a.ports) === JSON.stringify(b.ports)
  );
}

/** True when two versions of a ServingDeployment differ only in status (and resourceVersion). */
export function onlyStatusChanged(a: ServingDeploymentResource, b: ServingDeploymentResource): boolean {
  const ma = a.metadata;
  const mb = b.metadata;
  return (
    ma.generation === mb.generation &&
    ma.uid === mb.uid &&
    ma.creationTimestamp === mb.creationTimestamp &&
    JSON.stringify(a.spec) === JSON.stringify(b.spec) &&
    JSON.stringify(ma.labels ?? {}) === JSON.stringify(mb.labels ?? {}) &&
    JSON.stringify(ma.annotations ?? {}) === JSON.stringify(mb.annotations ?? {})
  );
}
