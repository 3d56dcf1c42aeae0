// The kubernetes source with the real @kubernetes/client-node against the fake API server over real HTTP.
import { afterEach, beforeEach, describe, expect, test } from '@jest/globals';
import { sleep, waitFor } from '../support/wait.js';
import type { Snapshot } from '../../src/routing/types.js';
import { parseConfig } from '../../src/config/load.js';
import {
  KubernetesSource,
  kubernetesSourceOptions,
  type KubernetesSourceOptions,
} from '../../src/sources/kubernetes/index.js';
import type { RestartReason } from '../../src/sources/kubernetes/reflector.js';
import { FakeApiServer } from '../support/fake-apiserver.js';
import { apiKey } from '../support/fixtures.js';
import { isvcRaw, keySecretRaw, SDEP_API, sdepRaw, serviceRaw, sliceRaw } from '../support/k8s-objects.js';

const FAST = { initialMs: 20, maxMs: 200 };

let fake: FakeApiServer;
const sources: KubernetesSource[] = [];

beforeEach(async () => {
  fake = await FakeApiServer.start();
});
afterEach(async () => {
  await Promise.all(sources.splice(0).map((s) => s.stop()));
  await fake.stop();
});

interface Harness {
  source: KubernetesSource;
  snapshots: Snapshot[];
  restarts: Array<{ kind: string; reason: RestartReason }>;
  last(): Snapshot;
  started: Promise<void>;
}

function startSource(opts: Partial<KubernetesSourceOptions> = {}): Harness {
  const restarts: Harness['restarts'] = [];
  const source = new KubernetesSource(fake.kubeConfig(), {
    keysNamespace: 'servegate',
    namespaces: [],
    kserve: false,
    backoff: FAST,
    onWatchRestart: (kind, reason) => restarts.push({ kind, reason }),
    ...opts,
  });
  sources.push(source);
  const snapshots: Snapshot[] = [];
  const started = source.start((s) => snapshots.push(s));
  started.catch(() => undefined);
  return { source, snapshots, restarts, last: () => snapshots[snapshots.length - 1], started };
}

const names = (s: Snapshot | undefined) =>
  (s?.deployments ?? []).map((d) => `${d.metadata.namespace}/${d.metadata.name}`).sort();
const keyNames = (s: Snapshot | undefined) =>
  (s?.keySecrets ?? []).map((k) => `${k.metadata.namespace}/${k.metadata.name}`).sort();
const svcBackend = (
  namespace: string,
  service: string,
  port: number,
  portName?: string,
  targetPort?: number | string,
) => ({ kind: 'service', namespace, service, port, portName, targetPort }) as const;

