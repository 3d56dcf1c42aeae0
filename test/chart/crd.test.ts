// The ServingDeployment CRD: structural, its schema accepts the examples and rejects bad objects,
// and its CEL rules (which only a real API server evaluates) say what their hand-written twins below say.
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { Ajv, type ValidateFunction } from 'ajv';
import { describe, test } from '@jest/globals';
import { expect } from '../support/expect.js';
import { parseAllDocuments, parse as parseYaml } from 'yaml';
import { buildRouteTable } from '../../src/routing/build.js';
import { DNS_LABEL, isDnsLabel, MODEL_NAME, PROJECT_NAME, SERVED_MODEL_NAME } from '../../src/routing/names.js';
import type { ServingDeploymentResource } from '../../src/routing/types.js';
import { desiredStatus } from '../../src/controller/status.js';
import { buildOptions, sdep, service, snapshot } from '../support/fixtures.js';

type Json = Record<string, any>;
import { ROOT } from '../support/paths.js';
const CRD_FILE = join(ROOT, 'crds', 'servingdeployments.serving.servegate.dev.yaml');
const crd: Json = parseYaml(readFileSync(CRD_FILE, 'utf8'));
const version: Json = crd.spec.versions[0];
const schema: Json = version.schema.openAPIV3Schema;

// ---- structural-schema check (apiextensions.k8s.io/v1 rules) ----

/** Every problem that would make the API server reject the schema as non-structural, with its path. */
function structuralProblems(node: Json, path: string, inJunctor = false, problems: string[] = []): string[] {
  const forbiddenEverywhere = [
    '$ref',
    'definitions',
    'id',
    '$schema',
    'dependencies',
    'patternProperties',
    'additionalItems',
  ];
  for (const k of forbiddenEverywhere) if (k in node) problems.push(`${path}: ${k} is not allowed`);
  if (node.uniqueItems === true) problems.push(`${path}: uniqueItems: true is not allowed`);
  if (node.additionalProperties === false) problems.push(`${path}: additionalProperties: false is not allowed`);
  if (node.properties && node.additionalProperties !== undefined)
    problems.push(`${path}: properties and additionalProperties together`);
  const opaque = node['x-kubernetes-int-or-string'] === true || node['x-kubernetes-preserve-unknown-fields'] === true;
  if (inJunctor) {
    for (const k of ['type', 'description', 'default', 'additionalProperties', 'nullable']) {
      if (k in node) problems.push(`${path}: ${k} inside allOf/anyOf/oneOf/not`);
    }
  } else if (!opaque && typeof node.type !== 'string') {
    problems.push(`${path}: no type`);
  }
  for (const [k, child] of Object.entries<Json>(node.properties ?? {}))
    structuralProblems(child, `${path}.${k}`, inJunctor, problems);
  if (node.items) structuralProblems(node.items, `${path}[]`, inJunctor, problems);
  if (typeof node.additionalProperties === 'object')
    structuralProblems(node.additionalProperties, `${path}.*`, inJunctor, problems);
  for (const j of ['allOf', 'anyOf', 'oneOf'])
    for (const [i, child] of (node[j] ?? []).entries()) structuralProblems(child, `${path}.${j}[${i}]`, true, problems);
  if (node.not) structuralProblems(node.not, `${path}.not`, true, problems);
  for (const r of node.required ?? [])
    if (!inJunctor && !(r in (node.properties ?? {})))
      problems.push(`${path}: required "${r}" is not a declared property`);
  if ('default' in node && path.includes('metadata')) problems.push(`${path}: default under metadata`);
  return problems;
}

// ---- OpenAPI v3.0 (Kubernetes flavour) → JSON Schema for ajv ----

/**
 * Drops x-kubernetes-* extensions, turns the boolean exclusiveMinimum/Maximum of OpenAPI 3.0 into draft-07 numbers,
 * and closes every object with declared properties (kubectl's default strict field validation rejects unknown fields).
 */
function toJsonSchema(node: Json, path = ''): Json {
  const out: Json = {};
  for (const [k, v] of Object.entries(node)) {
    if (k.startsWith('x-kubernetes-')) continue;
    if (k === 'properties')
      out.properties = Object.fromEntries(
        Object.entries<Json>(v).map(([p, s]) => [p, toJsonSchema(s, `${path}.${p}`)]),
      );
    else if (k === 'items') out.items = toJsonSchema(v, `${path}[]`);
    else out[k] = v;
  }
  if (node.exclusiveMinimum === true) {
    out.exclusiveMinimum = node.minimum;
    delete out.minimum;
  }
  if (node.exclusiveMaximum === true) {
    out.exclusiveMaximum = node.maximum;
    delete out.maximum;
  }
  if (node.type === 'object' && node.properties && path !== '.metadata') out.additionalProperties = false;
  return out;
}

