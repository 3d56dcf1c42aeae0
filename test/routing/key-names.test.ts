// A key record's name is what metrics (servegate_llm_key_tokens_total{key}), the access log's `key` and the upstream
// x-servegate-key header show: it must tell apart two Secrets of the same name in different namespaces
// (auth.projectNamespaceKeys). A Secret in the keys namespace keeps its plain name (existing dashboards rely on it);
// one in another namespace is named "<namespace>/<name>".
import { describe, expect, test } from '@jest/globals';
import type { ApiKeyRecord } from '../../src/routing/types.js';
import { apiKey, buildOptions } from '../support/fixtures.js';
import { build } from '../support/units.js';

const scoped = { ...buildOptions, projectNamespaceKeys: true };

function records(r: ReturnType<typeof build>): ApiKeyRecord[] {
  return [...r.table.keys.values()].flat();
}

describe('key record names', () => {
  test('two Secrets named "shared" in namespaces a and b get two different names, each naming its namespace', () => {
    const a = apiKey('shared', '*', { namespace: 'a' });
    const b = apiKey('shared', '*', { namespace: 'b' });
    const r = build({ keySecrets: [a.secret, b.secret] }, scoped);
    expect(r.keyProblems).toEqual([]);
    const byPrefix = (k: { key: string }) => r.table.keys.get(k.key.split('.')[0])![0];
    expect(byPrefix(a)).toMatchObject({ name: 'a/shared', namespace: 'a', secretName: 'shared', scopeNamespace: 'a' });
    expect(byPrefix(b)).toMatchObject({ name: 'b/shared', namespace: 'b', secretName: 'shared', scopeNamespace: 'b' });
    expect(new Set(records(r).map((k) => k.name)).size).toBe(2);
  });

  test('a Secret in the keys namespace keeps its plain name, beside a same-named one in a project namespace', () => {
    const home = apiKey('shared', '*', { namespace: 'servegate' });
    const team = apiKey('shared', '*', { namespace: 'demo' });
    const r = build({ keySecrets: [home.secret, team.secret] }, scoped);
    expect(records(r).map((k) => k.name)).toEqual(expect.arrayContaining(['shared', 'demo/shared']));
    expect(r.table.keys.get(home.key.split('.')[0])![0]).toMatchObject({
      name: 'shared',
      namespace: 'servegate',
      secretName: 'shared',
      scopeNamespace: undefined,
    });
  });

  test('without projectNamespaceKeys, keys-namespace names are plain (unchanged)', () => {
    const k = apiKey('apikey-ci', 'demo');
    const r = build({ keySecrets: [k.secret] });
    expect(records(r).map((x) => x.name)).toEqual(['apikey-ci']);
  });

  test('the keys namespace is the configured one: a Secret in "servegate" is scoped when keys live in "platform"', () => {
    const k = apiKey('shared', '*', { namespace: 'servegate' });
    const r = build({ keySecrets: [k.secret] }, { ...scoped, keysNamespace: 'platform' });
    expect(records(r)[0]).toMatchObject({ name: 'servegate/shared', secretName: 'shared' });
  });

  test('the namespace/Secret-name pair the per-minute buckets are keyed by stays namespace + Secret name', () => {
    const k = apiKey('shared', '*', { namespace: 'b' });
    const [rec] = records(build({ keySecrets: [k.secret] }, scoped));
    expect(`${rec.namespace}/${rec.secretName}`).toBe('b/shared');
  });
});
