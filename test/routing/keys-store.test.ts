// Name rules (names.ts), API-key Secrets (buildKeys) and the route store's swap rules (store.ts).
import { describe, expect, test } from '@jest/globals';
import { buildKeys } from '../../src/routing/build.js';
import {
  deploymentUrls,
  isDnsLabel,
  legacyHostname,
  projectHostLabel,
  projectNamespaceForm,
} from '../../src/routing/names.js';
import { RouteStore } from '../../src/routing/store.js';
import type { KeySecretResource } from '../../src/routing/types.js';
import { apiKey, buildOptions, sdep, snapshot } from '../support/fixtures.js';
import { build } from '../support/units.js';

describe('names', () => {
  test.each([
    ['fraud_detection', 'fraud-detection'],
    ['Fraud_Detection', 'fraud-detection'],
    ['fraud-detection', 'fraud-detection'],
    ['ABC123', 'abc123'],
    ['a.b c', 'a-b-c'],
  ])('namespace form of %s is %s', (p, form) => {
    expect(projectNamespaceForm(p)).toBe(form);
  });

  test.each([
    ['fraud_detection', 'fraud-detection'],
    ['DEMO', 'demo'],
    ['a-b', 'a-b'],
  ])('hostname label of %s is %s', (p, label) => {
    expect(projectHostLabel(p)).toBe(label);
  });

  test.each([
    ['a', true],
    ['a-b', true],
    ['a'.repeat(63), true],
    ['a'.repeat(64), false],
    ['', false],
    ['-a', false],
    ['a-', false],
    ['A', false],
    ['a_b', false],
    ['a.b', false],
  ])('isDnsLabel(%j) = %s', (s, ok) => {
    expect(isDnsLabel(s)).toBe(ok);
  });

  test.each([
    ['fraud_detection', 'fraud', 'fraud.fraud-detection.serving.example.com'],
    ['Demo', 'iris', 'iris.demo.serving.example.com'],
  ])('legacyHostname(%s, %s)', (project, dep, hostname) => {
    expect(legacyHostname(project, dep, 'serving.example.com')).toEqual({ hostname });
  });

  test.each([
    ['a project with a dot', 'fraud.detection', 'x', 'serving.example.com'],
    ['a project ending in _', 'fraud_', 'x', 'serving.example.com'],
    ['a project of 64 characters', 'p'.repeat(64), 'x', 'serving.example.com'],
    [
      'a hostname over 253 characters',
      'p',
      'x',
      `${'d'.repeat(63)}.${'d'.repeat(63)}.${'d'.repeat(63)}.${'d'.repeat(60)}`,
    ],
  ])('%s gets no hostname and a reason', (_what, project, dep, domain) => {
    const r = legacyHostname(project, dep, domain);
    expect('error' in r && r.error.length > 0).toBe(true);
  });

  test('deploymentUrls of each kind', () => {
    const base = 'https://m.example.com/v1/p/d';
    expect(deploymentUrls('https://m.example.com/', 'p', 'd', 'predictive', 'm')).toEqual({
      url: base,
      inferenceUrl: `${base}/v1/models/m:predict`,
    });
    expect(deploymentUrls('https://m.example.com', 'p', 'd', 'llm')).toEqual({ url: base, openaiUrl: `${base}/v1` });
    expect(deploymentUrls('https://m.example.com', 'p', 'd', 'python')).toEqual({ url: base, endpointUrl: base });
  });
});

function keySecret(data: Record<string, string>, ref = 'servegate/k'): KeySecretResource {
  const [namespace, name] = ref.split('/');
  return { metadata: { namespace, name }, data, origin: `keys.yaml#${name}` };
}
const GOOD = { prefix: 'Rc0uebjeAbSzEyRH', sha256: 'a'.repeat(64), projects: 'fraud_detection,demo' };

