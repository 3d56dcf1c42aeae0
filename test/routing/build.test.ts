// buildRouteTable: URLs, project forms, legacy hostnames, conflicts, invalid specs, backends, determinism (SPEC §2, §3).
import { describe, expect, test } from '@jest/globals';
import { buildRouteTable, kserveModelServer } from '../../src/routing/build.js';
import type { InferenceServiceResource, ServingDeploymentResource } from '../../src/routing/types.js';
import { apiKey, buildOptions, sdep, service, snapshot } from '../support/fixtures.js';
import { build, routeOf, shuffled } from '../support/units.js';

const BASE = 'https://models.example.com/v1/fraud_detection/fraud';

function statusOf(r: ReturnType<typeof build>, id: string) {
  const s = r.statuses.find((st) => st.id === id);
  if (!s) throw new Error(`no status for ${id}`);
  return s;
}

function isvc(ref: string, spec: unknown, created = '2025-06-01T00:00:00Z'): InferenceServiceResource {
  const [namespace, name] = ref.split('/');
  return {
    apiVersion: 'serving.kserve.io/v1beta1',
    kind: 'InferenceService',
    metadata: { namespace, name, creationTimestamp: created, generation: 1 },
    spec,
  };
}
const modelFormat = (name: string, runtime?: string) => ({
  predictor: { model: { modelFormat: { name }, ...(runtime ? { runtime } : {}) } },
});

describe('deployment URLs (SPEC §2 status)', () => {
  test.each([
    [
      'sklearn',
      sdep('fraud-detection/fraud').project('fraud_detection').sklearn(),
      { url: BASE, inferenceUrl: `${BASE}/v1/models/fraud:predict` },
    ],
    [
      'python model server',
      sdep('fraud-detection/fraud').project('fraud_detection').pythonModel(),
      { url: BASE, inferenceUrl: `${BASE}/v1/models/fraud:predict` },
    ],
    [
      'tensorflow with its own model name',
      sdep('fraud-detection/fraud').project('fraud_detection').tensorflow().modelName('flowers'),
      { url: BASE, inferenceUrl: `${BASE}/v1/models/flowers:predict` },
    ],
    ['llm', sdep('fraud-detection/fraud').project('fraud_detection').llm(), { url: BASE, openaiUrl: `${BASE}/v1` }],
    [
      'python deployment',
      sdep('fraud-detection/fraud').project('fraud_detection').python(),
      { url: BASE, endpointUrl: BASE },
    ],
  ])('a %s deployment gets exactly its URLs', (_what, b, urls) => {
    const s = build({ deployments: [b.build()] }).statuses[0];
    expect(s.ready).toBe(true);
    expect(s.reason).toBe('Routed');
    expect({ url: s.url, inferenceUrl: s.inferenceUrl, openaiUrl: s.openaiUrl, endpointUrl: s.endpointUrl }).toEqual({
      inferenceUrl: undefined,
      openaiUrl: undefined,
      endpointUrl: undefined,
      ...urls,
    });
  });

  test.each([
    ['https://models.example.com/', 'https://models.example.com/v1/demo/iris'],
    ['https://models.example.com//', 'https://models.example.com/v1/demo/iris'],
    ['https://example.com/gateway', 'https://example.com/gateway/v1/demo/iris'],
    ['http://localhost:8080', 'http://localhost:8080/v1/demo/iris'],
  ])('publicUrl %s gives base URL %s', (publicUrl, url) => {
    const s = build({ deployments: [sdep('demo/iris').build()] }, { ...buildOptions, publicUrl }).statuses[0];
    expect(s.url).toBe(url);
    expect(s.inferenceUrl).toBe(`${url}/v1/models/iris:predict`);
  });

  test('the model name defaults to metadata.name', () => {
    expect(routeOf(sdep('demo/iris').sklearn()).modelName).toBe('iris');
  });

  test('an LLM keeps the name its server serves (a Hugging Face id may have "/"), and none when unset', () => {
    expect(routeOf(sdep('demo/chat').llm().modelName('meta-llama/Llama-3.1-8B-Instruct')).modelName).toBe(
      'meta-llama/Llama-3.1-8B-Instruct',
    );
    expect(routeOf(sdep('demo/chat').llm()).modelName).toBeUndefined();
  });

  test('status carries the resource generation', () => {
    expect(build({ deployments: [sdep('demo/iris').generation(7).build()] }).statuses[0].generation).toBe(7);
  });
});

