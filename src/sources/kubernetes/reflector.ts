// A small reflector: list (paged) then watch from the list's resourceVersion, with the client's Watch class.
// It never gives up: dropped or ended watches reopen with backoff and jitter, 410 relists, idle watches restart,
// failing lists retry, and a server whose resourceVersions went back (etcd restored from a backup) is listed again
// from scratch. It tells its handler about every change as upsert/delete, relists included (diffed).
import { Watch, type KubeConfig } from '@kubernetes/client-node';
import type { Logger } from '../../log.js';
import { apiStatus } from '../../kube/objects.js';
import { errorText, getJson } from './http.js';
import { copyWith } from '../../same-shape.js';

/** Why a watch was (re)started: the `reason` label of servegate_watch_restarts_total. */
export type RestartReason = 'closed' | 'error' | 'expired' | 'idle' | 'list_error' | 'too_large';

export interface Backoff {
  initialMs: number;
  maxMs: number;
}

export interface ReflectorHandler {
  /** An object was added or changed (also for every object of a relist that is new or has a new resourceVersion). */
  upsert(obj: RawObject): void;
  /** An object is gone (also for objects missing from a relist). */
  delete(obj: RawObject): void;
}

export interface RawObject {
  metadata: { name: string; namespace?: string; resourceVersion?: string; [k: string]: unknown };
  [k: string]: unknown;
}

export interface ReflectorOptions {
  kc: KubeConfig;
  /** Metric/log label: the resource plural, e.g. "servingdeployments". */
  kind: string;
  /** Collection path: /apis/<group>/<version>[/namespaces/<ns>]/<plural> or /api/v1[/namespaces/<ns>]/<plural>. */
  path: string;
  /** For messages: "in namespace x" or "in all namespaces". */
  scope: string;
  labelSelector?: string;
  /** A kind whose API may not be installed (KServe): a 404 on list counts as synced-and-empty while retrying. */
  optional?: boolean;
  /** Said after a 404 on list: what is missing and how to install it (a CRD not applied yet). */
  notFoundHint?: string;
  pageSize: number;
  idleTimeoutMs: number;
  backoff: Backoff;
  logger: Logger;
  handler: ReflectorHandler;
  onRestart: (kind: string, reason: RestartReason) => void;
  /** Objects that could not be used (no metadata.name); counted by the owner. */
  onMalformed: (kind: string, why: string) => void;
}

type Outcome = {
  kind: 'closed' | 'error' | 'expired' | 'too_large' | 'idle' | 'stopped';
  err?: unknown;
  healthy: boolean;
  /** The watch delivered an event or bookmark (an ERROR event is none). */
  delivered: boolean;
};

const LIST_TIMEOUT_MS = 60_000;

export class Reflector {
  /** namespace/name → resourceVersion of what the handler was last told. */
  private readonly known = new Map<string, string | undefined>();
  private rv: string | undefined;
  private stopped = false;
  private running: Promise<void> | undefined;
  private watchAbort: (() => void) | undefined;
  private listAbort: AbortController | undefined;
  private wake: (() => void) | undefined;
  private syncedResolve!: () => void;
  private syncedReject!: (err: Error) => void;
  /** Resolves after the first full list was handed to the handler. */
  readonly synced: Promise<void>;
  isSynced = false;
  /** True while a watch is open and confirmed (connected). */
  private healthy = false;
  private lastOkAt = Date.now();
  /** When a 410 or a too-large resourceVersion last made us relist, and how many came within 10 s of the last. */
  private lastRelistAt = 0;
  private relistsInARow = 0;
  problem: string | undefined;
  private readonly watch: Watch;

  constructor(private readonly o: ReflectorOptions) {
    this.watch = new Watch(o.kc);
    this.synced = new Promise<void>((resolve, reject) => {
      this.syncedResolve = resolve;
      this.syncedReject = reject;
    });
    this.synced.catch(() => undefined);
  }

  get name(): string {
    return `${this.o.kind} ${this.o.scope}`;
  }

