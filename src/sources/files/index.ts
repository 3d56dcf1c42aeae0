// The files route source: a folder tree or one file of the cluster's YAML manifests, reloaded on change.
// fs.watch gives speed, a stat poll gives certainty; a file that stops parsing keeps its last good documents.
import { createHash } from 'node:crypto';
import { watch, type FSWatcher } from 'node:fs';
import { readFile, stat } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { silentLogger, type Logger } from '../../log.js';
import type { ReadError, Snapshot } from '../../routing/types.js';
import { IGNORE_FILE, NO_IGNORES, parseIgnoreFile, type IgnoreRules } from './ignore.js';
import { walkManifestDir, type ListedFile } from './walk.js';
import { combineManifests, emptyResources, parseManifests, type ManifestResources } from '../manifests.js';
import type { RouteSource, SourceHealth } from '../types.js';

export interface FilesSourceOptions {
  /** Namespace of key Secrets written without metadata.namespace. */
  keysNamespace: string;
  logger?: Logger;
  /** Stat poll period, the fallback when fs.watch misses an event. Default 500 ms. */
  pollIntervalMs?: number;
  /** Quiet time after a watch event before reading, so that a file being written is read once. Default 50 ms. */
  debounceMs?: number;
  /** Use fs.watch besides the poll. Default true; false leaves only the poll (tests, odd filesystems). */
  watch?: boolean;
}

export { listManifestFiles } from './walk.js';

/** Files larger than this are reported and not read. */
export const MAX_FILE_BYTES = 8 * 1024 * 1024;

interface FileState {
  origin: string;
  /** ino, size, mtime and ctime: a change means "read again". */
  sig: string;
  mtimeMs: number;
  /** Date.now() just before the last read; a file modified around then is read again (same-tick edits). */
  readAtMs: number;
  hash: string;
  /** The resources of the last text that parsed; kept while the file is invalid YAML. */
  good: ManifestResources;
  docErrors: ReadError[];
  /** The current text is not valid YAML (last good documents are in use). */
  syntaxError?: ReadError;
  /** The file could not be read at all (permissions, too large). */
  readError?: ReadError;
}

export class FilesSource implements RouteSource {
  private readonly abs: string;
  private readonly keysNamespace: string;
  private readonly log: Logger;
  private readonly pollMs: number;
  private readonly debounceMs: number;
  private readonly useWatch: boolean;
  private files = new Map<string, FileState>();
  private ignore: IgnoreRules = NO_IGNORES;
  private ignoreSig = '';
  private rootProblem: string | undefined;
  private onSnapshot: ((s: Snapshot) => void) | undefined;
  private lastHash: string | undefined;
  private problems: string[] = [];
  private synced = false;
  private stopped = false;
  private watchers = new Map<string, FSWatcher>();
  private unwatchable = new Set<string>();
  /** Folders to watch, as found by the last listing. */
  private watchDirs: string[] = [];
  private pollTimer: NodeJS.Timeout | undefined;
  private debounceTimer: NodeJS.Timeout | undefined;
  private firstEventAt = 0;
  private forced = new Set<string>();
  private forceAll = false;
  private running: Promise<void> | undefined;
  private again = false;

  constructor(
    private readonly path: string,
    opts: FilesSourceOptions,
  ) {
    this.abs = resolve(path);
    this.keysNamespace = opts.keysNamespace;
    this.log = opts.logger ?? silentLogger;
    this.pollMs = opts.pollIntervalMs ?? 500;
    this.debounceMs = opts.debounceMs ?? 50;
    this.useWatch = opts.watch ?? true;
  }

  async start(onSnapshot: (snapshot: Snapshot) => void): Promise<void> {
    if (this.onSnapshot) throw new Error('FilesSource already started');
    try {
      const st = await stat(this.abs);
      if (!st.isDirectory() && !st.isFile()) throw new Error('not a file or directory');
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      const why = code === 'ENOENT' ? 'does not exist' : `cannot be read (${(err as Error).message})`;
      throw new Error(`manifests path "${this.path}" ${why}: give a folder or a file of YAML manifests`);
    }
    this.onSnapshot = onSnapshot;
    await this.scan();
    this.synced = true;
    if (this.stopped) return;
    this.syncWatchers(this.watchDirs);
    this.pollTimer = setInterval(() => this.requestScan(false), this.pollMs);
    this.pollTimer.unref();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.closeWatchers();
    if (this.pollTimer) clearInterval(this.pollTimer);
    if (this.debounceTimer) clearTimeout(this.debounceTimer);
    this.pollTimer = this.debounceTimer = undefined;
    await this.running?.catch(() => undefined);
  }

  health(): SourceHealth {
    return { synced: this.synced, stalenessMs: 0, problems: [...this.problems] };
  }

  /** Reads everything again now (every file, whatever its stat says); resolves when the snapshot is delivered. */
  async refresh(): Promise<void> {
    this.forceAll = true;
    await this.scan();
  }

