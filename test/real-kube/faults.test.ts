// Faults for real (issue 30 item 6): servegate against a real kube-apiserver v1.36.3 and etcd of this file's own,
// whose API server is SIGKILLed and restarted, whose etcd is compacted, whose watch cache sends its own bookmarks, and
// whose Lease and status subresource are the real ones. What the real server will not do on demand (a watch that hangs,
// a 500 between two pages of a list, a reset mid-watch) comes from test/support/kube-fault-proxy.ts in front of it.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, test } from '@jest/globals';
import {
  CoordinationV1Api,
  CustomObjectsApi,
  KubernetesObjectApi,
  PatchStrategy,
  setHeaderMiddleware,
  type KubeConfig,
} from '@kubernetes/client-node';
import { startKubernetesWith } from '../../src/cli/serve-kubernetes.js';
import { parseConfig } from '../../src/config/load.js';
import { silentLogger } from '../../src/log.js';
import type { Servegate } from '../../src/server.js';
import { KubernetesSource } from '../../src/sources/kubernetes/index.js';
import type { Snapshot } from '../../src/routing/types.js';
import { apiKey } from '../support/fixtures.js';
import { KubeFaultProxy, type ProxiedRequest } from '../support/kube-fault-proxy.js';
import { startKubeCluster, type KubeCluster } from '../support/kube.js';
import { keySecretRaw, sdepRaw, serviceRaw, type Obj } from '../support/k8s-objects.js';
import { freePort } from '../support/net.js';
import { ROOT } from '../support/paths.js';
import { waitFor } from '../support/wait.js';

const SDEP = '/apis/serving.servegate.dev/v1alpha1';
const key = apiKey('faults-key', '*');
let cluster: KubeCluster;
let admin: KubernetesObjectApi;
let token: string;
const tmp = mkdtempSync(join(tmpdir(), 'servegate-faults-'));
const mergePatch = {
  middleware: [setHeaderMiddleware('Content-Type', PatchStrategy.MergePatch)],
  middlewareMergeStrategy: 'append' as const,
};
const cleanups: Array<() => Promise<unknown> | unknown> = [];

beforeAll(async () => {
  cluster = await startKubeCluster();
  const crd = await cluster.kubectl(['apply', '-f', 'crds/']);
  if (crd.code !== 0) throw new Error(`kubectl apply -f crds/: ${crd.stderr}`);
  await cluster.kubectl(['wait', '--for=condition=Established', 'crd/servingdeployments.serving.servegate.dev']);
  admin = KubernetesObjectApi.makeApiClient(cluster.kubeConfig());
  await create({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'servegate' } });
  await create({ apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'servegate', namespace: 'servegate' } });
  await create({
    apiVersion: 'rbac.authorization.k8s.io/v1',
    kind: 'ClusterRoleBinding',
    metadata: { name: 'faults-servegate' },
    roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'cluster-admin' },
    subjects: [{ kind: 'ServiceAccount', name: 'servegate', namespace: 'servegate' }],
  });
  // A bearer token, so that the fault proxy can pass the credentials on as they are.
  token = await cluster.tokenFor('servegate', 'servegate');
  await create(keySecretRaw(key.secret));
}, 180_000);

afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!();
});

afterAll(async () => {
  await cluster?.stop();
});

function create(obj: Obj): Promise<unknown> {
  return admin.create(obj as never);
}

/** A namespace with a python deployment per name, each on a Service of its own that has no endpoint. */
async function project(ns: string, names: string[]): Promise<void> {
  await create({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns } });
  for (const n of names) await deploy(ns, n);
}

async function deploy(ns: string, name: string): Promise<void> {
  await create(serviceRaw(`${ns}/${name}-svc`, [{ port: 80 }]));
  const sdep = sdepRaw(`${ns}/${name}`, { type: 'python', backend: { service: `${name}-svc`, port: 80 } });
  delete sdep.spec.modelServer;
  await create(sdep);
}