describe('cache sync', () => {
  test('start resolves only after every watched kind has been listed, then delivers one full snapshot', async () => {
    fake.create(sdepRaw('demo/iris'));
    fake.create(keySecretRaw(apiKey('ci', '*').secret));
    fake.create(serviceRaw('demo/iris-svc', [{ port: 8080, name: 'http' }]));
    fake.failNext(1000, 500, (m, p) => p.endsWith('/endpointslices'));
    const h = startSource();
    let resolved = false;
    void h.started.then(() => (resolved = true));
    await waitFor(
      () => fake.requests.filter((r) => r.path.endsWith('/endpointslices')).length >= 3,
      'endpointslice list retries',
    );
    expect(resolved).toBe(false);
    expect(h.snapshots).toHaveLength(0);
    expect(h.source.health().synced).toBe(false);
    expect(h.source.health().problems.join('\n')).toMatch(/list endpointslices in all namespaces: 500/);
    fake.clearFaults();
    await h.started;
    expect(h.snapshots).toHaveLength(1);
    expect(h.source.health()).toMatchObject({ synced: true, problems: [] });
    const s = h.last();
    expect(s.source).toBe('kubernetes');
    expect(names(s)).toEqual(['demo/iris']);
    expect(keyNames(s)).toEqual(['servegate/ci']);
    expect(s.services?.map((x) => x.metadata.name)).toEqual(['iris-svc']);
    expect(s.inferenceServices).toEqual([]);
    expect(h.restarts.some((r) => r.kind === 'endpointslices' && r.reason === 'list_error')).toBe(true);
  });

  test('an empty cluster still gives a first (empty) snapshot', async () => {
    const h = startSource();
    await h.started;
    expect(h.snapshots).toHaveLength(1);
    expect(h.last()).toMatchObject({ deployments: [], keySecrets: [], services: [], inferenceServices: [] });
  });

  test('a list answering 500 twice is retried and the source syncs', async () => {
    fake.create(sdepRaw('demo/iris'));
    fake.failNext(2, 500, (m, p) => m === 'GET' && p === '/apis/serving.servegate.dev/v1alpha1/servingdeployments');
    const h = startSource();
    await h.started;
    expect(names(h.last())).toEqual(['demo/iris']);
    const lists = fake.requests.filter(
      (r) => r.path === '/apis/serving.servegate.dev/v1alpha1/servingdeployments' && !r.watch,
    );
    expect(lists.map((r) => r.status)).toEqual([500, 500, 200]);
  });

  test('lists are paged and every page is read', async () => {
    for (let i = 0; i < 25; i++) fake.create(sdepRaw(`demo/d${i}`));
    const h = startSource({ pageSize: 10 });
    await h.started;
    expect(h.last().deployments).toHaveLength(25);
    const lists = fake.requests.filter((r) => r.path.endsWith('/servingdeployments') && !r.watch);
    expect(lists).toHaveLength(3);
    expect(lists[1].query).toMatch(/continue=/);
  });

  test('stop() before the first list makes start() reject and leaves no watch open', async () => {
    fake.failNext(1000, 503);
    const h = startSource();
    await waitFor(() => fake.requests.length > 0, 'first request');
    await h.source.stop();
    await expect(h.started).rejects.toThrow(/stopped/);
    expect(fake.openWatches()).toBe(0);
  });
});

