// etcd restored from a backup under a running servegate (found by a hostile review), against a real kube-apiserver
// v1.36.3 and etcd v3.6.8 of this file's own: the restore takes etcd's revision, and with it every resourceVersion,
// back to the backup's, so servegate's watches hold resourceVersions newer than anything the server has. The API
// server accepts a watch from such a resourceVersion and sends nothing until its revision passes it (then only what
// comes after): servegate kept serving what the restore took away and never saw what was written since. It must list
// again from scratch, so the objects the restore took away disappear and those written since appear.
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import { KubernetesObjectApi } from '@kubernetes/client-node';
import { startKubernetesWith } from '../../src/cli/serve-kubernetes.js';
import { parseConfig } from '../../src/config/load.js';
import { createLogger } from '../../src/log.js';
import type { Servegate } from '../../src/server.js';
import { apiKey } from '../support/fixtures.js';
import { startKubeCluster, type KubeCluster } from '../support/kube.js';
import { keySecretRaw, sdepRaw, serviceRaw, type Obj } from '../support/k8s-objects.js';
import { waitFor } from '../support/wait.js';

const SDEP = '/apis/serving.servegate.dev/v1alpha1';
const NS = 'restored';
const key = apiKey('restored-key', '*');
let cluster: KubeCluster;
let admin: KubernetesObjectApi;
let gw: Servegate | undefined;
const logLines: Array<Record<string, unknown>> = [];

beforeAll(async () => {
  cluster = await startKubeCluster();
  const crd = await cluster.kubectl(['apply', '-f', 'crds/']);
  if (crd.code !== 0) throw new Error(`kubectl apply -f crds/: ${crd.stderr}`);
  await cluster.kubectl(['wait', '--for=condition=Established', 'crd/servingdeployments.serving.servegate.dev']);
  admin = KubernetesObjectApi.makeApiClient(cluster.kubeConfig());
  await create({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'servegate' } });
  await create(keySecretRaw(key.secret));
  await create({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS } });
}, 180_000);

afterAll(async () => {
  await gw?.close();
  await cluster?.stop();
});

function create(obj: Obj): Promise<unknown> {
  return admin.create(obj as never);
}

async function deploy(name: string): Promise<void> {
  await create(serviceRaw(`${NS}/${name}-svc`, [{ port: 80 }]));
  const sdep = sdepRaw(`${NS}/${name}`, { type: 'python', backend: { service: `${name}-svc`, port: 80 } });
  delete sdep.spec.modelServer;
  await create(sdep);
}

/** The gateway's answer for a deployment: 503 no_ready_endpoint when it has the route, 404 when it does not. */
async function probe(name: string): Promise<number> {
  const r = await fetch(`http://127.0.0.1:${gw!.port}/v1/${NS}/${name}/ping`, {
    headers: { authorization: `ApiKey ${key.key}` },
  });
  const body = await r.text();
  if (r.status === 503 && !body.includes('no ready endpoint')) throw new Error(`503 for another reason: ${body}`);
  return r.status;
}

/** The Ready condition servegate wrote into a deployment's status, if any. */
async function readyCondition(name: string): Promise<{ status: string; reason?: string } | undefined> {
  const r = await cluster.raw(`${SDEP}/namespaces/${NS}/servingdeployments/${name}`);
  if (r.status !== 200) throw new Error(`GET ${name}: ${r.status} ${r.body}`);
  const o = JSON.parse(r.body) as {
    status?: { conditions?: Array<{ type: string; status: string; reason?: string }> };
  };
  return o.status?.conditions?.find((c) => c.type === 'Ready');
}

async function restarts(kind: string, reason: string): Promise<number> {
  const m = await gw!.metrics.watchRestarts.get();
  return m.values.find((v) => v.labels.kind === kind && v.labels.reason === reason)?.value ?? 0;
}