describe('API-key Secrets (SPEC §4)', () => {
  test('a good Secret becomes a key record: projects in namespace form, sha256 as bytes', () => {
    const { keys, problems } = buildKeys(
      [keySecret({ ...GOOD, expiresAt: '2027-01-01T00:00:00Z' }, 'servegate/apikey-ci-bot')],
      'servegate',
    );
    expect(problems).toEqual([]);
    const [rec] = keys.get(GOOD.prefix)!;
    expect(rec.name).toBe('apikey-ci-bot');
    expect(rec.sha256).toEqual(Buffer.from(GOOD.sha256, 'hex'));
    expect(rec.projects).toEqual(new Set(['fraud-detection', 'demo']));
    expect(rec.expiresAt).toBe(Date.parse('2027-01-01T00:00:00Z'));
    expect(rec.scopeNamespace).toBeUndefined();
  });

  test.each([
    ['*', '*'],
    [' * ', '*'],
    ['a, b ,c', new Set(['a', 'b', 'c'])],
    ['a,,b,', new Set(['a', 'b'])],
  ])('projects %j → %j', (projects, expected) => {
    const { keys, problems } = buildKeys([keySecret({ ...GOOD, projects })], 'servegate');
    expect(problems).toEqual([]);
    expect(keys.get(GOOD.prefix)![0].projects).toEqual(expected);
  });

  test('an upper-case sha256 and padded fields are accepted', () => {
    const { keys, problems } = buildKeys(
      [keySecret({ prefix: ` ${GOOD.prefix}\n`, sha256: `${'AB'.repeat(32)}\n`, projects: 'demo' })],
      'servegate',
    );
    expect(problems).toEqual([]);
    expect(keys.get(GOOD.prefix)![0].sha256.toString('hex')).toBe('ab'.repeat(32));
  });

  test.each([
    ['no prefix', { ...GOOD, prefix: '' }, /prefix/],
    ['a 15-character prefix', { ...GOOD, prefix: 'Rc0uebjeAbSzEyR' }, /prefix/],
    ['a 17-character prefix', { ...GOOD, prefix: 'Rc0uebjeAbSzEyRHx' }, /prefix/],
    ['a prefix with a dash', { ...GOOD, prefix: 'Rc0uebje-bSzEyRH' }, /prefix/],
    ['no sha256', { prefix: GOOD.prefix, projects: 'demo' }, /sha256/],
    ['a 63-character sha256', { ...GOOD, sha256: 'a'.repeat(63) }, /sha256/],
    ['a non-hex sha256', { ...GOOD, sha256: 'g'.repeat(64) }, /sha256/],
    ['no projects', { prefix: GOOD.prefix, sha256: GOOD.sha256 }, /projects/],
    ['blank projects', { ...GOOD, projects: '  ' }, /projects/],
    ['only commas', { ...GOOD, projects: ', ,' }, /projects/],
    ['a project with a space', { ...GOOD, projects: 'demo,fraud detection' }, /projects/],
    ['a bad expiresAt', { ...GOOD, expiresAt: 'next tuesday' }, /expiresAt/],
    ['nothing at all', {}, /prefix/],
  ])('%s is reported in keyProblems, never thrown', (_what, data, message) => {
    const good = apiKey('good', 'demo').secret;
    const { keys, problems } = buildKeys(
      [keySecret(data as Record<string, string>, 'servegate/bad'), good],
      'servegate',
    );
    expect(problems).toHaveLength(1);
    expect(problems[0]).toMatchObject({ id: 'servegate/bad', origin: 'keys.yaml#bad' });
    expect(problems[0].message).toMatch(message);
    expect([...keys.values()].flat().map((k) => k.name)).toEqual(['good']);
  });

  test('a bad key Secret is a keyProblem of the build and leaves routes alone', () => {
    const deployments = [sdep('demo/a').build()];
    const r = build({ deployments, keySecrets: [keySecret({ prefix: 'x' }, 'servegate/bad')] });
    expect(r.keyProblems.map((p) => p.id)).toEqual(['servegate/bad']);
    expect(r.statuses[0].ready).toBe(true);
    expect(r.table.keys.size).toBe(0);
    expect(r.table.hash).toBe(build({ deployments }).table.hash);
  });

  test.each([
    ['servegate', undefined],
    ['fraud-detection', 'fraud-detection'],
  ])('with projectNamespaceKeys, a key Secret in namespace %s has scope %s', (ns, scope) => {
    const { keys } = buildKeys([keySecret(GOOD, `${ns}/k`)], 'servegate', undefined, true);
    expect(keys.get(GOOD.prefix)![0].scopeNamespace).toBe(scope);
  });

  test('the keys namespace is the one configured, not a fixed name', () => {
    const { keys } = buildKeys([keySecret(GOOD, 'servegate/k')], 'platform', undefined, true);
    expect(keys.get(GOOD.prefix)![0].scopeNamespace).toBe('servegate');
  });

  test('without projectNamespaceKeys (the default), a key Secret outside the keys namespace is a problem naming it', () => {
    const { keys, problems } = buildKeys(
      [keySecret(GOOD, 'fraud-detection/k'), keySecret({ ...GOOD, prefix: 'B'.repeat(16) }, 'platform/home')],
      'platform',
    );
    expect([...keys.keys()]).toEqual(['B'.repeat(16)]);
    expect(problems).toEqual([
      {
        id: 'fraud-detection/k',
        origin: expect.anything(),
        message: expect.stringMatching(
          /^ignored: it is in namespace "fraud-detection", not the keys namespace "platform" .*auth\.projectNamespaceKeys: true/,
        ),
      },
    ]);
  });

  test('two Secrets with the same prefix are both kept, in namespace/name order', () => {
    const { keys } = buildKeys(
      [keySecret(GOOD, 'servegate/b'), keySecret({ ...GOOD, sha256: 'b'.repeat(64) }, 'servegate/a')],
      'servegate',
    );
    expect(keys.get(GOOD.prefix)!.map((k) => k.name)).toEqual(['a', 'b']);
  });
});

