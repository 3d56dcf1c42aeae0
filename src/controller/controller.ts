// The status controller: after every build, writes each ServingDeployment's status (URLs, hostname, conditions)
// through the status subresource, only while leader and only when it changed; a small work queue with retries.
import { CustomObjectsApi, PatchStrategy, setHeaderMiddleware, type KubeConfig } from '@kubernetes/client-node';
import { createHash } from 'node:crypto';
import { apiStatus, FIELD_MANAGER, isObject } from '../kube/objects.js';
import { silentLogger, type Logger } from '../log.js';
import { PROJECT_NAME } from '../routing/names.js';
import type { AppliedBuild, RouteStore } from '../routing/store.js';
import {
  API_GROUP,
  type DeploymentStatus,
  type RouteTable,
  type ServingDeploymentResource,
  type Snapshot,
} from '../routing/types.js';
import { alwaysLeader, type Leadership } from './leader.js';
import { desiredStatus, statusMergePatch, statusNeedsWrite, type ServingDeploymentStatus } from './status.js';

/** Writes the status subresource of one ServingDeployment. Errors carry the HTTP status as `code` when there is one. */
export interface StatusWriter {
  patchStatus(namespace: string, name: string, patch: { status: Record<string, unknown> }): Promise<void>;
}

/** A StatusWriter over the real API: PATCH .../servingdeployments/<name>/status, application/merge-patch+json. */
export function kubeStatusWriter(kc: KubeConfig, opts: { requestTimeoutMs?: number } = {}): StatusWriter {
  const api = kc.makeApiClient(CustomObjectsApi);
  const timeoutMs = opts.requestTimeoutMs ?? 10_000;
  const contentType = setHeaderMiddleware('Content-Type', PatchStrategy.MergePatch);
  const options = {
    middleware: [
      {
        pre: (ctx: Parameters<typeof contentType.pre>[0]) => {
          ctx.setSignal(AbortSignal.timeout(timeoutMs));
          ctx.setHeaderParam('User-Agent', FIELD_MANAGER);
          return contentType.pre(ctx);
        },
        post: contentType.post,
      },
    ],
    middlewareMergeStrategy: 'append' as const,
  };
  return {
    async patchStatus(namespace, name, patch) {
      await api.patchNamespacedCustomObjectStatus(
        {
          group: API_GROUP,
          version: 'v1alpha1',
          namespace,
          plural: 'servingdeployments',
          name,
          body: patch,
          fieldManager: FIELD_MANAGER,
        },
        options,
      );
    },
  };
}

export interface StatusControllerOptions {
  store: RouteStore;
  writer: StatusWriter;
  /** Checked before every write; default: always leader (leader election disabled). */
  leadership?: Leadership;
  logger?: Logger;
  /** The clock for lastTransitionTime. */
  now?: () => Date;
  /** Status writes in flight at once; default 4. */
  concurrency?: number;
  /** First retry delay after a failed write; doubles per attempt up to maxRetryMs. Default 500 ms / 60 s. */
  retryBaseMs?: number;
  maxRetryMs?: number;
}

export interface StatusControllerStats {
  /** Status writes that succeeded. */
  writes: number;
  /** Status writes that failed (each retry counts); 409 conflicts included. */
  failures: number;
  /** Of the failures, 409 Conflict answers. */
  conflicts: number;
  /** Work items dropped because the object was gone (404, or no longer in the snapshot). */
  dropped: number;
}

interface Entry {
  resource: ServingDeploymentResource;
  status: DeploymentStatus;
}

interface Written {
  uid?: string;
  resourceVersion?: string;
  status: ServingDeploymentStatus;
}

