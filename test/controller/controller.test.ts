// The status controller against a fake kube-apiserver over real HTTP, with the real @kubernetes/client-node:
// it writes status through the status subresource, only when it changed, only while leader, and retries failures.
import { Registry } from 'prom-client';
import { afterEach, beforeEach, describe, expect, test } from '@jest/globals';
import { sleep, waitFor } from '../support/wait.js';
import { kubeStatusWriter, StatusController, type StatusWriter } from '../../src/controller/controller.js';
import { registerControllerMetrics, startStatusController, type ControllerHandle } from '../../src/controller/index.js';
import { RouteStore } from '../../src/routing/store.js';
import { API_VERSION, type Snapshot } from '../../src/routing/types.js';
import { buildOptions } from '../support/fixtures.js';
import { FakeApiServer } from '../support/fake-apiserver.js';

type Obj = Record<string, any>;
let fake: FakeApiServer;
const cleanups: Array<() => Promise<void> | void> = [];

beforeEach(async () => {
  fake = await FakeApiServer.start();
});
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
  await fake.stop();
});

function sdepObj(ns: string, name: string, spec: Obj, created = '2026-01-01T00:00:00Z'): Obj {
  return {
    apiVersion: API_VERSION,
    kind: 'ServingDeployment',
    metadata: { namespace: ns, name, creationTimestamp: created },
    spec,
  };
}
function svcObj(ns: string, name: string, port: number): Obj {
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { namespace: ns, name },
    spec: { ports: [{ name: 'http', port, targetPort: port }] },
  };
}
const sklearn = (svc = 'fraud-predictor') => ({
  project: 'fraud_detection',
  type: 'model',
  modelServer: 'sklearn',
  backend: { service: svc, port: 8080 },
});

/** What the kubernetes source would hand over now: every object as the API server has it. */
function snapshotNow(): Snapshot {
  return {
    source: 'kubernetes',
    deployments: fake.list(API_VERSION, 'ServingDeployment').map((o) => ({
      apiVersion: o.apiVersion,
      kind: 'ServingDeployment',
      metadata: o.metadata,
      spec: o.spec,
      status: o.status,
    })),
    inferenceServices: fake
      .list('serving.kserve.io/v1beta1', 'InferenceService')
      .map((o) => ({ apiVersion: o.apiVersion, kind: 'InferenceService', metadata: o.metadata, spec: o.spec })),
    keySecrets: [],
    services: fake.list('v1', 'Service').map((s) => ({ metadata: s.metadata, ports: s.spec.ports })),
  };
}

const statusWrites = () => fake.requests.filter((r) => r.path.endsWith('/status') && r.method !== 'GET');
const sdepStatus = (ns: string, name: string) => fake.get(API_VERSION, 'ServingDeployment', ns, name)?.status;

function controller(opts: { leader?: () => boolean; writer?: StatusWriter; concurrency?: number } = {}) {
  const store = new RouteStore(buildOptions);
  const c = new StatusController({
    store,
    writer: opts.writer ?? kubeStatusWriter(fake.kubeConfig()),
    leadership: opts.leader ? { isLeader: opts.leader } : undefined,
    now: () => new Date('2026-03-01T10:00:00Z'),
    retryBaseMs: 30,
    concurrency: opts.concurrency,
  });
  c.start();
  cleanups.push(() => c.stop());
  return { store, c };
}

