// A hostile review of the Kubernetes side (session 4, H5) against the real kube-apiserver: what an operator and an
// attacker do to the gateway's watches and status writes that the other suites leave out.
import { afterEach, beforeAll, describe, expect, test } from '@jest/globals';
import {
  CoordinationV1Api,
  CoreV1Api,
  CustomObjectsApi,
  KubernetesObjectApi,
  PatchStrategy,
  setHeaderMiddleware,
  V1MicroTime,
  Watch,
} from '@kubernetes/client-node';
import type { Snapshot } from '../../src/routing/types.js';
import { LeaderElector } from '../../src/controller/leader.js';
import { KubernetesSource } from '../../src/sources/kubernetes/index.js';
import { startKubernetesWith } from '../../src/cli/serve-kubernetes.js';
import { parseConfig } from '../../src/config/load.js';
import { silentLogger } from '../../src/log.js';
import type { Servegate } from '../../src/server.js';
import { sharedKubeCluster, type KubeCluster } from '../support/kube.js';
import { sdepRaw, serviceRaw, type Obj } from '../support/k8s-objects.js';
import { expectSuccess } from '../support/processes.js';
import { ROOT } from '../support/paths.js';
import { sleep, waitFor } from '../support/wait.js';
import { join } from 'node:path';
import { spawn } from 'node:child_process';

const GROUP = 'serving.servegate.dev';
const mergePatch = {
  middleware: [setHeaderMiddleware('Content-Type', PatchStrategy.MergePatch)],
  middlewareMergeStrategy: 'append' as const,
};
let cluster: KubeCluster;
let admin: KubernetesObjectApi;
const cleanups: Array<() => Promise<unknown> | unknown> = [];

beforeAll(async () => {
  cluster = await sharedKubeCluster();
  expectSuccess(await cluster.kubectl(['apply', '-f', join(ROOT, 'crds')]));
  expectSuccess(
    await cluster.kubectl(['wait', '--for=condition=Established', `crd/servingdeployments.${GROUP}`, '--timeout=30s']),
  );
  admin = KubernetesObjectApi.makeApiClient(cluster.kubeConfig());
}, 180_000);

afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!();
});

function create(obj: Obj): Promise<unknown> {
  return admin.create(obj as never);
}

async function project(ns: string, names: string[]): Promise<void> {
  await create({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns } });
  for (const n of names) {
    await create(serviceRaw(`${ns}/${n}-svc`, [{ port: 80 }]));
    const sdep = sdepRaw(`${ns}/${n}`, { type: 'python', backend: { service: `${n}-svc`, port: 80 } });
    delete sdep.spec.modelServer;
    await create(sdep);
  }
}

async function gateway(o: { namespaces: string[]; publicUrl: string }): Promise<Servegate> {
  const config = parseConfig(
    {
      publicUrl: o.publicUrl,
      limits: { scaleFromZeroHoldSeconds: 0 },
      kubernetes: { namespaces: o.namespaces, leaderElection: { enabled: false } },
    },
    { port: 0, namespace: 'default' },
  );
  const gw = await startKubernetesWith(cluster.kubeConfig(), config, {
    port: 0,
    adminPort: 0,
    host: '127.0.0.1',
    logger: silentLogger,
    namespace: 'default',
    identity: 'hostile',
    processMetrics: false,
    backoff: { initialMs: 50, maxMs: 500 },
  });
  cleanups.push(() => gw.close());
  return gw;
}

/** Counts the MODIFIED events of the ServingDeployments of a namespace while `during` runs. */
async function countModified(ns: string, during: () => Promise<void>): Promise<number> {
  let n = 0;
  const w = await new Watch(cluster.kubeConfig()).watch(
    `/apis/${GROUP}/v1alpha1/namespaces/${ns}/servingdeployments`,
    {},
    (type) => {
      if (type === 'MODIFIED') n++;
    },
    () => undefined,
  );
  try {
    await during();
  } finally {
    w.abort();
  }
  return n;
}

