// The fake API server speaks the kube-apiserver wire protocol well enough for the real @kubernetes/client-node.
import {
  ApiException,
  CoordinationV1Api,
  CoreV1Api,
  CustomObjectsApi,
  PatchStrategy,
  setHeaderOptions,
  Watch,
} from '@kubernetes/client-node';
import { afterEach, beforeEach, describe, expect, test } from '@jest/globals';
import { waitFor } from './wait.js';
import { FakeApiServer } from './fake-apiserver.js';

const GROUP = 'serving.servegate.dev';
const VERSION = 'v1alpha1';
const SDEP = 'servingdeployments';

function sdepObj(ns: string, name: string, port = 8080): Record<string, any> {
  return {
    apiVersion: `${GROUP}/${VERSION}`,
    kind: 'ServingDeployment',
    metadata: { name, namespace: ns },
    spec: { type: 'model', modelServer: 'sklearn', backend: { service: `${name}-svc`, port } },
  };
}

function secretObj(
  ns: string,
  name: string,
  labels: Record<string, string> = { 'serving.servegate.dev/api-key': 'true' },
) {
  return { apiVersion: 'v1', kind: 'Secret', metadata: { name, namespace: ns, labels }, stringData: { prefix: 'abc' } };
}

type Ev = { type: string; object: any };

/** Opens a watch with the real client's Watch class and collects its events until `done`. */
async function openWatch(
  fake: FakeApiServer,
  path: string,
  query: Record<string, string | number | boolean | undefined>,
) {
  const events: Ev[] = [];
  let doneErr: unknown = 'open';
  const ended = new Promise<unknown>((resolve) => {
    void new Watch(fake.kubeConfig())
      .watch(
        path,
        query,
        (type, object) => events.push({ type, object }),
        (err) => {
          doneErr = err;
          resolve(err);
        },
      )
      .then((c) => controllers.push(c));
  });
  return {
    events,
    ended,
    get done() {
      return doneErr !== 'open';
    },
  };
}

const controllers: AbortController[] = [];

let fake: FakeApiServer;
beforeEach(async () => {
  fake = await FakeApiServer.start();
});
afterEach(async () => {
  for (const c of controllers.splice(0)) c.abort();
  await fake.stop();
});

describe('objects', () => {
  test('a created object gets uid, creationTimestamp, generation 1 and a resourceVersion', () => {
    const o = fake.create(sdepObj('a', 'iris'));
    expect(o.metadata.uid).toMatch(/^[0-9a-f-]{36}$/);
    expect(o.metadata.creationTimestamp).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
    expect(o.metadata.generation).toBe(1);
    expect(Number(o.metadata.resourceVersion)).toBeGreaterThan(0);
  });

  test('generation moves on spec changes only; resourceVersion on every change', () => {
    const o = fake.create(sdepObj('a', 'iris'));
    const labelled = fake.update({ ...o, metadata: { ...o.metadata, labels: { x: 'y' } } });
    expect(labelled.metadata.generation).toBe(1);
    expect(Number(labelled.metadata.resourceVersion)).toBeGreaterThan(Number(o.metadata.resourceVersion));
    const changed = fake.update({ ...labelled, spec: { ...labelled.spec, timeoutSeconds: 5 } });
    expect(changed.metadata.generation).toBe(2);
  });

  test('Secret stringData is stored base64 in data, as the real server does', () => {
    const s = fake.create(secretObj('a', 'k'));
    expect(s.stringData).toBeUndefined();
    expect(Buffer.from(s.data.prefix, 'base64').toString()).toBe('abc');
  });

  test('get returns a copy; delete removes', () => {
    fake.create(sdepObj('a', 'iris'));
    const g = fake.get(`${GROUP}/${VERSION}`, 'ServingDeployment', 'a', 'iris')!;
    g.spec.type = 'python';
    expect(fake.get(`${GROUP}/${VERSION}`, 'ServingDeployment', 'a', 'iris')!.spec.type).toBe('model');
    fake.delete(`${GROUP}/${VERSION}`, 'ServingDeployment', 'a', 'iris');
    expect(fake.get(`${GROUP}/${VERSION}`, 'ServingDeployment', 'a', 'iris')).toBeUndefined();
  });
});

