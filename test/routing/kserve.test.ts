// The route builder's SPEC §10 fields: InferenceService set-ups (transformer, serverless ExternalName, V2, Hugging
// Face prefix, Ready condition, hold annotation) and ServingDeployment protocol, backend.path, canary, scaleFromZero,
// and the status of a route whose backend has no ready endpoint.
import { describe, expect, test } from '@jest/globals';
import { BuildCache, buildRouteTable } from '../../src/routing/build.js';
import type { InferenceServiceResource, ServiceResource, ServingDeploymentResource } from '../../src/routing/types.js';
import { buildOptions, sdep, service } from '../support/fixtures.js';
import { build } from '../support/units.js';

function isvc(
  ref: string,
  spec: unknown,
  status?: unknown,
  annotations?: Record<string, string>,
): InferenceServiceResource {
  const [namespace, name] = ref.split('/');
  return {
    apiVersion: 'serving.kserve.io/v1beta1',
    kind: 'InferenceService',
    metadata: { namespace, name, creationTimestamp: '2025-06-01T00:00:00Z', generation: 1, annotations },
    spec,
    ...(status === undefined ? {} : { status }),
  };
}
const model = (m: Record<string, unknown>, more: Record<string, unknown> = {}) => ({
  predictor: { model: m },
  ...more,
});
const sklearn = model({ modelFormat: { name: 'sklearn' } });
const externalName = (ref: string, name: string, ports: number[] = []): ServiceResource => ({
  ...service(
    ref,
    ports.map((port) => ({ port })),
  ),
  type: 'ExternalName',
  externalName: name,
});
const snap = (deployments: ServingDeploymentResource[], services: ServiceResource[]) => ({
  source: 'kubernetes' as const,
  deployments,
  inferenceServices: [],
  keySecrets: [],
  services,
});
const withReady = (s: ServiceResource, readyEndpoints: boolean): ServiceResource => ({ ...s, readyEndpoints });