describe('route fields', () => {
  test.each([
    ['sklearn', sdep('demo/a').sklearn(), 'predictive', ['predict']],
    ['python model server', sdep('demo/a').pythonModel(), 'predictive', ['predict']],
    ['tensorflow', sdep('demo/a').tensorflow(), 'predictive', ['predict', 'classify', 'regress']],
    ['llm', sdep('demo/a').llm(), 'llm', []],
    ['python deployment', sdep('demo/a').python(), 'python', []],
  ])('%s → kind %s, verbs %j', (_what, b, kind, verbs) => {
    const r = routeOf(b);
    expect(r.kind).toBe(kind);
    expect([...r.verbs]).toEqual(verbs);
  });

  test.each([
    [undefined, 60_000],
    [5, 5_000],
    [0.5, 500],
    [86_400, 86_400_000],
  ])('timeoutSeconds %s → %i ms', (t, ms) => {
    const b = sdep('demo/a');
    if (t !== undefined) b.timeout(t);
    expect(routeOf(b).timeoutMs).toBe(ms);
  });

  test('backend.url is accepted in the files source, trailing slash dropped', () => {
    expect(routeOf(sdep('demo/a').url('http://127.0.0.1:8081/prefix/')).backend).toEqual({
      kind: 'url',
      url: 'http://127.0.0.1:8081/prefix',
    });
  });

  test('a Service backend without a Service list is routed as written', () => {
    const r = build({ source: 'kubernetes', deployments: [sdep('demo/a').backend('svc', 8080).build()] });
    expect(r.table.routes[0].backend).toEqual({ kind: 'service', namespace: 'demo', service: 'svc', port: 8080 });
  });

  test('a Service backend found in the Service list carries the port name and targetPort', () => {
    const r = build({
      source: 'kubernetes',
      deployments: [sdep('demo/a').backend('svc', 8080).build()],
      services: [
        service('demo/svc', [
          { port: 9000, name: 'metrics' },
          { port: 8080, name: 'http', targetPort: 'web' },
        ]),
      ],
    });
    expect(r.statuses[0].reason).toBe('Routed');
    expect(r.table.routes[0].backend).toEqual({
      kind: 'service',
      namespace: 'demo',
      service: 'svc',
      port: 8080,
      portName: 'http',
      targetPort: 'web',
    });
  });
  test('routes that name the same Service hold one backend object; a backend differing in any field is its own', () => {
    const r = build({
      source: 'kubernetes',
      deployments: [
        sdep('demo/a').backend('svc', 8080).build(),
        sdep('demo/b').backend('svc', 8080).build(),
        sdep('demo/c').backend('svc', 9090).build(),
        sdep('other/d').backend('svc', 8080).build(),
      ],
    });
    const [a, b, c, d] = ['demo/a', 'demo/b', 'demo/c', 'other/d'].map(
      (id) => r.table.routes.find((x) => x.id === id)!.backend,
    );
    expect(a).toBe(b);
    expect(c).not.toBe(a);
    expect(c).toEqual({ kind: 'service', namespace: 'demo', service: 'svc', port: 9090 });
    expect(d).not.toBe(a);
    expect(d).toEqual({ kind: 'service', namespace: 'other', service: 'svc', port: 8080 });
    // A build that shares nothing with it gives routes equal to these (sharing changes no content).
    const alone = build({ source: 'kubernetes', deployments: [sdep('demo/b').backend('svc', 8080).build()] });
    expect(alone.table.routes[0]).toEqual(r.table.routes.find((x) => x.id === 'demo/b'));
  });
});

describe('projects: default and both path forms (SPEC §3)', () => {
  test('the project defaults to the namespace', () => {
    const r = build({ deployments: [sdep('demo/iris').build()] });
    expect(r.table.routes[0].project).toBe('demo');
    expect([...r.table.byPath.keys()]).toEqual(['demo/iris']);
  });

  test('an empty project also defaults to the namespace', () => {
    expect(routeOf(sdep('demo/iris').project('')).project).toBe('demo');
  });

  test.each([
    ['fraud_detection', ['fraud-detection/fraud', 'fraud_detection/fraud']],
    ['Fraud_Detection', ['Fraud_Detection/fraud', 'fraud-detection/fraud']],
    ['FraudDetection', ['FraudDetection/fraud', 'frauddetection/fraud']],
    ['fraud-detection', ['fraud-detection/fraud']],
  ])('project %s is served at %j', (project, keys) => {
    const r = build({ deployments: [sdep('ns/fraud').project(project).build()] });
    expect([...r.table.byPath.keys()].sort()).toEqual(keys);
    for (const k of keys) expect(r.table.byPath.get(k)?.id).toBe('ns/fraud');
  });

  test('one project may span namespaces when the deployments differ', () => {
    const r = build({ deployments: [sdep('a/x').project('shared').build(), sdep('b/y').project('shared').build()] });
    expect(r.statuses.map((s) => s.reason)).toEqual(['Routed', 'Routed']);
    expect([...r.table.byPath.keys()].sort()).toEqual(['shared/x', 'shared/y']);
  });
});