describe('list with the real client', () => {
  test('lists all namespaces and one namespace, with the List kind and a resourceVersion', async () => {
    fake.create(sdepObj('a', 'one'));
    fake.create(sdepObj('b', 'two'));
    const api = fake.kubeConfig().makeApiClient(CustomObjectsApi);
    const all = await api.listClusterCustomObject({ group: GROUP, version: VERSION, plural: SDEP });
    expect(all.kind).toBe('ServingDeploymentList');
    expect(all.items.map((i: any) => i.metadata.name)).toEqual(['one', 'two']);
    expect(all.metadata.resourceVersion).toBe(fake.resourceVersion());
    const inB = await api.listNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: 'b', plural: SDEP });
    expect(inB.items.map((i: any) => i.metadata.name)).toEqual(['two']);
  });

  test.each([
    ['serving.servegate.dev/api-key=true', ['k1']],
    ['serving.servegate.dev/api-key', ['k1', 'k2']],
    ['serving.servegate.dev/api-key!=true', ['k2', 'other']],
    ['!serving.servegate.dev/api-key', ['other']],
  ])('labelSelector %s', async (selector, names) => {
    fake.create(secretObj('s', 'k1'));
    fake.create(secretObj('s', 'k2', { 'serving.servegate.dev/api-key': 'false' }));
    fake.create(secretObj('s', 'other', {}));
    const api = fake.kubeConfig().makeApiClient(CoreV1Api);
    const list = await api.listNamespacedSecret({ namespace: 's', labelSelector: selector });
    expect(list.items.map((i) => i.metadata?.name)).toEqual(names);
  });

  test('fieldSelector metadata.name and metadata.namespace', async () => {
    fake.create(secretObj('s', 'k1'));
    fake.create(secretObj('t', 'k1'));
    fake.create(secretObj('t', 'k2'));
    const api = fake.kubeConfig().makeApiClient(CoreV1Api);
    const byName = await api.listSecretForAllNamespaces({ fieldSelector: 'metadata.name=k1' });
    expect(byName.items.map((i) => `${i.metadata?.namespace}/${i.metadata?.name}`)).toEqual(['s/k1', 't/k1']);
    const byNs = await api.listSecretForAllNamespaces({ fieldSelector: 'metadata.namespace=t,metadata.name!=k1' });
    expect(byNs.items.map((i) => `${i.metadata?.namespace}/${i.metadata?.name}`)).toEqual(['t/k2']);
  });

  test('paging with limit/continue returns every item once, consistent at the first page resourceVersion', async () => {
    for (let i = 0; i < 7; i++) fake.create(secretObj('s', `k${i}`));
    const api = fake.kubeConfig().makeApiClient(CoreV1Api);
    const first = await api.listNamespacedSecret({ namespace: 's', limit: 3 });
    expect(first.items).toHaveLength(3);
    expect(first.metadata?._continue).toBeTruthy();
    expect(first.metadata?.remainingItemCount).toBe(4);
    fake.create(secretObj('s', 'k9')); // after the first page: not in this list
    const names = first.items.map((i) => i.metadata!.name);
    let cont = first.metadata?._continue;
    while (cont) {
      const page = await api.listNamespacedSecret({ namespace: 's', limit: 3, _continue: cont });
      expect(page.metadata?.resourceVersion).toBe(first.metadata?.resourceVersion);
      names.push(...page.items.map((i) => i.metadata!.name));
      cont = page.metadata?._continue;
    }
    expect(names).toEqual(['k0', 'k1', 'k2', 'k3', 'k4', 'k5', 'k6']);
  });

  test('a continue token from before compact() gets 410 Expired', async () => {
    for (let i = 0; i < 4; i++) fake.create(secretObj('s', `k${i}`));
    const api = fake.kubeConfig().makeApiClient(CoreV1Api);
    const first = await api.listNamespacedSecret({ namespace: 's', limit: 2 });
    fake.compact();
    const err = await api
      .listNamespacedSecret({ namespace: 's', limit: 2, _continue: first.metadata?._continue })
      .catch((e) => e);
    expect(err).toBeInstanceOf(ApiException);
    expect(err.code).toBe(410);
  });

  test('namespaces are cluster-scoped', async () => {
    fake.create({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'ns1' } });
    const api = fake.kubeConfig().makeApiClient(CoreV1Api);
    const list = await api.listNamespace();
    expect(list.items.map((n) => n.metadata?.name)).toEqual(['ns1']);
    const one = await api.readNamespace({ name: 'ns1' });
    expect(one.metadata?.namespace).toBeUndefined();
  });
});

