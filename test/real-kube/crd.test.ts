// The ServingDeployment CRD on the real kube-apiserver: crds/ applies, every CEL rule and schema constraint gets the
// server's own refusal (the whole message, as docs/controller.md gives it), every example is accepted, `kubectl get
// sdep` prints the printer columns, and status changes only through the status subresource.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, test } from '@jest/globals';
import { parse as parseYaml, parseAllDocuments } from 'yaml';
import { sharedKubeCluster, type KubeCluster } from '../support/kube.js';
import { expectSuccess } from '../support/processes.js';
import { ROOT } from '../support/paths.js';

type Json = Record<string, any>;

const GROUP = 'serving.servegate.dev';
const CRD_FILE = join(ROOT, 'crds', `servingdeployments.${GROUP}.yaml`);
const DOCS = join(ROOT, 'docs', 'controller.md');

let cluster: KubeCluster;
/** A namespace of this file's own (the shared cluster never finishes deleting one, so each run takes a new one). */
const ns = `crd-${Date.now().toString(36)}`;
const collection = (namespace = ns) => `/apis/${GROUP}/v1alpha1/namespaces/${namespace}/servingdeployments`;

beforeAll(async () => {
  cluster = await sharedKubeCluster();
  expectSuccess(await cluster.kubectl(['apply', '-f', join(ROOT, 'crds')]));
  expectSuccess(
    await cluster.kubectl(['wait', '--for=condition=Established', `crd/servingdeployments.${GROUP}`, '--timeout=30s']),
  );
  expectSuccess(await cluster.kubectl(['create', 'namespace', ns]));
}, 180_000);

function sdep(name: string, spec: Json | undefined): Json {
  return {
    apiVersion: `${GROUP}/v1alpha1`,
    kind: 'ServingDeployment',
    metadata: { name },
    ...(spec === undefined ? {} : { spec }),
  };
}
const svc = { service: 's', port: 80 };
const python = (extra: Json = {}) => ({ type: 'python', backend: svc, ...extra });
const sklearn = (extra: Json = {}) => ({ type: 'model', modelServer: 'sklearn', backend: svc, ...extra });

/** A server-side dry-run create with kubectl's default strict field validation: "<code> <message>" or "<code>". */
async function dryRunCreate(o: Json, namespace = ns): Promise<string> {
  const r = await cluster.request('POST', `${collection(namespace)}?dryRun=All&fieldValidation=Strict`, o);
  if (r.status === 201) return '201';
  const status = JSON.parse(r.body) as { message?: string };
  return `${r.status} ${status.message}`;
}

const invalid = (name: string, ...causes: string[]) =>
  `422 ServingDeployment.${GROUP} "${name}" is invalid: ` +
  (causes.length === 1 ? causes[0] : `[${causes.join(', ')}]`);
/** What the server adds when a schema error stops it from evaluating the CEL rules. */
const CEL_SKIPPED =
  '<nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation';

