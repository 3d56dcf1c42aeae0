// charts/servegate installed for real: `helm install` into the real kube-apiserver (test/support/kube.ts), with its
// defaults and with the keys-namespace, project-namespace-keys, KServe and watched-namespaces options. No kubelet
// runs, so the chart's Deployment never gets pods: servegate runs as a process configured as that pod would be (the
// chart's ConfigMap as --config, POD_NAMESPACE, POD_NAME) with a token of the chart's own ServiceAccount
// (TokenRequest), so the API server's RBAC authorizer checks exactly the chart's rules. It must sync, serve, write
// status, hold its Lease with no 403 in its log; and the same token must be refused what docs/rbac.md does not list.
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import { AuthorizationV1Api, type KubeConfig } from '@kubernetes/client-node';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { request } from 'node:https';
import { readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { parse as parseYaml } from 'yaml';
import { generateKey, keySecretManifest } from '../../src/keys/index.js';
import { installChart, type ChartRelease } from '../support/helm.js';
import { otherCrdsDir, sharedKubeCluster, type KubeCluster } from '../support/kube.js';
import { describeRun } from '../support/processes.js';
import { waitFor } from '../support/wait.js';
import { startServegateProcess, type ServegateProcess } from '../support/servegate-process.js';

let cluster: KubeCluster;
let dir: string;
const id = randomBytes(3).toString('hex');
const running: ServegateProcess[] = [];

beforeAll(async () => {
  cluster = await sharedKubeCluster();
  dir = mkdtempSync(join(tmpdir(), 'servegate-chart-'));
  // KServe's own InferenceService CRD, as its Go module ships it (server-side: it is too large for the annotation of a
  // client-side apply). Another test file of this worker may have applied it already.
  const kserve = join(otherCrdsDir(), 'kserve');
  for (const f of readdirSync(kserve)) {
    const r = await cluster.kubectl(['apply', '--server-side', '--force-conflicts', '-f', join(kserve, f)]);
    if (r.code !== 0) throw new Error(describeRun(r));
  }
  await until('the InferenceService CRD to be established', async () => {
    const r = await cluster.kubectl([
      'get',
      'crd/inferenceservices.serving.kserve.io',
      '-o',
      'jsonpath={.status.conditions[?(@.type=="Established")].status}',
    ]);
    return r.stdout === 'True' ? true : undefined;
  });
}, 180_000);

afterAll(async () => {
  await Promise.all(running.map((s) => s.stop()));
  rmSync(dir, { recursive: true, force: true });
});

async function apply(objects: object[]): Promise<void> {
  const r = await cluster.kubectl(['apply', '-f', '-'], {
    input: JSON.stringify({ apiVersion: 'v1', kind: 'List', items: objects }),
  });
  if (r.code !== 0) throw new Error(describeRun(r));
}

async function namespace(name: string): Promise<void> {
  await apply([{ apiVersion: 'v1', kind: 'Namespace', metadata: { name } }]);
}

/** A Service with one port named http; no EndpointSlice (no kubelet): requests get 503, which is all this needs. */
function service(ns: string, name: string): object {
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name, namespace: ns },
    spec: { selector: { app: name }, ports: [{ name: 'http', port: 80, targetPort: 8080 }] },
  };
}

function sdep(ns: string, name: string, backend: string): object {
  return {
    apiVersion: 'serving.servegate.dev/v1alpha1',
    kind: 'ServingDeployment',
    metadata: { name, namespace: ns },
    spec: { type: 'model', modelServer: 'sklearn', backend: { service: backend, port: 80 } },
  };
}

/** A key Secret in ns granting projects; returns the key. */
async function key(ns: string, name: string, projects: string[]): Promise<string> {
  const k = generateKey();
  await apply([keySecretManifest({ name, namespace: ns, prefix: k.prefix, sha256: k.sha256, projects })]);
  return k.key;
}

/** Waits until `f` gives a value (test/support/wait.ts polls; an error thrown meanwhile is retried, then named). */
function until<T>(what: string, f: () => Promise<T | undefined>, timeoutMs = 20_000): Promise<T> {
  return waitFor(async () => (await f()) ?? false, what, timeoutMs, 100) as Promise<T>;
}

