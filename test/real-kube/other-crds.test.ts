// Other projects' real CRDs on the real kube-apiserver, as their own Go modules ship them (test/kube/cache.mjs
// OTHER_CRDS: KServe v0.17.0, Gateway API v1.4.1, prometheus-operator v0.85.0): servegate's KServe source reads
// InferenceServices that KServe's own schema accepted, with status written through the status subresource as KServe
// writes it, and turns them into the routes docs/kserve.md describes; the chart's optional HTTPRoute, ServiceMonitor
// and PrometheusRule are accepted by their CRDs.
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import { parseAllDocuments } from 'yaml';
import { buildRouteTable } from '../../src/routing/build.js';
import type { Route, Snapshot } from '../../src/routing/types.js';
import { KubernetesSource } from '../../src/sources/kubernetes/index.js';
import { buildOptions } from '../support/fixtures.js';
import { otherCrdsDir, sharedKubeCluster, type KubeCluster } from '../support/kube.js';
import { expectSuccess, runProcess } from '../support/processes.js';
import { ROOT } from '../support/paths.js';
import { waitFor } from '../support/wait.js';

type Json = Record<string, any>;

let cluster: KubeCluster;
const ns = `kserve-${Date.now().toString(36)}`;
const ISVC = `/apis/serving.kserve.io/v1beta1/namespaces/${ns}/inferenceservices`;

const CRDS = [
  'kserve/serving.kserve.io_inferenceservices.yaml',
  'gateway-api/gateway.networking.k8s.io_gatewayclasses.yaml',
  'gateway-api/gateway.networking.k8s.io_gateways.yaml',
  'gateway-api/gateway.networking.k8s.io_httproutes.yaml',
  'prometheus-operator/monitoring.coreos.com_servicemonitors.yaml',
  'prometheus-operator/monitoring.coreos.com_prometheusrules.yaml',
];
const CRD_NAMES = [
  'inferenceservices.serving.kserve.io',
  'gatewayclasses.gateway.networking.k8s.io',
  'gateways.gateway.networking.k8s.io',
  'httproutes.gateway.networking.k8s.io',
  'servicemonitors.monitoring.coreos.com',
  'prometheusrules.monitoring.coreos.com',
  'servingdeployments.serving.servegate.dev',
];

beforeAll(async () => {
  cluster = await sharedKubeCluster();
  const dir = otherCrdsDir();
  // The InferenceService CRD (1 MB) is over the 256 KiB client-side apply annotation: server-side apply.
  const files = CRDS.flatMap((f) => ['-f', join(dir, f)]);
  // servegate's own CRD too: its source lists ServingDeployments whatever else it reads.
  expectSuccess(await cluster.kubectl(['apply', '-f', join(ROOT, 'crds')]));
  expectSuccess(await cluster.kubectl(['apply', '--server-side', '--field-manager=servegate-tests', ...files]));
  // (kubectl wait fails rather than waits while a new CRD has no status yet.)
  for (const name of CRD_NAMES) {
    await waitFor(
      async () => {
        const r = await cluster.raw(`/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${name}`);
        const conditions = ((JSON.parse(r.body) as Json).status?.conditions ?? []) as Json[];
        return conditions.some((c) => c.type === 'Established' && c.status === 'True');
      },
      `${name} to be established`,
      60_000,
    );
  }
  expectSuccess(await cluster.kubectl(['create', 'namespace', ns]));
}, 180_000);

test('the CRDs the build took are the ones applied here', () => {
  const found = ['kserve', 'gateway-api', 'prometheus-operator'].flatMap((d) =>
    readdirSync(join(otherCrdsDir(), d)).map((f) => `${d}/${f}`),
  );
  expect(found.sort()).toEqual([...CRDS].sort());
});

// ---- KServe ----

/** What KServe's controller writes to status once a predictor is up (v0.17, raw or serverless mode). */
function kserveStatus(name: string, mode: 'RawDeployment' | 'Serverless', ready: boolean, why?: [string, string]) {
  const t = '2026-01-02T03:04:05Z';
  const cond = (type: string, status: boolean) => ({
    type,
    status: status ? 'True' : 'False',
    lastTransitionTime: t,
    ...(status ? {} : { reason: why?.[0], message: why?.[1] }),
  });
  const url = `http://${name}-${ns}.example.com`;
  return {
    observedGeneration: 1,
    deploymentMode: mode,
    url,
    address: { url: `http://${name}-predictor.${ns}.svc.cluster.local` },
    conditions: [
      cond('IngressReady', ready),
      cond('PredictorReady', ready),
      cond('Ready', ready),
      ...(mode === 'Serverless' ? [cond('LatestDeploymentReady', ready), cond('RoutesReady', ready)] : []),
    ],
    components: {
      predictor: {
        url: `http://${name}-predictor-${ns}.example.com`,
        ...(mode === 'Serverless'
          ? {
              latestCreatedRevision: `${name}-predictor-00001`,
              latestReadyRevision: `${name}-predictor-00001`,
              traffic: [{ revisionName: `${name}-predictor-00001`, percent: 100, latestRevision: true }],
            }
          : {}),
      },
    },
    modelStatus: {
      transitionStatus: ready ? 'UpToDate' : 'InProgress',
      states: { activeModelState: ready ? 'Loaded' : 'Loading', targetModelState: 'Loaded' },
      copies: { failedCopies: 0, totalCopies: 1 },
    },
  };
}