const ajv = new Ajv({
  allErrors: true,
  strict: true,
  formats: { int64: true, 'date-time': /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$/ },
});
const validateSchema: ValidateFunction = ajv.compile(toJsonSchema(schema));

// ---- the CEL rules, each with a hand-written twin that states its intent ----

interface Rule {
  at: string;
  rule: string;
  message: string;
}

function collectRules(node: Json, at: string, out: Rule[] = []): Rule[] {
  for (const v of node['x-kubernetes-validations'] ?? []) out.push({ at, rule: v.rule, message: v.message });
  for (const [k, child] of Object.entries<Json>(node.properties ?? {})) collectRules(child, at ? `${at}.${k}` : k, out);
  if (node.items) collectRules(node.items, `${at}[]`, out);
  return out;
}
const rules = collectRules(schema, '');

const has = (o: Json, k: string) => o[k] !== undefined;
/** What each rule means, keyed by its exact text: a rule that changes without its twin fails the test below. */
const celTwins: Record<string, (self: Json) => boolean> = {
  "size(self.metadata.name) <= 63 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')": (self) =>
    isDnsLabel(self.metadata.name),
  "self.type == 'model' ? has(self.modelServer) : !has(self.modelServer)": (self) =>
    self.type === 'model' ? has(self, 'modelServer') : !has(self, 'modelServer'),
  "self.type == 'model' || !has(self.modelName)": (self) => self.type === 'model' || !has(self, 'modelName'),
  "!has(self.modelName) || (has(self.modelServer) && self.modelServer == 'llm') || self.modelName.matches('^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$')":
    (self) => !has(self, 'modelName') || self.modelServer === 'llm' || MODEL_NAME.test(self.modelName),
  '(has(self.service) && has(self.port) && !has(self.url)) || (has(self.url) && !has(self.service) && !has(self.port))':
    (self) =>
      (has(self, 'service') && has(self, 'port') && !has(self, 'url')) ||
      (has(self, 'url') && !has(self, 'service') && !has(self, 'port')),
  '(has(self.service) && has(self.port) && !has(self.url) && !has(self.urls)) || (has(self.url) && !has(self.service) && !has(self.port) && !has(self.urls)) || (has(self.urls) && !has(self.service) && !has(self.port) && !has(self.url))':
    (self) => {
      const [service, port, url, urls] = ['service', 'port', 'url', 'urls'].map((k) => has(self, k));
      return (
        (service && port && !url && !urls) || (url && !service && !port && !urls) || (urls && !service && !port && !url)
      );
    },
  "!has(self.protocol) || self.protocol == 'v1' || (self.type == 'model' && has(self.modelServer) && self.modelServer != 'llm')":
    (self) =>
      !has(self, 'protocol') ||
      self.protocol === 'v1' ||
      (self.type === 'model' && has(self, 'modelServer') && self.modelServer !== 'llm'),
  "!self.split('/').exists(s, s == '.' || s == '..')": (self) =>
    !(self as unknown as string).split('/').some((s) => s === '.' || s === '..'),
};

function at(obj: Json, path: string): unknown {
  return path === '' ? obj : path.split('.').reduce<any>((o, k) => (o == null ? undefined : o[k]), obj);
}

/** What `kubectl apply` would answer: schema errors, then the CEL rules of the nodes that are present. */
function admit(obj: Json): string[] {
  const errors: string[] = [];
  if (!validateSchema(obj)) errors.push(...validateSchema.errors!.map((e) => `${e.instancePath || '/'} ${e.message}`));
  for (const r of rules) {
    const self = at(obj, r.at);
    if (self === undefined || errors.some((e) => e.startsWith(`/${r.at.replace(/\./g, '/')}`) && r.at !== '')) continue;
    if (!celTwins[r.rule](self as Json)) errors.push(`${r.at || '<root>'}: ${r.message}`);
  }
  return errors;
}

// ---- fixtures ----