  start(): void {
    if (this.running) return;
    this.running = this.run().catch((err) => {
      // run() catches everything itself; this is a last line of defence.
      this.o.logger.error({ err, watch: this.name }, 'reflector loop failed unexpectedly');
    });
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.syncedReject(new Error('stopped before the first list'));
    this.watchAbort?.();
    this.listAbort?.abort();
    this.wake?.();
    await this.running;
  }

  /** 0 while a watch is open and current; else ms since the last successful list, event or bookmark. */
  stalenessMs(now = Date.now()): number {
    return this.healthy ? 0 : Math.max(0, now - this.lastOkAt);
  }

  private markOk(): void {
    this.lastOkAt = Date.now();
  }

  private async run(): Promise<void> {
    let attempt = 0;
    // The last watch brought nothing (it could not be opened, or stayed silent until it ended) or was cut (the API
    // server may have been restarted, on an etcd restored from a backup): before watching from our resourceVersion
    // again, check that the server has not gone back behind it.
    let check = false;
    /** Watches one after another that failed without delivering anything. */
    let failedInARow = 0;
    while (!this.stopped) {
      if (this.rv === undefined) {
        try {
          await this.list();
          // A list in the middle of failing watches (below) keeps their backoff.
          if (failedInARow === 0) attempt = 0;
          check = false;
        } catch (err) {
          if (this.stopped) break;
          const delay = this.delay(attempt++);
          const hint = apiStatus(err) === 404 && this.o.notFoundHint ? ` (${this.o.notFoundHint})` : '';
          this.fail('list_error', `list ${this.name}: ${errorText(err)}${hint}; retrying in ${fmt(delay)}`, err);
          await this.sleep(delay);
          continue;
        }
      }
      if (check) {
        let behind: string | undefined;
        try {
          behind = await this.serverBehind();
        } catch (err) {
          if (this.stopped) break;
          const delay = this.delay(attempt++);
          this.fail('error', `watch ${this.name}: ${errorText(err)}; retrying in ${fmt(delay)}`, err);
          await this.sleep(delay);
          continue;
        }
        if (this.stopped) break;
        check = false;
        if (behind !== undefined) {
          await this.tooLarge(`the API server's resourceVersion is ${behind}`);
          continue;
        }
      }
      const out = await this.watchOnce();
      this.healthy = false;
      if (this.stopped || out.kind === 'stopped') break;
      if (out.healthy) attempt = 0;
      check = !out.delivered || out.kind === 'error';
      failedInARow = out.delivered || out.healthy ? 0 : failedInARow + 1;
      if (out.kind === 'too_large') {
        await this.tooLarge(errorText(out.err));
        continue;
      }
      const status = apiStatus(out.err);
      if (out.kind === 'expired' || status === 410) {
        // Our resourceVersion is too old: list again (the diff tells the handler what changed meanwhile).
        this.rv = undefined;
        const delay = this.relistDelay();
        this.restart(
          'expired',
          `watch ${this.name}: resourceVersion expired (410)${delay ? ` again, relisting in ${fmt(delay)}` : ', relisting'}`,
        );
        if (delay) await this.sleep(delay);
        continue;
      }
      if (failedInARow % 3 === 0 && failedInARow > 0 && out.kind === 'error') {
        // The server answers (the check before each found it no older than us) but every watch from our
        // resourceVersion fails: list again and watch from the new one (client-go lists after every failed watch),
        // every third failure, the backoff growing on.
        const delay = this.delay(attempt++);
        this.fail(
          'error',
          `watch ${this.name}: ${errorText(out.err)} ${failedInARow} times in a row from resourceVersion ${this.rv ?? ''}; relisting in ${fmt(delay)}`,
          out.err,
        );
        this.rv = undefined;
        await this.sleep(delay);
        continue;
      }
      if (out.kind === 'idle') {
        this.restart('idle', `watch ${this.name}: no event or bookmark for ${fmt(this.o.idleTimeoutMs)}, restarting`);
        continue;
      }
      if (out.kind === 'closed' && out.healthy) {
        this.restart('closed');
        continue;
      }
      const delay = this.delay(attempt++);
      const why = out.kind === 'closed' ? 'closed by the API server' : errorText(out.err);
      this.fail(
        out.kind === 'closed' ? 'closed' : 'error',
        `watch ${this.name}: ${why}; retrying in ${fmt(delay)}`,
        out.err,
      );
      await this.sleep(delay);
    }
  }