  // ---- change detection ----

  /**
   * One watcher per folder walked (a single file's parent: editors save by renaming over it), kept in step after each
   * scan; a folder that cannot be watched (inotify limit) is left to the poll.
   */
  private syncWatchers(dirs: readonly string[]): void {
    if (!this.useWatch || this.stopped) return;
    const want = new Set(dirs);
    for (const [dir, w] of this.watchers) {
      if (!want.has(dir)) {
        w.close();
        this.watchers.delete(dir);
      }
    }
    for (const dir of want) {
      if (this.watchers.has(dir) || this.unwatchable.has(dir)) continue;
      try {
        const w = watch(dir, { persistent: false }, (_event, filename) => {
          if (filename === null || filename === undefined) this.forceAll = true;
          else this.forced.add(resolve(dir, filename.toString()));
          this.requestScan(true);
        });
        w.on('error', (err) => {
          // The folder went away or the watch broke: drop it; the next scan re-adds it if the folder is back.
          this.log.debug({ err: err.message, dir }, 'manifests watcher ended; the poll keeps reloading');
          w.close();
          if (this.watchers.get(dir) === w) this.watchers.delete(dir);
        });
        this.watchers.set(dir, w);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue; // gone already; the next scan decides
        this.unwatchable.add(dir);
        this.log.warn(
          { err: (err as Error).message, dir },
          `cannot watch folder; changes in it are seen by the ${this.pollMs} ms poll`,
        );
      }
    }
  }

  private closeWatchers(): void {
    for (const w of this.watchers.values()) w.close();
    this.watchers.clear();
  }

  /** A watch event waits for a short quiet time (bounded); a poll tick scans at once. */
  private requestScan(fromWatch: boolean): void {
    if (this.stopped) return;
    if (!fromWatch) {
      void this.scan();
      return;
    }
    const now = Date.now();
    if (!this.debounceTimer) this.firstEventAt = now;
    else clearTimeout(this.debounceTimer);
    const wait = Math.max(0, Math.min(this.debounceMs, this.firstEventAt + 4 * this.debounceMs - now));
    this.debounceTimer = setTimeout(() => {
      this.debounceTimer = undefined;
      void this.scan();
    }, wait);
  }

  /** Runs one scan at a time; a request during a scan runs one more afterwards. Never rejects. */
  private scan(): Promise<void> {
    if (this.running) {
      this.again = true;
      return this.running;
    }
    const run = async (): Promise<void> => {
      do {
        this.again = false;
        try {
          await this.scanOnce();
        } catch (err) {
          this.log.error({ err: (err as Error).message, path: this.path }, 'reading manifests failed');
        }
      } while (this.again && !this.stopped);
    };
    this.running = run().finally(() => {
      this.running = undefined;
    });
    return this.running;
  }

  // ---- reading ----

  private async scanOnce(): Promise<void> {
    const forced = this.forced;
    const forceAll = this.forceAll;
    this.forced = new Set();
    this.forceAll = false;

    const listed = await this.list();
    const seen = new Set<string>();
    for (const f of listed) {
      if (this.stopped) return;
      seen.add(f.abs);
      await this.readFile(f, forceAll || forced.has(f.abs));
    }
    for (const abs of [...this.files.keys()]) if (!seen.has(abs)) this.files.delete(abs);
    if (this.stopped) return;
    if (this.synced) this.syncWatchers(this.watchDirs);
    this.publish();
  }

  private async list(): Promise<ListedFile[]> {
    this.rootProblem = undefined;
    // A missing root (or a single file, which editors replace by rename) shows up as an event in its parent folder.
    this.watchDirs = [dirname(this.abs)];
    let st;
    try {
      st = await stat(this.abs);
    } catch (err) {
      const why =
        (err as NodeJS.ErrnoException).code === 'ENOENT' ? 'the path does not exist any more' : (err as Error).message;
      this.rootProblem = `${why}; nothing is served from it`;
      return [];
    }
    if (st.isFile()) {
      return [{ abs: this.abs, origin: this.path }];
    }
    if (!st.isDirectory()) {
      this.rootProblem = 'not a file or directory; nothing is served from it';
      return [];
    }
    await this.loadIgnoreFile();
    const { files, dirs } = await walkManifestDir(this.abs, this.path, this.ignore);
    this.watchDirs = dirs;
    return files;
  }

  private async loadIgnoreFile(): Promise<void> {
    const file = join(this.abs, IGNORE_FILE);
    try {
      const st = await stat(file);
      const sig = `${st.ino}:${st.size}:${st.mtimeMs}:${st.ctimeMs}`;
      if (sig === this.ignoreSig) return;
      this.ignore = parseIgnoreFile(await readFile(file, 'utf8'));
      this.ignoreSig = sig;
    } catch {
      this.ignore = NO_IGNORES;
      this.ignoreSig = '';
    }
  }

