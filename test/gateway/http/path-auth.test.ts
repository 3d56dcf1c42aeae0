// Path normalisation (SPEC §3: no path form may reach another deployment) and API-key checks (SPEC §4).
import { createHash } from 'node:crypto';
import { describe, expect, test } from '@jest/globals';
import { authError, parseAuthorization, verifyKey } from '../../../src/gateway/admit/auth.js';
import { GatewayError } from '../../../src/gateway/http/errors.js';
import { joinPath, parseTarget } from '../../../src/gateway/http/path.js';
import { buildKeys } from '../../../src/routing/build.js';
import { grantsProject } from '../../../src/routing/names.js';
import type { ApiKeyRecord, KeySecretResource } from '../../../src/routing/types.js';
import { apiKey } from '../../support/fixtures.js';

describe('parseTarget refuses ambiguous paths with bad_path (400)', () => {
  test.each([
    ['a dot-dot segment', '/v1/a/b/../c/d'],
    ['a leading dot-dot', '/../v1/a/b'],
    ['a trailing dot-dot', '/v1/a/b/..'],
    ['a dot segment', '/v1/a/./b'],
    ['%2e%2e', '/v1/a/b/%2e%2e/c/d'],
    ['%2E%2E', '/v1/a/b/%2E%2E/c/d'],
    ['.%2e', '/v1/a/b/.%2e/c/d'],
    ['a lone %2E', '/v1/a/b/%2E/x'],
    ['%2f', '/v1/a%2fb/c'],
    ['%2F', '/v1/a/b%2Fc/x'],
    ['a backslash', '/v1/a/b\\..\\c'],
    ['%5c', '/v1/a/b%5c..%5cc'],
    ['%5C', '/v1/a/b%5C'],
    ['//', '/v1//a/b'],
    ['a leading //', '//v1/a/b'],
    ['// near the end', '/v1/a/b/x//y'],
    ['%00', '/v1/a/b%00/x'],
    ['a raw NUL', '/v1/a/b\u0000/x'],
    ['a raw control character', '/v1/a/b\u0001'],
    ['a raw DEL', '/v1/a/b\u007f'],
    ['a raw tab', '/v1/a/b\t'],
    ['a raw space', '/v1/a/b c'],
    ['a bad percent-encoding', '/v1/a/b/%zz'],
    ['a truncated percent-encoding', '/v1/a/b/%'],
    ['an invalid UTF-8 sequence', '/v1/a/b/%e0%a4'],
    ['a fragment', '/v1/a/b#x'],
    ['a relative target', 'v1/a/b'],
    ['the asterisk form', '*'],
    ['an absolute-form target with dot-dot', 'http://gw.example.com/v1/a/b/../c/d'],
  ])('%s: %j', (_what, url) => {
    const r = parseTarget(url);
    expect(r).toBeInstanceOf(GatewayError);
    expect((r as GatewayError).code).toBe('bad_path');
    expect((r as GatewayError).status).toBe(400);
  });

  test('dot-dot in the query string is not part of the path', () => {
    expect(parseTarget('/v1/a/b/x?next=../../c')).toEqual({ segments: ['v1', 'a', 'b', 'x'], search: '?next=../../c' });
  });
});