async function undeploy(ns: string, name: string): Promise<void> {
  await admin.delete(sdepRaw(`${ns}/${name}`) as never);
}

interface GatewayOptions {
  namespaces: string[];
  kc?: KubeConfig;
  identity?: string;
  leaderElection?: boolean;
  watchIdleTimeoutSeconds?: number;
}

async function gateway(o: GatewayOptions): Promise<Servegate> {
  const config = parseConfig(
    {
      publicUrl: 'https://models.example.com',
      limits: { scaleFromZeroHoldSeconds: 0 },
      kubernetes: {
        namespaces: o.namespaces,
        watchIdleTimeoutSeconds: o.watchIdleTimeoutSeconds ?? 300,
        leaderElection: { enabled: o.leaderElection ?? false, leaseName: 'faults-inprocess' },
      },
    },
    { port: 0, namespace: 'servegate' },
  );
  const gw = await startKubernetesWith(o.kc ?? cluster.tokenKubeConfig(token), config, {
    port: 0,
    adminPort: 0,
    host: '127.0.0.1',
    logger: silentLogger,
    namespace: 'servegate',
    identity: o.identity ?? 'faults',
    processMetrics: false,
    backoff: { initialMs: 50, maxMs: 500 },
  });
  cleanups.push(() => gw.close());
  return gw;
}

async function throughProxy(): Promise<{ proxy: KubeFaultProxy; kc: KubeConfig }> {
  const proxy = await KubeFaultProxy.start(cluster);
  cleanups.push(() => proxy.stop());
  const file = proxy.writeKubeconfig(token, join(tmp, `proxy-${Date.now()}.kubeconfig`));
  const kc = cluster.tokenKubeConfig(token);
  kc.loadFromFile(file);
  return { proxy, kc };
}

/** The gateway's answer for a deployment: 503 no_ready_endpoint when it has the route, 404 when it does not. */
async function probe(port: number, ns: string, name: string): Promise<number> {
  const r = await fetch(`http://127.0.0.1:${port}/v1/${ns}/${name}/ping`, {
    headers: { authorization: `ApiKey ${key.key}` },
  });
  const body = await r.text();
  if (r.status === 503 && !body.includes('no ready endpoint')) throw new Error(`503 for another reason: ${body}`);
  return r.status;
}

async function readyz(gw: Servegate): Promise<{ status: string; stalenessSeconds: number; problems: string[] }> {
  const r = await fetch(`http://127.0.0.1:${gw.adminPort}/readyz`);
  return (await r.json()) as { status: string; stalenessSeconds: number; problems: string[] };
}

async function restarts(gw: Servegate, kind: string, reason: string): Promise<number> {
  const m = await gw.metrics.watchRestarts.get();
  return m.values.find((v) => v.labels.kind === kind && v.labels.reason === reason)?.value ?? 0;
}

/** Watches, or lists (not the one-item check of the server's resourceVersion made before reopening a silent watch). */
const sdepRequests = (proxy: KubeFaultProxy, ns: string, watch: boolean): ProxiedRequest[] =>
  proxy.requests.filter(
    (r) =>
      r.path === `${SDEP}/namespaces/${ns}/servingdeployments` &&
      r.watch === watch &&
      (watch || r.query.get('limit') !== '1'),
  );