describe('two status writers that disagree', () => {
  test('two servegate installations watching one namespace do not put each other\u2019s status back in a hot loop', async () => {
    // Two gateways (say prod and staging, each elected leader of its own Lease) that both watch a namespace: each
    // computes a different URL. Each sees the other's write as "another writer changed the status" and puts its own
    // back. That is a fight an operator must learn about, but it may not cost the API server and etcd a write per
    // round trip for as long as both run.
    const ns = 'hostile-fight';
    await project(ns, ['model']);
    const sdeps = cluster.kubeConfig().makeApiClient(CustomObjectsApi);
    const ref = { group: GROUP, version: 'v1alpha1', namespace: ns, plural: 'servingdeployments', name: 'model' };
    const a = await gateway({ namespaces: [ns], publicUrl: 'https://a.example.com' });
    await waitFor(
      async () => ((await sdeps.getNamespacedCustomObject(ref)) as Obj).status?.url?.startsWith('https://a.'),
      'the first status',
    );
    const writes = await countModified(ns, async () => {
      await gateway({ namespaces: [ns], publicUrl: 'https://b.example.com' });
      // Stays: the stimulus, a window in which the two writers' status writes are counted.
      await sleep(4000);
    });
    // Before: each gateway answered the other at once, hundreds of writes in 4 s. A few put-backs are fine; then each
    // writer backs off.
    expect(writes).toBeLessThan(20);
    expect(writes).toBeGreaterThanOrEqual(1);
    void a;
  }, 60_000);
});

describe('leader election between nodes whose clocks disagree', () => {
  const timings = { leaseDurationMs: 2000, renewDeadlineMs: 1500, retryPeriodMs: 300 };
  const leases = () => cluster.kubeConfig().makeApiClient(CoordinationV1Api);

  function elector(name: string, identity: string, skewMs: number): LeaderElector {
    const e = new LeaderElector({
      api: cluster.kubeConfig(),
      namespace: 'default',
      name,
      identity,
      ...timings,
      logger: silentLogger,
      now: () => Date.now() + skewMs,
    });
    cleanups.push(() => e.stop());
    return e;
  }

  test('a replica whose clock is 20 s ahead does not take the Lease from a leader that keeps renewing it', async () => {
    const a = elector('hostile-skew-ahead', 'node-a', 0);
    a.start();
    await waitFor(() => a.isLeader(), 'node-a to lead');
    const b = elector('hostile-skew-ahead', 'node-b', 20_000);
    b.start();
    // Three lease durations in which node-b reads the Lease every 0.3 s.
    const until = Date.now() + 3 * timings.leaseDurationMs;
    while (Date.now() < until) {
      expect(b.isLeader()).toBe(false);
      // Stays: node-b must never lead at any moment of the window, so it is read throughout it.
      await sleep(100);
    }
    expect(a.isLeader()).toBe(true);
    const l = await leases().readNamespacedLease({ name: 'hostile-skew-ahead', namespace: 'default' });
    expect(l.spec?.holderIdentity).toBe('node-a');
    expect(b.stats.acquisitions).toBe(0);
  }, 30_000);

  test('a replica whose clock is 20 s behind takes over a dead leader\u2019s Lease after the lease duration, not 20 s later', async () => {
    const name = 'hostile-skew-behind';
    const now = new V1MicroTime(Date.now());
    await leases().createNamespacedLease({
      namespace: 'default',
      body: {
        metadata: { name, namespace: 'default' },
        spec: { holderIdentity: 'dead-node', leaseDurationSeconds: 2, renewTime: now, acquireTime: now },
      },
    });
    const b = elector(name, 'node-b', -20_000);
    const started = Date.now();
    b.start();
    await waitFor(() => b.isLeader(), 'node-b to take the Lease over', 15_000, 50);
    // The lease duration (2 s) since node-b first saw the record, plus a retry period and a request.
    expect(Date.now() - started).toBeLessThan(2000 + 300 * 1.2 + 1000);
  }, 30_000);
});