describe('legacy hostnames (SPEC §3)', () => {
  test.each([
    ['fraud_detection', 'fraud', 'fraud.fraud-detection.serving.example.com'],
    ['Fraud_Detection', 'fraud', 'fraud.fraud-detection.serving.example.com'],
    ['DEMO', 'iris', 'iris.demo.serving.example.com'],
    ['a-b', 'x', 'x.a-b.serving.example.com'],
  ])('project %s, deployment %s → %s', (project, name, hostname) => {
    const r = build({ deployments: [sdep(`ns/${name}`).project(project).build()] });
    expect(r.statuses[0].hostname).toBe(hostname);
    expect(r.statuses[0].hostnameMessage).toBeUndefined();
    expect(r.table.byHost.get(hostname)?.id).toBe(`ns/${name}`);
  });

  test('a hostname that cannot be formed is left out, says why, and the route still serves by path', () => {
    const longDomain = `${'d'.repeat(60)}.${'d'.repeat(60)}.${'d'.repeat(60)}.${'d'.repeat(60)}`;
    const r = build(
      { deployments: [sdep('demo/iris').project('p'.repeat(20)).build()] },
      { ...buildOptions, serverlessDomain: longDomain },
    );
    const s = r.statuses[0];
    expect(s.ready).toBe(true);
    expect(s.hostname).toBeUndefined();
    expect(s.hostnameMessage).toMatch(/253/);
    expect(r.table.byHost.size).toBe(0);
    expect(r.table.byPath.has(`${'p'.repeat(20)}/iris`)).toBe(true);
  });
});