  /**
   * The server has nothing as new as our resourceVersion: etcd was restored from a backup (its revision went back),
   * or the API server is another cluster's. A watch from it would stay silent until the server's revision passes ours
   * and then miss everything written in between: list again from scratch (the diff takes away what the restore
   * removed) and watch from that list, as client-go does on "Too large resource version".
   */
  private async tooLarge(why: string): Promise<void> {
    const delay = this.relistDelay();
    const message =
      `watch ${this.name}: resourceVersion ${this.rv ?? ''} is newer than anything the API server has (${why}; ` +
      `etcd restored from a backup?): relisting from scratch${delay ? ` in ${fmt(delay)}` : ''}`;
    this.rv = undefined;
    this.problem = message;
    this.o.onRestart(this.o.kind, 'too_large');
    this.o.logger.warn({ watch: this.name, reason: 'too_large' }, message);
    if (delay) await this.sleep(delay);
  }

  /**
   * 0 for a relist forced by the server (410, a resourceVersion too large), unless another came within 10 s: then
   * the backoff, growing with each (a server whose watch cache cannot serve what its lists answer). Each relist is a
   * full list, at thousands of objects the API server's most costly request.
   */
  private relistDelay(): number {
    const now = Date.now();
    this.relistsInARow = now - this.lastRelistAt < 10_000 ? this.relistsInARow + 1 : 0;
    this.lastRelistAt = now;
    return this.relistsInARow === 0 ? 0 : this.delay(this.relistsInARow - 1);
  }

  /**
   * The server's current resourceVersion (a one-item consistent list) when it is older than ours, else undefined.
   * resourceVersions are compared as numbers, as the API server's own are (etcd revisions); one that is not a number
   * is taken as fine.
   */
  private async serverBehind(): Promise<string | undefined> {
    const ours = this.rv;
    if (ours === undefined || !/^\d+$/.test(ours)) return undefined;
    this.listAbort = new AbortController();
    let page: unknown;
    try {
      page = await getJson(
        this.o.kc,
        this.o.path,
        { labelSelector: this.o.labelSelector, limit: 1 },
        { signal: this.listAbort.signal, timeoutMs: LIST_TIMEOUT_MS },
      );
    } finally {
      this.listAbort = undefined;
    }
    const theirs = (page as { metadata?: { resourceVersion?: unknown } } | null)?.metadata?.resourceVersion;
    if (typeof theirs !== 'string' || !/^\d+$/.test(theirs)) return undefined;
    return BigInt(theirs) < BigInt(ours) ? theirs : undefined;
  }

  private restart(reason: RestartReason, message?: string): void {
    this.o.onRestart(this.o.kind, reason);
    if (message) this.o.logger.info({ watch: this.name, reason }, message);
  }

  private fail(reason: RestartReason, message: string, err: unknown): void {
    this.problem = message;
    this.o.onRestart(this.o.kind, reason);
    this.o.logger.warn({ watch: this.name, reason, err: errorText(err) }, message);
  }

