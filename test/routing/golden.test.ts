// The route builder's whole output for one fixture set — every kind, a legacy hostname, a conflict, an invalid spec, a
// missing Service, good and bad keys — written out in full, so any change to routing shows here; and a build with the
// store's cache equals a fresh build over a sequence of snapshots (add, change, remove).
import { describe, expect, test } from '@jest/globals';
import { BuildCache, buildRouteTable } from '../../src/routing/build.js';
import type { InferenceServiceResource, KeySecretResource, Snapshot } from '../../src/routing/types.js';
import { buildOptions as defaults, sdep, service } from '../support/fixtures.js';

// One key lives in a project namespace (apikey-team in demo): the opt-in of SPEC §11.
const buildOptions = { ...defaults, projectNamespaceKeys: true };

const at = (n: number) => `2026-02-01T00:00:0${n}Z`;
const P1 = 'AAAAAAAAAAAAAAA1';
const SHA = 'a'.repeat(64);
const LABELS = { 'serving.servegate.dev/api-key': 'true' };

const deployments = [
  sdep('fraud-detection/fraud').project('fraud_detection').sklearn().backend('fraud-svc', 8080).created(at(1)).build(),
  sdep('demo/flowers').tensorflow().modelName('flowers-v2').backend('tf', 8501).timeout(5).created(at(2)).build(),
  sdep('demo/chat').llm().modelName('meta-llama/Llama-3.1-8B').backend('vllm', 8000).created(at(3)).build(),
  sdep('demo/echo').python().backend('echo', 80).created(at(4)).build(),
  // Younger and at the same path as demo/chat (project "demo" written in another namespace): Conflict.
  sdep('other/chat').project('demo').llm().backend('vllm', 8000).created(at(5)).build(),
  sdep('demo/broken').set('modelServer', 'pytorch').backend('x', 1).created(at(6)).build(),
  sdep('demo/lost').python().backend('no-such-svc', 80).created(at(7)).build(),
];
const inferenceServices: InferenceServiceResource[] = [
  {
    apiVersion: 'serving.kserve.io/v1beta1',
    kind: 'InferenceService',
    metadata: { namespace: 'kserve-test', name: 'iris', creationTimestamp: at(8) },
    spec: { predictor: { model: { modelFormat: { name: 'sklearn' } } } },
  },
];
const keySecrets: KeySecretResource[] = [
  {
    metadata: { namespace: 'servegate', name: 'apikey-ci', labels: LABELS },
    data: { prefix: P1, sha256: SHA, projects: 'demo, fraud_detection', expiresAt: '2027-01-01T00:00:00Z' },
  },
  {
    metadata: { namespace: 'demo', name: 'apikey-team', labels: LABELS },
    data: { prefix: 'BBBBBBBBBBBBBBB2', sha256: SHA, projects: '*' },
  },
  {
    metadata: { namespace: 'servegate', name: 'apikey-bad', labels: LABELS },
    data: { prefix: 'short', sha256: SHA, projects: '*' },
  },
];
const services = [
  service('fraud-detection/fraud-svc', [{ port: 8080, name: 'http', targetPort: 8080 }]),
  service('demo/tf', [{ port: 8501, name: 'rest', targetPort: 8501 }]),
  service('demo/vllm', [{ port: 8000, targetPort: 'http' }]),
  service('demo/echo', [{ port: 80, name: 'http', targetPort: 8080 }]),
  service('other/vllm', [{ port: 8000 }]),
  service('demo/x', [{ port: 1 }]),
  service('kserve-test/iris-predictor', [{ port: 80, name: 'http', targetPort: 8080 }]),
];
const snap: Snapshot = { source: 'kubernetes', deployments, inferenceServices, keySecrets, services };

const U = 'https://models.example.com/v1';
const routed = (id: string, urls: Record<string, string>, hostname: string, generation?: number) => {
  const [namespace, name] = id.split('/');
  return {
    id,
    namespace,
    name,
    generation,
    ready: true,
    routed: true,
    reason: 'Routed',
    message: '',
    hostname,
    hostnameMessage: undefined,
    resourceKind: id.startsWith('kserve-test/') ? 'InferenceService' : 'ServingDeployment',
    inferenceUrl: undefined,
    openaiUrl: undefined,
    endpointUrl: undefined,
    ...urls,
  };
};