describe('conflicts: the oldest wins (SPEC §2)', () => {
  test.each([
    ['the older one in a later namespace', '2025-01-01T00:00:00Z', '2024-01-01T00:00:00Z', 'b/fraud', 'a/fraud'],
    ['the older one in an earlier namespace', '2024-01-01T00:00:00Z', '2025-01-01T00:00:00Z', 'a/fraud', 'b/fraud'],
    ['namespace/name order on equal timestamps', '2025-01-01T00:00:00Z', '2025-01-01T00:00:00Z', 'a/fraud', 'b/fraud'],
  ])('same project/deployment twice: %s wins', (_what, createdA, createdB, winner, loser) => {
    const deployments = [
      sdep('a/fraud').project('p').created(createdA).build(),
      sdep('b/fraud').project('p').created(createdB).build(),
    ];
    const r = build({ deployments });
    expect(r.table.byPath.get('p/fraud')?.id).toBe(winner);
    expect(r.table.routes.map((x) => x.id)).toEqual([winner]);
    expect(statusOf(r, winner)).toMatchObject({ ready: true, reason: 'Routed' });
    const lost = statusOf(r, loser);
    expect(lost).toMatchObject({ ready: false, reason: 'Conflict' });
    expect(lost.message).toContain(winner);
    expect(lost.url).toBeUndefined();
  });

  test('a resource without creationTimestamp loses to one with it', () => {
    const old = sdep('z/fraud').project('p').build();
    const none = sdep('a/fraud').project('p').build();
    delete none.metadata.creationTimestamp;
    const r = build({ deployments: [none, old] });
    expect(r.table.byPath.get('p/fraud')?.id).toBe('z/fraud');
    expect(statusOf(r, 'a/fraud').reason).toBe('Conflict');
  });

  test.each([
    ['fraud_detection', 'fraud-detection'],
    ['Demo', 'demo'],
    ['a_b', 'A-B'],
  ])('projects %s and %s meet in one form: the younger resource gets Conflict naming the winner', (older, younger) => {
    const r = build({
      deployments: [
        sdep('ns1/x').project(older).created('2024-01-01T00:00:00Z').build(),
        sdep('ns2/y').project(younger).created('2025-01-01T00:00:00Z').build(),
      ],
    });
    expect(statusOf(r, 'ns1/x').reason).toBe('Routed');
    const lost = statusOf(r, 'ns2/y');
    expect(lost).toMatchObject({ ready: false, reason: 'Conflict' });
    expect(lost.message).toContain('ns1/x');
    expect(lost.message).toContain(older);
    expect(r.table.routes.map((x) => x.id)).toEqual(['ns1/x']);
  });

  test('the SPEC example: namespace fraud-detection with project fraud_detection conflicts with a default-project deployment there', () => {
    const r = build({
      deployments: [
        sdep('fraud-detection/fraud').project('fraud_detection').created('2024-01-01T00:00:00Z').build(),
        sdep('fraud-detection/other').created('2025-01-01T00:00:00Z').build(),
      ],
    });
    expect(statusOf(r, 'fraud-detection/fraud').reason).toBe('Routed');
    expect(statusOf(r, 'fraud-detection/other').reason).toBe('Conflict');
  });

  test('a hostname shared by two projects goes to the oldest only', () => {
    const r = build({
      deployments: [
        sdep('ns2/x').project('Demo').created('2025-01-01T00:00:00Z').build(),
        sdep('ns1/x').project('demo').created('2024-01-01T00:00:00Z').build(),
      ],
    });
    expect(r.table.byHost.get('x.demo.serving.example.com')?.id).toBe('ns1/x');
    expect(r.table.byHost.size).toBe(1);
    expect(statusOf(r, 'ns2/x').reason).toBe('Conflict');
    expect(statusOf(r, 'ns2/x').hostname).toBeUndefined();
  });

  test('a ServingDeployment and an InferenceService on the same path: the older InferenceService wins', () => {
    const r = build({
      deployments: [sdep('other/iris').project('demo').created('2025-01-01T00:00:00Z').build()],
      inferenceServices: [isvc('demo/iris', modelFormat('sklearn'), '2024-01-01T00:00:00Z')],
    });
    expect(r.table.byPath.get('demo/iris')?.resourceKind).toBe('InferenceService');
    const lost = statusOf(r, 'other/iris');
    expect(lost.reason).toBe('Conflict');
    expect(lost.message).toContain('demo/iris');
  });

  test('the loser of a conflict never takes the winner off its paths or hostname', () => {
    const winner = sdep('a/fraud').project('fraud_detection').created('2024-01-01T00:00:00Z').build();
    const loser = sdep('b/fraud').project('fraud-detection').created('2025-01-01T00:00:00Z').build();
    const alone = build({ deployments: [winner] });
    const both = build({ deployments: [loser, winner] });
    expect(both.table.hash).toBe(alone.table.hash);
    expect([...both.table.byPath.keys()].sort()).toEqual(['fraud-detection/fraud', 'fraud_detection/fraud']);
    for (const r of both.table.byPath.values()) expect(r.id).toBe('a/fraud');
  });
});

