// A server whose resourceVersions went back (etcd restored from a backup), a watch answered "Too large resource
// version", and a watch that fails in a loop: the source lists again from scratch instead of watching on from a
// resourceVersion the server does not have (found by a hostile review; test/real-kube/restored-etcd.test.ts does the
// restore on a real kube-apiserver and etcd).
import { afterEach, expect, test } from '@jest/globals';
import type { Snapshot } from '../../src/routing/types.js';
import { KubernetesSource } from '../../src/sources/kubernetes/index.js';
import type { RestartReason } from '../../src/sources/kubernetes/reflector.js';
import { FakeApiServer, type RecordedRequest } from '../support/fake-apiserver.js';
import { SDEP_API, sdepRaw } from '../support/k8s-objects.js';
import { waitFor } from '../support/wait.js';

const fakes: FakeApiServer[] = [];
let source: KubernetesSource | undefined;

afterEach(async () => {
  await source?.stop();
  source = undefined;
  await Promise.all(fakes.splice(0).map((f) => f.stop()));
});

async function fakeServer(port?: number): Promise<FakeApiServer> {
  const f = await FakeApiServer.start({ port });
  fakes.push(f);
  return f;
}

function start(api: FakeApiServer): {
  restarts: Array<{ kind: string; reason: RestartReason }>;
  last: () => Snapshot | undefined;
  started: Promise<void>;
} {
  const restarts: Array<{ kind: string; reason: RestartReason }> = [];
  let last: Snapshot | undefined;
  source = new KubernetesSource(api.kubeConfig(), {
    keysNamespace: 'servegate',
    namespaces: [],
    kserve: false,
    backoff: { initialMs: 20, maxMs: 200 },
    onWatchRestart: (kind, reason) => restarts.push({ kind, reason }),
  });
  const started = source.start((s) => (last = s));
  return { restarts, last: () => last, started };
}

const names = (s: Snapshot | undefined) => (s?.deployments ?? []).map((d) => d.metadata.name).sort();
const isSdep = (r: RecordedRequest) => r.path.endsWith('/servingdeployments');
/** A full list, not the one-item check of the server's resourceVersion. */
const isList = (r: RecordedRequest) => !r.watch && !/(^|&)limit=1(&|$)/.test(r.query);

test('a server back at older resourceVersions (a restored etcd): the source lists again, what the restore took away goes', async () => {
  const before = await fakeServer();
  before.create(sdepRaw('demo/kept'));
  for (let i = 0; i < 20; i++) before.create(sdepRaw(`demo/lost-${i}`));
  const h = start(before);
  await h.started;
  expect(names(h.last())).toHaveLength(21);
  const port = Number(new URL(before.url).port);
  await before.stop();
  // The same address, with the state of an older backup: one object, resourceVersions from 1 again, so below the
  // source's. A watch from the source's resourceVersion stays silent there, as on the real server.
  const restored = await fakeServer(port);
  restored.create(sdepRaw('demo/kept'));
  restored.create(sdepRaw('demo/written-after'));
  await waitFor(() => names(h.last()).join() === 'kept,written-after', 'the restored state', 5000);
  expect(h.restarts.filter((r) => r.reason === 'too_large').map((r) => r.kind)).toContain('servingdeployments');
  // Listed from scratch (no resourceVersion) and watched from that list.
  const list = restored.requests.find((r) => isSdep(r) && isList(r))!;
  expect(list.query).not.toMatch(/resourceVersion=/);
  restored.create(sdepRaw('demo/later'));
  await waitFor(() => names(h.last()).includes('later'), 'a change after the relist', 5000);
  await waitFor(() => source!.health().problems.length === 0, 'every watch current again', 5000);
  expect(h.restarts.filter((r) => r.reason === 'too_large').length).toBeGreaterThanOrEqual(4);
});