describe('buildRouteTable: the whole output for one fixture set', () => {
  const { table, statuses, keyProblems } = buildRouteTable(snap, buildOptions);

  test('routes, oldest first, each with its kind, names, backend, timeout and legacy hostname', () => {
    expect(table.routes).toEqual([
      {
        id: 'fraud-detection/fraud',
        namespace: 'fraud-detection',
        name: 'fraud',
        resourceKind: 'ServingDeployment',
        project: 'fraud_detection',
        deployment: 'fraud',
        kind: 'predictive',
        modelServer: 'sklearn',
        modelName: 'fraud',
        verbs: ['predict'],
        backend: {
          kind: 'service',
          namespace: 'fraud-detection',
          service: 'fraud-svc',
          port: 8080,
          portName: 'http',
          targetPort: 8080,
        },
        timeoutMs: 60_000,
        balancing: { policy: 'round-robin', metricsPath: '/metrics', metricsPort: 0 },
        hostname: 'fraud.fraud-detection.serving.example.com',
      },
      {
        id: 'demo/flowers',
        namespace: 'demo',
        name: 'flowers',
        resourceKind: 'ServingDeployment',
        project: 'demo',
        deployment: 'flowers',
        kind: 'predictive',
        modelServer: 'tensorflow',
        modelName: 'flowers-v2',
        verbs: ['predict', 'classify', 'regress'],
        backend: { kind: 'service', namespace: 'demo', service: 'tf', port: 8501, portName: 'rest', targetPort: 8501 },
        timeoutMs: 5_000,
        balancing: { policy: 'round-robin', metricsPath: '/metrics', metricsPort: 0 },
        hostname: 'flowers.demo.serving.example.com',
      },
      {
        id: 'demo/chat',
        namespace: 'demo',
        name: 'chat',
        resourceKind: 'ServingDeployment',
        project: 'demo',
        deployment: 'chat',
        kind: 'llm',
        modelServer: 'llm',
        modelName: 'meta-llama/Llama-3.1-8B',
        verbs: [],
        backend: {
          kind: 'service',
          namespace: 'demo',
          service: 'vllm',
          port: 8000,
          portName: undefined,
          targetPort: 'http',
        },
        timeoutMs: 60_000,
        balancing: { policy: 'llm', metricsPath: '/metrics', metricsPort: 0 },
        hostname: 'chat.demo.serving.example.com',
      },
      {
        id: 'demo/echo',
        namespace: 'demo',
        name: 'echo',
        resourceKind: 'ServingDeployment',
        project: 'demo',
        deployment: 'echo',
        kind: 'python',
        modelServer: undefined,
        modelName: undefined,
        verbs: [],
        backend: { kind: 'service', namespace: 'demo', service: 'echo', port: 80, portName: 'http', targetPort: 8080 },
        timeoutMs: 60_000,
        balancing: { policy: 'round-robin', metricsPath: '/metrics', metricsPort: 0 },
        hostname: 'echo.demo.serving.example.com',
      },
      {
        id: 'kserve-test/iris',
        namespace: 'kserve-test',
        name: 'iris',
        resourceKind: 'InferenceService',
        project: 'kserve-test',
        deployment: 'iris',
        kind: 'predictive',
        modelServer: 'sklearn',
        modelName: 'iris',
        verbs: ['predict'],
        backend: {
          kind: 'service',
          namespace: 'kserve-test',
          service: 'iris-predictor',
          port: 80,
          portName: 'http',
          targetPort: 8080,
        },
        timeoutMs: 60_000,
        balancing: { policy: 'round-robin', metricsPath: '/metrics', metricsPort: 0 },
        hostname: 'iris.kserve-test.serving.example.com',
      },
    ]);
  });

  test('the path index has the written and the namespace form of each project; the host index each hostname', () => {
    expect([...table.byPath].map(([k, r]) => [k, r.id])).toEqual([
      ['fraud_detection/fraud', 'fraud-detection/fraud'],
      ['fraud-detection/fraud', 'fraud-detection/fraud'],
      ['demo/flowers', 'demo/flowers'],
      ['demo/chat', 'demo/chat'],
      ['demo/echo', 'demo/echo'],
      ['kserve-test/iris', 'kserve-test/iris'],
    ]);
    expect([...table.byHost.keys()]).toEqual([
      'fraud.fraud-detection.serving.example.com',
      'flowers.demo.serving.example.com',
      'chat.demo.serving.example.com',
      'echo.demo.serving.example.com',
      'iris.kserve-test.serving.example.com',
    ]);
    expect(table.serverlessDomain).toBe('serving.example.com');
  });

  test('statuses: served ones with their URLs, then the refused ones by kind and name, each with its reason', () => {
    expect(statuses).toEqual([
      routed(
        'fraud-detection/fraud',
        { url: `${U}/fraud_detection/fraud`, inferenceUrl: `${U}/fraud_detection/fraud/v1/models/fraud:predict` },
        'fraud.fraud-detection.serving.example.com',
        1,
      ),
      routed(
        'demo/flowers',
        { url: `${U}/demo/flowers`, inferenceUrl: `${U}/demo/flowers/v1/models/flowers-v2:predict` },
        'flowers.demo.serving.example.com',
        1,
      ),
      routed(
        'demo/chat',
        { url: `${U}/demo/chat`, openaiUrl: `${U}/demo/chat/v1` },
        'chat.demo.serving.example.com',
        1,
      ),
      routed('demo/echo', { url: `${U}/demo/echo`, endpointUrl: `${U}/demo/echo` }, 'echo.demo.serving.example.com', 1),
      {
        id: 'other/chat',
        namespace: 'other',
        name: 'chat',
        resourceKind: 'ServingDeployment',
        generation: 1,
        ready: false,
        reason: 'Conflict',
        message: 'demo/chat is already served by ServingDeployment demo/chat, which is older',
      },
      routed(
        'kserve-test/iris',
        { url: `${U}/kserve-test/iris`, inferenceUrl: `${U}/kserve-test/iris/v1/models/iris:predict` },
        'iris.kserve-test.serving.example.com',
      ),
      {
        id: 'demo/broken',
        namespace: 'demo',
        name: 'broken',
        resourceKind: 'ServingDeployment',
        generation: 1,
        ready: false,
        reason: 'InvalidSpec',
        message:
          'spec.modelServer is required for type "model" and must be one of python, sklearn, tensorflow, llm, got "pytorch"',
      },
      {
        id: 'demo/lost',
        namespace: 'demo',
        name: 'lost',
        resourceKind: 'ServingDeployment',
        generation: 1,
        ready: false,
        reason: 'BackendNotFound',
        message: 'Service demo/no-such-svc not found',
      },
    ]);
  });

  test('keys by prefix, in namespace/name order; the bad one is a problem naming its field', () => {
    expect(
      [...table.keys].map(([prefix, list]) => [
        prefix,
        list.map((k) => ({
          ...k,
          sha256: k.sha256.toString('hex'),
          projects: k.projects === '*' ? '*' : [...k.projects],
        })),
      ]),
    ).toEqual([
      [
        'BBBBBBBBBBBBBBB2',
        [
          {
            // Outside the keys namespace: named with its namespace, so it never merges with a same-named Secret.
            name: 'demo/apikey-team',
            namespace: 'demo',
            secretName: 'apikey-team',
            prefix: 'BBBBBBBBBBBBBBB2',
            sha256: SHA,
            projects: '*',
            expiresAt: undefined,
            scopeNamespace: 'demo',
          },
        ],
      ],
      [
        P1,
        [
          {
            name: 'apikey-ci',
            namespace: 'servegate',
            secretName: 'apikey-ci',
            prefix: P1,
            sha256: SHA,
            projects: ['demo', 'fraud-detection'],
            expiresAt: Date.parse('2027-01-01T00:00:00Z'),
            scopeNamespace: undefined,
          },
        ],
      ],
    ]);
    expect(keyProblems).toEqual([
      { id: 'servegate/apikey-bad', origin: undefined, message: 'prefix must be 16 characters [A-Za-z0-9]' },
    ]);
  });
});