describe('etcd restored from a backup while servegate watches', () => {
  test('servegate lists again: objects the restore took away are gone, objects written since are served', async () => {
    await deploy('kept');
    await cluster.backupEtcd();
    const backupRevision = await cluster.etcdRevision();
    // Written after the backup: the restore takes them away. A ConfigMap written 150 times puts the revision well
    // past the backup's, as days of a cluster's life would.
    await deploy('lost');
    await create({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'churn', namespace: NS }, data: {} });
    for (let i = 0; i < 150; i++) {
      const r = await cluster.request(
        'PATCH',
        `/api/v1/namespaces/${NS}/configmaps/churn`,
        { data: { i: String(i) } },
        'application/merge-patch+json',
      );
      if (r.status !== 200) throw new Error(`patch: ${r.status} ${r.body}`);
    }
    const config = parseConfig(
      {
        publicUrl: 'https://models.example.com',
        limits: { scaleFromZeroHoldSeconds: 0 },
        kubernetes: { namespaces: [NS], leaderElection: { enabled: false, leaseName: 'restored' } },
      },
      { port: 0, namespace: 'servegate' },
    );
    const sink = new Writable({
      write(chunk: Buffer, _enc, done) {
        for (const line of chunk.toString('utf8').split('\n'))
          if (line) logLines.push(JSON.parse(line) as Record<string, unknown>);
        done();
      },
    });
    gw = await startKubernetesWith(cluster.kubeConfig(), config, {
      port: 0,
      adminPort: 0,
      host: '127.0.0.1',
      logger: createLogger('info', sink),
      namespace: 'servegate',
      identity: 'restored',
      processMetrics: false,
      backoff: { initialMs: 50, maxMs: 500 },
    });
    expect(await probe('kept')).toBe(503);
    expect(await probe('lost')).toBe(503);
    // servegate writes the status of what it serves; the backup holds 'kept' without one.
    await waitFor(async () => (await readyCondition('kept')) !== undefined, "kept's status", 10_000);
    const gatewayRevision = await cluster.etcdRevision();
    expect(gatewayRevision).toBeGreaterThan(backupRevision + 150);

    await cluster.restoreEtcd();
    const restoredRevision = await cluster.etcdRevision();
    expect(restoredRevision).toBeLessThan(gatewayRevision);
    // What the API server answers a watch from servegate's resourceVersion: nothing at all, not an error (its watch
    // cache accepts a watch from the future and sends what comes after it).
    const silent = await cluster.raw(
      `${SDEP}/namespaces/${NS}/servingdeployments?watch=true&resourceVersion=${gatewayRevision}&timeoutSeconds=2`,
    );
    expect([silent.status, silent.body]).toEqual([200, '']);
    await deploy('written-after');

    await waitFor(
      async () => (await probe('written-after')) === 503,
      'the deployment written after the restore',
      20_000,
    );
    await waitFor(async () => (await probe('lost')) === 404, 'the deployment the restore took away to go', 5_000);
    expect(await probe('kept')).toBe(503);
    // The status the restore took away (the backup was taken before servegate started) is written again.
    await waitFor(async () => (await readyCondition('kept')) !== undefined, "kept's status written again", 10_000);
    expect(await restarts('servingdeployments', 'too_large')).toBeGreaterThanOrEqual(1);
    const warning = logLines.find((l) => l.reason === 'too_large' && String(l.watch).startsWith('servingdeployments'));
    expect(warning?.level).toBe('warn');
    expect(String(warning?.msg)).toMatch(
      /^watch servingdeployments in namespace restored: resourceVersion \d+ is newer than anything the API server has \(the API server's resourceVersion is \d+; etcd restored from a backup\?\): relisting from scratch$/,
    );
    // Healthy again: watching from the new list, nothing stale, no problem left.
    await waitFor(async () => {
      const r = (await (await fetch(`http://127.0.0.1:${gw!.adminPort}/readyz`)).json()) as {
        stalenessSeconds: number;
        problems: string[];
      };
      return r.stalenessSeconds === 0 && r.problems.length === 0;
    }, 'the watches to be current again');
  }, 120_000);
});