function obj(name: string, spec: Json, namespace = 'demo'): Json {
  return {
    apiVersion: 'serving.servegate.dev/v1alpha1',
    kind: 'ServingDeployment',
    metadata: { name, namespace },
    spec,
  };
}

const good: Array<[string, Json]> = [
  [
    'sklearn model',
    obj(
      'fraud',
      {
        project: 'fraud_detection',
        type: 'model',
        modelServer: 'sklearn',
        modelName: 'fraud',
        backend: { service: 'fraud-predictor', port: 8080 },
        timeoutSeconds: 60,
      },
      'fraud-detection',
    ),
  ],
  [
    'tensorflow model, defaults',
    obj('tf', { type: 'model', modelServer: 'tensorflow', backend: { service: 'tf', port: 8501 } }),
  ],
  [
    'llm model, fractional timeout',
    obj('chat', { type: 'model', modelServer: 'llm', backend: { service: 'vllm', port: 8000 }, timeoutSeconds: 0.5 }),
  ],
  [
    'llm model serving a Hugging Face id',
    obj('llama', {
      type: 'model',
      modelServer: 'llm',
      modelName: 'meta-llama/Llama-3.1-8B-Instruct',
      backend: { service: 'vllm', port: 8000 },
    }),
  ],
  ['python model server', obj('py', { type: 'model', modelServer: 'python', backend: { service: 'py', port: 1 } })],
  ['python server', obj('app', { type: 'python', backend: { service: 'app', port: 65535 } })],
  ['files-source url backend', obj('local', { type: 'python', backend: { url: 'http://127.0.0.1:8081' } })],
];

const bad: Array<[string, Json, RegExp]> = [
  [
    'type model without modelServer',
    obj('a', { type: 'model', backend: { service: 's', port: 80 } }),
    /modelServer is required/,
  ],
  [
    'type python with modelServer',
    obj('a', { type: 'python', modelServer: 'sklearn', backend: { service: 's', port: 80 } }),
    /modelServer is required when type is model, and not allowed/,
  ],
  [
    'modelName on type python',
    obj('a', { type: 'python', modelName: 'm', backend: { service: 's', port: 80 } }),
    /modelName is only allowed/,
  ],
  [
    'unknown type',
    obj('a', { type: 'job', backend: { service: 's', port: 80 } }),
    /spec\/type must be equal to one of the allowed values/,
  ],
  [
    'unknown modelServer',
    obj('a', { type: 'model', modelServer: 'pytorch', backend: { service: 's', port: 80 } }),
    /modelServer must be equal to one of the allowed values/,
  ],
  [
    'project with a dot',
    obj('a', { project: 'a.b', type: 'python', backend: { service: 's', port: 80 } }),
    /spec\/project must match pattern/,
  ],
  [
    'project ending in _',
    obj('a', { project: 'ab_', type: 'python', backend: { service: 's', port: 80 } }),
    /spec\/project must match pattern/,
  ],
  [
    'project of 64 characters',
    obj('a', { project: 'p'.repeat(64), type: 'python', backend: { service: 's', port: 80 } }),
    /spec\/project must NOT have more than 63/,
  ],
  [
    'model name with a slash',
    obj('a', { type: 'model', modelServer: 'sklearn', modelName: 'a/b', backend: { service: 's', port: 80 } }),
    /modelName of a predictive server must be/,
  ],
  [
    'LLM model name with a space',
    obj('a', { type: 'model', modelServer: 'llm', modelName: 'a b', backend: { service: 's', port: 80 } }),
    /modelName must match pattern/,
  ],
  [
    'service not a DNS label',
    obj('a', { type: 'python', backend: { service: 'My_Svc', port: 80 } }),
    /backend\/service must match pattern/,
  ],
  ['port 0', obj('a', { type: 'python', backend: { service: 's', port: 0 } }), /backend\/port must be >= 1/],
  [
    'port 70000',
    obj('a', { type: 'python', backend: { service: 's', port: 70000 } }),
    /backend\/port must be <= 65535/,
  ],
  [
    'port as a string',
    obj('a', { type: 'python', backend: { service: 's', port: '80' } }),
    /backend\/port must be integer/,
  ],
  ['service without port', obj('a', { type: 'python', backend: { service: 's' } }), /either service and port, or url/],
  [
    'service and url',
    obj('a', { type: 'python', backend: { service: 's', port: 80, url: 'http://x:1' } }),
    /either service and port, or url/,
  ],
  ['empty backend', obj('a', { type: 'python', backend: {} }), /either service and port, or url/],
  ['https url', obj('a', { type: 'python', backend: { url: 'https://x' } }), /backend\/url must match pattern/],
  [
    'timeout 0',
    obj('a', { type: 'python', backend: { service: 's', port: 80 }, timeoutSeconds: 0 }),
    /timeoutSeconds must be > 0/,
  ],
  ['no backend', obj('a', { type: 'python' }), /must have required property 'backend'/],
  [
    'no spec',
    {
      apiVersion: 'serving.servegate.dev/v1alpha1',
      kind: 'ServingDeployment',
      metadata: { name: 'a', namespace: 'demo' },
    },
    /must have required property 'spec'/,
  ],
  [
    'unknown spec field (strict field validation)',
    obj('a', { type: 'python', backend: { service: 's', port: 80 }, replicas: 2 }),
    /must NOT have additional properties/,
  ],
  ['name with a dot', obj('a.b', { type: 'python', backend: { service: 's', port: 80 } }), /DNS-1123 label/],
  ['upper-case name', obj('Fraud', { type: 'python', backend: { service: 's', port: 80 } }), /DNS-1123 label/],
  [
    'name of 64 characters',
    obj('n'.repeat(64), { type: 'python', backend: { service: 's', port: 80 } }),
    /DNS-1123 label/,
  ],
];