const inferenceServices: Array<[string, Json]> = [
  [
    'a sklearn predictor (raw deployment)',
    {
      metadata: { name: 'iris', annotations: { 'serving.kserve.io/deploymentMode': 'RawDeployment' } },
      spec: {
        predictor: {
          model: {
            modelFormat: { name: 'sklearn' },
            storageUri: 'gs://kfserving-examples/models/sklearn/1.0/model',
            resources: { requests: { cpu: '100m', memory: '256Mi' }, limits: { cpu: '1', memory: '1Gi' } },
          },
        },
      },
    },
  ],
  [
    'a Hugging Face LLM (serverless)',
    {
      metadata: { name: 'llama' },
      spec: {
        predictor: {
          minReplicas: 0,
          model: {
            modelFormat: { name: 'huggingface' },
            args: ['--model_name=llama3', '--model_id=meta-llama/meta-llama-3-8b-instruct'],
            resources: { limits: { cpu: '6', memory: '24Gi', 'nvidia.com/gpu': '1' } },
          },
        },
      },
    },
  ],
  [
    'a V2 (Open Inference Protocol) MLServer predictor (raw deployment)',
    {
      metadata: { name: 'mnist', annotations: { 'serving.kserve.io/deploymentMode': 'RawDeployment' } },
      spec: {
        predictor: {
          model: {
            modelFormat: { name: 'sklearn', version: '1' },
            protocolVersion: 'v2',
            runtime: 'kserve-mlserver',
            storageUri: 'gs://seldon-models/sklearn/mms/lr_model',
          },
        },
      },
    },
  ],
];

/** The fields of a route that docs/kserve.md describes. */
const described = (r: Route | undefined) =>
  r && {
    resourceKind: r.resourceKind,
    project: r.project,
    deployment: r.deployment,
    kind: r.kind,
    modelServer: r.modelServer,
    modelName: r.modelName,
    verbs: r.verbs,
    protocol: r.protocol,
    pathPrefix: r.pathPrefix,
    backend: r.backend,
    notReady: r.notReady,
  };