// Each row: what is broken, the manifest, the server's whole answer. The cause lines (after "is invalid: ") are the
// ones docs/controller.md gives, checked below.
const table: Array<[string, Json, string]> = [
  // ---- the eight CEL rules (x-kubernetes-validations) ----
  [
    'name with a dot',
    sdep('a.b', python()),
    invalid(
      'a.b',
      "metadata.name: Invalid value: metadata.name is the deployment name in URLs and hostnames: it must be a DNS-1123 label (lower-case a-z, 0-9 and '-', at most 63 characters, starting and ending with a letter or digit)",
    ),
  ],
  [
    'name of 64 characters',
    sdep('n'.repeat(64), python()),
    invalid(
      'n'.repeat(64),
      "metadata.name: Invalid value: metadata.name is the deployment name in URLs and hostnames: it must be a DNS-1123 label (lower-case a-z, 0-9 and '-', at most 63 characters, starting and ending with a letter or digit)",
    ),
  ],
  [
    'type model without modelServer',
    sdep('a', { type: 'model', backend: svc }),
    invalid(
      'a',
      'spec.modelServer: Invalid value: modelServer is required when type is model, and not allowed when type is python',
    ),
  ],
  [
    'type python with modelServer',
    sdep('a', python({ modelServer: 'sklearn' })),
    invalid(
      'a',
      'spec.modelServer: Invalid value: modelServer is required when type is model, and not allowed when type is python',
    ),
  ],
  [
    'modelName on type python',
    sdep('a', python({ modelName: 'm' })),
    invalid('a', 'spec.modelName: Forbidden: modelName is only allowed when type is model'),
  ],
  [
    'predictive modelName with a slash',
    sdep('a', sklearn({ modelName: 'a/b' })),
    invalid(
      'a',
      "spec.modelName: Invalid value: modelName of a predictive server must be letters, digits, '_', '.' or '-' (it is a URL path segment)",
    ),
  ],
  [
    'protocol v2 on an LLM server',
    sdep('a', { type: 'model', modelServer: 'llm', backend: svc, protocol: 'v2' }),
    invalid(
      'a',
      'spec.protocol: Invalid value: protocol v2 (Open Inference Protocol) is for predictive model servers only',
    ),
  ],
  [
    'protocol v2 on type python',
    sdep('a', python({ protocol: 'v2' })),
    invalid(
      'a',
      'spec.protocol: Invalid value: protocol v2 (Open Inference Protocol) is for predictive model servers only',
    ),
  ],
  [
    'backend service without port',
    sdep('a', { type: 'python', backend: { service: 's' } }),
    invalid(
      'a',
      'spec.backend: Invalid value: backend takes either service and port, or url, or urls (url and urls: files source only): exactly one',
    ),
  ],
  [
    'backend service and url',
    sdep('a', { type: 'python', backend: { ...svc, url: 'http://x:1' } }),
    invalid(
      'a',
      'spec.backend: Invalid value: backend takes either service and port, or url, or urls (url and urls: files source only): exactly one',
    ),
  ],
  [
    'backend url and urls',
    sdep('a', { type: 'python', backend: { url: 'http://x:1', urls: ['http://y:1'] } }),
    invalid(
      'a',
      'spec.backend: Invalid value: backend takes either service and port, or url, or urls (url and urls: files source only): exactly one',
    ),
  ],
  [
    'empty backend',
    sdep('a', { type: 'python', backend: {} }),
    invalid(
      'a',
      'spec.backend: Invalid value: backend takes either service and port, or url, or urls (url and urls: files source only): exactly one',
    ),
  ],
  [
    'backend.path with a .. segment',
    sdep('a', { type: 'python', backend: { ...svc, path: '/a/../b' } }),
    invalid('a', `spec.backend.path: Invalid value: "/a/../b": backend.path has no '.' or '..' segments`),
  ],
  [
    'canary backend with service and url',
    sdep('a', python({ canary: { percent: 10, backend: { ...svc, url: 'http://x:1' } } })),
    invalid(
      'a',
      'spec.canary.backend: Invalid value: canary.backend takes either service and port, or url (files source only), not both',
    ),
  ],
  // ---- the OpenAPI schema: enums, patterns, lengths, ranges, required fields, unknown fields ----
  [
    'unknown type',
    sdep('a', { type: 'job', backend: svc }),
    invalid('a', 'spec.type: Unsupported value: "job": supported values: "model", "python"', CEL_SKIPPED),
  ],
  [
    'unknown modelServer',
    sdep('a', sklearn({ modelServer: 'pytorch' })),
    invalid(
      'a',
      'spec.modelServer: Unsupported value: "pytorch": supported values: "python", "sklearn", "tensorflow", "llm"',
      CEL_SKIPPED,
    ),
  ],
  [
    'project with a dot',
    sdep('a', python({ project: 'a.b' })),
    invalid(
      'a',
      `spec.project: Invalid value: "a.b": spec.project in body should match '^[A-Za-z0-9]([A-Za-z0-9_-]*[A-Za-z0-9])?$'`,
    ),
  ],
  [
    'project of 64 characters',
    sdep('a', python({ project: 'p'.repeat(64) })),
    invalid('a', 'spec.project: Too long: may not be more than 63 bytes', CEL_SKIPPED),
  ],
  [
    'empty project',
    sdep('a', python({ project: '' })),
    invalid('a', 'spec.project: Invalid value: "": spec.project in body should be at least 1 chars long'),
  ],
  [
    'LLM modelName with a space',
    sdep('a', { type: 'model', modelServer: 'llm', backend: svc, modelName: 'a b' }),
    invalid('a', `spec.modelName: Invalid value: "a b": spec.modelName in body should match '^[A-Za-z0-9_.:/@+-]+$'`),
  ],
  [
    'backend.service not a DNS label',
    sdep('a', { type: 'python', backend: { service: 'My_Svc', port: 80 } }),
    invalid(
      'a',
      `spec.backend.service: Invalid value: "My_Svc": spec.backend.service in body should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'`,
    ),
  ],
  [
    'backend.port 0',
    sdep('a', { type: 'python', backend: { service: 's', port: 0 } }),
    invalid('a', 'spec.backend.port: Invalid value: 0: spec.backend.port in body should be greater than or equal to 1'),
  ],
  [
    'backend.port 70000',
    sdep('a', { type: 'python', backend: { service: 's', port: 70000 } }),
    invalid(
      'a',
      'spec.backend.port: Invalid value: 70000: spec.backend.port in body should be less than or equal to 65535',
    ),
  ],
  [
    'backend.port as a string',
    sdep('a', { type: 'python', backend: { service: 's', port: '80' } }),
    invalid(
      'a',
      'spec.backend.port: Invalid value: "string": spec.backend.port in body must be of type integer: "string"',
      CEL_SKIPPED,
    ),
  ],
  [
    'backend.url https',
    sdep('a', { type: 'python', backend: { url: 'https://x' } }),
    invalid(
      'a',
      `spec.backend.url: Invalid value: "https://x": spec.backend.url in body should match '^http://[^\\s?#]+$'`,
    ),
  ],
  [
    'backend.urls empty',
    sdep('a', { type: 'python', backend: { urls: [] } }),
    invalid('a', 'spec.backend.urls: Invalid value: 0: spec.backend.urls in body should have at least 1 items'),
  ],
  [
    'backend.path without a leading slash',
    sdep('a', { type: 'python', backend: { ...svc, path: 'openai' } }),
    invalid(
      'a',
      `spec.backend.path: Invalid value: "openai": spec.backend.path in body should match '^(/[A-Za-z0-9._~!$&'()*+,;=:@-]+)+/?$'`,
    ),
  ],
  [
    'unknown protocol',
    sdep('a', sklearn({ protocol: 'v3' })),
    invalid('a', 'spec.protocol: Unsupported value: "v3": supported values: "v1", "v2"', CEL_SKIPPED),
  ],
  [
    'scaleFromZero.holdSeconds over an hour',
    sdep('a', python({ scaleFromZero: { holdSeconds: 3601 } })),
    invalid(
      'a',
      'spec.scaleFromZero.holdSeconds: Invalid value: 3601: spec.scaleFromZero.holdSeconds in body should be less than or equal to 3600',
    ),
  ],
  [
    'canary without percent',
    sdep('a', python({ canary: { backend: svc } })),
    invalid('a', 'spec.canary.percent: Required value', CEL_SKIPPED),
  ],
  [
    'canary percent 101',
    sdep('a', python({ canary: { percent: 101, backend: svc } })),
    invalid(
      'a',
      'spec.canary.percent: Invalid value: 101: spec.canary.percent in body should be less than or equal to 100',
    ),
  ],
  [
    'unknown balancing policy',
    sdep('a', python({ balancing: { policy: 'random' } })),
    invalid(
      'a',
      'spec.balancing.policy: Unsupported value: "random": supported values: "llm", "least-request", "round-robin"',
      CEL_SKIPPED,
    ),
  ],
  [
    'balancing.metricsPort 70000',
    sdep('a', python({ balancing: { metricsPort: 70000 } })),
    invalid(
      'a',
      'spec.balancing.metricsPort: Invalid value: 70000: spec.balancing.metricsPort in body should be less than or equal to 65535',
    ),
  ],
  [
    'nine fallbacks',
    sdep('a', python({ fallbacks: ['b', 'c', 'd', 'e', 'f', 'g', 'h', 'i', 'j'] })),
    invalid('a', 'spec.fallbacks: Too many: 9: must have at most 8 items', CEL_SKIPPED),
  ],
  [
    'a fallback with two slashes',
    sdep('a', python({ fallbacks: ['p/q/r'] })),
    invalid(
      'a',
      `spec.fallbacks[0]: Invalid value: "p/q/r": spec.fallbacks[0] in body should match '^([A-Za-z0-9_-]+/)?[a-z0-9]([-a-z0-9]*[a-z0-9])?$'`,
    ),
  ],
  [
    'timeoutSeconds 0',
    sdep('a', python({ timeoutSeconds: 0 })),
    invalid('a', 'spec.timeoutSeconds: Invalid value: 0: spec.timeoutSeconds in body should be greater than 0'),
  ],
  [
    'timeoutSeconds over a day',
    sdep('a', python({ timeoutSeconds: 86401 })),
    invalid(
      'a',
      'spec.timeoutSeconds: Invalid value: 86401: spec.timeoutSeconds in body should be less than or equal to 86400',
    ),
  ],
  [
    'negative requestsPerMinute',
    sdep('a', python({ limits: { requestsPerMinute: -1 } })),
    invalid(
      'a',
      'spec.limits.requestsPerMinute: Invalid value: -1: spec.limits.requestsPerMinute in body should be greater than or equal to 0',
    ),
  ],
  ['no backend', sdep('a', { type: 'python' }), invalid('a', 'spec.backend: Required value', CEL_SKIPPED)],
  ['no type', sdep('a', { backend: svc }), invalid('a', 'spec.type: Required value', CEL_SKIPPED)],
  ['no spec', sdep('a', undefined), invalid('a', 'spec: Required value', CEL_SKIPPED)],
  [
    'an unknown spec field (strict field validation, kubectl’s default)',
    sdep('a', python({ replicas: 2 })),
    `400 ServingDeployment in version "v1alpha1" cannot be handled as a ServingDeployment: strict decoding error: unknown field "spec.replicas"`,
  ],
];