describe('status controller', () => {
  test('writes URLs, hostname, observedGeneration and Ready=True through the status subresource', async () => {
    fake.create(svcObj('fraud-detection', 'fraud-predictor', 8080));
    fake.create(sdepObj('fraud-detection', 'fraud', sklearn()));
    const { store, c } = controller();
    store.apply(snapshotNow());
    await c.idle();
    expect(sdepStatus('fraud-detection', 'fraud')).toEqual({
      observedGeneration: 1,
      project: 'fraud_detection',
      url: 'https://models.example.com/v1/fraud_detection/fraud',
      inferenceUrl: 'https://models.example.com/v1/fraud_detection/fraud/v1/models/fraud:predict',
      hostname: 'fraud.fraud-detection.serving.example.com',
      conditions: [
        {
          type: 'Ready',
          status: 'True',
          reason: 'Routed',
          message: '',
          observedGeneration: 1,
          lastTransitionTime: '2026-03-01T10:00:00Z',
        },
        {
          type: 'HostnameAssigned',
          status: 'True',
          reason: 'Assigned',
          message: 'requests with Host: fraud.fraud-detection.serving.example.com are routed here',
          observedGeneration: 1,
          lastTransitionTime: '2026-03-01T10:00:00Z',
        },
      ],
    });
    expect(statusWrites().map((r) => `${r.method} ${r.path} ${r.status}`)).toEqual([
      'PATCH /apis/serving.servegate.dev/v1alpha1/namespaces/fraud-detection/servingdeployments/fraud/status 200',
    ]);
    expect(c.stats).toMatchObject({ writes: 1, failures: 0 });
  });

  test('writes only when the status changed: rebuilds, stale snapshots and read-backs cost no PATCH', async () => {
    fake.create(svcObj('fraud-detection', 'fraud-predictor', 8080));
    fake.create(sdepObj('fraud-detection', 'fraud', sklearn()));
    const { store, c } = controller();
    const stale = snapshotNow();
    store.apply(stale);
    await c.idle();
    expect(statusWrites()).toHaveLength(1);
    store.apply(stale); // the informer has not delivered our write yet
    await c.idle();
    for (let i = 0; i < 3; i++) {
      store.apply(snapshotNow()); // ...and now it has
      await c.idle();
    }
    expect(statusWrites()).toHaveLength(1);

    // The backend Service disappears: one more write, Ready=False/BackendNotFound, URLs removed.
    fake.delete('v1', 'Service', 'fraud-detection', 'fraud-predictor');
    store.apply(snapshotNow());
    await c.idle();
    store.apply(snapshotNow());
    await c.idle();
    expect(statusWrites()).toHaveLength(2);
    expect(sdepStatus('fraud-detection', 'fraud')).toEqual({
      observedGeneration: 1,
      project: 'fraud_detection',
      conditions: [
        {
          type: 'Ready',
          status: 'False',
          reason: 'BackendNotFound',
          message: 'Service fraud-detection/fraud-predictor not found',
          observedGeneration: 1,
          lastTransitionTime: '2026-03-01T10:00:00Z',
        },
      ],
    });
  });

  test('a status another writer changed (a status-only change, which rebuilds nothing) is put back; our own read-back costs no PATCH', async () => {
    fake.create(svcObj('fraud-detection', 'fraud-predictor', 8080));
    fake.create(sdepObj('fraud-detection', 'fraud', sklearn()));
    const { store, c } = controller();
    store.apply(snapshotNow());
    await c.idle();
    const right = sdepStatus('fraud-detection', 'fraud');
    const readBack = snapshotNow().deployments[0]!;
    c.statusChanged(readBack); // our own write, delivered by the watch
    await c.idle();
    expect(statusWrites()).toHaveLength(1);
    // Someone else writes the status; the source hands the object over without a build.
    const obj = fake.get(API_VERSION, 'ServingDeployment', 'fraud-detection', 'fraud')!;
    fake.update({ ...obj, status: { url: 'https://elsewhere.example.com/', observedGeneration: 0 } });
    c.statusChanged(snapshotNow().deployments[0]!);
    await c.idle();
    expect(statusWrites()).toHaveLength(2);
    expect(sdepStatus('fraud-detection', 'fraud')).toEqual(right);
  });

  test('an earlier write of ours delivered after a later one is put right at once, however often the route flaps', async () => {
    // The route flaps (its Service comes and goes) faster than the watch delivers our writes: each late echo of an
    // earlier write of ours is answered at once, not taken for another writer and backed off (hostile-kube.test.ts).
    fake.create(
      sdepObj('flap', 'chat', { type: 'model', modelServer: 'llm', backend: { service: 'chat', port: 8000 } }),
    );
    const { store, c } = controller();
    const before = snapshotNow(); // the object as it was before any write of ours (the watch lags)
    for (let round = 0; round < 3; round++) {
      store.apply({ ...snapshotNow(), services: [], deployments: before.deployments }); // BackendNotFound
      await c.idle();
      const notFound = snapshotNow().deployments[0]!; // our BackendNotFound write, delivered later
      fake.create(svcObj('flap', 'chat', 8000));
      store.apply({ ...snapshotNow(), deployments: before.deployments }); // Routed
      await c.idle();
      const writes = statusWrites().length;
      c.statusChanged(notFound);
      await c.idle();
      expect(statusWrites()).toHaveLength(writes + 1);
      expect(sdepStatus('flap', 'chat').conditions[0].reason).toBe('Routed');
      fake.delete('v1', 'Service', 'flap', 'chat');
    }
  });

  test('a spec change is reflected with the new observedGeneration', async () => {
    fake.create(svcObj('demo', 'chat', 8000));
    fake.create(
      sdepObj('demo', 'chat', { type: 'model', modelServer: 'llm', backend: { service: 'chat', port: 8000 } }),
    );
    const { store, c } = controller();
    store.apply(snapshotNow());
    await c.idle();
    const o = fake.get(API_VERSION, 'ServingDeployment', 'demo', 'chat')!;
    fake.update({ ...o, spec: { ...o.spec, timeoutSeconds: 600 } });
    store.apply(snapshotNow());
    await c.idle();
    expect(sdepStatus('demo', 'chat')).toMatchObject({
      observedGeneration: 2,
      openaiUrl: 'https://models.example.com/v1/demo/chat/v1',
    });
    expect(statusWrites()).toHaveLength(2);
  });

  test.each([409, 500, 503])('a %i answer to a status write is retried until it succeeds', async (code) => {
    fake.create(svcObj('demo', 'iris', 8080));
    fake.create(
      sdepObj('demo', 'iris', { type: 'model', modelServer: 'sklearn', backend: { service: 'iris', port: 8080 } }),
    );
    fake.failNext(2, code, (m, p) => m === 'PATCH' && p.endsWith('/status'));
    const { store, c } = controller();
    store.apply(snapshotNow());
    await c.idle();
    expect(statusWrites().map((r) => r.status)).toEqual([code, code, 200]);
    expect(c.stats).toMatchObject({ writes: 1, failures: 2, conflicts: code === 409 ? 2 : 0 });
    expect(sdepStatus('demo', 'iris')?.conditions[0]).toMatchObject({ type: 'Ready', status: 'True' });
  });

  test('a write for an object deleted meanwhile (404) is dropped, not retried', async () => {
    fake.create(svcObj('demo', 'iris', 8080));
    fake.create(
      sdepObj('demo', 'iris', { type: 'model', modelServer: 'sklearn', backend: { service: 'iris', port: 8080 } }),
    );
    const snap = snapshotNow();
    fake.delete(API_VERSION, 'ServingDeployment', 'demo', 'iris');
    const { store, c } = controller();
    store.apply(snap);
    await c.idle();
    expect(statusWrites().map((r) => r.status)).toEqual([404]);
    expect(c.stats).toMatchObject({ writes: 0, failures: 0, dropped: 1 });
  });

  test('an object that leaves the snapshot while its write is backing off is dropped', async () => {
    fake.create(svcObj('demo', 'iris', 8080));
    fake.create(
      sdepObj('demo', 'iris', { type: 'model', modelServer: 'sklearn', backend: { service: 'iris', port: 8080 } }),
    );
    fake.failNext(100, 500, (m, p) => m === 'PATCH' && p.endsWith('/status'));
    const { store, c } = controller();
    store.apply(snapshotNow());
    await waitFor(() => c.stats.failures >= 1, 'the first status write to fail and back off');
    fake.delete(API_VERSION, 'ServingDeployment', 'demo', 'iris');
    store.apply(snapshotNow());
    await waitFor(() => c.stats.dropped === 1, 'the write of the deleted object to be dropped');
    await c.idle();
    // Counted, not slept on: every write attempt was one of the failures, and none came after the drop.
    expect(statusWrites()).toHaveLength(c.stats.failures);
    expect(c.stats.writes).toBe(0);
    expect(c.queueDepth()).toBe(0);
  });

  test('Conflict: the younger of two resources claiming one project/deployment gets Ready=False/Conflict, the older Ready=True', async () => {
    fake.create(svcObj('team-a', 'm', 80));
    fake.create(svcObj('team-b', 'm', 80));
    fake.create(
      sdepObj(
        'team-a',
        'iris',
        { project: 'shared', type: 'model', modelServer: 'sklearn', backend: { service: 'm', port: 80 } },
        '2026-01-01T00:00:00Z',
      ),
    );
    fake.create(
      sdepObj(
        'team-b',
        'iris',
        { project: 'shared', type: 'model', modelServer: 'sklearn', backend: { service: 'm', port: 80 } },
        '2026-01-02T00:00:00Z',
      ),
    );
    const { store, c } = controller();
    store.apply(snapshotNow());
    await c.idle();
    expect(sdepStatus('team-a', 'iris')?.conditions[0]).toMatchObject({ status: 'True', reason: 'Routed' });
    expect(sdepStatus('team-b', 'iris')?.conditions[0]).toMatchObject({ status: 'False', reason: 'Conflict' });
    expect(sdepStatus('team-b', 'iris')?.conditions[0].message).toMatch(/team-a\/iris/);
    expect(sdepStatus('team-b', 'iris')?.url).toBeUndefined();
  });

  test('InvalidSpec from the kubernetes source: a backend url is refused with a message', async () => {
    fake.create(sdepObj('demo', 'sneaky', { type: 'python', backend: { url: 'http://169.254.169.254' } }));
    const { store, c } = controller();
    store.apply(snapshotNow());
    await c.idle();
    expect(sdepStatus('demo', 'sneaky')?.conditions[0]).toMatchObject({
      type: 'Ready',
      status: 'False',
      reason: 'InvalidSpec',
    });
    expect(sdepStatus('demo', 'sneaky')?.conditions[0].message).toMatch(/backend\.url is refused/);
  });

  test('never writes the status of InferenceServices, and ignores files-source snapshots', async () => {
    fake.create(svcObj('kserve', 'iris-predictor', 80));
    fake.create({
      apiVersion: 'serving.kserve.io/v1beta1',
      kind: 'InferenceService',
      metadata: { namespace: 'kserve', name: 'iris' },
      spec: { predictor: { model: { modelFormat: { name: 'sklearn' } } } },
    });
    const { store, c } = controller();
    const snap = snapshotNow();
    expect(snap.inferenceServices).toHaveLength(1);
    store.apply(snap);
    expect(store.current().routes.map((r) => r.id)).toEqual(['kserve/iris']);
    fake.create(sdepObj('demo', 'x', { type: 'python', backend: { url: 'http://127.0.0.1:1' } }));
    store.apply({ ...snapshotNow(), source: 'files', services: undefined });
    await c.idle();
    expect(statusWrites()).toEqual([]);
    expect(fake.requests.filter((r) => r.method !== 'GET')).toEqual([]);
  });

  test('a non-leader writes nothing; on becoming leader it reconciles everything from the latest build', async () => {
    fake.create(svcObj('demo', 'a', 80));
    fake.create(sdepObj('demo', 'a', { type: 'python', backend: { service: 'a', port: 80 } }));
    fake.create(sdepObj('demo', 'b', { type: 'python', backend: { service: 'b', port: 80 } }));
    let leader = false;
    const { store, c } = controller({ leader: () => leader });
    store.apply(snapshotNow());
    store.apply(snapshotNow());
    await c.idle();
    await sleep(50); // stays: the window in which a non-leader's write would reach the fake API server
    expect(statusWrites()).toEqual([]);
    leader = true;
    c.startedLeading();
    await c.idle();
    expect(statusWrites()).toHaveLength(2);
    expect(sdepStatus('demo', 'a')?.conditions[0].status).toBe('True');
    expect(sdepStatus('demo', 'b')?.conditions[0]).toMatchObject({ status: 'False', reason: 'BackendNotFound' });
    leader = false;
    c.stoppedLeading();
    fake.create(svcObj('demo', 'b', 80));
    store.apply(snapshotNow());
    await c.idle();
    expect(statusWrites()).toHaveLength(2);
  });

  test('writes run with bounded concurrency, each object once', async () => {
    const n = 12;
    for (let i = 0; i < n; i++) {
      fake.create(svcObj('demo', `s${i}`, 80));
      fake.create(sdepObj('demo', `d${i}`, { type: 'python', backend: { service: `s${i}`, port: 80 } }));
    }
    const kube = kubeStatusWriter(fake.kubeConfig());
    let inFlight = 0;
    let peak = 0;
    const writer: StatusWriter = {
      async patchStatus(ns, name, patch) {
        inFlight++;
        peak = Math.max(peak, inFlight);
        try {
          await sleep(10); // stays: the stimulus, a slow write, so that writes would overlap if allowed to
          await kube.patchStatus(ns, name, patch);
        } finally {
          inFlight--;
        }
      },
    };
    const { store, c } = controller({ writer, concurrency: 3 });
    store.apply(snapshotNow());
    store.apply(snapshotNow()); // the same work again while the first round is in flight: deduplicated
    await c.idle();
    expect(peak).toBe(3);
    const paths = statusWrites().map((r) => r.path);
    expect(paths).toHaveLength(n);
    expect(new Set(paths).size).toBe(n);
  });

  test('a writer that throws (even a non-Error) never escapes: the failure is counted and retried', async () => {
    fake.create(svcObj('demo', 'a', 80));
    fake.create(sdepObj('demo', 'a', { type: 'python', backend: { service: 'a', port: 80 } }));
    let calls = 0;
    const kube = kubeStatusWriter(fake.kubeConfig());
    const writer: StatusWriter = {
      patchStatus(ns, name, patch) {
        calls++;
        if (calls === 1) throw 'boom';
        if (calls === 2) return Promise.reject(new TypeError('bad'));
        return kube.patchStatus(ns, name, patch);
      },
    };
    const { store, c } = controller({ writer });
    expect(() => store.apply(snapshotNow())).not.toThrow();
    await c.idle();
    expect(c.stats).toMatchObject({ writes: 1, failures: 2 });
    expect(statusWrites()).toHaveLength(1);
  });
});