describe('InferenceServices (SPEC §10)', () => {
  test('a transformer is the backend when the InferenceService has one', () => {
    const r = build({
      source: 'kubernetes',
      inferenceServices: [isvc('demo/tx', { ...sklearn, transformer: { containers: [] } })],
      services: [service('demo/tx-transformer', [{ port: 80 }]), service('demo/tx-predictor', [{ port: 80 }])],
    });
    expect(r.table.byPath.get('demo/tx')?.backend).toMatchObject({ service: 'tx-transformer', port: 80 });
  });

  test('without its transformer Service it is BackendNotFound naming that Service', () => {
    const r = build({
      source: 'kubernetes',
      inferenceServices: [isvc('demo/tx', { ...sklearn, transformer: { containers: [] } })],
      services: [service('demo/tx-predictor', [{ port: 80 }])],
    });
    expect(r.statuses[0]).toMatchObject({
      reason: 'BackendNotFound',
      message: 'Service demo/tx-transformer not found',
    });
  });

  test.each([
    ['declared ports: the first', [8012], 8012],
    ['no ports: 80', [], 80],
  ])('serverless: an ExternalName predictor is reached on its name (%s)', (_what, ports, port) => {
    const r = build({
      source: 'kubernetes',
      inferenceServices: [isvc('demo/s', sklearn)],
      services: [externalName('demo/s-predictor', 'knative-local-gateway.istio-system.svc.cluster.local.', ports)],
    });
    expect(r.table.byPath.get('demo/s')?.backend).toEqual({
      kind: 'service',
      namespace: 'demo',
      service: 's-predictor',
      port,
      externalName: 'knative-local-gateway.istio-system.svc.cluster.local',
    });
    // Its readiness is the InferenceService's own, not endpoints' (an ExternalName has none).
    expect(r.statuses[0]).toMatchObject({ ready: true, reason: 'Routed' });
  });

  test.each([
    ['protocolVersion v2', model({ modelFormat: { name: 'sklearn' }, protocolVersion: 'v2' }), 'v2', 'i'],
    ['an MLServer runtime', model({ modelFormat: { name: 'xgboost' }, runtime: 'kserve-mlserver' }), 'v2', 'i'],
    [
      'a Triton runtime (any model name)',
      model({ modelFormat: { name: 'onnx' }, runtime: 'kserve-tritonserver' }),
      'v2',
      undefined,
    ],
    ['modelFormat triton', model({ modelFormat: { name: 'triton' } }), 'v2', undefined],
    ['the older predictor.triton form', { predictor: { triton: {} } }, 'v2', undefined],
    ['sklearn V1', sklearn, undefined, 'i'],
  ])('%s → protocol %s', (_what, spec, protocol, modelName) => {
    const route = build({ inferenceServices: [isvc('demo/i', spec)] }).table.byPath.get('demo/i');
    expect(route?.protocol).toBe(protocol);
    expect(route?.modelName).toBe(modelName);
  });

  test('V2 InferenceServices get the V2 inference URL', () => {
    const s = build({
      inferenceServices: [isvc('demo/i', model({ modelFormat: { name: 'sklearn' }, protocolVersion: 'v2' }))],
    }).statuses[0];
    expect(s.inferenceUrl).toBe('https://models.example.com/v1/demo/i/v2/models/i/infer');
  });

  test('the Hugging Face runtime answers the OpenAI API under /openai; a vLLM format has no prefix', () => {
    const r = build({
      inferenceServices: [
        isvc('demo/hf', model({ modelFormat: { name: 'huggingface' } })),
        isvc('demo/v', model({ modelFormat: { name: 'vllm' } })),
      ],
    });
    expect(r.table.byPath.get('demo/hf')).toMatchObject({ kind: 'llm', pathPrefix: '/openai' });
    expect(r.table.byPath.get('demo/v')?.pathPrefix).toBeUndefined();
  });

  test.each([
    [
      { conditions: [{ type: 'Ready', status: 'False', reason: 'RevisionMissing', message: 'no revision' }] },
      'the InferenceService is not ready (Ready=False, RevisionMissing: no revision)',
    ],
    [{ conditions: [{ type: 'Ready', status: 'Unknown' }] }, 'the InferenceService is not ready (Ready=Unknown)'],
  ])('a Ready condition that is not True keeps the route (503) and says why: %j', (status, why) => {
    const r = build({ inferenceServices: [isvc('demo/i', sklearn, status)] });
    expect(r.table.byPath.get('demo/i')?.notReady).toBe(why);
    expect(r.statuses[0]).toMatchObject({
      ready: false,
      routed: true,
      reason: 'InferenceServiceNotReady',
      message: why,
    });
  });

  test.each([
    [undefined],
    [{}],
    [{ conditions: [{ type: 'PredictorReady', status: 'False' }] }],
    [{ conditions: [{ type: 'Ready', status: 'True' }] }],
  ])('no Ready condition to go by, or Ready=True: served (%j)', (status) => {
    const r = build({ inferenceServices: [isvc('demo/i', sklearn, status)] });
    expect(r.table.byPath.get('demo/i')?.notReady).toBeUndefined();
    expect(r.statuses[0]).toMatchObject({ ready: true, reason: 'Routed' });
  });

  test('the hold annotation sets scale from zero; a bad one is InvalidSpec naming it', () => {
    const r = build({
      inferenceServices: [
        isvc('demo/a', sklearn, undefined, { 'serving.servegate.dev/scale-from-zero-hold-seconds': '30' }),
        isvc('demo/b', sklearn, undefined, { 'serving.servegate.dev/scale-from-zero-hold-seconds': 'soon' }),
      ],
    });
    expect(r.table.byPath.get('demo/a')?.holdMs).toBe(30_000);
    expect(r.statuses.find((s) => s.id === 'demo/b')).toMatchObject({ reason: 'InvalidSpec' });
    expect(r.statuses.find((s) => s.id === 'demo/b')?.message).toContain('scale-from-zero-hold-seconds');
  });
});

