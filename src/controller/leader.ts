// Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does: one writer of status at a time.
// The holder renews every retryPeriod; it stops leading once it could not renew for renewDeadline; others take over after expiry.
import { hostname } from 'node:os';
import {
  CoordinationV1Api,
  setHeaderMiddleware,
  V1MicroTime,
  type KubeConfig,
  type V1Lease,
} from '@kubernetes/client-node';
import { apiStatus, FIELD_MANAGER } from '../kube/objects.js';
import { silentLogger, type Logger } from '../log.js';

/** What the status controller needs to know about leadership. */
export interface Leadership {
  isLeader(): boolean;
}

/** Always the leader: leader election disabled (one replica), or the files source. */
export const alwaysLeader: Leadership = { isLeader: () => true };

export interface LeaderTimings {
  /** How long a lease is valid after its renewTime; others may take it over after that. */
  leaseDurationMs: number;
  /** The holder stops leading when it could not renew for this long (must be < leaseDurationMs). */
  renewDeadlineMs: number;
  /** How often the holder renews and candidates retry (must be < renewDeadlineMs). */
  retryPeriodMs: number;
}

export interface LeaderElectorOptions extends LeaderTimings {
  /** A client for coordination.k8s.io/v1, or the KubeConfig to make one from. */
  api: CoordinationV1Api | KubeConfig;
  namespace: string;
  /** The Lease's name (config kubernetes.leaderElection.leaseName). */
  name: string;
  /** holderIdentity: POD_NAME, else the hostname (see defaultIdentity). */
  identity: string;
  /** Per-request timeout; default min(retryPeriod, 5s) but at least 500 ms. */
  requestTimeoutMs?: number;
  logger?: Logger;
  /** Clock in ms: how long the Lease went unrenewed is measured with it (never against the holder's renewTime). */
  now?: () => number;
  onStartedLeading?: () => void;
  onStoppedLeading?: () => void;
  /** Called when the observed holder changes (including to this identity, and to '' when released). */
  onNewLeader?: (identity: string) => void;
}

/** holderIdentity per the SPEC: POD_NAME (downward API), else the hostname. */
export function defaultIdentity(env: NodeJS.ProcessEnv = process.env): string {
  return env.POD_NAME?.trim() || hostname();
}

/** Timings from config `kubernetes.leaderElection` (seconds). */
export function leaderTimingsFromConfig(le: {
  leaseDurationSeconds: number;
  renewDeadlineSeconds: number;
  retryPeriodSeconds: number;
}): LeaderTimings {
  return {
    leaseDurationMs: le.leaseDurationSeconds * 1000,
    renewDeadlineMs: le.renewDeadlineSeconds * 1000,
    retryPeriodMs: le.retryPeriodSeconds * 1000,
  };
}

/** Throws an error naming the config key when the timings cannot give a safe election. */
export function checkLeaderTimings(t: LeaderTimings): void {
  const k = 'kubernetes.leaderElection';
  if (!(t.retryPeriodMs > 0)) throw new Error(`${k}.retryPeriodSeconds must be positive`);
  if (!(t.renewDeadlineMs > t.retryPeriodMs)) {
    throw new Error(
      `${k}.renewDeadlineSeconds (${t.renewDeadlineMs / 1000}) must be greater than retryPeriodSeconds (${t.retryPeriodMs / 1000})`,
    );
  }
  if (!(t.leaseDurationMs > t.renewDeadlineMs)) {
    throw new Error(
      `${k}.leaseDurationSeconds (${t.leaseDurationMs / 1000}) must be greater than renewDeadlineSeconds (${t.renewDeadlineMs / 1000})`,
    );
  }
}

export interface LeaderStats {
  /** Times this process became leader. */
  acquisitions: number;
  /** Times it stopped leading (renew deadline passed, lease taken, or stop()). */
  losses: number;
  /** Lease requests that failed (network, 5xx, timeouts; 409 races not counted). */
  errors: number;
}

function timeMs(t: unknown): number | undefined {
  if (t instanceof Date) return t.getTime();
  if (typeof t === 'string') {
    const ms = Date.parse(t);
    return Number.isNaN(ms) ? undefined : ms;
  }
  return undefined;
}