describe('parseTarget keeps normal paths as sent', () => {
  test.each([
    ['/', [''], ''],
    [
      '/v1/fraud_detection/fraud/v1/models/fraud:predict',
      ['v1', 'fraud_detection', 'fraud', 'v1', 'models', 'fraud:predict'],
      '',
    ],
    ['/v1/a/b/', ['v1', 'a', 'b', ''], ''],
    ['/v1/a/b?x=1&y=%2F', ['v1', 'a', 'b'], '?x=1&y=%2F'],
    ['/v1/a/b/?', ['v1', 'a', 'b', ''], '?'],
    ['/v1/a/b/files/a%20b', ['v1', 'a', 'b', 'files', 'a%20b'], ''],
    ['/v1/a/b/v1.2/x..y/...', ['v1', 'a', 'b', 'v1.2', 'x..y', '...'], ''],
    ['http://gw.example.com/v1/a/b?q=1', ['v1', 'a', 'b'], '?q=1'],
    ['HTTPS://gw.example.com:8443/v1/a/b', ['v1', 'a', 'b'], ''],
    ['http://gw.example.com', [''], ''],
    ['http://gw.example.com?x', [''], '?x'],
  ])('%j → %j %j', (url, segments, search) => {
    expect(parseTarget(url)).toEqual({ segments, search });
  });

  test.each([
    [['v1', 'a', 'b', 'x', 'y'], 3, '/x/y'],
    [['v1', 'a', 'b'], 3, '/'],
    [['v1', 'a', 'b', ''], 3, '/'],
    [['v1', 'a', 'b', 'x', ''], 3, '/x/'],
    [['x', 'y'], 0, '/x/y'],
  ])('joinPath(%j, %i) = %s', (segments, from, path) => {
    expect(joinPath(segments, from)).toBe(path);
  });
});

describe('parseAuthorization', () => {
  test.each([
    ['ApiKey abc.def', 'abc.def'],
    ['apikey abc.def', 'abc.def'],
    ['APIKEY abc.def', 'abc.def'],
    ['Bearer abc.def', 'abc.def'],
    ['bearer abc.def', 'abc.def'],
    ['BEARER abc.def', 'abc.def'],
    ['  ApiKey   abc.def  ', 'abc.def'],
  ])('%j → key %s', (header, key) => {
    expect(parseAuthorization(header)).toEqual({ key });
  });

  test.each([
    [undefined, 'missing'],
    ['', 'missing'],
    ['   ', 'missing'],
    ['ApiKey', 'malformed'],
    ['ApiKey ', 'malformed'],
    ['abc.def', 'malformed'],
    ['Basic dXNlcjpwYXNz', 'malformed'],
    ['Token abc.def', 'malformed'],
    ['ApiKeyabc.def', 'malformed'],
    [['ApiKey a.b', 'ApiKey c.d'], 'malformed'],
  ])('%j → %s', (header, failure) => {
    expect(parseAuthorization(header)).toEqual({ failure });
  });
});

function keyIndex(...secrets: KeySecretResource[]) {
  return buildKeys(secrets, 'servegate', undefined, true).keys;
}

describe('verifyKey', () => {
  const good = apiKey('good', 'demo');
  const expiring = apiKey('expiring', 'demo', { expiresAt: '2026-06-01T00:00:00Z' });
  const keys = keyIndex(good.secret, expiring.secret);
  const now = Date.parse('2026-01-01T00:00:00Z');
  const prefix = good.key.slice(0, 16);

  test('the right key is accepted and its record returned', () => {
    const r = verifyKey(keys, good.key, now);
    expect('record' in r && r.record.name).toBe('good');
  });

  test.each([
    ['an unknown prefix', () => apiKey('other', 'demo').key, 'unknown'],
    ['a known prefix with the wrong secret', () => `${prefix}.${'x'.repeat(43)}`, 'mismatch'],
    [
      'the key with one character changed',
      () => good.key.slice(0, -1) + (good.key.endsWith('A') ? 'B' : 'A'),
      'mismatch',
    ],
    ['no dot', () => prefix + 'x'.repeat(40), 'malformed'],
    ['a 15-character prefix', () => `${prefix.slice(1)}.${'x'.repeat(40)}`, 'malformed'],
    ['a 31-character secret', () => `${prefix}.${'x'.repeat(31)}`, 'malformed'],
    ['a secret with a space', () => `${prefix}.${'x'.repeat(20)} ${'x'.repeat(20)}`, 'malformed'],
    ['an empty string', () => '', 'malformed'],
  ])('%s → %s', (_what, key, failure) => {
    expect(verifyKey(keys, key(), now)).toEqual({ failure });
  });

  test.each([
    ['a millisecond before expiry', Date.parse('2026-06-01T00:00:00Z') - 1, true],
    ['at expiry', Date.parse('2026-06-01T00:00:00Z'), false],
    ['after expiry', Date.parse('2027-01-01T00:00:00Z'), false],
  ])('an expiring key %s: accepted = %s', (_what, at, ok) => {
    const r = verifyKey(keys, expiring.key, at);
    if (ok) expect('record' in r).toBe(true);
    else expect(r).toEqual({ failure: 'expired' });
  });

  test('two records with one prefix: the one whose hash matches is used', () => {
    const a = apiKey('a', 'demo');
    const prefixA = a.key.slice(0, 16);
    const otherKey = `${prefixA}.${'y'.repeat(40)}`;
    const other: KeySecretResource = {
      metadata: { namespace: 'servegate', name: 'b' },
      data: { prefix: prefixA, sha256: createHash('sha256').update(otherKey).digest('hex'), projects: '*' },
    };
    const idx = keyIndex(a.secret, other);
    expect(idx.get(prefixA)).toHaveLength(2);
    const r1 = verifyKey(idx, otherKey, now);
    const r2 = verifyKey(idx, a.key, now);
    expect('record' in r1 && r1.record.name).toBe('b');
    expect('record' in r2 && r2.record.name).toBe('a');
  });
});