describe('errors as Status objects', () => {
  test('a missing object is 404 with a NotFound Status', async () => {
    const res = await fetch(`${fake.url}/apis/${GROUP}/${VERSION}/namespaces/a/${SDEP}/nope`);
    expect(res.status).toBe(404);
    expect(res.headers.get('content-type')).toBe('application/json');
    expect(await res.json()).toMatchObject({ kind: 'Status', status: 'Failure', reason: 'NotFound', code: 404 });
  });

  test('creating an existing object is 409 AlreadyExists', async () => {
    const api = fake.kubeConfig().makeApiClient(CustomObjectsApi);
    await api.createNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace: 'a',
      plural: SDEP,
      body: sdepObj('a', 'x'),
    });
    const err = await api
      .createNamespacedCustomObject({
        group: GROUP,
        version: VERSION,
        namespace: 'a',
        plural: SDEP,
        body: sdepObj('a', 'x'),
      })
      .catch((e) => e);
    expect(err.code).toBe(409);
    expect(JSON.parse(err.body)).toMatchObject({ reason: 'AlreadyExists' });
  });

  test('a replace with a stale resourceVersion is 409 Conflict', async () => {
    const api = fake.kubeConfig().makeApiClient(CoordinationV1Api);
    const lease = await api.createNamespacedLease({
      namespace: 'sg',
      body: { metadata: { name: 'l' }, spec: { holderIdentity: 'a' } },
    });
    const next = await api.replaceNamespacedLease({
      name: 'l',
      namespace: 'sg',
      body: { ...lease, spec: { holderIdentity: 'b' } },
    });
    expect(next.spec?.holderIdentity).toBe('b');
    const err = await api
      .replaceNamespacedLease({ name: 'l', namespace: 'sg', body: { ...lease, spec: { holderIdentity: 'c' } } })
      .catch((e) => e);
    expect(err.code).toBe(409);
    expect(JSON.parse(err.body)).toMatchObject({ kind: 'Status', reason: 'Conflict', code: 409 });
  });

  test('failNext answers the next matching requests with the given status, then recovers', async () => {
    fake.failNext(2, 500, (method, path) => method === 'GET' && path.endsWith('/secrets'));
    const api = fake.kubeConfig().makeApiClient(CoreV1Api);
    for (let i = 0; i < 2; i++)
      expect((await api.listNamespacedSecret({ namespace: 's' }).catch((e) => e)).code).toBe(500);
    expect((await api.listNamespacedSecret({ namespace: 's' })).items).toEqual([]);
    expect(fake.requests.filter((r) => r.path === '/api/v1/namespaces/s/secrets').map((r) => r.status)).toEqual([
      500, 500, 200,
    ]);
  });
});