describe('InvalidSpec: one bad resource is reported and skipped (SPEC §2)', () => {
  const cases: Array<[string, ServingDeploymentResource, RegExp]> = [
    ['an upper-case name', sdep('demo/Iris').build(), /metadata\.name/],
    ['a name with an underscore', sdep('demo/iris_v2').build(), /metadata\.name/],
    ['a 64-character name', sdep(`demo/${'a'.repeat(64)}`).build(), /metadata\.name/],
    ['a project with a space', sdep('demo/a').project('fraud detection').build(), /spec\.project/],
    ['a project with a dot', sdep('demo/a').project('fraud.detection').build(), /spec\.project/],
    ['a project starting with _', sdep('demo/a').project('_fraud').build(), /spec\.project/],
    ['a 64-character project', sdep('demo/a').project('p'.repeat(64)).build(), /spec\.project/],
    ['a numeric project', sdep('demo/a').set('project', 42).build(), /spec\.project/],
    ['type job', sdep('demo/a').set('type', 'job').build(), /spec\.type/],
    ['no type', sdep('demo/a').set('type', undefined).build(), /spec\.type/],
    ['type model without modelServer', sdep('demo/a').set('modelServer', undefined).build(), /spec\.modelServer/],
    ['modelServer pytorch', sdep('demo/a').set('modelServer', 'pytorch').build(), /spec\.modelServer/],
    [
      'type python with a modelServer',
      sdep('demo/a').python().set('modelServer', 'sklearn').build(),
      /spec\.modelServer/,
    ],
    ['type python with a modelName', sdep('demo/a').python().modelName('m').build(), /spec\.modelName/],
    ['a model name with a slash', sdep('demo/a').modelName('a/b').build(), /spec\.modelName/],
    ['a model name with a colon', sdep('demo/a').modelName('a:b').build(), /spec\.modelName/],
    ['an LLM model name with a space', sdep('demo/a').llm().modelName('a b').build(), /spec\.modelName/],
    ['an LLM model name that is not a string', sdep('demo/a').llm().set('modelName', 7).build(), /spec\.modelName/],
    ['no backend', sdep('demo/a').set('backend', undefined).build(), /spec\.backend/],
    ['port 0', sdep('demo/a').backend('svc', 0).build(), /spec\.backend\.port/],
    ['port 65536', sdep('demo/a').backend('svc', 65536).build(), /spec\.backend\.port/],
    ['port 80.5', sdep('demo/a').backend('svc', 80.5).build(), /spec\.backend\.port/],
    [
      'port as a string',
      sdep('demo/a').set('backend', { service: 'svc', port: '8080' }).build(),
      /spec\.backend\.port/,
    ],
    ['a Service name with upper case', sdep('demo/a').backend('Svc', 80).build(), /spec\.backend\.service/],
    [
      'a backend with url and service',
      sdep('demo/a').set('backend', { url: 'http://127.0.0.1:1', service: 'svc', port: 80 }).build(),
      /either url or service/,
    ],
    ['a backend url that is not a URL', sdep('demo/a').url('not a url').build(), /backend\.url/],
    ['a backend url with ftp', sdep('demo/a').url('ftp://127.0.0.1:21').build(), /backend\.url/],
    ['a backend url with a query', sdep('demo/a').url('http://127.0.0.1:1/?a=b').build(), /backend\.url/],
    ['timeoutSeconds 0', sdep('demo/a').timeout(0).build(), /timeoutSeconds/],
    ['timeoutSeconds -1', sdep('demo/a').timeout(-1).build(), /timeoutSeconds/],
    ['timeoutSeconds as a string', sdep('demo/a').set('timeoutSeconds', '60').build(), /timeoutSeconds/],
    ['timeoutSeconds over a day', sdep('demo/a').timeout(86_401).build(), /timeoutSeconds/],
  ];

  test.each(cases)('%s → InvalidSpec naming the field', (_what, bad, message) => {
    const good = sdep('demo/good').build();
    const r = build({ deployments: [bad, good] });
    const s = statusOf(r, `${bad.metadata.namespace}/${bad.metadata.name}`);
    expect(s).toMatchObject({ ready: false, reason: 'InvalidSpec' });
    expect(s.message).toMatch(message);
    expect(s.url).toBeUndefined();
    expect(statusOf(r, 'demo/good')).toMatchObject({ ready: true, reason: 'Routed' });
    expect(r.table.hash).toBe(build({ deployments: [good] }).table.hash);
  });

  test.each([null, 'model', [1, 2]])('spec %j → InvalidSpec', (spec) => {
    const res = sdep('demo/a').build();
    res.spec = spec;
    expect(build({ deployments: [res] }).statuses[0]).toMatchObject({ ready: false, reason: 'InvalidSpec' });
  });

  test('backend.url is refused in the kubernetes source', () => {
    const s = build({ source: 'kubernetes', deployments: [sdep('demo/a').url('http://127.0.0.1:8081').build()] })
      .statuses[0];
    expect(s).toMatchObject({ ready: false, reason: 'InvalidSpec' });
    expect(s.message).toMatch(/backend\.url/);
  });
});

describe('BackendNotFound when the source sees Services', () => {
  test.each([
    ['no such Service', [service('demo/other', [{ port: 8080 }])], /demo\/svc not found/],
    ['the Service in another namespace', [service('prod/svc', [{ port: 8080 }])], /demo\/svc not found/],
    ['the Service without that port', [service('demo/svc', [{ port: 9090, name: 'http' }])], /no port 8080/],
    ['no Services at all', [], /not found/],
  ])('%s → BackendNotFound', (_what, services, message) => {
    const r = build({ source: 'kubernetes', deployments: [sdep('demo/a').backend('svc', 8080).build()], services });
    expect(r.statuses[0]).toMatchObject({ ready: false, reason: 'BackendNotFound' });
    expect(r.statuses[0].message).toMatch(message);
    expect(r.table.routes).toEqual([]);
  });

  test('one missing backend leaves the others routed', () => {
    const r = build({
      source: 'kubernetes',
      deployments: [sdep('demo/a').backend('missing', 80).build(), sdep('demo/b').backend('svc', 80).build()],
      services: [service('demo/svc', [{ port: 80 }])],
    });
    expect(r.statuses.map((s) => [s.id, s.reason]).sort()).toEqual([
      ['demo/a', 'BackendNotFound'],
      ['demo/b', 'Routed'],
    ]);
  });
});