describe('changes are reflected', () => {
  test('deployments: create, update (status kept on the resource), delete', async () => {
    const h = startSource();
    await h.started;
    const created = fake.create(sdepRaw('demo/iris'));
    await waitFor(() => names(h.last()).includes('demo/iris'), 'created deployment');
    fake.update({
      ...created,
      spec: { ...created.spec, timeoutSeconds: 7 },
      status: { url: 'https://x/v1/demo/iris' },
    });
    await waitFor(() => (h.last().deployments[0]?.spec as any)?.timeoutSeconds === 7, 'updated deployment');
    const d = h.last().deployments[0];
    expect(d).toMatchObject({
      apiVersion: SDEP_API,
      kind: 'ServingDeployment',
      status: { url: 'https://x/v1/demo/iris' },
      origin: 'kubernetes',
    });
    expect(d.metadata).toMatchObject({ name: 'iris', namespace: 'demo', generation: 2 });
    expect(d.metadata.uid).toBeTruthy();
    expect(d.metadata.creationTimestamp).toBeTruthy();
    fake.delete(SDEP_API, 'ServingDeployment', 'demo', 'iris');
    await waitFor(() => names(h.last()).length === 0, 'deleted deployment');
  });

  test('keys: created, rotated and deleted keys take effect; data decoded from base64', async () => {
    const h = startSource();
    await h.started;
    const k1 = apiKey('ci', 'demo');
    fake.create(keySecretRaw(k1.secret));
    await waitFor(() => keyNames(h.last()).includes('servegate/ci'), 'created key');
    expect(h.last().keySecrets[0].data).toEqual(k1.secret.data);
    const k2 = apiKey('ci', 'demo,other');
    fake.update(keySecretRaw(k2.secret));
    await waitFor(() => h.last().keySecrets[0]?.data.prefix === k2.secret.data.prefix, 'rotated key');
    expect(h.last().keySecrets[0].data.projects).toBe('demo,other');
    fake.delete('v1', 'Secret', 'servegate', 'ci');
    await waitFor(() => keyNames(h.last()).length === 0, 'deleted key');
  });

  test('a Secret without the api-key label is not read; removing the label removes the key', async () => {
    fake.create({
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: 'tls', namespace: 'servegate' },
      data: { a: 'Yg==' },
    });
    const k = fake.create(keySecretRaw(apiKey('ci', '*').secret));
    const h = startSource();
    await h.started;
    expect(keyNames(h.last())).toEqual(['servegate/ci']);
    expect(fake.requests.find((r) => r.path === '/api/v1/namespaces/servegate/secrets' && !r.watch)?.query).toContain(
      'labelSelector=serving.servegate.dev%2Fapi-key%3Dtrue',
    );
    fake.update({ ...k, metadata: { ...k.metadata, labels: {} } });
    await waitFor(() => keyNames(h.last()).length === 0, 'unlabelled key gone');
  });

  test('a stringData field (should an API server send one) is merged over data', async () => {
    const h = startSource();
    await h.started;
    await waitFor(() => fake.openWatches() === 4, 'watches open');
    fake.injectWatchEvent('v1', 'Secret', {
      type: 'ADDED',
      object: {
        metadata: {
          name: 'x',
          namespace: 'servegate',
          resourceVersion: fake.resourceVersion(),
          labels: { 'serving.servegate.dev/api-key': 'true' },
        },
        data: { prefix: Buffer.from('from-data').toString('base64'), projects: Buffer.from('a').toString('base64') },
        stringData: { prefix: 'from-stringData' },
      },
    });
    await waitFor(() => keyNames(h.last()).includes('servegate/x'), 'injected key');
    expect(h.last().keySecrets[0].data).toEqual({ prefix: 'from-stringData', projects: 'a' });
  });

  test('services: port changes produce a snapshot', async () => {
    const svc = fake.create(serviceRaw('demo/iris-svc', [{ port: 8080, name: 'http' }]));
    const h = startSource();
    await h.started;
    fake.update({ ...svc, spec: { ports: [{ port: 9090, name: 'grpc', targetPort: 9000 }] } });
    await waitFor(() => h.last().services?.[0]?.ports[0]?.port === 9090, 'service update');
    expect(h.last().services?.[0].ports).toEqual([{ port: 9090, name: 'grpc', targetPort: 9000 }]);
    fake.delete('v1', 'Service', 'demo', 'iris-svc');
    await waitFor(() => h.last().services?.length === 0, 'service delete');
  });

  test('events of one tick are coalesced into few snapshots', async () => {
    const h = startSource();
    await h.started;
    const before = h.snapshots.length;
    for (let i = 0; i < 200; i++) fake.create(sdepRaw(`demo/d${i}`));
    await waitFor(() => h.last().deployments.length === 200, 'all deployments');
    expect(h.snapshots.length - before).toBeLessThan(50);
  });

  test('unchanged parts keep the same array in the next snapshot', async () => {
    fake.create(keySecretRaw(apiKey('ci', '*').secret));
    const h = startSource();
    await h.started;
    const keysBefore = h.last().keySecrets;
    fake.create(sdepRaw('demo/iris'));
    await waitFor(() => h.last().deployments.length === 1, 'deployment');
    expect(h.last().keySecrets).toBe(keysBefore);
  });
});