describe('ServingDeployment fields (SPEC §10)', () => {
  test('protocol v2, a backend path, a canary and a hold end up on the route', () => {
    const route = build({
      deployments: [
        sdep('demo/a')
          .set('protocol', 'v2')
          .set('backend', { url: 'http://127.0.0.1:1', path: '/openai/' })
          .set('canary', { backend: { url: 'http://127.0.0.1:2' }, percent: 12.5 })
          .set('scaleFromZero', { holdSeconds: 2.5 })
          .build(),
      ],
    }).table.byPath.get('demo/a');
    expect(route).toMatchObject({
      protocol: 'v2',
      pathPrefix: '/openai',
      canary: { backend: { kind: 'url', url: 'http://127.0.0.1:2' }, percent: 12.5 },
      holdMs: 2500,
      backend: { kind: 'url', url: 'http://127.0.0.1:1' },
    });
  });

  test('the configured hold applies when the spec sets none; holdSeconds 0 turns it off', () => {
    const opts = { ...buildOptions, scaleFromZeroHoldMs: 20_000 };
    const r = build(
      { deployments: [sdep('demo/a').build(), sdep('demo/b').set('scaleFromZero', { holdSeconds: 0 }).build()] },
      opts,
    );
    expect(r.table.byPath.get('demo/a')?.holdMs).toBe(20_000);
    expect(r.table.byPath.get('demo/b')?.holdMs).toBeUndefined();
  });

  test.each([
    ['protocol v3', sdep('demo/a').set('protocol', 'v3'), /spec\.protocol/],
    ['protocol v2 on an LLM', sdep('demo/a').llm().set('protocol', 'v2'), /predictive model servers only/],
    [
      'protocol v2 on a python deployment',
      sdep('demo/a').python().set('protocol', 'v2'),
      /predictive model servers only/,
    ],
    [
      'a path without a leading /',
      sdep('demo/a').set('backend', { service: 's', port: 80, path: 'openai' }),
      /spec\.backend\.path/,
    ],
    [
      'a path with ..',
      sdep('demo/a').set('backend', { service: 's', port: 80, path: '/a/../b' }),
      /spec\.backend\.path/,
    ],
    [
      'a path with a query',
      sdep('demo/a').set('backend', { service: 's', port: 80, path: '/a?b' }),
      /spec\.backend\.path/,
    ],
    ['a path with //', sdep('demo/a').set('backend', { service: 's', port: 80, path: '//a' }), /spec\.backend\.path/],
    ['a path with %', sdep('demo/a').set('backend', { service: 's', port: 80, path: '/a%2f' }), /spec\.backend\.path/],
    [
      'canary percent 101',
      sdep('demo/a').set('canary', { backend: { service: 'c', port: 80 }, percent: 101 }),
      /spec\.canary\.percent/,
    ],
    [
      'canary percent missing',
      sdep('demo/a').set('canary', { backend: { service: 'c', port: 80 } }),
      /spec\.canary\.percent/,
    ],
    ['canary without a backend', sdep('demo/a').set('canary', { percent: 5 }), /spec\.canary\.backend/],
    [
      'canary with its own path',
      sdep('demo/a').set('canary', { backend: { service: 'c', port: 80, path: '/x' }, percent: 5 }),
      /spec\.canary\.backend\.path/,
    ],
    [
      'canary with an unknown field',
      sdep('demo/a').set('canary', { backend: { service: 'c', port: 80 }, percent: 5, sticky: true }),
      /spec\.canary\.sticky/,
    ],
    ['holdSeconds -1', sdep('demo/a').set('scaleFromZero', { holdSeconds: -1 }), /spec\.scaleFromZero\.holdSeconds/],
    [
      'holdSeconds as a string',
      sdep('demo/a').set('scaleFromZero', { holdSeconds: '5' }),
      /spec\.scaleFromZero\.holdSeconds/,
    ],
    [
      'scaleFromZero with an unknown field',
      sdep('demo/a').set('scaleFromZero', { minReplicas: 0 }),
      /spec\.scaleFromZero\.minReplicas/,
    ],
  ])('%s → InvalidSpec naming the field', (_what, b, message) => {
    const s = build({ deployments: [b.build()] }).statuses[0];
    expect(s).toMatchObject({ ready: false, reason: 'InvalidSpec' });
    expect(s.message).toMatch(message);
  });

  test('in the cluster a canary Service that does not exist is BackendNotFound naming it; created later, the route is rebuilt', () => {
    const res = sdep('demo/a')
      .backend('p', 80)
      .set('canary', { backend: { service: 'c', port: 80 }, percent: 5 })
      .build();
    const cache = new BuildCache();
    const p = service('demo/p', [{ port: 80 }]);
    const r = buildRouteTable(snap([res], [p]), buildOptions, cache);
    expect(r.statuses[0]).toMatchObject({ reason: 'BackendNotFound', message: 'Service demo/c not found' });
    const later = buildRouteTable(snap([res], [p, service('demo/c', [{ port: 80 }])]), buildOptions, cache);
    expect(later.statuses[0]).toMatchObject({ ready: true, reason: 'Routed' });
    expect(later.table.byPath.get('demo/a')?.canary?.backend).toMatchObject({ service: 'c', port: 80 });
  });
});

describe('endpoint readiness in status (SPEC §10)', () => {
  const svc = service('demo/p', [{ port: 80 }]);
  test.each([
    [undefined, false, true, 'Routed'],
    [true, false, true, 'Routed'],
    [false, false, false, 'NoReadyEndpoints'],
    [false, true, true, 'ScaledToZero'],
  ])('readyEndpoints %s, holding %s → Ready=%s %s', (ready, holding, isReady, reason) => {
    const b = sdep('demo/a').backend('p', 80);
    if (holding) b.set('scaleFromZero', { holdSeconds: 30 });
    const s = build({
      source: 'kubernetes',
      deployments: [b.build()],
      services: [ready === undefined ? svc : withReady(svc, ready)],
    }).statuses[0];
    expect(s).toMatchObject({ ready: isReady, reason, routed: true });
    // Still routed (503 or held, never 404), with its URLs.
    expect(s.url).toBe('https://models.example.com/v1/demo/a');
  });

  test('a Service object replaced with new readiness re-evaluates the route on a cached build', () => {
    const cache = new BuildCache();
    const dep = sdep('demo/a').backend('p', 80).build();
    expect(buildRouteTable(snap([dep], [withReady(svc, true)]), buildOptions, cache).statuses[0].reason).toBe('Routed');
    expect(buildRouteTable(snap([dep], [withReady(svc, false)]), buildOptions, cache).statuses[0].reason).toBe(
      'NoReadyEndpoints',
    );
  });
});