describe('InferenceServices (SPEC §2, KServe)', () => {
  test.each([
    ['modelFormat sklearn', modelFormat('sklearn'), 'sklearn'],
    ['modelFormat SKLearn', modelFormat('SKLearn'), 'sklearn'],
    ['modelFormat tensorflow', modelFormat('tensorflow'), 'tensorflow'],
    ['modelFormat huggingface', modelFormat('huggingface'), 'llm'],
    ['modelFormat vllm', modelFormat('vllm'), 'llm'],
    ['a vLLM runtime', modelFormat('pytorch', 'kserve-vllm'), 'llm'],
    ['a huggingface runtime', modelFormat('pytorch', 'kserve-huggingfaceserver'), 'llm'],
    ['modelFormat xgboost', modelFormat('xgboost'), 'python'],
    ['the older predictor.sklearn form', { predictor: { sklearn: { storageUri: 's3://x' } } }, 'sklearn'],
    ['the older predictor.tensorflow form', { predictor: { tensorflow: {} } }, 'tensorflow'],
    ['an unknown format', modelFormat('caffe'), undefined],
    ['no predictor', {}, undefined],
    ['no spec', null, undefined],
  ])('%s → %s', (_what, spec, server) => {
    expect(kserveModelServer(spec)).toBe(server);
  });

  test('project = namespace, deployment = name, backend = the predictor Service', () => {
    const r = build({ inferenceServices: [isvc('demo/flowers', modelFormat('sklearn'))] });
    const route = r.table.byPath.get('demo/flowers');
    expect(route).toMatchObject({
      id: 'demo/flowers',
      resourceKind: 'InferenceService',
      project: 'demo',
      deployment: 'flowers',
      kind: 'predictive',
      modelName: 'flowers',
      backend: { kind: 'service', namespace: 'demo', service: 'flowers-predictor', port: 80 },
    });
    expect(r.statuses[0]).toMatchObject({
      resourceKind: 'InferenceService',
      ready: true,
      inferenceUrl: 'https://models.example.com/v1/demo/flowers/v1/models/flowers:predict',
      hostname: 'flowers.demo.serving.example.com',
    });
  });

  test('an LLM InferenceService gets an openaiUrl', () => {
    const s = build({ inferenceServices: [isvc('demo/chat', modelFormat('huggingface'))] }).statuses[0];
    expect(s).toMatchObject({ ready: true, openaiUrl: 'https://models.example.com/v1/demo/chat/v1' });
    expect(s.inferenceUrl).toBeUndefined();
  });

  test('an unknown format is InvalidSpec; a missing predictor Service is BackendNotFound', () => {
    const r = build({
      source: 'kubernetes',
      inferenceServices: [isvc('demo/a', modelFormat('caffe')), isvc('demo/b', modelFormat('sklearn'))],
      services: [],
    });
    expect(r.statuses.map((s) => [s.id, s.reason])).toEqual([
      ['demo/a', 'InvalidSpec'],
      ['demo/b', 'BackendNotFound'],
    ]);
  });
});