describe('crds/ on the real API server', () => {
  test('the CRD applies and is established, with its names accepted', async () => {
    const r = await cluster.raw(`/apis/apiextensions.k8s.io/v1/customresourcedefinitions/servingdeployments.${GROUP}`);
    expect(r.status).toBe(200);
    const conditions = (JSON.parse(r.body) as Json).status.conditions as Json[];
    const byType = Object.fromEntries(conditions.map((c) => [c.type, c.status]));
    expect(byType).toMatchObject({ Established: 'True', NamesAccepted: 'True' });
    expect(byType.NonStructuralSchema).toBeUndefined();
    // Applying the same file again changes nothing (the chart's copy is the same bytes: test/chart/crd.test.ts).
    const again = expectSuccess(await cluster.kubectl(['apply', '-f', CRD_FILE]));
    expect(again.stdout.trim()).toBe(
      `customresourcedefinition.apiextensions.k8s.io/servingdeployments.${GROUP} unchanged`,
    );
  });

  test('the table covers every CEL rule of the CRD', () => {
    const crd = parseYaml(readFileSync(CRD_FILE, 'utf8')) as Json;
    const messages: string[] = [];
    const walk = (node: Json) => {
      for (const v of node['x-kubernetes-validations'] ?? []) messages.push(v.message as string);
      for (const child of Object.values<Json>(node.properties ?? {})) walk(child);
      if (node.items) walk(node.items as Json);
    };
    walk(crd.spec.versions[0].schema.openAPIV3Schema as Json);
    expect(messages).toHaveLength(8);
    const expected = table.map(([, , out]) => out).join('\n');
    for (const m of messages) expect(expected).toContain(`: ${m}`);
  });

  test.each(table)('refuses %s with the message docs/controller.md gives', async (_what, manifest, expected) => {
    expect(await dryRunCreate(manifest)).toBe(expected);
  });

  test('docs/controller.md gives each of those messages word for word', () => {
    const docs = readFileSync(DOCS, 'utf8');
    const missing: string[] = [];
    for (const [, , out] of table) {
      const causes = out.startsWith('422 ')
        ? out
            .replace(/^422 [^:]+ is invalid: /, '')
            .replace(/^\[(.*)\]$/, '$1')
            .split(/, (?=spec|metadata|<nil>)/)
        : [out.slice(4)];
      for (const c of causes) if (c !== CEL_SKIPPED && !docs.includes(c)) missing.push(c);
    }
    expect(missing).toEqual([]);
  });

  test('what kubectl apply prints for a refused manifest is the same message', async () => {
    const r = await cluster.kubectl(['apply', '-n', ns, '-f', '-'], {
      input: JSON.stringify(sdep('a', { type: 'model', backend: svc })),
    });
    expect(r.code).toBe(1);
    expect(r.stderr).toBe(
      'The ServingDeployment "a" is invalid: spec.modelServer: Invalid value: modelServer is required when type is model, and not allowed when type is python\n',
    );
  });
});