describe('namespaces and kserve', () => {
  test('key Secrets are read in the keys namespace only by default (auth.projectNamespaceKeys off)', async () => {
    fake.create(keySecretRaw(apiKey('global', '*').secret));
    fake.create(keySecretRaw(apiKey('proj', 'a', { namespace: 'a' }).secret));
    for (const namespaces of [[], ['a', 'b']]) {
      const before = fake.requests.length;
      const h = startSource({ namespaces });
      await h.started;
      expect(keyNames(h.last())).toEqual(['servegate/global']);
      const secretPaths = new Set(
        fake.requests
          .slice(before)
          .map((r) => r.path)
          .filter((p) => p.endsWith('/secrets')),
      );
      expect([...secretPaths]).toEqual(['/api/v1/namespaces/servegate/secrets']);
    }
  });

  test('with auth.projectNamespaceKeys, key Secrets are read in every namespace', async () => {
    fake.create(keySecretRaw(apiKey('global', '*').secret));
    fake.create(keySecretRaw(apiKey('proj', 'a', { namespace: 'a' }).secret));
    const h = startSource({ projectNamespaceKeys: true });
    await h.started;
    expect(keyNames(h.last())).toEqual(['a/proj', 'servegate/global']);
    expect(fake.requests.some((r) => r.path === '/api/v1/secrets')).toBe(true);
  });

  test('with namespaces configured only those are watched; with auth.projectNamespaceKeys, keys from the keys namespace and those namespaces', async () => {
    fake.create(sdepRaw('a/one'));
    fake.create(sdepRaw('b/two'));
    fake.create(sdepRaw('c/three'));
    fake.create(keySecretRaw(apiKey('global', '*').secret));
    fake.create(keySecretRaw(apiKey('proj', 'a', { namespace: 'a' }).secret));
    fake.create(keySecretRaw(apiKey('elsewhere', 'c', { namespace: 'c' }).secret));
    const h = startSource({ namespaces: ['a', 'b'], projectNamespaceKeys: true });
    await h.started;
    expect(names(h.last())).toEqual(['a/one', 'b/two']);
    expect(keyNames(h.last())).toEqual(['a/proj', 'servegate/global']);
    const paths = new Set(fake.requests.map((r) => r.path));
    expect(paths).toContain('/apis/serving.servegate.dev/v1alpha1/namespaces/a/servingdeployments');
    expect(paths).toContain('/api/v1/namespaces/servegate/secrets');
    expect(paths).toContain('/apis/discovery.k8s.io/v1/namespaces/b/endpointslices');
    expect([...paths].some((p) => p.includes('/namespaces/c/'))).toBe(false);
    fake.create(sdepRaw('c/four'));
    fake.create(sdepRaw('b/five'));
    await waitFor(() => names(h.last()).includes('b/five'), 'b/five');
    expect(names(h.last())).toEqual(['a/one', 'b/five', 'b/two']);
  });

  test('InferenceServices are read only when kserve is enabled', async () => {
    fake.create(isvcRaw('ml/flowers'));
    const off = startSource();
    await off.started;
    expect(off.last().inferenceServices).toEqual([]);
    expect(fake.requests.some((r) => r.path.includes('inferenceservices'))).toBe(false);
    const on = startSource({ kserve: true });
    await on.started;
    expect(on.last().inferenceServices.map((i) => i.metadata.name)).toEqual(['flowers']);
    expect(on.last().inferenceServices[0]).toMatchObject({
      kind: 'InferenceService',
      spec: { predictor: { model: { modelFormat: { name: 'sklearn' } } } },
    });
    fake.create(isvcRaw('ml/llama', 'huggingface'));
    await waitFor(() => on.last().inferenceServices.length === 2, 'second isvc');
  });
});