test('a watch answered with an ERROR "Too large resource version" (504, ResourceVersionTooLarge) relists at once', async () => {
  const api = await fakeServer();
  api.create(sdepRaw('demo/a'));
  const h = start(api);
  await h.started;
  await waitFor(() => api.openWatches() === 4, 'the watches');
  const lists = () => api.requests.filter((r) => isSdep(r) && isList(r)).length;
  const listsBefore = lists();
  api.injectWatchEvent(SDEP_API, 'ServingDeployment', {
    type: 'ERROR',
    object: {
      kind: 'Status',
      apiVersion: 'v1',
      status: 'Failure',
      message: 'Too large resource version: 9999, current: 12',
      reason: 'Timeout',
      details: {
        causes: [{ reason: 'ResourceVersionTooLarge', message: 'Too large resource version' }],
        retryAfterSeconds: 1,
      },
      code: 504,
    },
  });
  await waitFor(() => lists() === listsBefore + 1, 'a list from scratch');
  expect(h.restarts).toContainEqual({ kind: 'servingdeployments', reason: 'too_large' });
  await waitFor(() => api.openWatches() === 4, 'the watch from the new list');
});

test('watches refused in a loop while lists answer: every third failure lists again', async () => {
  const api = await fakeServer();
  api.create(sdepRaw('demo/a'));
  const h = start(api);
  await h.started;
  await waitFor(() => api.openWatches() === 4, 'the watches');
  const from = api.requests.length;
  // Every watch of ServingDeployments from now on is answered 500 (lists and the other kinds are answered).
  api.failNext(1_000_000, 500, (_m, p) => p.endsWith('/servingdeployments') && api.requests.at(-1)!.watch);
  api.dropWatches();
  const sdep = () => api.requests.slice(from).filter(isSdep);
  await waitFor(() => sdep().filter(isList).length >= 2, 'two lists again', 10_000);
  // Three failed watches in a row before each list: the one cut (it had delivered nothing), then two refused, each
  // after checking that the server is not behind the source's resourceVersion. Then the backoff grows on.
  const shape = sdep().map((r) => (r.watch ? `watch ${r.status}` : isList(r) ? 'list' : 'check'));
  expect(shape.slice(0, 5)).toEqual(['check', 'watch 500', 'check', 'watch 500', 'list']);
  expect(shape.slice(5, 10)).toEqual(['watch 500', 'check', 'watch 500', 'check', 'watch 500']);
  expect(
    h.restarts.filter((r) => r.kind === 'servingdeployments' && r.reason === 'error').length,
  ).toBeGreaterThanOrEqual(5);
  expect(names(h.last())).toEqual(['a']);
});

test('watches that each end in an ERROR event (500) while lists answer: the third lists again', async () => {
  const api = await fakeServer();
  api.create(sdepRaw('demo/a'));
  const h = start(api);
  await h.started;
  await waitFor(() => api.openWatches() === 4, 'the watches');
  const from = api.requests.length;
  const sdep = () => api.requests.slice(from).filter(isSdep);
  const error = {
    type: 'ERROR',
    object: { kind: 'Status', apiVersion: 'v1', status: 'Failure', message: 'etcd: leader changed', code: 500 },
  };
  for (let i = 0; i < 3; i++) {
    // The sdep watch open (the first, then each reopened after its check): answer it with the ERROR.
    await waitFor(() => api.openWatches() === 4 && sdep().filter((r) => r.watch).length === i, `watch ${i + 1}`, 5000);
    api.injectWatchEvent(SDEP_API, 'ServingDeployment', error);
  }
  await waitFor(() => sdep().some(isList), 'a list again', 5000);
  const shape = sdep().map((r) => (r.watch ? 'watch' : isList(r) ? 'list' : 'check'));
  expect(shape.slice(0, 5)).toEqual(['check', 'watch', 'check', 'watch', 'list']);
  expect(names(h.last())).toEqual(['a']);
});

test('a working watch that is cut is checked before it is reopened (an API server back quickly on a restored etcd)', async () => {
  const api = await fakeServer();
  const h = start(api);
  await h.started;
  await waitFor(() => api.openWatches() === 4, 'the watches');
  api.create(sdepRaw('demo/a'));
  await waitFor(() => names(h.last()).join() === 'a', 'the event');
  const from = api.requests.length;
  api.dropWatches();
  await waitFor(() => api.openWatches() === 4, 'the watches reopened');
  const sdep = api.requests.slice(from).filter(isSdep);
  expect(sdep.map((r) => (r.watch ? 'watch' : isList(r) ? 'list' : 'check'))).toEqual(['check', 'watch']);
  expect(sdep[1]!.query).toMatch(/resourceVersion=\d+/);
});