/** ServingDeployment documents under examples/ (examples/cluster for kubectl, the rest for the files source). */
function examplesOf(): Array<[string, Json]> {
  const dir = join(ROOT, 'examples');
  if (!existsSync(dir)) return [];
  const files = readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .filter((f) => /\.ya?ml$/.test(f) && statSync(join(dir, f)).isFile())
    .sort();
  const out: Array<[string, Json]> = [];
  for (const f of files) {
    parseAllDocuments(readFileSync(join(dir, f), 'utf8')).forEach((d, i) => {
      const doc = d.toJS();
      const docs = doc?.kind === 'List' ? doc.items : [doc];
      for (const o of docs ?? []) if (o?.kind === 'ServingDeployment') out.push([`examples/${f}#${i + 1}`, o]);
    });
  }
  return out;
}

// ---- tests ----

describe('the CRD', () => {
  test('names ServingDeployment in serving.servegate.dev, plural servingdeployments, short name sdep, category servegate', () => {
    expect(crd.apiVersion).toBe('apiextensions.k8s.io/v1');
    expect(crd.kind).toBe('CustomResourceDefinition');
    expect(crd.metadata.name).toBe(`${crd.spec.names.plural}.${crd.spec.group}`);
    expect(crd.spec.group).toBe('serving.servegate.dev');
    expect(crd.spec.scope).toBe('Namespaced');
    expect(crd.spec.names).toMatchObject({
      kind: 'ServingDeployment',
      plural: 'servingdeployments',
      singular: 'servingdeployment',
      shortNames: ['sdep'],
      categories: ['servegate'],
    });
    expect(crd.spec.versions).toHaveLength(1);
    expect(version).toMatchObject({ name: 'v1alpha1', served: true, storage: true, subresources: { status: {} } });
  });

  test('its schema is structural', () => {
    expect(structuralProblems(schema, '<root>')).toEqual([]);
    expect(schema.type).toBe('object');
  });

  test('the structural check catches what it claims to (a node without type, a forbidden key)', () => {
    const broken = structuredClone(schema);
    delete broken.properties.spec.properties.project.type;
    broken.properties.spec.properties.backend.properties.port.uniqueItems = true;
    broken.properties.spec.properties.backend.properties.port.$ref = '#/x';
    expect(structuralProblems(broken, '<root>')).toEqual([
      '<root>.spec.project: no type',
      '<root>.spec.backend.port: $ref is not allowed',
      '<root>.spec.backend.port: uniqueItems: true is not allowed',
    ]);
  });

  test('kubectl get sdep -A shows Project, Type, Server, URL, Ready, Age', () => {
    const cols = version.additionalPrinterColumns as Json[];
    expect(cols.filter((c) => !c.priority).map((c) => c.name)).toEqual([
      'Project',
      'Type',
      'Server',
      'URL',
      'Ready',
      'Age',
    ]);
    const byName = Object.fromEntries(cols.map((c) => [c.name, c]));
    expect(byName.Ready.jsonPath).toBe('.status.conditions[?(@.type=="Ready")].status');
    expect(byName.Age).toMatchObject({ type: 'date', jsonPath: '.metadata.creationTimestamp' });
    // Every simple column path names a field the schema declares.
    for (const c of cols.filter((c) => !c.jsonPath.includes('[') && !c.jsonPath.startsWith('.metadata'))) {
      const node = c.jsonPath
        .slice(1)
        .split('.')
        .reduce((n: Json | undefined, k: string) => n?.properties?.[k], schema);
      expect(node, c.jsonPath).toBeDefined();
    }
  });

  test('the schema patterns are the ones the builder uses', () => {
    const spec = schema.properties.spec.properties;
    expect(spec.project.pattern).toBe(PROJECT_NAME.source);
    expect(spec.modelName.pattern).toBe(SERVED_MODEL_NAME.source);
    expect(
      schema.properties.spec['x-kubernetes-validations'].some((v: { rule: string }) =>
        v.rule.includes(`'${MODEL_NAME.source}'`),
      ),
    ).toBe(true);
    expect(spec.backend.properties.service.pattern).toBe(DNS_LABEL.source);
  });

  test('every CEL rule has a hand-written twin here (so a changed rule breaks this test until its twin changes too)', () => {
    expect([...new Set(rules.map((r) => r.rule))].sort()).toEqual(Object.keys(celTwins).sort());
    expect(rules.map((r) => r.at).sort()).toEqual([
      '',
      'spec',
      'spec',
      'spec',
      'spec',
      'spec.backend',
      'spec.backend.path',
      'spec.canary.backend',
    ]);
  });

  test('the status schema accepts what the controller writes', () => {
    const statuses = buildRouteTable(
      snapshot({
        source: 'kubernetes',
        deployments: [
          sdep('demo/iris').sklearn().backend('iris', 80).build(),
          sdep('demo/chat').llm().backend('chat', 80).build(),
          sdep('demo/app').python().backend('app', 80).project('Bad_Host_').build(),
          sdep('demo/gone').python().backend('gone', 80).build(),
        ],
        services: ['iris', 'chat', 'app'].map((n) => service(`demo/${n}`, [{ port: 80 }])),
      }),
      buildOptions,
    ).statuses;
    expect(statuses.length).toBe(4);
    for (const ds of statuses) {
      const o = obj(ds.name, { type: 'python', backend: { service: 's', port: 80 } });
      o.status = desiredStatus(ds, undefined, new Date(), { project: 'demo' });
      expect(admit(o), ds.id).toEqual([]);
    }
  });
});