describe('the API server killed (SIGKILL) and restarted while servegate serves', () => {
  test('the last routes keep being served, /readyz reports the staleness, and after the restart changes are served', async () => {
    await project('outage', ['kept', 'gone']);
    // Straight to the API server, with the admin's client certificate: the connections die with the process.
    const gw = await gateway({ namespaces: ['outage'], kc: cluster.kubeConfig() });
    expect(await probe(gw.port, 'outage', 'kept')).toBe(503);
    expect(await probe(gw.port, 'outage', 'unknown')).toBe(404);
    expect((await readyz(gw)).stalenessSeconds).toBe(0);

    await cluster.killApiServer();
    const stale = await waitFor(
      async () => {
        const r = await readyz(gw);
        return r.stalenessSeconds >= 1 && r;
      },
      'the staleness on /readyz',
      10_000,
    );
    expect(stale.status).toBe('serving the last known routes; source is stale');
    expect(stale.problems.join('\n')).toMatch(/servingdeployments in namespace outage: .*retrying in/);
    expect(await probe(gw.port, 'outage', 'kept')).toBe(503);
    expect(await probe(gw.port, 'outage', 'gone')).toBe(503);
    expect(await probe(gw.port, 'outage', 'unknown')).toBe(404);

    await cluster.restartApiServer();
    await waitFor(async () => (await readyz(gw)).stalenessSeconds === 0, 'the watches to be back', 20_000);
    await deploy('outage', 'late');
    await undeploy('outage', 'gone');
    await waitFor(async () => (await probe(gw.port, 'outage', 'late')) === 503, 'the new deployment', 10_000);
    await waitFor(async () => (await probe(gw.port, 'outage', 'gone')) === 404, 'the deleted deployment', 10_000);
    expect(await probe(gw.port, 'outage', 'kept')).toBe(503);
    expect((await readyz(gw)).problems).toEqual([]);
  }, 90_000);
});

describe('a watch from before an etcd compaction', () => {
  test('gets 410 from the restarted API server and relists: what changed meanwhile is served, nothing is lost', async () => {
    await project('compacted', ['a', 'b']);
    const { proxy, kc } = await throughProxy();
    const gw = await gateway({ namespaces: ['compacted'], kc });
    expect(await probe(gw.port, 'compacted', 'a')).toBe(503);
    // Served once listed; the watch opens just after.
    const watch = await waitFor(() => sdepRequests(proxy, 'compacted', true)[0] ?? false, 'the watch to open');
    const watchedFrom = watch.query.get('resourceVersion')!;

    // servegate cannot reach the API server while the cluster changes and etcd is compacted past its resourceVersion.
    proxy.block();
    await undeploy('compacted', 'a');
    await deploy('compacted', 'c');
    const compactedAt = await cluster.compactEtcd();
    expect(compactedAt).toBeGreaterThan(Number(watchedFrom));
    // The API server's watch cache still holds those events: a watch from before the compaction is answered, not 410.
    const replay = await cluster.raw(
      `${SDEP}/namespaces/compacted/servingdeployments?watch=true&resourceVersion=${watchedFrom}&timeoutSeconds=1`,
    );
    expect(replay.status).toBe(200);
    expect(replay.body).toContain('"type":"DELETED"');
    expect(replay.body).not.toContain('"code":410');
    // A restarted API server's cache starts after the compaction, as after a control-plane upgrade.
    await cluster.killApiServer();
    await cluster.restartApiServer();
    const listsBefore = sdepRequests(proxy, 'compacted', false).length;
    proxy.unblock();

    await waitFor(
      async () => (await probe(gw.port, 'compacted', 'c')) === 503,
      'the deployment made meanwhile',
      20_000,
    );
    await waitFor(async () => (await probe(gw.port, 'compacted', 'a')) === 404, 'the deployment deleted meanwhile');
    expect(await probe(gw.port, 'compacted', 'b')).toBe(503);
    // The real 410: an ERROR event with code 410 on the watch from the old resourceVersion, then a list again.
    const expired = sdepRequests(proxy, 'compacted', true).find(
      (r) =>
        r.query.get('resourceVersion') === watchedFrom && r.events.some((e) => e.type === 'ERROR' && e.code === 410),
    );
    expect(expired).toBeDefined();
    expect(sdepRequests(proxy, 'compacted', false).length).toBeGreaterThan(listsBefore);
    expect(await restarts(gw, 'servingdeployments', 'expired')).toBeGreaterThanOrEqual(1);
  }, 90_000);
});