export class StatusController {
  readonly stats: StatusControllerStats = { writes: 0, failures: 0, conflicts: 0, dropped: 0 };
  private readonly log: Logger;
  private readonly leadership: Leadership;
  private readonly now: () => Date;
  private readonly concurrency: number;
  private readonly retryBaseMs: number;
  private readonly maxRetryMs: number;
  /** The ServingDeployments of the latest kubernetes build, by "namespace/name". */
  private latest = new Map<string, Entry>();
  /** What we wrote, valid while the object's resourceVersion is still what we saw when writing (the informer lags). */
  private written = new Map<string, Written>();
  private queue: string[] = [];
  private queued = new Set<string>();
  private inFlight = new Set<string>();
  /** Keys enqueued again while in flight: processed once more when the write ends. */
  private dirty = new Set<string>();
  private retryTimers = new Map<string, NodeJS.Timeout>();
  private attempts = new Map<string, number>();
  /** Put-backs of a status another writer changed, per key: how many in a row, and when the last one was. */
  private putBacks = new Map<string, { count: number; at: number }>();
  /** Keys whose next put-back waits (another writer keeps changing their status). */
  private putBackTimers = new Map<string, NodeJS.Timeout>();
  /** Digests of the last few statuses we wrote per key: one seen again is our own write arriving late, not a fight. */
  private ownWrites = new Map<string, string[]>();
  private active = 0;
  private idleWaiters: Array<() => void> = [];
  private unsubscribe: (() => void) | undefined;
  private servedFor: RouteTable | undefined;
  private served = new Set<string>();
  private stopped = false;

  constructor(private readonly opts: StatusControllerOptions) {
    this.log = (opts.logger ?? silentLogger).child({ component: 'status-controller' });
    this.leadership = opts.leadership ?? alwaysLeader;
    this.now = opts.now ?? (() => new Date());
    this.concurrency = Math.max(1, opts.concurrency ?? 4);
    this.retryBaseMs = opts.retryBaseMs ?? 500;
    this.maxRetryMs = opts.maxRetryMs ?? 60_000;
  }

  /** Subscribes to the store. Start it before the route source so that it sees the first build. */
  start(): void {
    if (this.unsubscribe) return;
    this.stopped = false;
    this.unsubscribe = this.opts.store.onBuild((applied, snapshot) => this.onBuild(applied, snapshot));
  }

  /** Unsubscribes, drops queued work and waits (at most timeoutMs) for writes in flight. */
  async stop(timeoutMs = 5000): Promise<void> {
    this.stopped = true;
    this.unsubscribe?.();
    this.unsubscribe = undefined;
    this.clearQueue();
    await this.idle(timeoutMs);
  }

  /** Call when this process became leader: reconciles every ServingDeployment of the latest build. */
  startedLeading(): void {
    this.written.clear();
    for (const key of this.latest.keys()) this.enqueue(key);
  }

  /**
   * Call when a ServingDeployment changed in its status only (the source rebuilds nothing for that): the object is
   * compared with what the latest build says, and written again when another writer changed its status.
   */
  statusChanged(resource: ServingDeploymentResource): void {
    if (this.stopped) return;
    const key = `${resource.metadata.namespace}/${resource.metadata.name}`;
    const e = this.latest.get(key);
    if (!e || e.resource.metadata.uid !== resource.metadata.uid) return;
    const entry = { resource, status: e.status };
    this.latest.set(key, entry);
    if (!this.leadership.isLeader() || this.retryTimers.has(key) || this.putBackTimers.has(key)) return;
    const current = this.currentStatus(key, resource);
    if (!statusNeedsWrite(desiredStatus(e.status, current, this.now(), { project: projectOf(entry) }), current)) return;
    // An earlier write of ours delivered after a later one (the route changed while it was on its way): answered at
    // once, and not counted as another writer.
    if (this.ownWrites.get(key)?.includes(statusDigest(current))) this.enqueue(key);
    else this.putBack(key);
  }

  /**
   * Another writer changed a status: the first put-back goes at once; while that writer keeps answering (a second
   * servegate installation watching the same namespace, another controller), each next one waits twice as long, up to
   * maxRetryMs, so that two writers that disagree cost the API server a write per object a minute, not one per round trip.
   */
  private putBack(key: string): void {
    const now = Date.now();
    const prev = this.putBacks.get(key);
    // A quiet spell of twice the longest wait ends a fight.
    const count = prev && now - prev.at < 2 * this.maxRetryMs ? prev.count + 1 : 1;
    this.putBacks.set(key, { count, at: now });
    if (count === 1) {
      this.enqueue(key);
      return;
    }
    const delay = Math.min(this.maxRetryMs, this.retryBaseMs * 2 ** (count - 1));
    if (count === 2 || delay === this.maxRetryMs)
      this.log.warn(
        { key, putBacks: count, nextInMs: delay },
        "another writer keeps changing this ServingDeployment's status (a second servegate watching the namespace, " +
          'or another controller); putting it back less and less often',
      );
    const t = setTimeout(() => {
      this.putBackTimers.delete(key);
      this.enqueue(key);
    }, delay);
    t.unref?.();
    this.putBackTimers.set(key, t);
  }