export class LeaderElector implements Leadership {
  readonly stats: LeaderStats = { acquisitions: 0, losses: 0, errors: 0 };
  private readonly api: CoordinationV1Api;
  private readonly log: Logger;
  private readonly now: () => number;
  private readonly requestTimeoutMs: number;
  private leading = false;
  /** renewTime of our last successful acquire/renew (ms). */
  private lastRenew = 0;
  private observedHolder: string | undefined;
  /** The Lease record (holder, renewTime, duration) last read, and when (this process's clock) it last changed. */
  private observedRecord: string | undefined;
  private observedAt = 0;
  private running: Promise<void> | undefined;
  private stopped = false;
  private wake: (() => void) | undefined;

  constructor(private readonly opts: LeaderElectorOptions) {
    checkLeaderTimings(opts);
    this.api = opts.api instanceof CoordinationV1Api ? opts.api : opts.api.makeApiClient(CoordinationV1Api);
    this.log = (opts.logger ?? silentLogger).child({
      component: 'leader-election',
      lease: `${opts.namespace}/${opts.name}`,
      identity: opts.identity,
    });
    this.now = opts.now ?? Date.now;
    this.requestTimeoutMs = opts.requestTimeoutMs ?? Math.max(500, Math.min(opts.retryPeriodMs, 5000));
  }

  get identity(): string {
    return this.opts.identity;
  }

  /** True while this process holds the lease and renewed it within renewDeadline. */
  isLeader(): boolean {
    return this.leading && this.now() - this.lastRenew <= this.opts.renewDeadlineMs;
  }

  /** The holder last seen on the Lease ('' = released; undefined = not read yet). */
  leader(): string | undefined {
    return this.observedHolder;
  }

  /** Starts campaigning in the background; never throws (errors are logged and retried). */
  start(): void {
    if (this.running) return;
    this.stopped = false;
    this.running = this.loop();
  }

  /**
   * Stops campaigning. A leader steps down (onStoppedLeading) and releases the Lease: holderIdentity cleared,
   * leaseDurationSeconds 1, so another replica takes over at its next retry instead of waiting for expiry.
   */
  async stop(): Promise<void> {
    this.stopped = true;
    this.wake?.();
    await this.running;
    this.running = undefined;
    if (this.leading) {
      this.stepDown('stopping');
      await this.release();
    }
  }