describe('a dual-stack Service: an IPv4 and an IPv6 EndpointSlice for the same pods', () => {
  function slice(ns: string, name: string, service: string, addressType: string, ips: string[]): Obj {
    return {
      apiVersion: 'discovery.k8s.io/v1',
      kind: 'EndpointSlice',
      metadata: { name, namespace: ns, labels: { 'kubernetes.io/service-name': service } },
      addressType,
      ports: [{ name: 'http', protocol: 'TCP', port: 8000 }],
      endpoints: ips.map((ip, i) => ({
        addresses: [ip],
        conditions: { ready: true },
        targetRef: { kind: 'Pod', namespace: ns, name: `pod-${i}` },
      })),
    };
  }

  test('each pod is one endpoint, in the Service\u2019s primary family', async () => {
    const ns = 'hostile-dual';
    await create({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns } });
    const svc = (name: string, spec: Obj = {}): Obj => ({
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name, namespace: ns },
      spec: { ports: [{ name: 'http', port: 80, targetPort: 8000, protocol: 'TCP' }], ...spec },
    });
    // The cluster is single-stack IPv4: a ClusterIP Service gets ipFamilies [IPv4]; a headless one without a selector
    // may name both families, IPv6 first.
    await create(svc('dual'));
    await create(
      svc('v6first', { clusterIP: 'None', ipFamilyPolicy: 'RequireDualStack', ipFamilies: ['IPv6', 'IPv4'] }),
    );
    await create(svc('v6only'));
    for (const [service, v4, v6] of [
      ['dual', ['10.1.0.1', '10.1.0.2'], ['fd00::1', 'fd00::2']],
      ['v6first', ['10.1.0.3', '10.1.0.4'], ['fd00::3', 'fd00::4']],
      ['v6only', [], ['fd00::5']],
    ] as const) {
      if (v4.length > 0) await create(slice(ns, `${service}-v4`, service, 'IPv4', [...v4]));
      await create(slice(ns, `${service}-v6`, service, 'IPv6', [...v6]));
    }
    const source = new KubernetesSource(cluster.kubeConfig(), {
      keysNamespace: 'default',
      namespaces: [ns],
      kserve: false,
      logger: silentLogger,
    });
    cleanups.push(() => source.stop());
    await source.start(() => undefined);
    const hosts = (service: string) =>
      source.endpoints({ kind: 'service', namespace: ns, service, port: 80 }).map((e) => `${e.host}:${e.port}`);
    expect(hosts('dual')).toEqual(['10.1.0.1:8000', '10.1.0.2:8000']);
    expect(hosts('v6first')).toEqual(['fd00::3:8000', 'fd00::4:8000']);
    expect(hosts('v6only')).toEqual(['fd00::5:8000']);
  }, 30_000);
});

describe('EndpointSlices that change fast', () => {
  test('200 updates of ready, serving and terminating endpoints, a slice moved to another Service: the index ends where the API server ends', async () => {
    const ns = 'hostile-churn';
    await create({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns } });
    for (const name of ['a', 'b'])
      await create({
        apiVersion: 'v1',
        kind: 'Service',
        metadata: { name, namespace: ns },
        spec: { ports: [{ name: 'http', port: 80, targetPort: 8000, protocol: 'TCP' }] },
      });
    const source = new KubernetesSource(cluster.kubeConfig(), {
      keysNamespace: 'default',
      namespaces: [ns],
      kserve: false,
      logger: silentLogger,
    });
    cleanups.push(() => source.stop());
    await source.start(() => undefined);
    const hosts = (service: string) =>
      source
        .endpoints({ kind: 'service', namespace: ns, service, port: 80 })
        .map((e) => e.host)
        .join(',');
    const body = (service: string, eps: Obj[]): Obj => ({
      apiVersion: 'discovery.k8s.io/v1',
      kind: 'EndpointSlice',
      metadata: { name: 'churn', namespace: ns, labels: { 'kubernetes.io/service-name': service } },
      addressType: 'IPv4',
      ports: [{ name: 'http', protocol: 'TCP', port: 8000 }],
      endpoints: eps,
    });
    const slices = KubernetesObjectApi.makeApiClient(cluster.kubeConfig());
    await slices.create(body('a', []) as never);
    let expected = '';
    let seed = 7;
    const rnd = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
    for (let i = 0; i < 200; i++) {
      const eps: Obj[] = [];
      const ready: string[] = [];
      for (let j = 1; j <= 6; j++) {
        const r = rnd();
        if (r < 0.2) continue; // gone
        const ip = `10.2.0.${j}`;
        if (r < 0.4) eps.push({ addresses: [ip], conditions: { ready: false, serving: true, terminating: true } });
        else if (r < 0.5)
          eps.push({ addresses: [ip], conditions: { ready: false, serving: false, terminating: false } });
        else if (r < 0.6) {
          eps.push({ addresses: [ip] }); // no conditions: ready, as Kubernetes reads it
          ready.push(ip);
        } else {
          eps.push({ addresses: [ip], conditions: { ready: true, serving: true, terminating: false } });
          ready.push(ip);
        }
      }
      await slices.replace(body('a', eps) as never);
      expected = ready.sort().join(',');
    }
    expect(expected).not.toBe('');
    await waitFor(() => hosts('a') === expected, `service a to have ${expected}`, 10_000, 20);
    // The slice moves to Service b: a has nothing, b has what it lists.
    const last = (await slices.read({
      apiVersion: 'discovery.k8s.io/v1',
      kind: 'EndpointSlice',
      metadata: { name: 'churn', namespace: ns },
    } as never)) as unknown as Obj;
    last.metadata.labels = { 'kubernetes.io/service-name': 'b' };
    await slices.replace(last as never);
    await waitFor(() => hosts('a') === '' && hosts('b') === expected, 'the slice under service b', 10_000, 20);
  }, 60_000);
});