describe('endpoints', () => {
  test('ready addresses on the endpoint port named like the Service port; changes apply without a snapshot', async () => {
    fake.create(
      serviceRaw('demo/iris-svc', [
        { port: 80, name: 'http', targetPort: 'web' },
        { port: 9000, name: 'metrics', targetPort: 9100 },
      ]),
    );
    const slice = fake.create(
      sliceRaw(
        'demo/iris-svc-abc',
        'iris-svc',
        [
          { name: 'http', port: 8080 },
          { name: 'metrics', port: 9100 },
        ],
        [{ ip: '10.0.0.2' }, { ip: '10.0.0.1', ready: true }, { ip: '10.0.0.3', ready: false }],
      ),
    );
    const h = startSource();
    await h.started;
    const backend = svcBackend('demo', 'iris-svc', 80, 'http', 'web');
    const eps = h.source.endpoints(backend);
    expect(eps).toEqual([
      { host: '10.0.0.1', port: 8080 },
      { host: '10.0.0.2', port: 8080 },
    ]);
    expect(h.source.endpoints(backend)).toBe(eps);
    expect(h.source.endpoints(svcBackend('demo', 'iris-svc', 9000, 'metrics', 9100))).toEqual([
      { host: '10.0.0.1', port: 9100 },
      { host: '10.0.0.2', port: 9100 },
    ]);
    const snapshotsBefore = h.snapshots.length;
    fake.update({ ...slice, endpoints: [{ addresses: ['10.0.0.9'], conditions: { ready: true } }] });
    await waitFor(() => h.source.endpoints(backend)[0]?.host === '10.0.0.9', 'endpoint update');
    expect(h.source.endpoints(backend)).toEqual([{ host: '10.0.0.9', port: 8080 }]);
    await sleep(30); // stays: the window in which an endpoints-only change would wrongly make a snapshot
    expect(h.snapshots.length).toBe(snapshotsBefore);
  });

  test('a second slice of the same Service adds its endpoints; deleting a slice removes them', async () => {
    fake.create(serviceRaw('demo/s', [{ port: 80, name: 'http' }]));
    fake.create(sliceRaw('demo/s-1', 's', [{ name: 'http', port: 8080 }], [{ ip: '10.0.0.1' }]));
    const h = startSource();
    await h.started;
    const b = svcBackend('demo', 's', 80, 'http');
    expect(h.source.endpoints(b)).toHaveLength(1);
    fake.create(sliceRaw('demo/s-2', 's', [{ name: 'http', port: 8080 }], [{ ip: '10.0.0.2' }]));
    await waitFor(() => h.source.endpoints(b).length === 2, 'second slice');
    fake.delete('discovery.k8s.io/v1', 'EndpointSlice', 'demo', 's-1');
    await waitFor(() => h.source.endpoints(b).length === 1, 'slice deleted');
    expect(h.source.endpoints(b)).toEqual([{ host: '10.0.0.2', port: 8080 }]);
  });

  test.each([
    [
      'an unnamed single port matches the slice port with empty name',
      [{ port: 80, targetPort: 8080 }],
      [{ port: 5000 }],
      svcBackend('demo', 's', 80),
      5000,
    ],
    [
      'no slice port of that name: falls back to the numeric targetPort',
      [{ port: 80, name: 'http', targetPort: 8081 }],
      [{ name: 'other', port: 7 }],
      svcBackend('demo', 's', 80, 'http', 8081),
      8081,
    ],
    [
      'the Service port is found by number when the route carries no name',
      [
        { port: 80, name: 'http' },
        { port: 81, name: 'admin' },
      ],
      [
        { name: 'http', port: 8080 },
        { name: 'admin', port: 8181 },
      ],
      svcBackend('demo', 's', 81),
      8181,
    ],
  ])('%s', async (_name, svcPorts, slicePorts, backend, port) => {
    fake.create(serviceRaw('demo/s', svcPorts));
    fake.create(sliceRaw('demo/s-1', 's', slicePorts, [{ ip: '10.1.0.1' }]));
    const h = startSource();
    await h.started;
    expect(h.source.endpoints(backend)).toEqual([{ host: '10.1.0.1', port }]);
  });

  test("the same array instance is returned until that Service's endpoints really change", async () => {
    fake.create(serviceRaw('demo/s', [{ port: 80, name: 'http' }]));
    const slice = fake.create(sliceRaw('demo/s-1', 's', [{ name: 'http', port: 8080 }], [{ ip: '10.0.0.1' }]));
    const h = startSource();
    await h.started;
    const b = svcBackend('demo', 's', 80, 'http');
    const first = h.source.endpoints(b);
    fake.create(sliceRaw('demo/other-1', 'other', [{ name: 'http', port: 8080 }], [{ ip: '10.9.0.1' }]));
    await waitFor(
      () => h.source.endpoints(svcBackend('demo', 'other', 80, 'http')).length === 1,
      'other service endpoints',
    );
    expect(h.source.endpoints(b)).toBe(first);
    fake.update({ ...slice, metadata: { ...slice.metadata, annotations: { touched: 'yes' } } }); // same addresses
    fake.update({ ...slice, endpoints: [{ addresses: ['10.0.0.1'] }, { addresses: ['10.0.0.5'] }] });
    await waitFor(() => h.source.endpoints(b).length === 2, 'new endpoint');
    expect(h.source.endpoints(b)).not.toBe(first);
  });

  test('no ready endpoint gives [] (the gateway answers 503), also for an unknown Service', async () => {
    fake.create(serviceRaw('demo/s', [{ port: 80, name: 'http' }]));
    fake.create(sliceRaw('demo/s-1', 's', [{ name: 'http', port: 8080 }], [{ ip: '10.0.0.1', ready: false }]));
    const h = startSource();
    await h.started;
    expect(h.source.endpoints(svcBackend('demo', 's', 80, 'http'))).toEqual([]);
    expect(h.source.endpoints(svcBackend('demo', 'nope', 80))).toEqual([]);
  });
});