  private async readFile(f: ListedFile, force: boolean): Promise<void> {
    const prev = this.files.get(f.abs);
    let st;
    try {
      st = await stat(f.abs);
    } catch {
      return; // gone between listing and reading: dropped by the caller's next scan
    }
    const sig = `${st.ino}:${st.size}:${st.mtimeMs}:${st.ctimeMs}`;
    // Unchanged stat is trusted, unless the file was modified so close to our last read that the clock could not tell.
    if (prev && !force && prev.sig === sig && st.mtimeMs < prev.readAtMs - 20) return;

    const state: FileState = prev ?? {
      origin: f.origin,
      sig: '',
      mtimeMs: 0,
      readAtMs: 0,
      hash: '',
      good: emptyResources(),
      docErrors: [],
    };
    state.origin = f.origin;
    if (st.size > MAX_FILE_BYTES) {
      state.sig = sig;
      state.readError = {
        origin: f.origin,
        message: `file is larger than ${MAX_FILE_BYTES} bytes; not read (its last good documents stay in use)`,
      };
      this.files.set(f.abs, state);
      return;
    }
    const readAtMs = Date.now();
    let text: string;
    try {
      text = await readFile(f.abs, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
      state.readError = { origin: f.origin, message: `cannot read: ${(err as Error).message}` };
      this.files.set(f.abs, state);
      return;
    }
    state.readError = undefined;
    state.sig = sig;
    state.mtimeMs = st.mtimeMs;
    state.readAtMs = readAtMs;
    const hash = createHash('sha256').update(text).digest('hex');
    if (prev && hash === prev.hash) return;
    state.hash = hash;
    const parsed = parseManifests(text, { origin: f.origin, keysNamespace: this.keysNamespace });
    if (parsed.syntaxError) {
      const kept = state.good.deployments.length + state.good.inferenceServices.length + state.good.keySecrets.length;
      state.syntaxError = {
        origin: parsed.syntaxError.origin,
        message: `${parsed.syntaxError.message}; ${
          kept > 0
            ? `its last good version (${kept} resource${kept === 1 ? '' : 's'}) stays in use`
            : 'nothing from this file is used until it parses'
        }`,
      };
    } else {
      state.syntaxError = undefined;
      state.good = {
        deployments: parsed.deployments,
        inferenceServices: parsed.inferenceServices,
        keySecrets: parsed.keySecrets,
      };
      state.docErrors = parsed.errors;
    }
    this.files.set(f.abs, state);
  }

  // ---- publishing ----

  private publish(): void {
    const states = [...this.files.values()].sort((a, b) => (a.origin < b.origin ? -1 : a.origin > b.origin ? 1 : 0));
    const combined = combineManifests(states.map((s) => s.good));
    const readErrors: ReadError[] = [];
    if (this.rootProblem) readErrors.push({ origin: this.path, message: this.rootProblem });
    for (const p of this.ignore.problems) readErrors.push({ origin: join(this.path, IGNORE_FILE), message: p });
    for (const s of states) {
      if (s.readError) readErrors.push(s.readError);
      if (s.syntaxError) readErrors.push(s.syntaxError);
      readErrors.push(...s.docErrors);
    }
    readErrors.push(...combined.errors);

    const snapshot: Snapshot = {
      source: 'files',
      deployments: combined.deployments,
      inferenceServices: combined.inferenceServices,
      keySecrets: combined.keySecrets,
      readErrors,
    };
    this.reportProblems(readErrors);
    const hash = createHash('sha256').update(JSON.stringify(snapshot)).digest('hex');
    if (hash === this.lastHash) return;
    this.lastHash = hash;
    this.log.info(
      {
        path: this.path,
        files: states.length,
        deployments: snapshot.deployments.length,
        inferenceServices: snapshot.inferenceServices.length,
        keySecrets: snapshot.keySecrets.length,
        problems: readErrors.length,
      },
      'manifests read',
    );
    try {
      this.onSnapshot?.(snapshot);
    } catch (err) {
      this.log.error({ err: (err as Error).message }, 'applying the manifests snapshot failed');
    }
  }

  /** Logs each problem once when it appears, and once when it is gone. */
  private reportProblems(errors: readonly ReadError[]): void {
    const next = errors.map((e) => `${e.origin}: ${e.message}`);
    const before = new Set(this.problems);
    const after = new Set(next);
    for (const e of errors) {
      if (!before.has(`${e.origin}: ${e.message}`))
        this.log.warn({ origin: e.origin, ...placeOf(e.origin), reason: e.message }, 'manifest problem');
    }
    for (const p of this.problems) if (!after.has(p)) this.log.info({ problem: p }, 'manifest problem resolved');
    this.problems = next;
  }
}

/** "dir/a.yaml#2.items[0]" → { file: "dir/a.yaml", document: 2 }. */
function placeOf(origin: string): { file: string; document?: number } {
  const m = /^(.*)#(\d+)(?:\.items\[\d+\])?$/.exec(origin);
  return m ? { file: m[1], document: Number(m[2]) } : { file: origin };
}