describe('deterministic output', () => {
  const deployments = [
    sdep('a/x').project('p').build(),
    sdep('b/x').project('p').build(),
    sdep('c/y').project('P').build(),
    sdep('demo/iris').build(),
    sdep('demo/chat').llm().build(),
    sdep('demo/Bad').build(),
    sdep('demo/echo').python().timeout(3).build(),
    sdep('fraud-detection/fraud').project('fraud_detection').tensorflow().build(),
  ];
  const keySecrets = [
    apiKey('k1', 'demo').secret,
    apiKey('k2', '*').secret,
    apiKey('k3', 'p', { namespace: 'a' }).secret,
    apiKey('bad', '').secret,
  ];
  const inferenceServices = [isvc('kserve/flowers', modelFormat('sklearn')), isvc('kserve/chat', modelFormat('vllm'))];
  const reference = build({ deployments, keySecrets, inferenceServices });

  test.each([1, 2, 3, 4, 5, 6, 7, 8])(
    'shuffled input (seed %i) gives the same hash, routes, statuses and key problems',
    (seed) => {
      const r = build({
        deployments: shuffled(deployments, seed),
        keySecrets: shuffled(keySecrets, seed + 100),
        inferenceServices: shuffled(inferenceServices, seed + 200),
      });
      expect(r.table.hash).toBe(reference.table.hash);
      expect(r.table.routes).toEqual(reference.table.routes);
      expect(r.statuses).toEqual(reference.statuses);
      expect(r.keyProblems).toEqual(reference.keyProblems);
      expect(new Map(r.table.byPath)).toEqual(new Map(reference.table.byPath));
    },
  );

  test('routes come oldest first (creationTimestamp, then namespace/name); rejected statuses follow, sorted', () => {
    const age = (id: string) => {
      const d = [...deployments, ...inferenceServices].find((x) => `${x.metadata.namespace}/${x.metadata.name}` === id);
      return `${d?.metadata.creationTimestamp ?? '~'}|${id}`;
    };
    const ids = reference.table.routes.map((r) => r.id);
    expect(ids.map(age)).toEqual([...ids.map(age)].sort());
    const rejected = reference.statuses
      .filter((s) => !s.ready && s.reason !== 'Conflict')
      .map((s) => `${s.resourceKind}/${s.id}`);
    expect(rejected).toEqual([...rejected].sort());
  });

  test('the hash changes when a route changes and stays when nothing does', () => {
    const one = [sdep('demo/a').build()];
    const h = build({ deployments: one }).table.hash;
    expect(build({ deployments: structuredClone(one) }).table.hash).toBe(h);
    const changed = structuredClone(one);
    (changed[0].spec as Record<string, unknown>).timeoutSeconds = 5;
    expect(build({ deployments: changed }).table.hash).not.toBe(h);
  });

  test('the hash changes when a key is added', () => {
    const deps = [sdep('demo/a').build()];
    expect(build({ deployments: deps, keySecrets: [apiKey('k', 'demo').secret] }).table.hash).not.toBe(
      build({ deployments: deps }).table.hash,
    );
  });

  test('buildRouteTable does not modify its input', () => {
    const snap = snapshot({ deployments: structuredClone(deployments), keySecrets: structuredClone(keySecrets) });
    const before = structuredClone(snap);
    buildRouteTable(snap, buildOptions);
    expect(snap).toEqual(before);
  });
});

describe('limits (SPEC §9)', () => {
  test('spec.limits: whole numbers 0 or more; 0 means none; anything else is InvalidSpec naming the field', () => {
    expect(
      routeOf(sdep('demo/a').python().set('limits', { requestsPerMinute: 60, tokensPerMinute: 0 })).limits,
    ).toEqual({ requestsPerMinute: 60 });
    expect(routeOf(sdep('demo/b').python()).limits).toBeUndefined();
    for (const [limits, message] of [
      [{ requestsPerMinute: -1 }, 'spec.limits.requestsPerMinute must be a whole number 0 or more, got -1'],
      [{ tokensPerMinute: 1.5 }, 'spec.limits.tokensPerMinute must be a whole number 0 or more, got 1.5'],
      [{ rpm: 5 }, 'spec.limits.rpm is not a field: spec.limits takes requestsPerMinute and tokensPerMinute'],
      ['60', 'spec.limits must be an object: {requestsPerMinute, tokensPerMinute}'],
    ] as const) {
      const r = build({ deployments: [sdep('demo/bad').python().set('limits', limits).build()] });
      expect(r.statuses[0]).toMatchObject({ ready: false, reason: 'InvalidSpec', message });
    }
  });

  test("a key Secret's rpm/tpm: whole numbers; a bad one makes the key a problem naming the field", () => {
    const good = apiKey('apikey-l', 'demo');
    good.secret.data.rpm = '120';
    good.secret.data.tpm = ' 5000 ';
    const bad = apiKey('apikey-bad', 'demo');
    bad.secret.data.tpm = 'lots';
    const r = build({ keySecrets: [good.secret, bad.secret] });
    expect([...r.table.keys.values()].flat().map((k) => [k.name, k.limits])).toEqual([
      ['apikey-l', { requestsPerMinute: 120, tokensPerMinute: 5000 }],
    ]);
    expect(r.keyProblems.map((p) => p.message)).toEqual([
      'tpm must be a whole number 0 or more (per minute), got "lots"',
    ]);
  });
});