describe('restarts', () => {
  test('a dropped watch is reopened from its resourceVersion and catches the events made meanwhile', async () => {
    fake.create(sdepRaw('demo/a'));
    const h = startSource();
    await h.started;
    await waitFor(() => fake.openWatches() === 4, 'four watches');
    // A watch that had delivered nothing is checked (a one-item list: is the server behind its resourceVersion?)
    // before it is reopened; that is no relist.
    const lists = () => fake.requests.filter((r) => !r.watch && !/(^|&)limit=1(&|$)/.test(r.query)).length;
    const listsBefore = lists();
    fake.dropWatches();
    fake.create(sdepRaw('demo/b'));
    fake.delete(SDEP_API, 'ServingDeployment', 'demo', 'a');
    await waitFor(() => names(h.last()).join() === 'demo/b', 'events made while the watch was down');
    await waitFor(() => fake.openWatches() === 4, 'watches reopened');
    expect(lists()).toBe(listsBefore); // no relist was needed
    const reopened = fake.requests.filter((r) => r.watch && r.path.endsWith('/servingdeployments')).at(-1)!;
    expect(reopened.query).toMatch(/resourceVersion=\d+/);
    expect(
      h.restarts
        .filter((r) => r.reason === 'error')
        .map((r) => r.kind)
        .sort(),
    ).toEqual(['endpointslices', 'secrets', 'services', 'servingdeployments']);
  });

  test('a watch the server ends cleanly (its timeout) is reopened at once and misses nothing', async () => {
    const h = startSource();
    await h.started;
    await waitFor(() => fake.openWatches() === 4, 'four watches');
    fake.endWatches();
    fake.create(sdepRaw('demo/after-end'));
    await waitFor(() => names(h.last()).includes('demo/after-end'), 'event after a clean end');
    await waitFor(() => fake.openWatches() === 4, 'watches reopened');
    expect(
      h.restarts
        .filter((r) => r.reason === 'closed')
        .map((r) => r.kind)
        .sort(),
    ).toEqual(['endpointslices', 'secrets', 'services', 'servingdeployments']);
    await waitFor(
      () => h.source.health().problems.length === 0 && h.source.health().stalenessMs === 0,
      'healthy again',
    );
  });

  test('410 after compaction relists and converges: objects deleted meanwhile are gone, new ones present', async () => {
    fake.create(sdepRaw('demo/keep'));
    fake.create(sdepRaw('demo/gone'));
    fake.create(keySecretRaw(apiKey('old', '*').secret));
    const h = startSource();
    await h.started;
    await fake.down();
    fake.delete(SDEP_API, 'ServingDeployment', 'demo', 'gone');
    fake.delete('v1', 'Secret', 'servegate', 'old');
    fake.create(sdepRaw('demo/new'));
    fake.compact();
    await fake.up();
    await waitFor(
      () => names(h.last()).join() === 'demo/keep,demo/new' && keyNames(h.last()).length === 0,
      'converged state',
    );
    expect(h.restarts.some((r) => r.kind === 'servingdeployments' && r.reason === 'expired')).toBe(true);
    const sdepLists = fake.requests.filter(
      (r) =>
        r.path.endsWith('/servingdeployments') && !r.watch && r.status === 200 && !/(^|&)limit=1(&|$)/.test(r.query),
    );
    expect(sdepLists.length).toBe(2);
  });

  test('API server down: the last snapshot stays, staleness grows, problems are reported; after up() it catches up', async () => {
    fake.create(sdepRaw('demo/a'));
    fake.create(serviceRaw('demo/s', [{ port: 80, name: 'http' }]));
    fake.create(sliceRaw('demo/s-1', 's', [{ name: 'http', port: 8080 }], [{ ip: '10.0.0.1' }]));
    const h = startSource({ backoff: { initialMs: 20, maxMs: 100 } });
    await h.started;
    await waitFor(() => fake.openWatches() === 4, 'watches open');
    expect(h.source.health().stalenessMs).toBe(0);
    const snapshotsBefore = h.snapshots.length;
    await fake.down();
    const health = await waitFor(() => {
      const now = h.source.health();
      return now.stalenessMs >= 300 && now;
    }, 'staleness to pass 300 ms');
    expect(health.problems.join('\n')).toMatch(/ECONNREFUSED/);
    expect(health.synced).toBe(true);
    expect(h.snapshots.length).toBe(snapshotsBefore); // nothing was thrown away
    expect(h.source.endpoints(svcBackend('demo', 's', 80, 'http'))).toEqual([{ host: '10.0.0.1', port: 8080 }]);
    fake.create(sdepRaw('demo/b'));
    await fake.up();
    await waitFor(() => names(h.last()).includes('demo/b'), 'caught up');
    await waitFor(() => h.source.health().stalenessMs === 0, 'healthy again');
    expect(h.source.health().problems).toEqual([]);
  });

  test('an idle watch (no event, no bookmark) is restarted', async () => {
    const h = startSource({ watchIdleTimeoutMs: 150 });
    await h.started;
    await waitFor(
      () => h.restarts.filter((r) => r.kind === 'servingdeployments' && r.reason === 'idle').length >= 2,
      'idle restarts',
    );
    fake.create(sdepRaw('demo/late'));
    await waitFor(() => names(h.last()).includes('demo/late'), 'event after idle restarts');
  });

  test('bookmarks keep a quiet watch alive', async () => {
    await fake.stop();
    fake = await FakeApiServer.start({ bookmarkIntervalMs: 50 });
    const h = startSource({ watchIdleTimeoutMs: 400 });
    await h.started;
    await sleep(1000); // stays: the stimulus, a quiet second, more than twice the 400 ms idle timeout
    expect(h.restarts.filter((r) => r.reason === 'idle')).toEqual([]);
    expect(fake.requests.filter((r) => r.watch)).toHaveLength(4);
    expect(fake.requests.find((r) => r.watch)?.query).toContain('allowWatchBookmarks=true');
  });

  test('a watch answering 500 is retried with backoff', async () => {
    fake.failNext(3, 500, (m, p) => p.endsWith('/services'));
    const h = startSource();
    await h.started;
    await waitFor(() => fake.openWatches() === 4, 'watch open after retries');
    expect(fake.requests.filter((r) => r.path.endsWith('/services')).map((r) => r.status)).toEqual([
      500, 500, 500, 200, 200,
    ]);
  });

  test('stop() closes every watch', async () => {
    const h = startSource({ kserve: true });
    await h.started;
    await waitFor(() => fake.openWatches() === 5, 'five watches');
    await h.source.stop();
    await waitFor(() => fake.openWatches() === 0, 'no watches');
  });
});