  /** Call when this process stopped leading: queued work and pending retries are dropped. */
  stoppedLeading(): void {
    this.clearQueue();
    this.written.clear();
  }

  /** Items waiting (queued, waiting for a retry, or a put-back held while another writer keeps changing it). */
  queueDepth(): number {
    return this.queue.length + this.retryTimers.size + this.putBackTimers.size;
  }

  /** Resolves when nothing is queued, in flight or waiting for a retry (or after timeoutMs). */
  idle(timeoutMs = 10_000): Promise<void> {
    if (this.isIdle()) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const t = setTimeout(done, timeoutMs);
      const waiter = () => {
        clearTimeout(t);
        resolve();
      };
      function done() {
        resolve();
      }
      this.idleWaiters.push(waiter);
    });
  }

  private isIdle(): boolean {
    return this.queue.length === 0 && this.active === 0 && this.retryTimers.size === 0;
  }

  private notifyIdle(): void {
    if (!this.isIdle()) return;
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const w of waiters) w();
  }

  private onBuild(applied: AppliedBuild, snapshot: Snapshot): void {
    try {
      if (this.stopped || snapshot.source !== 'kubernetes') return;
      const resources = new Map<string, ServingDeploymentResource>();
      for (const d of snapshot.deployments) resources.set(`${d.metadata.namespace}/${d.metadata.name}`, d);
      const next = new Map<string, Entry>();
      for (const s of applied.result.statuses) {
        if (s.resourceKind !== 'ServingDeployment') continue;
        const resource = resources.get(s.id);
        if (resource) next.set(s.id, { resource, status: s });
      }
      for (const key of this.latest.keys()) {
        if (!next.has(key)) this.forget(key);
      }
      this.latest = next;
      if (!this.leadership.isLeader()) return;
      const now = this.now();
      for (const [key, e] of next) {
        if (this.retryTimers.has(key)) continue; // backing off: the retry uses the latest build
        const current = this.currentStatus(key, e.resource);
        if (statusNeedsWrite(desiredStatus(e.status, current, now, { project: projectOf(e) }), current))
          this.enqueue(key);
      }
    } catch (err) {
      this.log.error({ err: (err as Error).message }, 'status controller: handling a build failed');
    }
  }

  /** The object is gone from the snapshot: its work is dropped. */
  private forget(key: string): void {
    const t = this.retryTimers.get(key);
    if (t) clearTimeout(t);
    let pending = this.retryTimers.delete(key);
    this.attempts.delete(key);
    clearTimeout(this.putBackTimers.get(key));
    if (this.putBackTimers.delete(key)) pending = true;
    this.putBacks.delete(key);
    this.ownWrites.delete(key);
    this.written.delete(key);
    if (this.queued.delete(key)) {
      this.queue = this.queue.filter((k) => k !== key);
      pending = true;
    }
    if (this.dirty.delete(key)) pending = true;
    if (pending) this.stats.dropped++;
    this.notifyIdle();
  }

  private clearQueue(): void {
    for (const t of this.retryTimers.values()) clearTimeout(t);
    this.retryTimers.clear();
    this.attempts.clear();
    for (const t of this.putBackTimers.values()) clearTimeout(t);
    this.putBackTimers.clear();
    this.putBacks.clear();
    this.queue = [];
    this.queued.clear();
    this.dirty.clear();
    this.notifyIdle();
  }

  private enqueue(key: string): void {
    if (this.stopped) return;
    if (this.inFlight.has(key)) {
      this.dirty.add(key);
      return;
    }
    if (this.queued.has(key) || this.retryTimers.has(key)) return;
    this.queued.add(key);
    this.queue.push(key);
    this.pump();
  }

  private pump(): void {
    while (this.active < this.concurrency && this.queue.length > 0) {
      const key = this.queue.shift()!;
      this.queued.delete(key);
      this.active++;
      this.inFlight.add(key);
      void this.process(key)
        .catch((err) => this.log.error({ key, err: (err as Error).message }, 'status controller: unexpected error'))
        .finally(() => {
          this.active--;
          this.inFlight.delete(key);
          if (this.dirty.delete(key)) this.enqueue(key);
          this.pump();
          this.notifyIdle();
        });
    }
  }

  /** The status as the API server has it now, as far as we know. */
  private currentStatus(key: string, resource: ServingDeploymentResource): unknown {
    const w = this.written.get(key);
    if (
      w &&
      w.resourceVersion !== undefined &&
      w.uid === resource.metadata.uid &&
      w.resourceVersion === resource.metadata.resourceVersion
    )
      return w.status;
    if (w) this.written.delete(key);
    return resource.status;
  }

  /** Ids of ServingDeployments in the table the gateway serves now. */
  private isServed(id: string): boolean {
    const table = this.opts.store.current();
    if (table !== this.servedFor) {
      this.servedFor = table;
      this.served = new Set(table.routes.filter((r) => r.resourceKind === 'ServingDeployment').map((r) => r.id));
    }
    return this.served.has(id);
  }

  private async process(key: string): Promise<void> {
    const e = this.latest.get(key);
    if (!e) {
      this.stats.dropped++;
      return;
    }
    if (this.stopped || !this.leadership.isLeader()) return;
    // Ready=True promises that the gateway serves the route now.
    if (e.status.ready && !this.isServed(key)) return;
    const current = this.currentStatus(key, e.resource);
    const desired = desiredStatus(e.status, current, this.now(), { project: projectOf(e) });
    if (!statusNeedsWrite(desired, current)) {
      this.attempts.delete(key);
      return;
    }
    const [namespace, name] = [e.resource.metadata.namespace, e.resource.metadata.name];
    try {
      await this.opts.writer.patchStatus(namespace, name, statusMergePatch(desired, current));
      this.stats.writes++;
      this.attempts.delete(key);
      const own = this.ownWrites.get(key) ?? [];
      own.push(statusDigest(desired));
      if (own.length > 3) own.shift();
      this.ownWrites.set(key, own);
      // The informer has not delivered our write yet: remember it against the resourceVersion we computed from
      // (ignored as soon as the snapshot carries a newer version of the object).
      this.written.set(key, {
        uid: e.resource.metadata.uid,
        resourceVersion: e.resource.metadata.resourceVersion,
        status: desired,
      });
      this.log.debug({ key, ready: e.status.ready, reason: e.status.reason }, 'status written');
    } catch (err) {
      const code = apiStatus(err);
      if (code === 404) {
        this.stats.dropped++;
        this.log.debug({ key }, 'status not written: the object is gone');
        return;
      }
      this.stats.failures++;
      if (code === 409) this.stats.conflicts++;
      this.scheduleRetry(key, err);
    }
  }

  private scheduleRetry(key: string, err: unknown): void {
    if (this.stopped || !this.latest.has(key)) return;
    const attempt = (this.attempts.get(key) ?? 0) + 1;
    this.attempts.set(key, attempt);
    const base = Math.min(this.maxRetryMs, this.retryBaseMs * 2 ** (attempt - 1));
    const delay = Math.round(base * (0.8 + Math.random() * 0.4));
    this.log.warn(
      { key, attempt, retryInMs: delay, code: apiStatus(err), err: (err as Error)?.message },
      'status write failed; retrying',
    );
    const t = setTimeout(() => {
      this.retryTimers.delete(key);
      this.enqueue(key);
      this.notifyIdle();
    }, delay);
    t.unref?.();
    this.retryTimers.set(key, t);
  }
}

/** A status's digest, object key order ignored (the API server's order is not ours): see ownWrites. */
function statusDigest(status: unknown): string {
  return createHash('sha1').update(canonical(status)).digest('base64');
}

function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  if (isObject(v))
    return `{${Object.keys(v)
      .filter((k) => v[k] !== undefined)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonical(v[k])}`)
      .join(',')}}`;
  return JSON.stringify(v ?? null);
}

/** The project shown in status (and by `kubectl get sdep`): spec.project, else the namespace; none for InvalidSpec. */
function projectOf(e: Entry): string | undefined {
  if (e.status.reason === 'InvalidSpec') return undefined;
  const spec = e.resource.spec as { project?: unknown } | null;
  const p =
    spec && typeof spec.project === 'string' && spec.project !== '' ? spec.project : e.resource.metadata.namespace;
  return PROJECT_NAME.test(p) ? p : undefined;
}