describe('a cached build equals a fresh one', () => {
  test('over a sequence of snapshots that add, change and remove resources, keys and Services', () => {
    const cache = new BuildCache();
    const steps: Snapshot[] = [];
    steps.push({ ...snap });
    // add a deployment (the others are the same objects, as sources hand them over)
    steps.push({
      ...snap,
      deployments: [...deployments, sdep('demo/new').python().backend('echo', 80).created(at(9)).build()],
    });
    // change one (a new object for it), keep the rest
    const changed = sdep('demo/echo').python().backend('echo', 80).timeout(9).created(at(4)).build();
    steps.push({ ...snap, deployments: deployments.map((d) => (d.metadata.name === 'echo' ? changed : d)) });
    // remove the older of the conflicting pair: the younger one takes the path
    steps.push({
      ...snap,
      deployments: deployments.filter((d) => d.metadata.namespace !== 'demo' || d.metadata.name !== 'chat'),
    });
    // a Service goes away: its deployment becomes BackendNotFound though the deployment object is the same
    steps.push({ ...snap, services: services.filter((s) => s.metadata.name !== 'tf') });
    // a key changes, another goes
    steps.push({ ...snap, keySecrets: [{ ...keySecrets[0], data: { ...keySecrets[0].data, projects: '*' } }] });
    // back to the start, with the very same arrays
    steps.push(snap);

    const strip = (r: ReturnType<typeof buildRouteTable>) => ({
      ...r,
      table: { ...r.table, byPath: [...r.table.byPath], byHost: [...r.table.byHost], keys: [...r.table.keys] },
    });
    const hashes: string[] = [];
    for (const s of steps) {
      const cached = buildRouteTable(s, buildOptions, cache);
      expect(strip(cached)).toEqual(strip(buildRouteTable(s, buildOptions)));
      hashes.push(cached.table.hash);
    }
    // Every step changed the table except the last, which is the first again.
    expect(new Set(hashes.slice(0, -1)).size).toBe(steps.length - 1);
    expect(hashes.at(-1)).toBe(hashes[0]);
  });
});