describe('status subresource', () => {
  test('merge-patch on /status changes status only and keeps generation', async () => {
    const created = fake.create(sdepObj('a', 'iris'));
    const api = fake.kubeConfig().makeApiClient(CustomObjectsApi);
    const patched = await api.patchNamespacedCustomObjectStatus(
      {
        group: GROUP,
        version: VERSION,
        namespace: 'a',
        plural: SDEP,
        name: 'iris',
        body: { status: { url: 'u' }, spec: { type: 'python' } },
      },
      setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
    );
    expect(patched.status).toEqual({ url: 'u' });
    expect(patched.spec.type).toBe('model');
    expect(patched.metadata.generation).toBe(1);
    expect(Number(patched.metadata.resourceVersion)).toBeGreaterThan(Number(created.metadata.resourceVersion));
  });

  test('json-patch on /status works too', async () => {
    fake.create(sdepObj('a', 'iris'));
    const api = fake.kubeConfig().makeApiClient(CustomObjectsApi);
    const patched = await api.patchNamespacedCustomObjectStatus(
      {
        group: GROUP,
        version: VERSION,
        namespace: 'a',
        plural: SDEP,
        name: 'iris',
        body: [{ op: 'add', path: '/status', value: { observedGeneration: 1 } }],
      },
      setHeaderOptions('Content-Type', PatchStrategy.JsonPatch),
    );
    expect(patched.status).toEqual({ observedGeneration: 1 });
  });

  test('PUT on /status with a stale resourceVersion is 409; PUT on the main resource keeps status', async () => {
    const created = fake.create({ ...sdepObj('a', 'iris'), status: { url: 'old' } });
    const api = fake.kubeConfig().makeApiClient(CustomObjectsApi);
    const ok = await api.replaceNamespacedCustomObjectStatus({
      group: GROUP,
      version: VERSION,
      namespace: 'a',
      plural: SDEP,
      name: 'iris',
      body: { ...created, status: { url: 'new' } },
    });
    expect(ok.status).toEqual({ url: 'new' });
    const err = await api
      .replaceNamespacedCustomObjectStatus({
        group: GROUP,
        version: VERSION,
        namespace: 'a',
        plural: SDEP,
        name: 'iris',
        body: { ...created, status: { url: 'x' } },
      })
      .catch((e) => e);
    expect(err.code).toBe(409);
    const main = await api.replaceNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace: 'a',
      plural: SDEP,
      name: 'iris',
      body: { ...ok, spec: { ...ok.spec, timeoutSeconds: 3 }, status: { url: 'ignored' } },
    });
    expect(main.status).toEqual({ url: 'new' });
    expect(main.metadata.generation).toBe(2);
  });
});

