// Parsing manifest text into ServingDeployments, key Secrets and InferenceServices.
import { describe, expect, test } from '@jest/globals';
import { combineManifests, parseManifests } from '../../src/sources/manifests.js';

const opts = { origin: 'app/models.yaml', keysNamespace: 'servegate' };
const b64 = (s: string) => Buffer.from(s, 'utf8').toString('base64');

const SDEP = `apiVersion: serving.servegate.dev/v1alpha1
kind: ServingDeployment
metadata: {name: iris, namespace: demo}
spec: {type: model, modelServer: sklearn, backend: {url: "http://127.0.0.1:8081"}}
`;

describe('parseManifests', () => {
  test('reads a ServingDeployment with its spec, namespace and origin', () => {
    const r = parseManifests(SDEP, opts);
    expect(r.errors).toEqual([]);
    expect(r.syntaxError).toBeUndefined();
    expect(r.deployments).toEqual([
      {
        apiVersion: 'serving.servegate.dev/v1alpha1',
        kind: 'ServingDeployment',
        metadata: { name: 'iris', namespace: 'demo' },
        spec: { type: 'model', modelServer: 'sklearn', backend: { url: 'http://127.0.0.1:8081' } },
        origin: 'app/models.yaml#1',
      },
    ]);
  });

  test.each([
    ['ServingDeployment', SDEP.replace('namespace: demo', 'labels: {a: b}'), 'deployments', 'default'],
    [
      'InferenceService',
      'apiVersion: serving.kserve.io/v1beta1\nkind: InferenceService\nmetadata: {name: flowers}\nspec: {predictor: {model: {modelFormat: {name: sklearn}}}}\n',
      'inferenceServices',
      'default',
    ],
    [
      'key Secret',
      'apiVersion: v1\nkind: Secret\nmetadata: {name: k1, labels: {serving.servegate.dev/api-key: "true"}}\nstringData: {projects: "*"}\n',
      'keySecrets',
      'servegate',
    ],
  ] as const)('a %s without namespace lands in %s of namespace %s', (_what, text, field, ns) => {
    const r = parseManifests(text, opts);
    expect(r.errors).toEqual([]);
    expect(r[field]).toHaveLength(1);
    expect(r[field][0].metadata.namespace).toBe(ns);
  });

  test('keeps creationTimestamp and generation', () => {
    const text = SDEP.replace(
      'metadata: {name: iris, namespace: demo}',
      'metadata: {name: iris, namespace: demo, generation: 3, creationTimestamp: "2025-01-02T03:04:05Z"}',
    );
    const [d] = parseManifests(text, opts).deployments;
    expect(d.metadata.generation).toBe(3);
    expect(d.metadata.creationTimestamp).toBe('2025-01-02T03:04:05Z');
  });

  test.each([
    ['stringData only', { stringData: { prefix: 'P', projects: 'demo' } }, { prefix: 'P', projects: 'demo' }],
    ['base64 data only', { data: { prefix: b64('P'), projects: b64('a,b') } }, { prefix: 'P', projects: 'a,b' }],
    [
      'stringData wins over data for the same key',
      { data: { prefix: b64('FROMDATA'), sha256: b64('abc') }, stringData: { prefix: 'FROMSTRING' } },
      { prefix: 'FROMSTRING', sha256: 'abc' },
    ],
    [
      'a null data value is empty',
      { data: { expiresAt: null }, stringData: { projects: '*' } },
      { expiresAt: '', projects: '*' },
    ],
  ])('key Secret data: %s', (_name, body, want) => {
    const doc = {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: 'k', labels: { 'serving.servegate.dev/api-key': 'true' } },
      ...body,
    };
    const r = parseManifests(JSON.stringify(doc), { ...opts, origin: 'k.json' });
    expect(r.errors).toEqual([]);
    expect(r.keySecrets).toEqual([
      {
        metadata: { name: 'k', namespace: 'servegate', labels: { 'serving.servegate.dev/api-key': 'true' } },
        data: want,
        origin: 'k.json#1',
      },
    ]);
  });

  test('a stringData value written as a plain number keeps its digits', () => {
    const text =
      'apiVersion: v1\nkind: Secret\nmetadata: {name: k, labels: {serving.servegate.dev/api-key: "true"}}\nstringData:\n  prefix: 9999999999999999\n  projects: "*"\n';
    expect(parseManifests(text, opts).keySecrets[0].data.prefix).toBe('9999999999999999');
  });

  test('reads the items of a kind: List, each with its own origin', () => {
    const text = `apiVersion: v1
kind: List
items:
- ${JSON.stringify({ apiVersion: 'serving.servegate.dev/v1alpha1', kind: 'ServingDeployment', metadata: { name: 'a', namespace: 'x' }, spec: {} })}
- ${JSON.stringify({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'c' } })}
- ${JSON.stringify({ apiVersion: 'v1', kind: 'Secret', metadata: { name: 'k', labels: { 'serving.servegate.dev/api-key': 'true' } }, stringData: { prefix: '0123' } })}
`;
    const r = parseManifests(`${SDEP}---\n${text}`, opts);
    expect(r.errors).toEqual([]);
    expect(r.deployments.map((d) => [d.metadata.name, d.origin])).toEqual([
      ['iris', 'app/models.yaml#1'],
      ['a', 'app/models.yaml#2.items[0]'],
    ]);
    expect(r.keySecrets.map((k) => [k.metadata.name, k.origin, k.data.prefix])).toEqual([
      ['k', 'app/models.yaml#2.items[2]', '0123'],
    ]);
  });

  test.each([
    ['a Service', 'apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {ports: [{port: 80}]}'],
    ['a Deployment', 'apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}'],
    ['a ConfigMap', 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: "not base64 !!"}'],
    [
      'a Secret without the api-key label',
      'apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ndata: {a: "not base64 !!"}',
    ],
    [
      'a Secret whose api-key label is "false"',
      'apiVersion: v1\nkind: Secret\nmetadata: {name: s, labels: {serving.servegate.dev/api-key: "false"}}',
    ],
    [
      'a ServingDeployment of another API group',
      'apiVersion: other.example.com/v1\nkind: ServingDeployment\nmetadata: {name: x}',
    ],
    ['a document without kind (e.g. Helm values)', 'replicaCount: 2\nimage: {repository: x}'],
    ['a plain scalar document', 'just text'],
    ['an empty document', '# only a comment'],
    ['a JSON package file', '{"name": "my-app", "version": "1.0.0"}'],
  ])('ignores %s without error', (_name, text) => {
    const r = parseManifests(`${text}\n---\n${SDEP}`, opts);
    expect(r.errors).toEqual([]);
    expect(r.syntaxError).toBeUndefined();
    expect(r.keySecrets).toEqual([]);
    expect(r.inferenceServices).toEqual([]);
    expect(r.deployments.map((d) => d.metadata.name)).toEqual(['iris']);
  });

  const secretHead =
    'apiVersion: v1\nkind: Secret\nmetadata: {name: k, labels: {serving.servegate.dev/api-key: "true"}}\n';
  test.each([
    [
      'a ServingDeployment without metadata.name',
      'apiVersion: serving.servegate.dev/v1alpha1\nkind: ServingDeployment\nmetadata: {namespace: demo}\nspec: {}',
      /metadata\.name/,
    ],
    [
      'a ServingDeployment whose metadata is not a mapping',
      'apiVersion: serving.servegate.dev/v1alpha1\nkind: ServingDeployment\nmetadata: [a]\nspec: {}',
      /metadata/,
    ],
    [
      'a ServingDeployment of an unknown version',
      'apiVersion: serving.servegate.dev/v9\nkind: ServingDeployment\nmetadata: {name: a}',
      /v9.*not supported/,
    ],
    [
      'an InferenceService without a name',
      'apiVersion: serving.kserve.io/v1beta1\nkind: InferenceService\nmetadata: {}',
      /metadata\.name/,
    ],
    [
      'a key Secret whose data is not base64',
      `${secretHead}data: {prefix: "not base64!"}`,
      /data\.prefix is not valid base64/,
    ],
    ['a key Secret whose data is not a mapping', `${secretHead}data: [1, 2]`, /data must be a mapping/],
    ['a key Secret whose stringData is not a mapping', `${secretHead}stringData: "x"`, /stringData must be a mapping/],
    [
      'a key Secret with a nested stringData value',
      `${secretHead}stringData: {projects: [a, b]}`,
      /stringData\.projects must be a string/,
    ],
    [
      'a key Secret with an invalid name',
      'apiVersion: v1\nkind: Secret\nmetadata: {name: Bad_Name, labels: {serving.servegate.dev/api-key: "true"}}',
      /DNS-1123/,
    ],
    [
      'a ServingDeployment with a bad namespace',
      'apiVersion: serving.servegate.dev/v1alpha1\nkind: ServingDeployment\nmetadata: {name: a, namespace: Not_OK}',
      /namespace/,
    ],
    ['a List whose items is not a sequence', 'apiVersion: v1\nkind: List\nitems: {a: 1}', /sequence/],
  ])('reports %s with file and document index; the other documents still count', (_name, bad, message) => {
    const r = parseManifests(`${SDEP}---\n${bad}\n---\n${SDEP.replace('iris', 'iris2')}`, opts);
    expect(r.syntaxError).toBeUndefined();
    expect(r.errors).toHaveLength(1);
    expect(r.errors[0].origin).toBe('app/models.yaml#2');
    expect(r.errors[0].message).toMatch(message);
    expect(r.deployments.map((d) => d.metadata.name)).toEqual(['iris', 'iris2']);
  });

  test.each([
    ['a half-written flow mapping', `${SDEP}---\nkind: ServingDeployment\nmetadata: {name: x`],
    ['a duplicate key', `${SDEP}---\na: 1\na: 2`],
    ['an unresolved alias', `${SDEP}---\na: *nothing`],
    ['broken JSON', '{"apiVersion": "v1", "kind": '],
  ])('refuses the whole text for %s (nothing half-applied)', (_name, text) => {
    const r = parseManifests(text, opts);
    expect(r.syntaxError?.message).toMatch(/not valid YAML/);
    expect(r.syntaxError?.origin).toMatch(/^app\/models\.yaml#\d+$/);
    expect(r.deployments).toEqual([]);
    expect(r.errors).toEqual([]);
  });

  test('an empty text has no resources and no errors', () => {
    expect(parseManifests('', opts)).toEqual({ deployments: [], inferenceServices: [], keySecrets: [], errors: [] });
  });
});

describe('combineManifests', () => {
  test('a resource defined twice keeps its last definition and reports the earlier one', () => {
    const a = parseManifests(SDEP, { ...opts, origin: 'a.yaml' });
    const b = parseManifests(SDEP.replace('8081', '9999'), { ...opts, origin: 'b.yaml' });
    const c = combineManifests([a, b]);
    expect(c.deployments).toHaveLength(1);
    expect(c.deployments[0].origin).toBe('b.yaml#1');
    expect(c.errors).toEqual([
      { origin: 'a.yaml#1', message: expect.stringMatching(/demo\/iris is defined again at b\.yaml#1/) },
    ]);
  });

  test('the same name in two namespaces is two resources', () => {
    const a = parseManifests(SDEP, opts);
    const b = parseManifests(SDEP.replace('namespace: demo', 'namespace: other'), opts);
    expect(combineManifests([a, b]).deployments).toHaveLength(2);
  });
});