describe('grantsProject', () => {
  const rec = (projects: '*' | string[], scopeNamespace?: string): ApiKeyRecord => ({
    name: 'k',
    namespace: scopeNamespace ?? 'servegate',
    prefix: 'p'.repeat(16),
    sha256: Buffer.alloc(32),
    projects: projects === '*' ? '*' : new Set(projects),
    scopeNamespace,
  });
  // Records are built the way buildKeys stores them: projects in namespace form.
  test.each([
    ['fraud_detection as written', rec(['fraud-detection']), 'fraud_detection', undefined, true],
    ['fraud-detection in namespace form', rec(['fraud-detection']), 'fraud-detection', undefined, true],
    ['another project', rec(['fraud-detection']), 'demo', undefined, false],
    ['a project that only shares a prefix', rec(['demo']), 'demo2', undefined, false],
    ['"*" on any project', rec('*'), 'anything', undefined, true],
    ['a scoped key on a route in its namespace', rec(['demo'], 'demo'), 'demo', 'demo', true],
    ['a scoped key on a route in another namespace', rec(['demo'], 'demo'), 'demo', 'other', false],
    [
      'a scoped "*" key on a route in another namespace',
      rec('*', 'team-a'),
      'fraud_detection',
      'fraud-detection',
      false,
    ],
    ['a scoped "*" key on a route in its namespace', rec('*', 'team-a'), 'team-a', 'team-a', true],
    ['a scoped key, no route, the project of its namespace', rec(['team-a'], 'team-a'), 'team_a', undefined, true],
    ['a scoped "*" key, no route, another project', rec('*', 'team-a'), 'other', undefined, false],
  ])('%s → %s', (_what, record, project, ns, ok) => {
    expect(grantsProject(record, project, ns)).toBe(ok);
  });

  test('a key Secret written with project fraud_detection grants both forms', () => {
    const k = apiKey('k', 'fraud_detection');
    const [record] = keyIndex(k.secret).get(k.key.slice(0, 16))!;
    expect(grantsProject(record, 'fraud_detection')).toBe(true);
    expect(grantsProject(record, 'fraud-detection')).toBe(true);
  });
});

describe('authError', () => {
  test.each([
    ['missing', 'missing_api_key'],
    ['malformed', 'invalid_api_key'],
    ['unknown', 'invalid_api_key'],
    ['mismatch', 'invalid_api_key'],
    ['expired', 'expired_api_key'],
  ] as const)('%s → 401 %s with WWW-Authenticate: ApiKey', (failure, code) => {
    const e = authError(failure);
    expect(e.status).toBe(401);
    expect(e.code).toBe(code);
    expect(e.headers['www-authenticate']).toBe('ApiKey');
  });

  test('an unknown key and a wrong secret read the same to the client', () => {
    expect(authError('unknown').message).toBe(authError('mismatch').message);
  });
});
