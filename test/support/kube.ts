// The real control plane for the Kubernetes suites: etcd and kube-apiserver built from Go modules by
// `npm run kube:build` (scripts/build-kube.mjs), run by test/kube/cluster.mjs. One is shared per jest worker
// (sharedKubeCluster: test files of one worker run one after another and each uses namespaces of its own); a test
// that kills or restarts the API server starts one of its own (startKubeCluster) and stops it.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { request } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { kubeCacheDir } from '../kube/cache.mjs';
import { runProcess, type RunResult } from './processes.js';
import { ROOT as repoRoot } from './paths.js';

export interface KubeState {
  server: string;
  apiPort: number;
  etcdUrl: string;
  etcdPid: number;
  apiserverPid: number;
  /** The cluster.mjs process. */
  pid: number;
  kubeconfig: string;
  ca: string;
  adminCert: string;
  adminKey: string;
  dir: string;
  apiserverDown?: boolean;
  /** The number of the last etcd backup or restore done (backupEtcd, restoreEtcd). */
  etcdOpDone?: number;
}

/** Where the binaries are; undefined until `npm run kube:build` has run for the current test/kube module. */
export function kubeBinDir(): string | undefined {
  const dir = join(kubeCacheDir(), 'bin');
  return ['kube-apiserver', 'etcd', 'kubectl'].every((b) => existsSync(join(dir, b))) ? dir : undefined;
}

/** The other projects' CRDs that the build took from their Go modules (KServe, Gateway API, Prometheus operator). */
export function otherCrdsDir(): string {
  return join(kubeCacheDir(), 'crds');
}

const NOT_BUILT =
  'the real control plane is not built: run `npm run kube:build` (Go 1.26 or newer; the first build takes about 5 min on 2 idle cores)';

export class KubeCluster {
  private constructor(
    private readonly dir: string,
    private readonly daemon: ChildProcess | undefined,
  ) {}

  /** The daemon's state as it is now (the API server's pid changes across a restart). */
  get state(): KubeState {
    return JSON.parse(readFileSync(join(this.dir, 'state.json'), 'utf8')) as KubeState;
  }

  get server(): string {
    return this.state.server;
  }

  get kubeconfigPath(): string {
    return this.state.kubeconfig;
  }

  /** A client configuration for the admin (system:masters). */
  kubeConfig(): KubeConfig {
    const kc = new KubeConfig();
    kc.loadFromFile(this.kubeconfigPath);
    return kc;
  }

  /** A client configuration that authenticates with a bearer token (e.g. a ServiceAccount's, from tokenFor). */
  tokenKubeConfig(token: string): KubeConfig {
    const kc = new KubeConfig();
    kc.loadFromString(this.tokenKubeconfigText(token));
    return kc;
  }

  /** The same as a kubeconfig file, for processes (servegate, kubectl, helm); returns its path. */
  writeTokenKubeconfig(token: string, file: string): string {
    writeFileSync(file, this.tokenKubeconfigText(token), { mode: 0o600 });
    return file;
  }

  private tokenKubeconfigText(token: string): string {
    const s = this.state;
    return [
      'apiVersion: v1',
      'kind: Config',
      `clusters: [{name: test, cluster: {server: "${s.server}", certificate-authority: "${s.ca}"}}]`,
      `users: [{name: token, user: {token: "${token}"}}]`,
      'contexts: [{name: test, context: {cluster: test, user: token, namespace: default}}]',
      'current-context: test',
      '',
    ].join('\n');
  }

  /** A ServiceAccount token from the TokenRequest API (the ServiceAccount must exist). */
  async tokenFor(namespace: string, serviceAccount: string, expirationSeconds = 3600): Promise<string> {
    const core = this.kubeConfig().makeApiClient(CoreV1Api);
    const tr = await core.createNamespacedServiceAccountToken({
      name: serviceAccount,
      namespace,
      body: { spec: { audiences: [], expirationSeconds } },
    });
    if (!tr.status?.token) throw new Error(`TokenRequest for ${namespace}/${serviceAccount} returned no token`);
    return tr.status.token;
  }

  /** kubectl (built with the API server, at its version) against this cluster as the admin (or the kubeconfig given). */
  kubectl(
    args: readonly string[],
    opts: { input?: string; kubeconfig?: string; timeoutMs?: number } = {},
  ): Promise<RunResult> {
    return runProcess(
      join(kubeBinDir() ?? NOT_BUILT, 'kubectl'),
      ['--kubeconfig', opts.kubeconfig ?? this.kubeconfigPath, ...args],
      {
        timeoutMs: opts.timeoutMs ?? 60_000,
        input: opts.input,
        cwd: repoRoot,
      },
    );
  }

  /** GET on the API server as the admin: status and body. */
  raw(path: string): Promise<{ status: number; body: string }> {
    return this.request('GET', path);
  }