describe('bookmarks', () => {
  test('the watch cache sends them and they are kept: the watch the server ends is reopened from the bookmark, with no list', async () => {
    await project('bookmarks', ['quiet']);
    await create({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'bookmarks-elsewhere' } });
    const { proxy, kc } = await throughProxy();
    // The watch cache sends a bookmark shortly before a watch's timeoutSeconds runs out (and about once a minute);
    // the proxy shortens servegate's 5-10 minutes to 10 s so that one comes soon.
    proxy.setWatchTimeoutSeconds(10);
    const gw = await gateway({ namespaces: ['bookmarks'], kc });
    const first = await waitFor(() => sdepRequests(proxy, 'bookmarks', true)[0] ?? false, 'the watch');
    // servegate's own status write is the last event this watch gets.
    const written = await waitFor(
      () => first.events.find((e) => e.type === 'MODIFIED' && e.name === 'quiet') ?? false,
      'the status write',
    );
    // A change in another namespace moves the resource's resourceVersion on: only a bookmark tells this watch.
    await deploy('bookmarks-elsewhere', 'other');
    const bookmark = await waitFor(
      () =>
        first.events.find(
          (e) => e.type === 'BOOKMARK' && Number(e.resourceVersion) > Number(written.resourceVersion),
        ) ?? false,
      'a bookmark past the last event',
      15_000,
    );
    const next = await waitFor(() => sdepRequests(proxy, 'bookmarks', true)[1] ?? false, 'the next watch', 15_000);
    expect(next.query.get('resourceVersion')).toBe(bookmark.resourceVersion);
    expect(next.query.get('allowWatchBookmarks')).toBe('true');
    expect(sdepRequests(proxy, 'bookmarks', false)).toHaveLength(1);
    expect(await restarts(gw, 'servingdeployments', 'closed')).toBeGreaterThanOrEqual(1);
  }, 60_000);
});