/** The status of a request through the gateway, once it is no longer `not` (routes and keys arrive by watch). */
async function statusOf(sg: ServegateProcess, path: string, apiKey: string | undefined, not?: number): Promise<number> {
  const get = async () =>
    (
      await fetch(`${sg.base}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...(apiKey ? { authorization: `ApiKey ${apiKey}` } : {}) },
        body: JSON.stringify({ instances: [[1, 2, 3, 4]] }),
      })
    ).status;
  if (not === undefined) return get();
  return until(`${path} to answer other than ${not}`, async () => {
    const s = await get();
    return s === not ? undefined : s;
  });
}

interface Sdep {
  metadata: { generation: number };
  status?: {
    url?: string;
    observedGeneration?: number;
    conditions?: { type: string; status: string; reason: string; observedGeneration?: number }[];
  };
}

/** The ServingDeployment as `kubectl get sdep -o json` shows it, once its Ready condition is for its generation. */
async function readyCondition(ns: string, name: string): Promise<Sdep> {
  return until(`a Ready condition on ${ns}/${name}`, async () => {
    const r = await cluster.kubectl(['get', 'sdep', name, '-n', ns, '-o', 'json']);
    if (r.code !== 0) return undefined;
    const o = JSON.parse(r.stdout) as Sdep;
    const ready = o.status?.conditions?.find((c) => c.type === 'Ready');
    return ready && ready.observedGeneration === o.metadata.generation ? o : undefined;
  });
}

async function holder(ns: string, lease: string): Promise<string | undefined> {
  const r = await cluster.kubectl(['get', 'lease', lease, '-n', ns, '-o', 'jsonpath={.spec.holderIdentity}']);
  return r.code === 0 && r.stdout ? r.stdout : undefined;
}

/** Lines of servegate's log that tell of a refusal by the API server. */
function refusals(sg: ServegateProcess): string[] {
  return sg
    .log()
    .split('\n')
    .filter((l) => !l.includes('"msg":"request"')) // the access log: the test's own 401s and 403s
    .filter((l) => /forbidden|\b403\b|unauthori[sz]ed|\b401\b/i.test(l));
}

async function start(rel: ChartRelease): Promise<ServegateProcess> {
  const sg = await startServegateProcess({
    kubeconfig: rel.kubeconfig,
    config: rel.configFile,
    namespace: rel.namespace,
    podName: rel.podName,
  });
  running.push(sg);
  await until('servegate to be ready', async () => {
    const r = await fetch(`${sg.admin}/readyz`).catch(() => undefined);
    return r?.status === 200 ? true : undefined;
  });
  return sg;
}

// --- what the token may and may not do ----------------------------------------------------------------------------

interface Attr {
  verb: string;
  resource: string;
  group?: string;
  namespace?: string;
  subresource?: string;
  name?: string;
}

async function allowed(kc: KubeConfig, a: Attr): Promise<boolean> {
  const r = await kc.makeApiClient(AuthorizationV1Api).createSelfSubjectAccessReview({
    body: { spec: { resourceAttributes: { ...a, group: a.group ?? '' } } },
  });
  return r.status?.allowed === true;
}

/** A real call with the token: its HTTP status. */
function call(rel: ChartRelease, method: string, path: string, body?: object, contentType = 'application/json') {
  const s = cluster.state;
  const token = /token: "([^"]+)"/.exec(readFileSync(rel.kubeconfig, 'utf8'))![1];
  return new Promise<number>((resolve, reject) => {
    const req = request(
      `${s.server}${path}`,
      {
        method,
        agent: false,
        ca: readFileSync(s.ca),
        headers: { authorization: `Bearer ${token}`, 'content-type': contentType },
        timeout: 10_000,
      },
      (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      },
    );
    req.on('error', reject);
    req.end(body ? JSON.stringify(body) : undefined);
  });
}

const SD = '/apis/serving.servegate.dev/v1alpha1';
/** gateway.publicUrl of every install: the base of the URLs written to status. */
const PUBLIC_URL = 'https://models.example.test';

/** What servegate must never be able to do, whatever the options (docs/rbac.md lists what it may). */
async function expectLeast(
  rel: ChartRelease,
  kc: KubeConfig,
  project: { ns: string; sdep: string },
  /** rbac.projectNamespaceKeys with every namespace watched: Secrets are listed cluster-wide, as documented. */
  secretsListedEverywhere = false,
): Promise<void> {
  const p = project.ns;
  const refused: [Attr, string, string, object?, string?][] = [
    // Writing a ServingDeployment's spec, or creating or deleting one.
    [
      { verb: 'update', group: 'serving.servegate.dev', resource: 'servingdeployments', namespace: p },
      'PUT',
      `${SD}/namespaces/${p}/servingdeployments/${project.sdep}`,
      { apiVersion: 'serving.servegate.dev/v1alpha1', kind: 'ServingDeployment', metadata: { name: project.sdep } },
    ],
    [
      { verb: 'patch', group: 'serving.servegate.dev', resource: 'servingdeployments', namespace: p },
      'PATCH',
      `${SD}/namespaces/${p}/servingdeployments/${project.sdep}`,
      { spec: { timeoutSeconds: 5 } },
      'application/merge-patch+json',
    ],
    [
      { verb: 'delete', group: 'serving.servegate.dev', resource: 'servingdeployments', namespace: p },
      'DELETE',
      `${SD}/namespaces/${p}/servingdeployments/${project.sdep}`,
    ],
    [
      { verb: 'create', group: 'serving.servegate.dev', resource: 'servingdeployments', namespace: p },
      'POST',
      `${SD}/namespaces/${p}/servingdeployments`,
      sdep(p, 'intruder', 'model'),
    ],
    // The status is patched, never replaced.
    [
      {
        verb: 'update',
        group: 'serving.servegate.dev',
        resource: 'servingdeployments',
        subresource: 'status',
        namespace: p,
      },
      'PUT',
      `${SD}/namespaces/${p}/servingdeployments/${project.sdep}/status`,
      { apiVersion: 'serving.servegate.dev/v1alpha1', kind: 'ServingDeployment', metadata: { name: project.sdep } },
    ],
    // Deleting what it reads, or its own Lease.
    [{ verb: 'delete', resource: 'services', namespace: p }, 'DELETE', `/api/v1/namespaces/${p}/services/model`],
    [
      { verb: 'delete', group: 'coordination.k8s.io', resource: 'leases', namespace: rel.namespace },
      'DELETE',
      `/apis/coordination.k8s.io/v1/namespaces/${rel.namespace}/leases/${leaseOf(rel)}`,
    ],
    [
      { verb: 'list', group: 'coordination.k8s.io', resource: 'leases', namespace: rel.namespace },
      'GET',
      `/apis/coordination.k8s.io/v1/namespaces/${rel.namespace}/leases`,
    ],
    // Secrets: never get one by name, never write one, never touch kube-system's.
    [{ verb: 'get', resource: 'secrets', namespace: 'kube-system' }, 'GET', '/api/v1/namespaces/kube-system/secrets/x'],
    ...(secretsListedEverywhere
      ? []
      : [
          [
            { verb: 'list', resource: 'secrets', namespace: 'kube-system' },
            'GET',
            '/api/v1/namespaces/kube-system/secrets',
          ] as [Attr, string, string],
        ]),
    [
      { verb: 'create', resource: 'secrets', namespace: rel.namespace },
      'POST',
      `/api/v1/namespaces/${rel.namespace}/secrets`,
      { apiVersion: 'v1', kind: 'Secret', metadata: { name: 'intruder' } },
    ],
    // Events: servegate records none (it reports through status conditions).
    [
      { verb: 'create', resource: 'events', namespace: p },
      'POST',
      `/api/v1/namespaces/${p}/events`,
      { apiVersion: 'v1', kind: 'Event', metadata: { name: 'x' } },
    ],
    // Anything cluster-wide that docs/rbac.md does not list.
    [{ verb: 'list', resource: 'nodes' }, 'GET', '/api/v1/nodes'],
    [{ verb: 'list', resource: 'namespaces' }, 'GET', '/api/v1/namespaces'],
    [{ verb: 'list', resource: 'pods', namespace: p }, 'GET', `/api/v1/namespaces/${p}/pods`],
    [
      { verb: 'list', resource: 'configmaps', namespace: rel.namespace },
      'GET',
      `/api/v1/namespaces/${rel.namespace}/configmaps`,
    ],
    [
      { verb: 'create', group: 'rbac.authorization.k8s.io', resource: 'clusterroles' },
      'POST',
      '/apis/rbac.authorization.k8s.io/v1/clusterroles',
      { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRole', metadata: { name: `intruder-${id}` } },
    ],
    [
      { verb: 'list', group: 'apiextensions.k8s.io', resource: 'customresourcedefinitions' },
      'GET',
      '/apis/apiextensions.k8s.io/v1/customresourcedefinitions',
    ],
  ];
  const wrong: string[] = [];
  for (const [attr, method, path, body, type] of refused) {
    const review = await allowed(kc, attr);
    const status = await call(rel, method, path, body, type);
    if (review || status !== 403) wrong.push(`${method} ${path}: review allowed=${review}, call ${status}`);
  }
  expect(wrong).toEqual([]);
}

/** The Lease a release elects on: its config's (the chart names it <fullname>-controller by default). */
function leaseOf(rel: ChartRelease): string {
  const c = parseYaml(rel.config) as { kubernetes: { leaderElection: { leaseName: string } } };
  return c.kubernetes.leaderElection.leaseName;
}

/** What every install grants: the watch rules, the status patch, the Lease. */
async function expectGranted(rel: ChartRelease, kc: KubeConfig, project: string, lease = leaseOf(rel)) {
  const granted: Attr[] = [
    { verb: 'list', group: 'serving.servegate.dev', resource: 'servingdeployments', namespace: project },
    { verb: 'watch', group: 'serving.servegate.dev', resource: 'servingdeployments', namespace: project },
    {
      verb: 'patch',
      group: 'serving.servegate.dev',
      resource: 'servingdeployments',
      subresource: 'status',
      namespace: project,
    },
    { verb: 'list', resource: 'services', namespace: project },
    { verb: 'watch', resource: 'endpointslices', group: 'discovery.k8s.io', namespace: project },
    { verb: 'create', group: 'coordination.k8s.io', resource: 'leases', namespace: rel.namespace },
    { verb: 'get', group: 'coordination.k8s.io', resource: 'leases', namespace: rel.namespace, name: lease },
    { verb: 'update', group: 'coordination.k8s.io', resource: 'leases', namespace: rel.namespace, name: lease },
  ];
  const missing: string[] = [];
  for (const a of granted) if (!(await allowed(kc, a))) missing.push(JSON.stringify(a));
  expect(missing).toEqual([]);
}

/** servegate serves a project's deployment, writes its status and holds the Lease, with no refusal in its log. */
async function expectWorks(sg: ServegateProcess, rel: ChartRelease, ns: string, name: string, apiKey: string) {
  const path = `/v1/${ns}/${name}/v1/models/${name}:predict`;
  // Routed, the key granted: no ready endpoint (no kubelet) answers 503.
  expect(await statusOf(sg, path, apiKey, 404)).toBe(503);
  expect(await statusOf(sg, path, undefined)).toBe(401);
  const o = await readyCondition(ns, name);
  const ready = o.status!.conditions!.find((c) => c.type === 'Ready')!;
  expect([ready.status, ready.reason]).toEqual(['False', 'NoReadyEndpoints']);
  expect(o.status!.url).toBe(`${PUBLIC_URL}/v1/${ns}/${name}`);
  expect(await until('the Lease', () => holder(rel.namespace, leaseOf(rel)))).toBe(rel.podName);
  expect(refusals(sg)).toEqual([]);
}

describe('helm install charts/servegate into the real API server, servegate on the chart ServiceAccount token', () => {
  test('default values: syncs, serves, writes status, holds its Lease, and may do nothing docs/rbac.md does not list', async () => {
    const ns = `sga-${id}`;
    const project = `pa-${id}`;
    const rel = await installChart(cluster, {
      release: `sga-${id}`,
      namespace: ns,
      set: [`gateway.publicUrl=${PUBLIC_URL}`],
      dir,
    });
    await namespace(project);
    await apply([service(project, 'model'), sdep(project, 'm1', 'model')]);
    const apiKey = await key(ns, 'ci-bot', [project]);
    const sg = await start(rel);
    await expectWorks(sg, rel, project, 'm1', apiKey);

    const kc = cluster.tokenKubeConfig(/token: "([^"]+)"/.exec(readFileSync(rel.kubeconfig, 'utf8'))![1]);
    await expectGranted(rel, kc, project);
    await expectLeast(rel, kc, { ns: project, sdep: 'm1' });
    // Key Secrets: listed in the keys namespace (the release namespace) only.
    expect(await allowed(kc, { verb: 'list', resource: 'secrets', namespace: ns })).toBe(true);
    expect(await allowed(kc, { verb: 'get', resource: 'secrets', namespace: ns, name: 'ci-bot' })).toBe(false);
    expect(await allowed(kc, { verb: 'list', resource: 'secrets', namespace: project })).toBe(false);
    expect(await call(rel, 'GET', `/api/v1/namespaces/${project}/secrets`)).toBe(403);
    expect(await call(rel, 'GET', `/api/v1/secrets`)).toBe(403);
    // KServe is off: not even InferenceServices may be read.
    expect(await call(rel, 'GET', '/apis/serving.kserve.io/v1beta1/inferenceservices')).toBe(403);
    expect(refusals(sg)).toEqual([]);
  }, 120_000);

  test('gateway.auth.keysNamespace: key Secrets are read there, and only there', async () => {
    const ns = `sgb-${id}`;
    const keys = `keys-${id}`;
    const project = `pb-${id}`;
    await namespace(keys);
    await namespace(project);
    const rel = await installChart(cluster, {
      release: `sgb-${id}`,
      namespace: ns,
      set: [`gateway.publicUrl=${PUBLIC_URL}`, `gateway.auth.keysNamespace=${keys}`],
      dir,
    });
    await apply([service(project, 'model'), sdep(project, 'm1', 'model')]);
    const apiKey = await key(keys, 'ci-bot', [project]);
    const inRelease = await key(ns, 'stray', [project]);
    const sg = await start(rel);
    await expectWorks(sg, rel, project, 'm1', apiKey);
    // A key Secret in the release namespace is no key when the keys namespace is elsewhere.
    expect(await statusOf(sg, `/v1/${project}/m1/v1/models/m1:predict`, inRelease)).toBe(401);

    const kc = cluster.tokenKubeConfig(/token: "([^"]+)"/.exec(readFileSync(rel.kubeconfig, 'utf8'))![1]);
    await expectGranted(rel, kc, project);
    await expectLeast(rel, kc, { ns: project, sdep: 'm1' });
    expect(await call(rel, 'GET', `/api/v1/namespaces/${keys}/secrets`)).toBe(200);
    expect(await call(rel, 'GET', `/api/v1/namespaces/${ns}/secrets`)).toBe(403);
    expect(await call(rel, 'GET', `/api/v1/namespaces/${project}/secrets`)).toBe(403);
    expect(refusals(sg)).toEqual([]);
  }, 120_000);

  test('rbac.projectNamespaceKeys and KServe: a project namespace key grants its project, InferenceServices are routed', async () => {
    const ns = `sgc-${id}`;
    const project = `pc-${id}`;
    const other = `pc2-${id}`;
    const rel = await installChart(cluster, {
      release: `sgc-${id}`,
      namespace: ns,
      set: [
        `gateway.publicUrl=${PUBLIC_URL}`,
        'rbac.projectNamespaceKeys=true',
        'gateway.kubernetes.kserve.enabled=true',
      ],
      dir,
    });
    await namespace(project);
    await namespace(other);
    await apply([
      service(project, 'model'),
      sdep(project, 'm1', 'model'),
      service(other, 'm2'),
      sdep(other, 'm2', 'm2'),
      service(project, 'iris-predictor'),
      {
        apiVersion: 'serving.kserve.io/v1beta1',
        kind: 'InferenceService',
        metadata: { name: 'iris', namespace: project },
        spec: { predictor: { model: { modelFormat: { name: 'sklearn' }, storageUri: 'gs://bucket/iris' } } },
      },
    ]);
    // A key in the project's namespace that claims another project too: it grants its own namespace's only.
    const projectKey = await key(project, 'team-key', [project, other]);
    const sg = await start(rel);
    await expectWorks(sg, rel, project, 'm1', projectKey);
    expect(await statusOf(sg, `/v1/${other}/m2/v1/models/m2:predict`, projectKey)).toBe(403);
    // The InferenceService is routed (its predictor Service has no endpoints: 503, not 404), its status never written.
    expect(await statusOf(sg, `/v1/${project}/iris/v1/models/iris:predict`, projectKey, 404)).toBe(503);
    const isvc = await cluster.kubectl(['get', 'inferenceservice', 'iris', '-n', project, '-o', 'json']);
    expect((JSON.parse(isvc.stdout) as { status?: unknown }).status).toBeUndefined();

    const kc = cluster.tokenKubeConfig(/token: "([^"]+)"/.exec(readFileSync(rel.kubeconfig, 'utf8'))![1]);
    await expectGranted(rel, kc, project);
    await expectLeast(rel, kc, { ns: project, sdep: 'm1' }, true);
    // The documented price of the option: Secrets are listed wherever ServingDeployments are watched (here: every
    // namespace), never read by name nor written.
    expect(await call(rel, 'GET', `/api/v1/namespaces/${project}/secrets`)).toBe(200);
    expect(await call(rel, 'GET', '/api/v1/namespaces/kube-system/secrets')).toBe(200);
    expect(await allowed(kc, { verb: 'get', resource: 'secrets', namespace: project, name: 'team-key' })).toBe(false);
    expect(await call(rel, 'GET', '/apis/serving.kserve.io/v1beta1/inferenceservices')).toBe(200);
    expect(
      await call(rel, 'PATCH', `/apis/serving.kserve.io/v1beta1/namespaces/${project}/inferenceservices/iris/status`, {
        status: {},
      }),
    ).toBe(403);
    expect(refusals(sg)).toEqual([]);
  }, 120_000);

  test('gateway.kubernetes.namespaces with KServe: Roles in the watched namespaces only, nothing cluster-wide', async () => {
    const ns = `sgd-${id}`;
    const project = `pd-${id}`;
    const outside = `pd2-${id}`;
    await namespace(project);
    await namespace(outside);
    const rel = await installChart(cluster, {
      release: `sgd-${id}`,
      namespace: ns,
      set: [
        `gateway.publicUrl=${PUBLIC_URL}`,
        `gateway.kubernetes.namespaces={${project}}`,
        'gateway.kubernetes.kserve.enabled=true',
      ],
      dir,
    });
    await apply([
      service(project, 'model'),
      sdep(project, 'm1', 'model'),
      service(outside, 'model'),
      sdep(outside, 'm1', 'model'),
    ]);
    const apiKey = await key(ns, 'ci-bot', [project, outside]);
    const sg = await start(rel);
    await expectWorks(sg, rel, project, 'm1', apiKey);
    // A namespace that is not watched is not routed.
    expect(await statusOf(sg, `/v1/${outside}/m1/v1/models/m1:predict`, apiKey)).toBe(404);

    const kc = cluster.tokenKubeConfig(/token: "([^"]+)"/.exec(readFileSync(rel.kubeconfig, 'utf8'))![1]);
    await expectGranted(rel, kc, project);
    await expectLeast(rel, kc, { ns: project, sdep: 'm1' });
    expect(await call(rel, 'GET', `${SD}/servingdeployments`)).toBe(403);
    expect(await call(rel, 'GET', `${SD}/namespaces/${outside}/servingdeployments`)).toBe(403);
    expect(await call(rel, 'GET', `/apis/discovery.k8s.io/v1/endpointslices`)).toBe(403);
    expect(await call(rel, 'GET', `/apis/serving.kserve.io/v1beta1/namespaces/${project}/inferenceservices`)).toBe(200);
    expect(await call(rel, 'GET', `/apis/serving.kserve.io/v1beta1/namespaces/${outside}/inferenceservices`)).toBe(403);
    expect(refusals(sg)).toEqual([]);
  }, 120_000);
});