describe('budgets, prices and priorities (SPEC §14)', () => {
  test('spec.pricing and spec.priority: numbers 0 or more and the three priorities; anything else is InvalidSpec', () => {
    const r = routeOf(
      sdep('demo/p').llm().set('pricing', { inputPerMillion: 0.5, outputPerMillion: 1.5 }).set('priority', 'critical'),
    );
    expect([r.pricing, r.priority]).toEqual([{ inputPerMillion: 0.5, outputPerMillion: 1.5 }, 'critical']);
    expect(routeOf(sdep('demo/free').llm().set('pricing', { inputPerMillion: 0 })).pricing).toBeUndefined();
    for (const [field, value, message] of [
      [
        'pricing',
        { inputPerMillion: -1 },
        'spec.pricing.inputPerMillion must be a number 0 or more (per million tokens), got -1',
      ],
      [
        'pricing',
        { perToken: 1 },
        'spec.pricing.perToken is not a field: spec.pricing takes inputPerMillion and outputPerMillion',
      ],
      ['pricing', 3, 'spec.pricing must be an object: {inputPerMillion, outputPerMillion}'],
      ['priority', 'urgent', 'spec.priority must be critical, standard or sheddable, got "urgent"'],
    ] as const) {
      const b = build({ deployments: [sdep('demo/bad').llm().set(field, value).build()] });
      expect(b.statuses[0]).toMatchObject({ ready: false, reason: 'InvalidSpec', message });
    }
  });

  test("a key Secret's budget and queue fields; a bad one makes the key a problem naming the field", () => {
    const good = apiKey('apikey-b', 'demo');
    Object.assign(good.secret.data, {
      budgetTokens: '2000000',
      budgetCost: '49.99',
      budgetPeriod: '7d',
      tenant: 'team-a',
      priority: 'sheddable',
      weight: '2.5',
    });
    const month = apiKey('apikey-m', 'demo');
    month.secret.data.budgetTokens = '10';
    const bad = (field: string, value: string) => {
      const k = apiKey(`apikey-${field.toLowerCase()}`, 'demo');
      k.secret.data[field] = value;
      return k.secret;
    };
    const r = build({
      keySecrets: [
        good.secret,
        month.secret,
        bad('budgetTokens', '1e6'),
        bad('budgetCost', '-1'),
        bad('budgetPeriod', 'fortnight'),
        bad('priority', 'urgent'),
        bad('weight', '0'),
      ],
    });
    const keys = [...r.table.keys.values()].flat();
    expect(keys.map((k) => [k.name, k.budget, k.tenant, k.priority, k.weight])).toEqual([
      [
        'apikey-b',
        { tokens: 2_000_000, cost: 49.99, period: { kind: 'rolling', ms: 7 * 86_400_000, text: '7d' } },
        'team-a',
        'sheddable',
        2.5,
      ],
      ['apikey-m', { tokens: 10, period: { kind: 'month' } }, undefined, undefined, undefined],
    ]);
    expect(r.keyProblems.map((p) => p.message).sort()).toEqual([
      'budgetCost must be a decimal 0 or more (at most 6 places), got "-1"',
      'budgetPeriod must be "day", "month" or a rolling duration of 1h to 366d such as 12h or 7d, got "fortnight"',
      'budgetTokens must be a whole number 0 or more, got "1e6"',
      'priority must be critical, standard or sheddable, got "urgent"',
      'weight must be a number above 0 (default 1), got "0"',
    ]);
  });
});

describe('spec.fallbacks (SPEC §12)', () => {
  test.each([
    ['the plain form', 'chat'],
    ['the project as written', 'my_proj/chat'],
    ['the namespace form of the project', 'my-proj/chat'],
    ['the namespace form in another case', 'My-Proj/chat'],
  ])('naming the deployment itself by %s is refused', (_what, ref) => {
    const r = build({ deployments: [sdep('my-proj/chat').project('my_proj').llm().set('fallbacks', [ref]).build()] });
    expect(statusOf(r, 'my-proj/chat')).toMatchObject({ reason: 'InvalidSpec' });
    expect(statusOf(r, 'my-proj/chat').message).toContain('names the deployment itself');
  });

  test('one fallback written in both forms of its project is a repeat', () => {
    const r = build({
      deployments: [
        sdep('my-proj/chat').project('my_proj').llm().set('fallbacks', ['other_p/small', 'other-p/small']).build(),
      ],
    });
    expect(statusOf(r, 'my-proj/chat').message).toContain('twice');
  });
});