/** Every ServingDeployment document in examples/ and in the YAML blocks of docs/ and the README. */
function examples(): Array<[string, Json]> {
  const out: Array<[string, Json]> = [];
  const add = (origin: string, text: string) =>
    parseAllDocuments(text).forEach((d, i) => {
      const o = d.toJS() as Json | null;
      if (o?.kind === 'ServingDeployment') out.push([`${origin}#${i + 1}`, o]);
    });
  const exampleFiles = readdirSync(join(ROOT, 'examples'), { recursive: true, encoding: 'utf8' })
    .filter((f) => /\.ya?ml$/.test(f) && statSync(join(ROOT, 'examples', f)).isFile())
    .sort();
  for (const f of exampleFiles) add(`examples/${f}`, readFileSync(join(ROOT, 'examples', f), 'utf8'));
  const markdown = [
    'README.md',
    ...readdirSync(join(ROOT, 'docs'))
      .filter((f) => f.endsWith('.md'))
      .sort()
      .map((f) => `docs/${f}`),
  ];
  for (const f of markdown) {
    const blocks = readFileSync(join(ROOT, f), 'utf8').matchAll(/^```ya?ml\n([\s\S]*?)^```$/gm);
    let n = 0;
    for (const [, text] of blocks) {
      n++;
      if (/^kind: ServingDeployment\b/m.test(text)) add(`${f} block ${n}`, text);
    }
  }
  return out;
}

