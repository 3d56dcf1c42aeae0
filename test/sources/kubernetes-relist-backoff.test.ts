// A server that answers every watch with 410 right after each list: the source relists with backoff, not in a loop.
import { afterEach, beforeEach, expect, test } from '@jest/globals';
import { KubernetesSource } from '../../src/sources/kubernetes/index.js';
import { FakeApiServer } from '../support/fake-apiserver.js';
import { sdepRaw } from '../support/k8s-objects.js';
import { sleep } from '../support/wait.js';

let api: FakeApiServer;
let source: KubernetesSource | undefined;

beforeEach(async () => {
  api = await FakeApiServer.start();
});
afterEach(async () => {
  await source?.stop();
  source = undefined;
  await api.stop();
});

test('410 on every watch: relists back off (a few in 1.5 s), and the objects stay served', async () => {
  api.create(sdepRaw('demo/iris'));
  const isSdep = (p: string) => p.endsWith('/servingdeployments');
  // Every watch of ServingDeployments is answered 410 Gone (lists are answered).
  api.failNext(1_000_000, 410, (_m, p) => isSdep(p) && api.requests.at(-1)!.watch);
  source = new KubernetesSource(api.kubeConfig(), {
    keysNamespace: 'servegate',
    namespaces: [],
    kserve: false,
    backoff: { initialMs: 100, maxMs: 2000 },
  });
  let deployments = 0;
  await source.start((s) => (deployments = s.deployments.length));
  const lists = () => api.requests.filter((r) => isSdep(r.path) && !r.watch).length;
  const before = lists();
  // Stays: the stimulus, a window in which the lists a failing API server gets are counted.
  await sleep(1500);
  // Before: a list and a watch per round trip, hundreds in 1.5 s. Now: 100, 200, 400, 800 ms apart (with jitter).
  expect(lists() - before).toBeLessThanOrEqual(8);
  expect(lists() - before).toBeGreaterThanOrEqual(2);
  expect(deployments).toBe(1);
  const r = source.watchRestarts().find((x) => x.kind === 'servingdeployments' && x.reason === 'expired');
  expect(r?.count).toBeGreaterThanOrEqual(2);
});