describe('kubectl apply', () => {
  const examples = examplesOf();

  test('examples/cluster has ServingDeployments for the checks below', () => {
    expect(examples.filter(([f]) => f.startsWith('examples/cluster/')).length).toBeGreaterThan(0);
  });

  test.each([...good, ...examples])('accepts %s', (_name, o) => {
    expect(admit(o)).toEqual([]);
  });

  test.each(bad)('rejects %s', (_name, o, why) => {
    const errors = admit(o);
    expect(errors.join('\n')).toMatch(why);
  });

  test('what the CRD accepts in a cluster the builder routes (no InvalidSpec surprises for service backends)', () => {
    const deployments = [...good, ...examples]
      .map(([, o]) => o as Json)
      .filter((o) => o.spec.backend?.service)
      .map((o, i): ServingDeploymentResource => ({
        ...(o as ServingDeploymentResource),
        metadata: { ...o.metadata, namespace: `ns${i}` },
      }));
    const services = deployments.map((d) => {
      const b = (d.spec as Json).backend;
      return service(`${d.metadata.namespace}/${b.service}`, [{ port: b.port }]);
    });
    const { statuses } = buildRouteTable(snapshot({ source: 'kubernetes', deployments, services }), buildOptions);
    expect(statuses.filter((s) => !s.ready)).toEqual([]);
    expect(statuses.length).toBe(deployments.length);
  });

  test('the chart ships the same CRD files byte for byte', () => {
    const chartCrds = join(ROOT, 'charts', 'servegate', 'crds');
    if (!existsSync(join(ROOT, 'charts', 'servegate'))) {
      expect(existsSync(chartCrds)).toBe(false);
      return;
    }
    for (const f of readdirSync(join(ROOT, 'crds'))) {
      expect(readFileSync(join(chartCrds, f), 'utf8'), `charts/servegate/crds/${f}`).toBe(
        readFileSync(join(ROOT, 'crds', f), 'utf8'),
      );
    }
  });
});