  private async loop(): Promise<void> {
    while (!this.stopped) {
      await this.tick();
      if (this.stopped) break;
      // Candidates add jitter so that replicas do not hit the API server in lockstep.
      const wait = this.leading ? this.opts.retryPeriodMs : this.opts.retryPeriodMs * (1 + Math.random() * 0.2);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, wait);
        this.wake = () => {
          clearTimeout(t);
          resolve();
        };
      });
      this.wake = undefined;
    }
  }

  private async tick(): Promise<void> {
    try {
      const held = await this.tryAcquireOrRenew();
      if (held && !this.stopped) {
        if (!this.leading) {
          this.leading = true;
          this.stats.acquisitions++;
          this.log.info('became leader');
          this.call(this.opts.onStartedLeading);
        }
      } else if (
        !held &&
        this.leading &&
        this.observedHolder !== undefined &&
        this.observedHolder !== this.opts.identity
      ) {
        this.stepDown(`lease is now held by "${this.observedHolder}"`);
      }
    } catch (err) {
      this.stats.errors++;
      this.log.warn(
        { err: (err as Error).message },
        this.leading ? 'renewing the lease failed' : 'reading the lease failed',
      );
    }
    if (this.leading && this.now() - this.lastRenew > this.opts.renewDeadlineMs) {
      this.stepDown(`could not renew the lease for ${this.opts.renewDeadlineMs} ms`);
    }
  }

  private stepDown(why: string): void {
    if (!this.leading) return;
    this.leading = false;
    this.stats.losses++;
    this.log.warn({ why }, 'stopped leading');
    this.call(this.opts.onStoppedLeading);
  }

  private call(fn: (() => void) | undefined): void {
    try {
      fn?.();
    } catch (err) {
      this.log.error({ err: (err as Error).message }, 'leader-election callback threw');
    }
  }

  private observe(holder: string): void {
    if (holder !== this.observedHolder) {
      this.observedHolder = holder;
      if (holder) this.log.info({ holder }, 'new leader observed');
      try {
        this.opts.onNewLeader?.(holder);
      } catch {
        // callbacks never break the loop
      }
    }
  }

  private requestOptions() {
    const ua = setHeaderMiddleware('User-Agent', FIELD_MANAGER);
    const timeoutMs = this.requestTimeoutMs;
    return {
      middleware: [
        {
          pre: (ctx: Parameters<typeof ua.pre>[0]) => {
            ctx.setSignal(AbortSignal.timeout(timeoutMs));
            return ua.pre(ctx);
          },
          post: ua.post,
        },
      ],
      middlewareMergeStrategy: 'append' as const,
    };
  }

  /** One round: true when this identity holds the lease afterwards; false when another does or a race was lost. */
  private async tryAcquireOrRenew(): Promise<boolean> {
    const { namespace, name, identity } = this.opts;
    const now = this.now();
    const leaseSeconds = Math.max(1, Math.ceil(this.opts.leaseDurationMs / 1000));
    let lease: V1Lease;
    try {
      lease = await this.api.readNamespacedLease({ name, namespace }, this.requestOptions());
    } catch (err) {
      if (apiStatus(err) !== 404) throw err;
      try {
        await this.api.createNamespacedLease(
          {
            namespace,
            fieldManager: FIELD_MANAGER,
            body: {
              apiVersion: 'coordination.k8s.io/v1',
              kind: 'Lease',
              metadata: { name, namespace },
              spec: {
                holderIdentity: identity,
                leaseDurationSeconds: leaseSeconds,
                acquireTime: new V1MicroTime(now),
                renewTime: new V1MicroTime(now),
                leaseTransitions: 0,
              },
            },
          },
          this.requestOptions(),
        );
      } catch (e) {
        if (apiStatus(e) === 409) return false; // another candidate created it first
        throw e;
      }
      this.lastRenew = now;
      this.observe(identity);
      return true;
    }

    const spec = lease.spec ?? {};
    const holder = spec.holderIdentity ?? '';
    const durationMs = (spec.leaseDurationSeconds ?? leaseSeconds) * 1000;
    // Expiry by this process's clock, as client-go does: the record has not changed for the lease duration since we
    // first saw it. The holder's renewTime is another node's clock; compared with ours, a node whose clock is ahead
    // took a lease its holder was renewing, and one whose clock is behind waited that much longer after a holder died.
    const record = `${holder}|${String(timeMs(spec.renewTime))}|${durationMs}`;
    if (record !== this.observedRecord) {
      this.observedRecord = record;
      this.observedAt = now;
    }
    const expired = !holder || this.observedAt + durationMs < now;
    this.observe(holder);
    if (holder !== identity && !expired) return false;

    const mine = holder === identity;
    const next: V1Lease = {
      apiVersion: 'coordination.k8s.io/v1',
      kind: 'Lease',
      metadata: { ...lease.metadata, name, namespace, resourceVersion: lease.metadata?.resourceVersion },
      spec: {
        ...spec,
        holderIdentity: identity,
        leaseDurationSeconds: leaseSeconds,
        acquireTime: mine && spec.acquireTime ? new V1MicroTime(timeMs(spec.acquireTime) ?? now) : new V1MicroTime(now),
        renewTime: new V1MicroTime(now),
        leaseTransitions: mine ? (spec.leaseTransitions ?? 0) : (spec.leaseTransitions ?? 0) + 1,
      },
    };
    try {
      await this.api.replaceNamespacedLease(
        { name, namespace, body: next, fieldManager: FIELD_MANAGER },
        this.requestOptions(),
      );
    } catch (err) {
      if (apiStatus(err) === 409) return false; // someone wrote the lease since we read it: re-read next round
      throw err;
    }
    this.lastRenew = now;
    this.observe(identity);
    return true;
  }

  /** Gives the lease up if this identity still holds it. Errors are logged: the lease then simply expires. */
  private async release(): Promise<void> {
    const { namespace, name, identity } = this.opts;
    try {
      const lease = await this.api.readNamespacedLease({ name, namespace }, this.requestOptions());
      if (lease.spec?.holderIdentity !== identity) return;
      const now = this.now();
      const spec = {
        ...lease.spec,
        leaseDurationSeconds: 1,
        renewTime: new V1MicroTime(now),
        acquireTime: new V1MicroTime(now),
      };
      delete spec.holderIdentity;
      await this.api.replaceNamespacedLease(
        {
          name,
          namespace,
          fieldManager: FIELD_MANAGER,
          body: { apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', metadata: lease.metadata, spec },
        },
        this.requestOptions(),
      );
      this.observe('');
      this.log.info('released the lease');
    } catch (err) {
      this.log.warn({ err: (err as Error).message }, 'could not release the lease; it expires by itself');
    }
  }
}