describe('Services that other controllers keep touching', () => {
  test('updates that change nothing routing reads (annotations, labels) rebuild nothing; a port change does', async () => {
    const ns = 'hostile-touch';
    await project(ns, ['model']);
    const source = new KubernetesSource(cluster.kubeConfig(), {
      keysNamespace: 'default',
      namespaces: [ns],
      kserve: false,
      logger: silentLogger,
    });
    cleanups.push(() => source.stop());
    const snapshots: Snapshot[] = [];
    await source.start((s) => snapshots.push(s));
    const core = cluster.kubeConfig().makeApiClient(CoreV1Api);
    const patch = (body: Obj) => core.patchNamespacedService({ name: 'model-svc', namespace: ns, body }, mergePatch);
    const before = snapshots.length;
    for (let i = 0; i < 30; i++)
      await patch({ metadata: { annotations: { 'touched-by': `controller-${i}` }, labels: { round: String(i) } } });
    await patch({ spec: { ports: [{ port: 80, targetPort: 8081, protocol: 'TCP' }] } });
    await waitFor(
      () => snapshots.at(-1)?.services?.find((x) => x.metadata.name === 'model-svc')?.ports[0]?.targetPort === 8081,
      'the port change',
      10_000,
      20,
    );
    // Before: one rebuild per touch (30 here); now the port change alone.
    expect(snapshots.length - before).toBeLessThanOrEqual(2);
  }, 30_000);
});

describe('a steady stream of changes while a rebuild is expensive', () => {
  test('rebuilds take at most about a third of the time, and the last change still arrives within a second', async () => {
    const ns = 'hostile-stream';
    await project(ns, ['model']);
    const source = new KubernetesSource(cluster.kubeConfig(), {
      keysNamespace: 'default',
      namespaces: [ns],
      kserve: false,
      logger: silentLogger,
    });
    cleanups.push(() => source.stop());
    // The consumer stands for the route-table build of a few thousand routes: 30 ms of CPU per snapshot.
    let busyMs = 0;
    const ports: number[] = [];
    await source.start((s) => {
      const t = performance.now();
      while (performance.now() - t < 30);
      busyMs += performance.now() - t;
      const p = s.services?.find((x) => x.metadata.name === 'model-svc')?.ports[0]?.targetPort;
      if (typeof p === 'number') ports.push(p);
    });
    // Another process changes the Service's port as fast as the API server takes it for 1.5 s, then sets 9000.
    const script = `
      import { CoreV1Api, KubeConfig, PatchStrategy, setHeaderMiddleware } from '@kubernetes/client-node';
      const kc = new KubeConfig();
      kc.loadFromFile(process.argv[1]);
      const core = kc.makeApiClient(CoreV1Api);
      const opts = { middleware: [setHeaderMiddleware('Content-Type', PatchStrategy.MergePatch)], middlewareMergeStrategy: 'append' };
      const port = (p) => core.patchNamespacedService({ name: 'model-svc', namespace: '${ns}', body: { spec: { ports: [{ port: 80, targetPort: p, protocol: 'TCP' }] } } }, opts);
      const end = Date.now() + 1500;
      for (let i = 0; Date.now() < end; i++) await port(8000 + (i % 2));
      await port(9000);
      console.log(String(Date.now()));
    `;
    const writer = spawn(process.execPath, ['--input-type=module', '-e', script, cluster.kubeconfigPath], {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    writer.stdout.on('data', (c: Buffer) => (out += c.toString()));
    await waitFor(() => ports.length > 1, 'the first changes', 10_000, 5);
    busyMs = 0;
    const from = performance.now();
    const code = await new Promise<number | null>((resolve) => writer.on('exit', resolve));
    const window = performance.now() - from;
    const busy = busyMs;
    expect(code).toBe(0);
    const lastWrite = Number(out.trim());
    await waitFor(() => ports.at(-1) === 9000, 'the last change', 5_000, 5);
    const latency = Date.now() - lastWrite;
    // Before: rebuilds back to back, most of the window (about 90 % here). Now: about a quarter.
    expect(busy / window).toBeLessThan(0.5);
    expect(latency).toBeLessThan(1000);
  }, 30_000);
});