describe('RouteStore', () => {
  const fixed = snapshot({ deployments: [sdep('demo/a').build()], keySecrets: [apiKey('k', 'demo').secret] });
  const snap = () => structuredClone(fixed);

  test('starts empty, swaps in the first table, and skips a swap when the hash is unchanged', () => {
    const store = new RouteStore(buildOptions);
    expect(store.current().routes).toEqual([]);
    expect(store.hasSnapshot()).toBe(false);
    const s = snap();
    const first = store.apply(s);
    expect(first.changed).toBe(true);
    const table = store.current();
    expect(table.routes.map((r) => r.id)).toEqual(['demo/a']);
    const second = store.apply(structuredClone(s));
    expect(second.changed).toBe(false);
    expect(store.current()).toBe(table);
    expect(store.builds).toBe(2);
    expect(store.hasSnapshot()).toBe(true);
  });

  test('a changed snapshot swaps the table; the old table object is left as it was', () => {
    const store = new RouteStore(buildOptions);
    store.apply(snap());
    const old = store.current();
    const r = store.apply(snapshot({ deployments: [sdep('demo/b').build()] }));
    expect(r.changed).toBe(true);
    expect(store.current()).not.toBe(old);
    expect(old.routes.map((x) => x.id)).toEqual(['demo/a']);
    expect(store.current().routes.map((x) => x.id)).toEqual(['demo/b']);
  });

  test('statuses follow the latest snapshot even when the table is unchanged', () => {
    const store = new RouteStore(buildOptions);
    const s = snap();
    store.apply(s);
    const bumped = structuredClone(s);
    bumped.deployments[0].metadata.generation = 2;
    expect(store.apply(bumped).changed).toBe(false);
    expect(store.statuses()[0].generation).toBe(2);
  });

  test('key problems of the last build are kept', () => {
    const store = new RouteStore(buildOptions);
    store.apply(snapshot({ keySecrets: [keySecret({}, 'servegate/bad')] }));
    expect(store.keyProblems().map((p) => p.id)).toEqual(['servegate/bad']);
  });

  test('a throwing listener does not break apply or the other listeners', () => {
    const store = new RouteStore(buildOptions);
    const seen: boolean[] = [];
    store.onBuild(() => {
      throw new Error('listener failed');
    });
    store.onBuild((applied) => seen.push(applied.changed));
    expect(() => store.apply(snap())).not.toThrow();
    expect(store.current().routes).toHaveLength(1);
    store.apply(snap());
    expect(seen).toEqual([true, false]);
  });

  test('a removed listener is no longer told', () => {
    const store = new RouteStore(buildOptions);
    let calls = 0;
    const off = store.onBuild(() => calls++);
    store.apply(snap());
    off();
    store.apply(snapshot());
    expect(calls).toBe(1);
  });
});