  /**
   * Any request on the API server as the admin: status and body (status 0 when it could not be made). An object
   * body is sent as JSON with `contentType` (default application/json; patches: application/merge-patch+json, ...).
   */
  request(
    method: string,
    path: string,
    body?: unknown,
    contentType = 'application/json',
  ): Promise<{ status: number; body: string }> {
    const s = this.state;
    const payload = body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body);
    return new Promise((resolve) => {
      const req = request(
        `${s.server}${path}`,
        {
          method,
          ca: readFileSync(s.ca),
          cert: readFileSync(s.adminCert),
          key: readFileSync(s.adminKey),
          timeout: 5000,
          headers: payload === undefined ? {} : { 'content-type': contentType },
        },
        (res) => {
          let body = '';
          res.setEncoding('utf8');
          res.on('data', (d: string) => (body += d));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
        },
      );
      req.on('error', () => resolve({ status: 0, body: '' }));
      req.on('timeout', () => req.destroy());
      req.end(payload);
    });
  }

  /** SIGKILLs the API server (etcd keeps running); restartApiServer brings it back on the same port. */
  async killApiServer(): Promise<void> {
    const pid = this.state.apiserverPid;
    process.kill(this.state.pid, 'SIGUSR1');
    await until(() => this.state.apiserverDown === true && !alive(pid), 10_000, 'the API server to die');
  }

  async restartApiServer(): Promise<void> {
    process.kill(this.state.pid, 'SIGUSR2');
    await until(
      async () => !this.state.apiserverDown && (await this.raw('/readyz')).status === 200,
      120_000,
      'the API server to be ready again',
    );
  }

  /**
   * Copies etcd's data folder aside, as a volume backup would, with the API server and etcd stopped for the copy
   * (both come back on the same ports). restoreEtcd puts it back.
   */
  backupEtcd(): Promise<void> {
    return this.etcdOp('backup');
  }

  /**
   * Restores etcd from backupEtcd's copy: every object written since is gone and etcd's revision, which the API
   * server's resourceVersions are, goes back to what it was then. The API server is restarted on the same port.
   */
  restoreEtcd(): Promise<void> {
    return this.etcdOp('restore');
  }

  private etcdOps = 0;

  private async etcdOp(op: 'backup' | 'restore'): Promise<void> {
    const n = ++this.etcdOps;
    writeFileSync(join(this.dir, 'etcd-op'), `${n} ${op}\n`);
    process.kill(this.state.pid, 'SIGHUP');
    await until(
      async () => this.state.etcdOpDone === n && (await this.raw('/readyz')).status === 200,
      120_000,
      `etcd's ${op} and the API server to be ready again`,
    );
  }

  /** etcd's current revision: the newest resourceVersion the API server can hand out. */
  async etcdRevision(): Promise<number> {
    const range = await fetch(`${this.state.etcdUrl}/v3/kv/range`, {
      method: 'POST',
      body: JSON.stringify({ key: 'AA==' }),
    });
    return Number(((await range.json()) as { header: { revision: string } }).header.revision);
  }

  /** Compacts etcd at its current revision (the API server's watches from before then get 410); returns it. */
  async compactEtcd(): Promise<number> {
    const etcd = this.state.etcdUrl;
    const range = await fetch(`${etcd}/v3/kv/range`, { method: 'POST', body: JSON.stringify({ key: 'AA==' }) });
    const revision = Number(((await range.json()) as { header: { revision: string } }).header.revision);
    const c = await fetch(`${etcd}/v3/kv/compaction`, {
      method: 'POST',
      body: JSON.stringify({ revision: String(revision), physical: true }),
    });
    if (!c.ok) throw new Error(`etcd compaction at ${revision}: ${c.status} ${await c.text()}`);
    return revision;
  }

  /** The API server's log so far (for assertion messages). */
  apiserverLog(): string {
    try {
      return readFileSync(join(this.dir, 'apiserver.log'), 'utf8');
    } catch {
      return '';
    }
  }

  /** Stops a cluster of this test's own (the shared one stops with its jest worker). */
  async stop(): Promise<void> {
    if (!this.daemon) return;
    const d = this.daemon;
    if (d.exitCode !== null || d.signalCode !== null) return;
    await new Promise<void>((resolve) => {
      d.once('exit', () => resolve());
      d.kill('SIGTERM');
    });
  }

  /** The shared cluster of this worker, started by an earlier test file. */
  static reattach(dir: string): KubeCluster {
    return new KubeCluster(dir, undefined);
  }

  /** Starts etcd and kube-apiserver in a process of their own; resolves when the API server is ready. */
  static async start(dir: string, own: boolean): Promise<KubeCluster> {
    if (!kubeBinDir()) throw new Error(NOT_BUILT);
    const daemon = spawn(
      process.execPath,
      [join(repoRoot, 'test/kube/cluster.mjs'), '--dir', dir, '--parent', String(process.pid)],
      {
        stdio: ['ignore', 'ignore', 'pipe'],
        detached: !own,
      },
    );
    let err = '';
    daemon.stderr?.setEncoding('utf8').on('data', (d: string) => (err += d));
    const exited = new Promise<void>((resolve) => daemon.once('exit', () => resolve()));
    let gone = false;
    void exited.then(() => (gone = true));
    await until(
      () => {
        if (gone) throw new Error(`the control plane did not start: ${err}`);
        return existsSync(join(dir, 'state.json'));
      },
      150_000,
      'etcd and kube-apiserver to be ready',
    );
    if (!own) {
      daemon.stderr?.destroy();
      daemon.unref();
    }
    return new KubeCluster(dir, own ? daemon : undefined);
  }
}

/** A control plane of this test's own: the test may kill and restart its API server; stop() it in afterAll. */
export function startKubeCluster(): Promise<KubeCluster> {
  return KubeCluster.start(mkdtempSync(join(tmpdir(), 'servegate-kube-')), true);
}

let shared: Promise<KubeCluster> | undefined;

/**
 * The control plane shared by every test file of this jest worker: started by the first, found again by the next
 * (its state file is keyed by the worker's pid) and stopped when the worker exits. Tests must not kill it.
 */
export function sharedKubeCluster(): Promise<KubeCluster> {
  shared ??= (async () => {
    const dir = join(tmpdir(), `servegate-kube-worker-${process.pid}`);
    const stateFile = join(dir, 'state.json');
    if (existsSync(stateFile)) {
      const state = JSON.parse(readFileSync(stateFile, 'utf8')) as KubeState;
      if (alive(state.pid)) return KubeCluster.reattach(dir);
    }
    return KubeCluster.start(dir, false);
  })();
  return shared;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function until(cond: () => boolean | Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await cond()) return;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