describe('faults from the proxy, answered by the real server', () => {
  test('a connection cut mid-watch: the watch is reopened from its last resourceVersion and misses nothing, with no list', async () => {
    await project('reset', ['before']);
    const { proxy, kc } = await throughProxy();
    const gw = await gateway({ namespaces: ['reset'], kc });
    await deploy('reset', 'during');
    await waitFor(async () => (await probe(gw.port, 'reset', 'during')) === 503, 'the first change');
    // Both status writes seen on the watch: nothing else is on its way when it is cut.
    const first = sdepRequests(proxy, 'reset', true)[0]!;
    await waitFor(() => first.events.filter((e) => e.type === 'MODIFIED').length === 2, 'the status writes');
    const lastSeen = first.events.at(-1)!.resourceVersion;
    expect(proxy.cutWatches()).toBeGreaterThan(0);
    await deploy('reset', 'after');
    await waitFor(async () => (await probe(gw.port, 'reset', 'after')) === 503, 'the change after the reset', 10_000);
    expect(sdepRequests(proxy, 'reset', true)[1]!.query.get('resourceVersion')).toBe(lastSeen);
    expect(sdepRequests(proxy, 'reset', false)).toHaveLength(1);
    expect(await restarts(gw, 'servingdeployments', 'error')).toBeGreaterThanOrEqual(1);
    expect(await restarts(gw, 'servingdeployments', 'expired')).toBe(0);
  }, 60_000);

  test('a watch that hangs without data is restarted after watchIdleTimeoutSeconds and catches up from its resourceVersion', async () => {
    await project('hang', ['before']);
    const { proxy, kc } = await throughProxy();
    const gw = await gateway({ namespaces: ['hang'], kc, watchIdleTimeoutSeconds: 2 });
    const idleBefore = await restarts(gw, 'servingdeployments', 'idle');
    proxy.hangWatches();
    await deploy('hang', 'during');
    await waitFor(
      async () => (await restarts(gw, 'servingdeployments', 'idle')) > idleBefore,
      'the hung watch to be restarted',
      10_000,
    );
    // The watch open now hangs too: the change is not there yet.
    expect(await probe(gw.port, 'hang', 'during')).toBe(404);
    proxy.resumeWatches();
    await waitFor(
      async () => (await probe(gw.port, 'hang', 'during')) === 503,
      'the change made during the hang',
      10_000,
    );
    expect(sdepRequests(proxy, 'hang', false)).toHaveLength(1);
  }, 60_000);

  test('a 500 between two pages of a list: the list starts again from its first page and every object is synced', async () => {
    const names = ['p1', 'p2', 'p3', 'p4', 'p5'];
    await project('paged', names);
    const { proxy, kc } = await throughProxy();
    proxy.failLists(500, 1, (r) => r.path.endsWith('/namespaces/paged/servingdeployments') && r.query.has('continue'));
    const snapshot = await syncSource(kc, 'paged');
    expect(snapshot.deployments.map((d) => d.metadata.name).sort()).toEqual(names);
    // Pages of 2 from the real server's continue tokens: the failed second page, then the whole list again.
    expect(sdepRequests(proxy, 'paged', false).map((r) => [r.query.has('continue'), r.status])).toEqual([
      [false, 200],
      [true, 500],
      [false, 200],
      [true, 200],
      [true, 200],
    ]);
  }, 60_000);

  test('a continue token from before a compaction is still answered (from the watch cache): the list is one consistent snapshot', async () => {
    const names = ['q1', 'q2', 'q3', 'q4', 'q5'];
    await project('paged-compacted', names);
    const { proxy, kc } = await throughProxy();
    let compactedAt = 0;
    proxy.beforeForward = async (r) => {
      if (
        compactedAt === 0 &&
        r.query.has('continue') &&
        r.path.endsWith('/namespaces/paged-compacted/servingdeployments')
      ) {
        await deploy('paged-compacted', 'q6'); // a revision after the first page's
        compactedAt = await cluster.compactEtcd();
      }
    };
    const snapshots: Snapshot[] = [];
    await syncSource(kc, 'paged-compacted', (s) => snapshots.push(s));
    // etcd would answer 410 for pages read at a compacted revision; kube-apiserver 1.36 serves them from its watch
    // cache's snapshot of the first page's resourceVersion: no 410, and the list does not see q6...
    expect(compactedAt).toBeGreaterThan(0);
    expect(sdepRequests(proxy, 'paged-compacted', false).map((r) => [r.query.has('continue'), r.status])).toEqual([
      [false, 200],
      [true, 200],
      [true, 200],
    ]);
    expect(snapshots[0]!.deployments.map((d) => d.metadata.name).sort()).toEqual(names);
    // ...which the watch from the list's resourceVersion then delivers.
    await waitFor(() => snapshots.at(-1)!.deployments.some((d) => d.metadata.name === 'q6'), 'q6 from the watch');
  }, 60_000);
});

/** The kubernetes source alone (pages of 2), synced through kc; resolves with its first snapshot. */
async function syncSource(kc: KubeConfig, ns: string, onSnapshot?: (s: Snapshot) => void): Promise<Snapshot> {
  const source = new KubernetesSource(kc, {
    keysNamespace: 'servegate',
    namespaces: [ns],
    kserve: false,
    pageSize: 2,
    backoff: { initialMs: 50, maxMs: 500 },
  });
  cleanups.push(() => source.stop());
  let first: Snapshot | undefined;
  await source.start((s) => {
    first ??= s;
    onSnapshot?.(s);
  });
  return first!;
}