  /** Exponential backoff with jitter: base·2^attempt capped at max, then a random value in [half, full]. */
  private delay(attempt: number): number {
    const base = Math.min(this.o.backoff.maxMs, this.o.backoff.initialMs * 2 ** Math.min(attempt, 30));
    return Math.round(base / 2 + (Math.random() * base) / 2);
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const t = setTimeout(done, ms);
      function done() {
        clearTimeout(t);
        resolve();
      }
      this.wake = () => {
        this.wake = undefined;
        done();
      };
    });
  }

  /** Lists every page, then hands the differences to the handler; sets the resourceVersion to watch from. */
  private async list(): Promise<void> {
    let items: RawObject[] = [];
    let rv = '';
    let cont: string | undefined;
    let restarts = 0;
    for (;;) {
      this.listAbort = new AbortController();
      let page: unknown;
      try {
        page = await getJson(
          this.o.kc,
          this.o.path,
          { labelSelector: this.o.labelSelector, limit: this.o.pageSize, continue: cont },
          { signal: this.listAbort.signal, timeoutMs: LIST_TIMEOUT_MS },
        );
      } catch (err) {
        // A continue token that expired mid-list: start the list over (a few times), as client-go does.
        if (cont !== undefined && apiStatus(err) === 410 && restarts++ < 3) {
          items = [];
          cont = undefined;
          continue;
        }
        if (this.o.optional && apiStatus(err) === 404 && !this.isSynced) {
          // The API is not installed: do not hold readiness hostage; keep retrying in the background.
          this.isSynced = true;
          this.syncedResolve();
        }
        throw err;
      } finally {
        this.listAbort = undefined;
      }
      if (this.stopped) return;
      const p = page as { metadata?: { resourceVersion?: unknown; continue?: unknown }; items?: unknown };
      if (!p || typeof p !== 'object' || !Array.isArray(p.items))
        throw new Error(`list ${this.name}: the answer has no items array`);
      if (cont === undefined) rv = typeof p.metadata?.resourceVersion === 'string' ? p.metadata.resourceVersion : '';
      for (const it of p.items as unknown[]) {
        if (isRaw(it)) items.push(it);
        else this.o.onMalformed(this.o.kind, 'list item without metadata.name');
      }
      cont = typeof p.metadata?.continue === 'string' && p.metadata.continue !== '' ? p.metadata.continue : undefined;
      if (!cont) break;
    }
    this.replace(items);
    this.rv = rv;
    this.markOk();
    this.problem = undefined;
    if (!this.isSynced) {
      this.isSynced = true;
      this.syncedResolve();
    }
  }

  private replace(items: RawObject[]): void {
    const seen = new Set<string>();
    for (const obj of items) {
      const key = keyOf(obj);
      seen.add(key);
      const rv = obj.metadata.resourceVersion;
      if (this.known.has(key) && rv !== undefined && this.known.get(key) === rv) continue;
      this.known.set(key, rv);
      this.call('upsert', obj);
    }
    for (const key of [...this.known.keys()]) {
      if (seen.has(key)) continue;
      this.known.delete(key);
      const [namespace, name] = splitKey(key);
      this.call('delete', { metadata: namespace === '' ? { name } : { name, namespace } });
    }
  }

  private call(op: 'upsert' | 'delete', obj: RawObject): void {
    try {
      this.o.handler[op](obj);
    } catch (err) {
      this.o.onMalformed(this.o.kind, `handler failed: ${errorText(err)}`);
      this.o.logger.warn(
        { watch: this.name, err: errorText(err), object: keyOf(obj) },
        'handling a watched object failed; skipped',
      );
    }
  }

  /** One watch from this.rv until it ends; resolves with why it ended. */
  private watchOnce(): Promise<Outcome> {
    return new Promise<Outcome>((resolve) => {
      let finished = false;
      let events = 0;
      let controller: AbortController | undefined;
      const openedAt = Date.now();
      const idle = setTimeout(() => finish({ kind: 'idle', healthy: true }), this.o.idleTimeoutMs);
      const finish = (out: Omit<Outcome, 'healthy' | 'delivered'> & { healthy?: boolean }) => {
        if (finished) return;
        finished = true;
        clearTimeout(idle);
        // An open watch kept us current until this moment (an idle one may not have: it proves nothing).
        if (this.healthy && out.kind !== 'idle') this.markOk();
        this.watchAbort = undefined;
        try {
          controller?.abort();
        } catch {
          // already aborted
        }
        // A watch that delivered something or stayed open a while was a good one: reset the backoff.
        const healthy = out.healthy ?? (events > 0 || Date.now() - openedAt >= 2_000);
        resolve(copyWith(out, { healthy, delivered: events > 0 }));
      };
      this.watchAbort = () => finish({ kind: 'stopped' });
      const onEvent = (type: string, obj: unknown) => {
        if (finished) return;
        // An ERROR event ends the watch and proves nothing current: it is no sign of a working watch.
        if (type !== 'ERROR') {
          events++;
          idle.refresh();
          this.markOk();
        }
        try {
          this.onWatchEvent(type, obj, finish);
        } catch (err) {
          this.o.onMalformed(this.o.kind, `watch event failed: ${errorText(err)}`);
        }
      };
      // Server-side end of the watch after 5-10 minutes, randomised (as client-go does) so watches do not restart together.
      const timeoutSeconds = Math.round(300 + Math.random() * 300);
      let opening: Promise<AbortController>;
      try {
        opening = this.watch.watch(
          this.o.path,
          { resourceVersion: this.rv, allowWatchBookmarks: true, labelSelector: this.o.labelSelector, timeoutSeconds },
          onEvent,
          (err: unknown) => finish({ kind: err ? 'error' : 'closed', err }),
        );
      } catch (err) {
        finish({ kind: 'error', err });
        return;
      }
      opening.then(
        (c) => {
          controller = c;
          if (finished) {
            c.abort();
            return;
          }
          // Connected: the API server accepted the watch from our resourceVersion.
          this.healthy = true;
          this.problem = undefined;
          this.markOk();
        },
        (err: unknown) => finish({ kind: 'error', err }),
      );
    });
  }

  private onWatchEvent(type: string, obj: unknown, finish: (o: Omit<Outcome, 'healthy' | 'delivered'>) => void): void {
    if (type === 'ERROR') {
      const code = obj && typeof obj === 'object' ? (obj as { code?: unknown }).code : undefined;
      if (code === 410) finish({ kind: 'expired' });
      else if (isTooLarge(obj)) finish({ kind: 'too_large', err: new Error(errorText(obj)) });
      else finish({ kind: 'error', err: new Error(`watch ERROR event: ${errorText(obj)}`) });
      return;
    }
    const rv = resourceVersionOf(obj);
    if (type === 'BOOKMARK') {
      if (rv) this.rv = rv;
      return;
    }
    if (type !== 'ADDED' && type !== 'MODIFIED' && type !== 'DELETED') return;
    if (!isRaw(obj)) {
      this.o.onMalformed(this.o.kind, `${type} event without metadata.name`);
      if (rv) this.rv = rv;
      return;
    }
    const key = keyOf(obj);
    if (type === 'DELETED') {
      if (this.known.delete(key)) this.call('delete', obj);
    } else {
      this.known.set(key, obj.metadata.resourceVersion);
      this.call('upsert', obj);
    }
    if (rv) this.rv = rv;
  }
}