describe('a steady cluster rebuilds nothing', () => {
  // Every snapshot is a route-table build: O(routes) at 10,000 deployments. What a quiet cluster sends (bookmarks,
  // watches ending at timeoutSeconds and resuming, endpoint churn that keeps a Service ready) must make none.
  test('bookmarks, resumed watches and endpoint churn that keeps readiness deliver no snapshot', async () => {
    fake.create(sdepRaw('demo/iris'));
    fake.create(keySecretRaw(apiKey('ci', '*').secret));
    fake.create(serviceRaw('demo/s', [{ port: 8080, name: 'http' }]));
    fake.create(sliceRaw('demo/s-1', 's', [{ name: 'http', port: 8080 }], [{ ip: '10.0.0.1' }]));
    const h = startSource();
    await h.started;
    expect(h.snapshots).toHaveLength(1);
    const watchesBefore = fake.requests.filter((r) => r.watch).length;

    fake.bookmark();
    fake.endWatches();
    await waitFor(() => fake.requests.filter((r) => r.watch).length >= watchesBefore + 4, 'the watches resumed');
    await waitFor(() => fake.openWatches() === 4, 'four open watches');
    fake.create(sliceRaw('demo/s-2', 's', [{ name: 'http', port: 8080 }], [{ ip: '10.0.0.2' }]));
    await waitFor(
      () => h.source.endpoints(svcBackend('demo', 's', 8080, 'http')).length === 2,
      'the second endpoint is known',
    );
    await sleep(50); // stays: the window in which a bookmark or resumed watch would wrongly make a snapshot
    expect(h.snapshots).toHaveLength(1);

    // A real change still makes exactly one snapshot, with the same arrays for the parts that did not change.
    fake.create(sdepRaw('demo/second'));
    await waitFor(() => h.snapshots.length >= 2, 'the snapshot of the real change');
    expect(h.snapshots).toHaveLength(2);
    expect(names(h.snapshots[1])).toEqual(['demo/iris', 'demo/second']);
    expect(h.snapshots[1].keySecrets).toBe(h.snapshots[0].keySecrets);
    expect(h.snapshots[1].services).toBe(h.snapshots[0].services);
  });
});