describe('watch with the real Watch class', () => {
  const path = `/apis/${GROUP}/${VERSION}/${SDEP}`;

  test('streams ADDED, MODIFIED and DELETED after the given resourceVersion', async () => {
    const before = fake.create(sdepObj('a', 'old'));
    const w = await openWatch(fake, path, { resourceVersion: before.metadata.resourceVersion });
    await waitFor(() => fake.openWatches() === 1, 'watch open');
    const o = fake.create(sdepObj('a', 'iris'));
    fake.update({ ...o, spec: { ...o.spec, timeoutSeconds: 9 } });
    fake.delete(`${GROUP}/${VERSION}`, 'ServingDeployment', 'a', 'iris');
    await waitFor(() => w.events.length === 3, 'three events');
    expect(w.events.map((e) => `${e.type} ${e.object.metadata.name}`)).toEqual([
      'ADDED iris',
      'MODIFIED iris',
      'DELETED iris',
    ]);
    expect(w.events[1].object.metadata.generation).toBe(2);
  });

  test('replays events that happened between the list and the watch', async () => {
    const api = fake.kubeConfig().makeApiClient(CustomObjectsApi);
    const list = await api.listClusterCustomObject({ group: GROUP, version: VERSION, plural: SDEP });
    fake.create(sdepObj('a', 'meanwhile'));
    const w = await openWatch(fake, path, { resourceVersion: list.metadata.resourceVersion });
    await waitFor(() => w.events.length === 1, 'replayed event');
    expect(w.events[0]).toMatchObject({ type: 'ADDED', object: { metadata: { name: 'meanwhile' } } });
  });

  test('a watch from a compacted resourceVersion gets a 410 Expired ERROR event and ends', async () => {
    const o = fake.create(sdepObj('a', 'iris'));
    fake.update({ ...o, spec: { ...o.spec, timeoutSeconds: 1 } });
    fake.compact();
    const w = await openWatch(fake, path, { resourceVersion: o.metadata.resourceVersion });
    await w.ended;
    expect(w.events).toEqual([
      { type: 'ERROR', object: expect.objectContaining({ kind: 'Status', code: 410, reason: 'Expired' }) },
    ]);
  });

  test('events beyond the history window are compacted: a watch from before it gets 410', async () => {
    await fake.stop();
    fake = await FakeApiServer.start({ historyLimit: 10 });
    const first = fake.create(sdepObj('a', 'iris'));
    for (let i = 0; i < 20; i++) fake.update({ ...first, spec: { ...first.spec, timeoutSeconds: i + 1 } });
    const w = await openWatch(fake, path, { resourceVersion: first.metadata.resourceVersion });
    await w.ended;
    expect(w.events[0]).toMatchObject({ type: 'ERROR', object: { code: 410 } });
    const recent = await openWatch(fake, path, { resourceVersion: String(Number(fake.resourceVersion()) - 3) });
    await waitFor(() => recent.events.length === 3, 'recent events replayed');
  });

  test('a label-selected watch sees an object leave the selection as DELETED', async () => {
    const s = fake.create(secretObj('s', 'k'));
    const w = await openWatch(fake, '/api/v1/secrets', {
      resourceVersion: s.metadata.resourceVersion,
      labelSelector: 'serving.servegate.dev/api-key=true',
    });
    await waitFor(() => fake.openWatches() === 1, 'watch open');
    fake.update({ ...s, metadata: { ...s.metadata, labels: {} } });
    fake.create(secretObj('s', 'unlabelled', {}));
    await waitFor(() => w.events.length === 1, 'event');
    await new Promise((r) => setTimeout(r, 30));
    expect(w.events.map((e) => `${e.type} ${e.object.metadata.name}`)).toEqual(['DELETED k']);
  });

  test('bookmarks carry only the resourceVersion', async () => {
    await fake.stop();
    fake = await FakeApiServer.start({ bookmarkIntervalMs: 20 });
    const w = await openWatch(fake, path, { resourceVersion: fake.resourceVersion(), allowWatchBookmarks: true });
    await waitFor(() => w.events.length >= 2, 'bookmarks');
    expect(w.events[0]).toEqual({
      type: 'BOOKMARK',
      object: {
        kind: 'ServingDeployment',
        apiVersion: `${GROUP}/${VERSION}`,
        metadata: { resourceVersion: fake.resourceVersion() },
      },
    });
  });

  test('timeoutSeconds ends the watch cleanly', async () => {
    const w = await openWatch(fake, path, { resourceVersion: fake.resourceVersion(), timeoutSeconds: 1 });
    expect(await w.ended).toBeNull();
    expect(fake.openWatches()).toBe(0);
  });

  test('dropWatches ends open watches with an error; down() refuses connections; up() serves again on the same port', async () => {
    const w = await openWatch(fake, path, { resourceVersion: fake.resourceVersion() });
    await waitFor(() => fake.openWatches() === 1, 'watch open');
    fake.dropWatches();
    expect(await w.ended).toBeTruthy();
    const url = fake.url;
    await fake.down();
    const api = fake.kubeConfig().makeApiClient(CoreV1Api);
    const err = await api.listNamespacedSecret({ namespace: 's' }).catch((e) => e);
    expect(String(err?.code ?? err?.message)).toMatch(/ECONNREFUSED/);
    fake.create(secretObj('s', 'k'));
    await fake.up();
    expect(fake.url).toBe(url);
    expect((await api.listNamespacedSecret({ namespace: 's' })).items.map((i) => i.metadata?.name)).toEqual(['k']);
  });

  test('a non-200 watch answer reaches done with the status code', async () => {
    fake.failNext(1, 500);
    const w = await openWatch(fake, path, { resourceVersion: fake.resourceVersion() });
    const err = (await w.ended) as { statusCode?: number };
    expect(err.statusCode).toBe(500);
  });
});