describe('servegate reads real InferenceServices', () => {
  let source: KubernetesSource;
  const snapshots: Snapshot[] = [];
  const last = () => snapshots[snapshots.length - 1];
  const written = new Map<string, Json>();

  beforeAll(async () => {
    for (const [, o] of inferenceServices) {
      const r = await cluster.request('POST', `${ISVC}?fieldValidation=Strict`, {
        apiVersion: 'serving.kserve.io/v1beta1',
        kind: 'InferenceService',
        ...o,
      });
      expect(`${r.status} ${r.status === 201 ? '' : r.body}`).toBe('201 ');
    }
    // The Services KServe makes: raw mode a ClusterIP Service (its EndpointSlice written here, as no controller
    // manager runs), serverless an ExternalName Service naming Knative's local gateway.
    const objects = [
      ...['iris', 'mnist'].flatMap((n) => [
        {
          apiVersion: 'v1',
          kind: 'Service',
          metadata: { name: `${n}-predictor`, namespace: ns },
          spec: { ports: [{ name: 'http', port: 80, targetPort: 8080 }], selector: { app: `isvc.${n}-predictor` } },
        },
        {
          apiVersion: 'discovery.k8s.io/v1',
          kind: 'EndpointSlice',
          metadata: {
            name: `${n}-predictor-abc12`,
            namespace: ns,
            labels: { 'kubernetes.io/service-name': `${n}-predictor` },
          },
          addressType: 'IPv4',
          ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
          endpoints: [{ addresses: [n === 'iris' ? '10.244.0.5' : '10.244.0.6'], conditions: { ready: true } }],
        },
      ]),
      {
        apiVersion: 'v1',
        kind: 'Service',
        metadata: { name: 'llama-predictor', namespace: ns },
        spec: {
          type: 'ExternalName',
          externalName: 'knative-local-gateway.istio-system.svc.cluster.local',
          ports: [{ name: 'http', port: 80 }],
        },
      },
    ];
    expectSuccess(
      await cluster.kubectl(['apply', '-f', '-'], {
        input: JSON.stringify({ apiVersion: 'v1', kind: 'List', items: objects }),
      }),
    );
    const statuses: Array<[string, Json]> = [
      ['iris', kserveStatus('iris', 'RawDeployment', true)],
      ['llama', kserveStatus('llama', 'Serverless', true)],
      ['mnist', kserveStatus('mnist', 'RawDeployment', true)],
    ];
    for (const [name, status] of statuses) {
      written.set(name, status);
      const r = await cluster.request('PATCH', `${ISVC}/${name}/status`, { status }, 'application/merge-patch+json');
      expect(`${r.status} ${r.status === 200 ? '' : r.body}`).toBe('200 ');
    }
    source = new KubernetesSource(cluster.kubeConfig(), {
      keysNamespace: ns,
      namespaces: [ns],
      kserve: true,
      backoff: { initialMs: 50, maxMs: 500 },
    });
    await source.start((s) => snapshots.push(s));
  }, 60_000);

  afterAll(async () => {
    await source?.stop();
  });

  test("KServe's schema kept every field given, spec and status (nothing pruned), and its printer columns read them", async () => {
    for (const [, o] of inferenceServices) {
      const r = await cluster.raw(`${ISVC}/${o.metadata.name as string}`);
      const stored = JSON.parse(r.body) as Json;
      expect(stored.spec).toEqual(o.spec);
      expect(stored.status).toEqual(written.get(o.metadata.name as string));
    }
    const cols = expectSuccess(await cluster.kubectl(['get', 'isvc', '-n', ns, '--no-headers'])).stdout;
    expect(cols.split('\n').map((l) => l.split(/ +/).slice(0, 3).join(' '))).toEqual([
      `iris http://iris-${ns}.example.com True`,
      `llama http://llama-${ns}.example.com True`,
      `mnist http://mnist-${ns}.example.com True`,
      '',
    ]);
  });

  test('each becomes the route docs/kserve.md describes: project = namespace, deployment = name', () => {
    const { table, statuses } = buildRouteTable(last(), buildOptions);
    const route = (name: string) => described(table.routes.find((x) => x.id === `${ns}/${name}`));
    const endpoint = {
      kind: 'service',
      namespace: ns,
      port: 80,
      portName: 'http',
      targetPort: 8080,
    };
    expect(route('iris')).toEqual({
      resourceKind: 'InferenceService',
      project: ns,
      deployment: 'iris',
      kind: 'predictive',
      modelServer: 'sklearn',
      modelName: 'iris',
      verbs: ['predict'],
      protocol: undefined,
      pathPrefix: undefined,
      backend: { ...endpoint, service: 'iris-predictor' },
      notReady: undefined,
    });
    expect(route('mnist')).toEqual({
      resourceKind: 'InferenceService',
      project: ns,
      deployment: 'mnist',
      kind: 'predictive',
      modelServer: 'sklearn',
      modelName: 'mnist',
      verbs: ['predict'],
      protocol: 'v2',
      pathPrefix: undefined,
      backend: { ...endpoint, service: 'mnist-predictor' },
      notReady: undefined,
    });
    expect(route('llama')).toEqual({
      resourceKind: 'InferenceService',
      project: ns,
      deployment: 'llama',
      kind: 'llm',
      modelServer: 'llm',
      modelName: undefined,
      verbs: [],
      protocol: undefined,
      pathPrefix: '/openai',
      backend: {
        kind: 'service',
        namespace: ns,
        service: 'llama-predictor',
        port: 80,
        externalName: 'knative-local-gateway.istio-system.svc.cluster.local',
      },
      notReady: undefined,
    });
    const base = `${buildOptions.publicUrl}/v1/${ns}`;
    expect(
      statuses
        .map((s) => ({
          id: s.id,
          ready: s.ready,
          reason: s.reason,
          url: s.url,
          inferenceUrl: s.inferenceUrl,
          openaiUrl: s.openaiUrl,
        }))
        .sort((a, b) => a.id.localeCompare(b.id)),
    ).toEqual([
      {
        id: `${ns}/iris`,
        ready: true,
        reason: 'Routed',
        url: `${base}/iris`,
        inferenceUrl: `${base}/iris/v1/models/iris:predict`,
        openaiUrl: undefined,
      },
      {
        id: `${ns}/llama`,
        ready: true,
        reason: 'Routed',
        url: `${base}/llama`,
        inferenceUrl: undefined,
        openaiUrl: `${base}/llama/v1`,
      },
      {
        id: `${ns}/mnist`,
        ready: true,
        reason: 'Routed',
        url: `${base}/mnist`,
        inferenceUrl: `${base}/mnist/v2/models/mnist/infer`,
        openaiUrl: undefined,
      },
    ]);
  });

  test('the raw-mode predictors resolve to the ready endpoints of their EndpointSlices', () => {
    const { table } = buildRouteTable(last(), buildOptions);
    const endpoints = (name: string) => {
      const b = table.routes.find((x) => x.id === `${ns}/${name}`)!.backend;
      return b.kind === 'service' ? source.endpoints(b) : undefined;
    };
    expect(endpoints('iris')).toEqual([{ host: '10.244.0.5', port: 8080 }]);
    expect(endpoints('mnist')).toEqual([{ host: '10.244.0.6', port: 8080 }]);
  });

  test('KServe turning Ready=False (a status write) reaches the route through the watch: kept, marked not ready with the reason KServe gives (the gateway answers 503)', async () => {
    const r = await cluster.request(
      'PATCH',
      `${ISVC}/mnist/status`,
      {
        status: kserveStatus('mnist', 'RawDeployment', false, [
          'RevisionMissing',
          'Revision "mnist-predictor-00002" failed',
        ]),
      },
      'application/merge-patch+json',
    );
    expect(r.status).toBe(200);
    await waitFor(
      () => buildRouteTable(last(), buildOptions).table.routes.find((x) => x.name === 'mnist')?.notReady !== undefined,
      'the not-ready InferenceService in a snapshot',
      10_000,
    );
    const { table, statuses } = buildRouteTable(last(), buildOptions);
    expect(table.routes.find((x) => x.name === 'mnist')?.notReady).toBe(
      'the InferenceService is not ready (Ready=False, RevisionMissing: Revision "mnist-predictor-00002" failed)',
    );
    expect(statuses.find((s) => s.name === 'mnist')).toMatchObject({
      ready: false,
      reason: 'InferenceServiceNotReady',
    });
  });
});