test('the counters are exported as Prometheus metrics', async () => {
  fake.create(svcObj('demo', 'a', 80));
  fake.create(sdepObj('demo', 'a', { type: 'python', backend: { service: 'a', port: 80 } }));
  fake.failNext(1, 409, (m, p) => m === 'PATCH' && p.endsWith('/status'));
  const { store, c } = controller();
  const registry = new Registry();
  registerControllerMetrics(registry, { controller: c, isLeader: () => true });
  store.apply(snapshotNow());
  await c.idle();
  const text = await registry.metrics();
  expect(text).toMatch(/^servegate_status_writes_total 1$/m);
  expect(text).toMatch(/^servegate_status_write_failures_total 1$/m);
  expect(text).toMatch(/^servegate_status_write_conflicts_total 1$/m);
  expect(text).toMatch(/^servegate_status_queue_depth 0$/m);
  expect(text).toMatch(/^servegate_leader 1$/m);
  expect(text).toMatch(/^servegate_leader_transitions_total 0$/m);
});

describe('two replicas with leader election', () => {
  test('only the elected replica writes status; after it stops, the other takes over and writes what changed', async () => {
    fake.create(svcObj('demo', 'a', 80));
    fake.create(sdepObj('demo', 'a', { type: 'python', backend: { service: 'a', port: 80 } }));
    fake.create(
      sdepObj('demo', 'b', { type: 'model', modelServer: 'tensorflow', backend: { service: 'a', port: 80 } }),
    );
    const replicas: Array<{ store: RouteStore; handle: ControllerHandle }> = ['pod-a', 'pod-b'].map((identity) => {
      const store = new RouteStore(buildOptions);
      const handle = startStatusController({
        store,
        kubeConfig: fake.kubeConfig('servegate'),
        namespace: 'servegate',
        identity,
        leaderElection: {
          enabled: true,
          leaseName: 'servegate-controller',
          leaseDurationSeconds: 15,
          renewDeadlineSeconds: 10,
          retryPeriodSeconds: 2,
        },
        timings: { leaseDurationMs: 1000, renewDeadlineMs: 700, retryPeriodMs: 150 },
        retryBaseMs: 30,
      });
      cleanups.push(() => handle.stop());
      return { store, handle };
    });
    for (const r of replicas) r.store.apply(snapshotNow());
    await waitFor(() => replicas.some((r) => r.handle.isLeader()), 'a leader', 3000);
    const leaders = replicas.filter((r) => r.handle.isLeader());
    expect(leaders).toHaveLength(1);
    await Promise.all(replicas.map((r) => r.handle.controller.idle()));
    expect(statusWrites()).toHaveLength(2);
    expect(leaders[0].handle.controller.stats.writes).toBe(2);
    const [leader, follower] = leaders[0] === replicas[0] ? replicas : [replicas[1], replicas[0]];
    expect(follower.handle.controller.stats.writes).toBe(0);

    // Both see the informer catch up: nothing more to write.
    for (const r of replicas) r.store.apply(snapshotNow());
    await Promise.all(replicas.map((r) => r.handle.controller.idle()));
    expect(statusWrites()).toHaveLength(2);

    // The leader shuts down (releases the Lease); a spec change meanwhile is written by the new leader.
    await leader.handle.stop();
    const b = fake.get(API_VERSION, 'ServingDeployment', 'demo', 'b')!;
    fake.update({ ...b, spec: { ...b.spec, modelName: 'renamed' } });
    follower.store.apply(snapshotNow());
    await waitFor(
      () => sdepStatus('demo', 'b')?.observedGeneration === 2,
      'the follower-turned-leader to write generation 2',
      3000,
    );
    await follower.handle.controller.idle(); // the fake has stored the write; let the client see the answer too
    expect(follower.handle.isLeader()).toBe(true);
    expect(sdepStatus('demo', 'b')).toMatchObject({
      observedGeneration: 2,
      inferenceUrl: 'https://models.example.com/v1/demo/b/v1/models/renamed:predict',
    });
    expect(follower.handle.controller.stats.writes).toBe(1);
  });
});
