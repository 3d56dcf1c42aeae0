// The tests' real control plane itself: etcd 3.6 and kube-apiserver built from Go modules (npm run kube:build), RBAC
// authorization, an admin client certificate, ServiceAccount tokens from the TokenRequest API.
import { beforeAll, describe, expect, test } from '@jest/globals';
import { AuthorizationV1Api, CoreV1Api, VersionApi } from '@kubernetes/client-node';
import { readFileSync } from 'node:fs';
import { request } from 'node:https';
import { sharedKubeCluster, type KubeCluster } from '../support/kube.js';

let cluster: KubeCluster;

beforeAll(async () => {
  cluster = await sharedKubeCluster();
}, 180_000);

describe('the real control plane', () => {
  test('is a kube-apiserver of 1.34 or newer behind RBAC', async () => {
    const v = await cluster.kubeConfig().makeApiClient(VersionApi).getCode();
    expect(v.major).toBe('1');
    expect(Number.parseInt(v.minor, 10)).toBeGreaterThanOrEqual(34);
    // A version helm can read, as a release's: a chart's kubeVersion constraint is checked against it.
    expect(v.gitVersion).toMatch(new RegExp(`^v1\\.${v.minor}\\.\\d+$`));
    // A request without credentials is system:anonymous, and RBAC gives it nothing.
    const anonymous = await new Promise<number>((resolve, reject) => {
      const req = request(`${cluster.server}/api/v1/namespaces`, { ca: readFileSync(cluster.state.ca) }, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      req.on('error', reject);
      req.end();
    });
    expect(anonymous).toBe(403);
  });

  test('a ServiceAccount token from TokenRequest is authenticated as that account and authorized by RBAC alone', async () => {
    const admin = cluster.kubeConfig().makeApiClient(CoreV1Api);
    const ns = `cp-${Date.now().toString(36)}`;
    await admin.createNamespace({ body: { metadata: { name: ns } } });
    await admin.createNamespacedServiceAccount({ namespace: ns, body: { metadata: { name: 'robot' } } });
    const token = await cluster.tokenFor(ns, 'robot');
    const kc = cluster.tokenKubeConfig(token);
    const review = await kc.makeApiClient(AuthorizationV1Api).createSelfSubjectAccessReview({
      body: { spec: { resourceAttributes: { namespace: ns, verb: 'list', resource: 'secrets' } } },
    });
    expect(review.status?.allowed).toBe(false);
    const denied = await kc
      .makeApiClient(CoreV1Api)
      .listNamespacedSecret({ namespace: ns })
      .then(
        () => 200,
        (e: { code?: number }) => e.code,
      );
    expect(denied).toBe(403);
  });
});