// ---- the chart's optional objects against their CRDs ----

const HELM = join(ROOT, 'node_modules', '.cache', 'servegate-helm', 'helm');

describe("the chart's HTTPRoute, ServiceMonitor and PrometheusRule", () => {
  test('are accepted by the Gateway API and prometheus-operator schemas (server-side dry run, strict)', async () => {
    const helm = process.env.HELM ?? HELM;
    expect(existsSync(helm) || process.env.HELM !== undefined).toBe(true);
    const chartNs = `${ns}-chart`;
    expectSuccess(await cluster.kubectl(['create', 'namespace', chartNs]));
    const rendered = expectSuccess(
      await runProcess(
        helm,
        [
          'template',
          'servegate',
          join(ROOT, 'charts', 'servegate'),
          '-n',
          chartNs,
          '--set',
          'gateway.publicUrl=https://models.example.com',
          '--set',
          'httpRoute.enabled=true',
          '--set',
          'httpRoute.parentRefs[0].name=public',
          '--set',
          'httpRoute.parentRefs[0].namespace=gateways',
          '--set',
          'httpRoute.parentRefs[0].sectionName=https',
          '--set',
          'serviceMonitor.enabled=true',
          '--set',
          'serviceMonitor.labels.release=prometheus',
          '--set',
          'prometheusRule.enabled=true',
          '--set',
          'prometheusRule.labels.release=prometheus',
        ],
        { timeoutMs: 60_000, cwd: ROOT },
      ),
    ).stdout;
    const wanted = parseAllDocuments(rendered)
      .map((d) => d.toJS() as Json | null)
      .filter((d): d is Json => !!d && ['HTTPRoute', 'ServiceMonitor', 'PrometheusRule'].includes(d.kind));
    expect(wanted.map((d) => d.kind).sort()).toEqual(['HTTPRoute', 'PrometheusRule', 'ServiceMonitor']);
    const r = await cluster.kubectl(['apply', '--dry-run=server', '--validate=strict', '-f', '-'], {
      input: JSON.stringify({ apiVersion: 'v1', kind: 'List', items: wanted }),
    });
    expect(`${r.stdout}${r.stderr}`).toBe(
      [
        'httproute.gateway.networking.k8s.io/servegate created (server dry run)',
        'prometheusrule.monitoring.coreos.com/servegate created (server dry run)',
        'servicemonitor.monitoring.coreos.com/servegate created (server dry run)',
        '',
      ].join('\n'),
    );
  });
});