describe('malformed input never throws', () => {
  test('bad objects are skipped or passed on unvalidated; the source keeps working', async () => {
    fake.create(sdepRaw('demo/weird', { type: 42, backend: 'nope' }));
    fake.create({
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: 'bad', namespace: 'servegate', labels: { 'serving.servegate.dev/api-key': 'true' } },
      data: { prefix: 12, sha256: '***' },
    });
    fake.create({
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: 'odd', namespace: 'demo' },
      spec: { ports: { nope: true } },
    });
    fake.create({
      apiVersion: 'discovery.k8s.io/v1',
      kind: 'EndpointSlice',
      metadata: { name: 'odd-1', namespace: 'demo', labels: { 'kubernetes.io/service-name': 'odd' } },
      endpoints: 'x',
      ports: [null],
    });
    const h = startSource();
    await h.started;
    expect(names(h.last())).toEqual(['demo/weird']);
    expect(h.last().keySecrets[0].data).toEqual({ sha256: Buffer.from('***', 'base64').toString('utf8') });
    expect(h.last().services?.find((s) => s.metadata.name === 'odd')?.ports).toEqual([]);
    expect(h.source.endpoints(svcBackend('demo', 'odd', 80))).toEqual([]);

    const api = 'serving.servegate.dev/v1alpha1';
    await waitFor(() => fake.openWatches() === 4, 'watches open');
    fake.injectWatchEvent(api, 'ServingDeployment', 'this is not json');
    fake.injectWatchEvent(api, 'ServingDeployment', { type: 'ADDED', object: null });
    fake.injectWatchEvent(api, 'ServingDeployment', { type: 'MODIFIED', object: { metadata: { namespace: 'demo' } } });
    fake.injectWatchEvent(api, 'ServingDeployment', {
      type: 'ADDED',
      object: { metadata: { name: 'nons' }, spec: {} },
    });
    fake.injectWatchEvent(api, 'ServingDeployment', { type: 'SURPRISE', object: {} });
    fake.create(sdepRaw('demo/fine'));
    await waitFor(() => names(h.last()).includes('demo/fine'), 'a good object after bad ones');
    expect(names(h.last())).toEqual(['demo/fine', 'demo/weird']);
    expect(h.source.malformedTotal).toBeGreaterThanOrEqual(3);
    expect(h.source.health().problems).toEqual([]);
  });

  test('a throwing snapshot consumer does not stop the source', async () => {
    const source = new KubernetesSource(fake.kubeConfig(), {
      keysNamespace: 'servegate',
      namespaces: [],
      kserve: false,
      backoff: FAST,
    });
    sources.push(source);
    const seen: number[] = [];
    await source.start((s) => {
      seen.push(s.deployments.length);
      throw new Error('consumer bug');
    });
    fake.create(sdepRaw('demo/a'));
    await waitFor(() => seen.at(-1) === 1, 'snapshot after a throwing consumer');
  });
});

test('the source options follow the configuration', () => {
  const config = parseConfig(
    {
      auth: { keysNamespace: 'keys' },
      kubernetes: { namespaces: ['a', 'b'], kserve: { enabled: true }, watchIdleTimeoutSeconds: 120 },
    },
    { port: 8080, namespace: 'servegate' },
  );
  expect(kubernetesSourceOptions(config)).toEqual({
    keysNamespace: 'keys',
    projectNamespaceKeys: false,
    namespaces: ['a', 'b'],
    kserve: true,
    watchIdleTimeoutMs: 120_000,
  });
});
