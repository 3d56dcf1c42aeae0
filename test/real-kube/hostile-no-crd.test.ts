// servegate started before `kubectl apply -f crds/` (the chart rendered and applied first): /readyz says what is
// missing and how to install it, and the source syncs once the CRD is there. A control plane of this file's own,
// since every other suite applies the CRD to the shared one.
import { afterAll, beforeAll, expect, test } from '@jest/globals';
import { join } from 'node:path';
import { silentLogger } from '../../src/log.js';
import { KubernetesSource } from '../../src/sources/kubernetes/index.js';
import { startKubeCluster, type KubeCluster } from '../support/kube.js';
import { expectSuccess } from '../support/processes.js';
import { ROOT } from '../support/paths.js';
import { waitFor } from '../support/wait.js';

let cluster: KubeCluster;

beforeAll(async () => {
  cluster = await startKubeCluster();
}, 180_000);

afterAll(async () => {
  await cluster?.stop();
});

test('no ServingDeployment CRD yet: the problem names the CRD and the command, and the first list follows its apply', async () => {
  const source = new KubernetesSource(cluster.kubeConfig(), {
    keysNamespace: 'default',
    namespaces: [],
    kserve: true,
    logger: silentLogger,
    backoff: { initialMs: 50, maxMs: 500 },
  });
  let snapshots = 0;
  const started = source.start(() => snapshots++);
  try {
    const problems = await waitFor(
      () => {
        const p = source.health().problems.filter((l) => l.includes('404'));
        return p.length >= 2 && p;
      },
      'the 404s to be reported',
      10_000,
      20,
    );
    const sdep = problems.find((l) => l.startsWith('list servingdeployments'));
    expect(sdep).toContain('servingdeployments.serving.servegate.dev is not installed: kubectl apply -f crds/');
    expect(problems.find((l) => l.startsWith('list inferenceservices'))).toContain('KServe is not installed');
    expect(source.health().synced).toBe(false);

    expectSuccess(await cluster.kubectl(['apply', '-f', join(ROOT, 'crds')]));
    await started;
    expect(source.health().synced).toBe(true);
    expect(snapshots).toBe(1);
    expect(source.health().problems.filter((l) => l.startsWith('list servingdeployments'))).toEqual([]);
  } finally {
    await source.stop();
  }
}, 90_000);