describe('the examples', () => {
  const all = examples();

  test('are found: examples/deployments.yaml, examples/cluster/demo.yaml and the docs', () => {
    const files = new Set(all.map(([origin]) => origin.replace(/( block \d+)?#\d+$/, '')));
    expect([...files].sort()).toEqual([
      'README.md',
      'docs/llm.md',
      'docs/spec.md',
      'examples/cluster/demo.yaml',
      'examples/deployments.yaml',
    ]);
  });

  test.each(all)('%s is accepted (server-side dry run, strict field validation)', async (_origin, o) => {
    const copy = structuredClone(o);
    copy.metadata.namespace = ns;
    expect(await dryRunCreate(copy)).toBe('201');
  });

  test('kubectl apply -f examples/cluster/demo.yaml creates every object (in a namespace of this test)', async () => {
    const demoNs = `${ns}-demo`;
    const text = readFileSync(join(ROOT, 'examples/cluster/demo.yaml'), 'utf8')
      .replace(/^( {2}name:) demo$/m, `$1 ${demoNs}`)
      .replace(/namespace: demo\b/g, `namespace: ${demoNs}`);
    const r = expectSuccess(await cluster.kubectl(['apply', '-f', '-'], { input: text }));
    expect(r.stdout).toBe(
      [
        `namespace/${demoNs} created`,
        ...['demo-v1', 'demo-llm', 'demo-echo', 'demo-fleet'].flatMap((n) => [
          `deployment.apps/${n} created`,
          `service/${n} created`,
        ]),
        ...['iris', 'mnist', 'chat', 'echo', 'fleet'].map((n) => `servingdeployment.${GROUP}/${n} created`),
        '',
      ].join('\n'),
    );
    expect(r.stderr).toBe('');
  });
});

/** Writes status through the status subresource, as the controller does (JSON merge patch). */
async function patchStatus(name: string, status: Json, namespace = ns): Promise<Json> {
  const r = await cluster.request(
    'PATCH',
    `${collection(namespace)}/${name}/status`,
    { status },
    'application/merge-patch+json',
  );
  expect(`${r.status} ${r.status === 200 ? '' : r.body}`).toBe('200 ');
  return JSON.parse(r.body) as Json;
}

async function create(o: Json, namespace = ns): Promise<Json> {
  const r = await cluster.request('POST', `${collection(namespace)}?fieldValidation=Strict`, o);
  expect(`${r.status} ${r.status === 201 ? '' : r.body}`).toBe('201 ');
  return JSON.parse(r.body) as Json;
}

async function get(name: string, namespace = ns): Promise<Json> {
  const r = await cluster.raw(`${collection(namespace)}/${name}`);
  expect(r.status).toBe(200);
  return JSON.parse(r.body) as Json;
}

const condition = (type: string, status: string, reason: string, message: string) => ({
  type,
  status,
  reason,
  message,
  lastTransitionTime: '2026-01-02T03:04:05Z',
  observedGeneration: 1,
});

describe('kubectl get sdep', () => {
  const printNs = `${ns}-print`;
  const base = 'https://models.example.com/v1';

  beforeAll(async () => {
    expectSuccess(await cluster.kubectl(['create', 'namespace', printNs]));
    await create(
      sdep('iris', sklearn({ project: 'fraud_detection', backend: { service: 'iris-predictor', port: 8080 } })),
      printNs,
    );
    await create(
      sdep('chat', { type: 'model', modelServer: 'llm', backend: { service: 'vllm', port: 8000 }, project: 'genai' }),
      printNs,
    );
    await create(sdep('app', python({ project: 'demo' })), printNs);
    await create(sdep('fresh', python({ project: 'demo' })), printNs);
    // What the controller writes (docs/controller.md), through the status subresource.
    await patchStatus(
      'iris',
      {
        observedGeneration: 1,
        project: 'fraud_detection',
        url: `${base}/fraud_detection/iris`,
        inferenceUrl: `${base}/fraud_detection/iris/v1/models/iris:predict`,
        hostname: 'iris.fraud-detection.models.example.com',
        conditions: [
          condition('Ready', 'True', 'Routed', 'served'),
          condition(
            'HostnameAssigned',
            'True',
            'Assigned',
            'requests with Host: iris.fraud-detection.models.example.com are routed here',
          ),
        ],
      },
      printNs,
    );
    await patchStatus(
      'chat',
      {
        observedGeneration: 1,
        project: 'genai',
        url: `${base}/genai/chat`,
        openaiUrl: `${base}/genai/chat/v1`,
        hostname: 'chat.genai.models.example.com',
        conditions: [condition('Ready', 'False', 'NoReadyEndpoints', 'no ready endpoint')],
      },
      printNs,
    );
    await patchStatus(
      'app',
      {
        observedGeneration: 1,
        project: 'demo',
        conditions: [condition('Ready', 'False', 'BackendNotFound', 'Service "s" not found')],
      },
      printNs,
    );
  });

  /** The output with the AGE column's values (the last column: 5s, 2m3s, 4h, 12d) replaced. */
  const withoutAge = (out: string) => out.replace(/ {3}\d+[smhd](\d+[smh])?\n/g, '   <age>\n');

  test('prints Project, Type, Server, URL, Ready and Age (fresh: no status yet)', async () => {
    const r = expectSuccess(await cluster.kubectl(['get', 'sdep', '-n', printNs]));
    expect(withoutAge(r.stdout)).toBe(
      [
        'NAME    PROJECT           TYPE     SERVER    URL                                                  READY   AGE',
        'app     demo              python                                                                  False   <age>',
        'chat    genai             model    llm       https://models.example.com/v1/genai/chat             False   <age>',
        'fresh                     python                                                                          <age>',
        'iris    fraud_detection   model    sklearn   https://models.example.com/v1/fraud_detection/iris   True    <age>',
        '',
      ].join('\n'),
    );
  });

  test('-o wide adds Reason and Hostname', async () => {
    const r = expectSuccess(await cluster.kubectl(['get', 'sdep', '-n', printNs, '-o', 'wide']));
    expect(withoutAge(r.stdout)).toBe(
      [
        'NAME    PROJECT           TYPE     SERVER    URL                                                  READY   REASON             HOSTNAME                                  AGE',
        'app     demo              python                                                                  False   BackendNotFound                                              <age>',
        'chat    genai             model    llm       https://models.example.com/v1/genai/chat             False   NoReadyEndpoints   chat.genai.models.example.com             <age>',
        'fresh                     python                                                                                                                                       <age>',
        'iris    fraud_detection   model    sklearn   https://models.example.com/v1/fraud_detection/iris   True    Routed             iris.fraud-detection.models.example.com   <age>',
        '',
      ].join('\n'),
    );
  });

  test('the category finds them', async () => {
    const r = expectSuccess(await cluster.kubectl(['get', 'servegate', '-n', printNs, '-o', 'name']));
    expect(r.stdout).toBe(['app', 'chat', 'fresh', 'iris'].map((n) => `servingdeployment.${GROUP}/${n}\n`).join(''));
  });
});

describe('status changes only through the status subresource', () => {
  const statusNs = `${ns}-status`;
  const status = {
    observedGeneration: 1,
    project: statusNs,
    conditions: [condition('Ready', 'True', 'Routed', 'served')],
  };

  beforeAll(async () => {
    expectSuccess(await cluster.kubectl(['create', 'namespace', statusNs]));
  });

  test('create ignores a status; the status subresource writes it and leaves spec and generation alone', async () => {
    const created = await create({ ...sdep('s1', python()), status }, statusNs);
    expect(created.status).toBeUndefined();
    expect(created.metadata.generation).toBe(1);
    const patched = await patchStatus('s1', { ...status, project: 'x' }, statusNs);
    expect(patched.status.project).toBe('x');
    // A status write that also carries a spec change: the spec part is ignored.
    const r = await cluster.request(
      'PATCH',
      `${collection(statusNs)}/s1/status`,
      { spec: { timeoutSeconds: 5 }, status: { project: 'y' } },
      'application/merge-patch+json',
    );
    expect(r.status).toBe(200);
    const after = await get('s1', statusNs);
    expect(after.spec).toEqual(python());
    expect(after.status.project).toBe('y');
    expect(after.metadata.generation).toBe(1);
  });

  test('a PATCH of the main resource that changes status leaves status as it was', async () => {
    await create(sdep('s2', python()), statusNs);
    await patchStatus('s2', status, statusNs);
    const r = await cluster.request(
      'PATCH',
      `${collection(statusNs)}/s2`,
      { status: { project: 'hijacked', conditions: null } },
      'application/merge-patch+json',
    );
    expect(r.status).toBe(200);
    const after = await get('s2', statusNs);
    expect(after.status).toEqual(status);
    expect(after.metadata.generation).toBe(1);
  });

  test('a PUT of the main resource changes spec and generation, never status', async () => {
    await create(sdep('s3', python()), statusNs);
    await patchStatus('s3', status, statusNs);
    const current = await get('s3', statusNs);
    current.spec.timeoutSeconds = 30;
    current.status = { project: 'hijacked' };
    const r = await cluster.request('PUT', `${collection(statusNs)}/s3`, current);
    expect(r.status).toBe(200);
    const after = await get('s3', statusNs);
    expect(after.spec.timeoutSeconds).toBe(30);
    expect(after.status).toEqual(status);
    expect(after.metadata.generation).toBe(2);
  });

  test('generation moves only with spec: labels and status leave it', async () => {
    await create(sdep('s4', python()), statusNs);
    const labelled = await cluster.request(
      'PATCH',
      `${collection(statusNs)}/s4`,
      { metadata: { labels: { team: 'a' } } },
      'application/merge-patch+json',
    );
    expect(labelled.status).toBe(200);
    await patchStatus('s4', status, statusNs);
    expect((await get('s4', statusNs)).metadata.generation).toBe(1);
    const specChanged = await cluster.request(
      'PATCH',
      `${collection(statusNs)}/s4`,
      { spec: { timeoutSeconds: 9 } },
      'application/merge-patch+json',
    );
    expect(specChanged.status).toBe(200);
    expect((await get('s4', statusNs)).metadata.generation).toBe(2);
  });

  test('the status subresource checks the status schema (a condition status outside True/False/Unknown)', async () => {
    await create(sdep('s5', python()), statusNs);
    const r = await cluster.request(
      'PATCH',
      `${collection(statusNs)}/s5/status`,
      { status: { conditions: [{ ...condition('Ready', 'Maybe', 'Routed', '') }] } },
      'application/merge-patch+json',
    );
    expect(`${r.status} ${(JSON.parse(r.body) as Json).message}`).toBe(
      `422 ServingDeployment.${GROUP} "s5" is invalid: [status.conditions[0].status: Unsupported value: "Maybe": supported values: "True", "False", "Unknown", ${CEL_SKIPPED}]`,
    );
  });
});