/** A Status saying the resourceVersion asked for is newer than the server's (504, cause ResourceVersionTooLarge). */
function isTooLarge(status: unknown): boolean {
  if (!status || typeof status !== 'object') return false;
  const s = status as { message?: unknown; details?: { causes?: unknown } };
  const causes = Array.isArray(s.details?.causes) ? (s.details.causes as unknown[]) : [];
  return (
    causes.some(
      (c) => !!c && typeof c === 'object' && (c as { reason?: unknown }).reason === 'ResourceVersionTooLarge',
    ) ||
    (typeof s.message === 'string' && /too large resource version/i.test(s.message))
  );
}

function isRaw(v: unknown): v is RawObject {
  if (!v || typeof v !== 'object') return false;
  const m = (v as { metadata?: unknown }).metadata;
  return (
    !!m &&
    typeof m === 'object' &&
    typeof (m as { name?: unknown }).name === 'string' &&
    (m as { name: string }).name !== ''
  );
}

function resourceVersionOf(v: unknown): string | undefined {
  if (!v || typeof v !== 'object') return undefined;
  const m = (v as { metadata?: { resourceVersion?: unknown } }).metadata;
  return m && typeof m.resourceVersion === 'string' && m.resourceVersion !== '' ? m.resourceVersion : undefined;
}

function keyOf(o: RawObject): string {
  const ns = typeof o.metadata.namespace === 'string' ? o.metadata.namespace : '';
  return `${ns}/${o.metadata.name}`;
}

function splitKey(key: string): [string, string] {
  const i = key.indexOf('/');
  return [key.slice(0, i), key.slice(i + 1)];
}

function fmt(ms: number): string {
  return ms >= 1000 ? `${(ms / 1000).toFixed(1)}s` : `${ms}ms`;
}