describe('two servegate processes and a real Lease', () => {
  const LEASE = 'faults-leader';
  const procs = new Map<string, ChildProcess>();

  afterAll(() => {
    for (const p of procs.values()) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
  });

  async function replica(name: string, config: string, kubeconfig: string): Promise<{ admin: number }> {
    const [port, admin] = [await freePort(), await freePort()];
    const p = spawn(
      process.execPath,
      [
        join(ROOT, 'dist/cli/main.js'),
        'serve',
        '--kubernetes',
        '--config',
        config,
        '--host',
        '127.0.0.1',
        '--port',
        String(port),
        '--admin-port',
        String(admin),
      ],
      {
        env: { ...process.env, KUBECONFIG: kubeconfig, POD_NAMESPACE: 'servegate', POD_NAME: name },
        stdio: ['ignore', 'ignore', 'inherit'],
      },
    );
    procs.set(name, p);
    await waitFor(
      async () => {
        if (p.exitCode !== null) throw new Error(`${name} exited with ${p.exitCode}`);
        return (await fetch(`http://127.0.0.1:${admin}/readyz`)).status === 200;
      },
      `${name} to be ready`,
      20_000,
      100,
    );
    return { admin };
  }

  async function leading(admin: number): Promise<number> {
    const text = await (await fetch(`http://127.0.0.1:${admin}/metrics`)).text();
    return Number(/^servegate_leader (\S+)$/m.exec(text)?.[1]);
  }

  test('elect one leader; the leader SIGKILLed hands over within the lease duration and the new one writes status', async () => {
    await project('leader', ['model']);
    const config = join(tmp, 'leader.yaml');
    writeFileSync(
      config,
      [
        'publicUrl: https://models.example.com',
        'limits: {scaleFromZeroHoldSeconds: 0}',
        'kubernetes:',
        '  namespaces: [leader]',
        `  leaderElection: {leaseName: ${LEASE}, leaseDurationSeconds: 3, renewDeadlineSeconds: 2, retryPeriodSeconds: 1}`,
        '',
      ].join('\n'),
    );
    const kubeconfig = cluster.writeTokenKubeconfig(token, join(tmp, 'replica.kubeconfig'));
    const replicas = {
      'replica-a': await replica('replica-a', config, kubeconfig),
      'replica-b': await replica('replica-b', config, kubeconfig),
    };
    const leases = cluster.kubeConfig().makeApiClient(CoordinationV1Api);
    const lease = () => leases.readNamespacedLease({ name: LEASE, namespace: 'servegate' });
    const first = await waitFor(async () => (await lease()).spec?.holderIdentity || false, 'a leader', 10_000);
    const other = first === 'replica-a' ? 'replica-b' : 'replica-a';
    expect(await leading(replicas[first as keyof typeof replicas].admin)).toBe(1);
    expect(await leading(replicas[other].admin)).toBe(0);
    // The leader wrote the status (a MicroTime renewTime and a resourceVersion-checked replace: the real Lease took both).
    const sdeps = cluster.kubeConfig().makeApiClient(CustomObjectsApi);
    const read = () =>
      sdeps.getNamespacedCustomObject({
        group: 'serving.servegate.dev',
        version: 'v1alpha1',
        namespace: 'leader',
        plural: 'servingdeployments',
        name: 'model',
      }) as Promise<Obj>;
    await waitFor(async () => (await read()).status?.observedGeneration === 1, 'the first status');

    // Watch the Lease as the old leader leaves it: its last renewTime before the kill.
    const before = await lease();
    const transitions = before.spec?.leaseTransitions ?? 0;
    procs.get(first)!.kill('SIGKILL');
    let lastRenew = new Date(before.spec!.renewTime as unknown as string).getTime();
    const taken = await waitFor(
      async () => {
        const l = await lease();
        if (l.spec?.holderIdentity === first) lastRenew = new Date(l.spec.renewTime as unknown as string).getTime();
        return l.spec?.holderIdentity === other && l;
      },
      'the other replica to take the Lease over',
      15_000,
      100,
    );
    const acquired = new Date(taken.spec!.acquireTime as unknown as string).getTime();
    // Taken over after the lease (3 s) ran out by the other replica's clock: it saw the last renewal within a retry
    // period (1 s, +20 % jitter), and acts at most one more retry period (and a request's time) after the lease ran out.
    expect(acquired - lastRenew).toBeGreaterThanOrEqual(3000);
    expect(acquired - lastRenew).toBeLessThan(3000 + 2 * 1200 + 1000);
    expect(taken.spec?.leaseTransitions).toBe(transitions + 1);
    await waitFor(async () => (await leading(replicas[other].admin)) === 1, 'the new leader to say so');

    // The new leader writes status: a spec change is observed.
    await sdeps.patchNamespacedCustomObject(
      {
        group: 'serving.servegate.dev',
        version: 'v1alpha1',
        namespace: 'leader',
        plural: 'servingdeployments',
        name: 'model',
        body: { spec: { timeoutSeconds: 33 } },
      },
      mergePatch,
    );
    await waitFor(async () => (await read()).status?.observedGeneration === 2, 'the status of generation 2', 10_000);

    // SIGTERM: the leader releases the Lease (no holder, a 1 s lease) instead of leaving it to expire.
    const stopped = new Promise((resolve) => procs.get(other)!.once('exit', resolve));
    procs.get(other)!.kill('SIGTERM');
    await stopped;
    const released = await lease();
    expect(released.spec?.holderIdentity).toBeUndefined();
    expect(released.spec?.leaseDurationSeconds).toBe(1);
  }, 90_000);
});

