// The Kubernetes source against API servers that are less helpful than a real one.
import { createServer, request as httpRequest } from 'node:http';
import type { AddressInfo } from 'node:net';
import { KubeConfig } from '@kubernetes/client-node';
import { afterEach, beforeEach, expect, test } from '@jest/globals';
import { waitFor } from '../support/wait.js';
import { KubernetesSource } from '../../src/sources/kubernetes/index.js';
import type { Snapshot } from '../../src/routing/types.js';
import { FakeApiServer } from '../support/fake-apiserver.js';
import { apiKey } from '../support/fixtures.js';
import { keySecretRaw, sdepRaw } from '../support/k8s-objects.js';

let api: FakeApiServer;
let source: KubernetesSource | undefined;
const FAST = { initialMs: 20, maxMs: 200 };

beforeEach(async () => {
  api = await FakeApiServer.start();
});
afterEach(async () => {
  await source?.stop();
  source = undefined;
  await api.stop();
});

test('KServe enabled but not installed (InferenceService list answers 404): the source still syncs and serves the rest', async () => {
  api.failNext(1_000_000, 404, (method, path) => method === 'GET' && path.includes('/inferenceservices'));
  api.create(sdepRaw('demo/iris'));
  source = new KubernetesSource(api.kubeConfig(), {
    keysNamespace: 'servegate',
    namespaces: [],
    kserve: true,
    backoff: FAST,
  });
  let last: Snapshot | undefined;
  await Promise.race([
    source.start((s) => (last = s)),
    new Promise((_, reject) => setTimeout(() => reject(new Error('never synced')), 5000)),
  ]);
  expect(source.health().synced).toBe(true);
  expect(last?.deployments.map((d) => d.metadata.name)).toEqual(['iris']);
  expect(last?.inferenceServices).toEqual([]);
});

test('a Secret without the api-key label is never taken for a key, even when the API server ignores the label selector', async () => {
  const k = apiKey('apikey-real', 'demo');
  api.create(keySecretRaw(k.secret));
  const plain = keySecretRaw(apiKey('not-a-key', 'demo').secret);
  delete plain.metadata.labels;
  api.create(plain);
  // A proxy in front of the fake that drops labelSelector: an API server that ignores it.
  const proxy = createServer((req, res) => {
    const u = new URL(req.url ?? '/', api.url);
    u.searchParams.delete('labelSelector');
    const up = httpRequest(u, { method: req.method, headers: req.headers }, (r) => {
      res.writeHead(r.statusCode ?? 502, r.headers);
      r.pipe(res);
    });
    up.on('error', () => res.destroy());
    req.pipe(up);
    res.on('close', () => up.destroy());
  });
  await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
  try {
    const kc = new KubeConfig();
    kc.loadFromOptions({
      clusters: [
        { name: 'proxy', server: `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`, skipTLSVerify: true },
      ],
      users: [{ name: 'u', token: 't' }],
      contexts: [{ name: 'c', cluster: 'proxy', user: 'u' }],
      currentContext: 'c',
    });
    source = new KubernetesSource(kc, { keysNamespace: 'servegate', namespaces: [], kserve: false, backoff: FAST });
    let last: Snapshot | undefined;
    await source.start((s) => (last = s));
    expect(last?.keySecrets.map((s) => s.metadata.name)).toEqual(['apikey-real']);
    await source.stop();
    source = undefined;
  } finally {
    proxy.closeAllConnections();
    await new Promise((r) => proxy.close(r));
  }
});

test('a status-only change (a status write) produces no rebuild; the next snapshot carries the fresh status', async () => {
  api.create(sdepRaw('demo/iris'));
  source = new KubernetesSource(api.kubeConfig(), {
    keysNamespace: 'servegate',
    namespaces: [],
    kserve: false,
    backoff: FAST,
  });
  const snapshots: Snapshot[] = [];
  await source.start((s) => snapshots.push(s));
  const obj = api.get('serving.servegate.dev/v1alpha1', 'ServingDeployment', 'demo', 'iris') as Record<string, unknown>;
  api.update({ ...obj, status: { url: 'https://x/v1/demo/iris' } });
  // Then a real change, so that a snapshot follows. The watch delivers events in order: had the status write made a
  // snapshot, it would be the second one and would not hold demo/second yet. No sleep proves "nothing happened".
  api.create(sdepRaw('demo/second'));
  await waitFor(() => snapshots.length >= 2, 'the snapshot of the real change');
  expect(snapshots[1].deployments.map((d) => d.metadata.name).sort()).toEqual(['iris', 'second']);
  const iris = snapshots[1].deployments.find((d) => d.metadata.name === 'iris');
  expect(iris?.status).toEqual({ url: 'https://x/v1/demo/iris' });
});