describe('status writes and concurrent writers', () => {
  test('an update between servegate reading an object and writing its status: the status ends right', async () => {
    await project('conflict', ['model']);
    const { proxy, kc } = await throughProxy();
    const sdeps = cluster.kubeConfig().makeApiClient(CustomObjectsApi);
    const ref = {
      group: 'serving.servegate.dev',
      version: 'v1alpha1',
      namespace: 'conflict',
      plural: 'servingdeployments',
      name: 'model',
    };
    let raced = 0;
    // Before servegate's first status write reaches the server: the spec changes (generation 2), and another writer
    // puts its own status there.
    proxy.beforeForward = async (r) => {
      if (raced > 0 || r.method !== 'PATCH' || !r.path.endsWith('/namespaces/conflict/servingdeployments/model/status'))
        return;
      raced++;
      await sdeps.patchNamespacedCustomObject({ ...ref, body: { spec: { timeoutSeconds: 33 } } }, mergePatch);
      await sdeps.patchNamespacedCustomObjectStatus(
        { ...ref, body: { status: { url: 'https://elsewhere.example.com/', conditions: [] } } },
        mergePatch,
      );
    };
    await gateway({ namespaces: ['conflict'], kc });
    await waitFor(
      async () => {
        const s = ((await sdeps.getNamespacedCustomObject(ref)) as Obj).status;
        return (
          s?.observedGeneration === 2 &&
          s.url === 'https://models.example.com/v1/conflict/model' &&
          s.conditions?.[0]?.observedGeneration === 2
        );
      },
      'the status of generation 2, written by servegate',
      10_000,
    );
    expect(raced).toBe(1);
  }, 60_000);

  test('a status another writer changes afterwards is put back', async () => {
    await project('overwritten', ['model']);
    const sdeps = cluster.kubeConfig().makeApiClient(CustomObjectsApi);
    const ref = {
      group: 'serving.servegate.dev',
      version: 'v1alpha1',
      namespace: 'overwritten',
      plural: 'servingdeployments',
      name: 'model',
    };
    await gateway({ namespaces: ['overwritten'] });
    const get = async () => ((await sdeps.getNamespacedCustomObject(ref)) as Obj).status;
    const right = await waitFor(async () => (await get())?.observedGeneration === 1 && get(), 'the first status');
    await sdeps.patchNamespacedCustomObjectStatus(
      { ...ref, body: { status: { url: 'https://elsewhere.example.com/', observedGeneration: 0 } } },
      mergePatch,
    );
    await waitFor(async () => JSON.stringify(await get()) === JSON.stringify(right), 'the status put back', 10_000);
  }, 60_000);
});
