// One home for each rule (src/routing/names.ts, src/kube/objects.ts): the cases where earlier copies disagreed, and
// the edges of each rule.
import { describe, expect, test } from '@jest/globals';
import { apiStatus, formatTime, isObject, readMeta, secretData } from '../../src/kube/objects.js';
import { API_KEY, isDnsLabel, isDnsSubdomain, MODEL_SERVERS } from '../../src/routing/names.js';
import { verifyKey } from '../../src/gateway/admit/auth.js';
import { generateKey } from '../../src/keys/index.js';
import { ApiStatusError } from '../../src/sources/kubernetes/http.js';

describe('API key format (SPEC §4): one rule for the gateway and the CLI', () => {
  test.each([
    ['a generated key (base64url secret)', generateKey().key, true],
    [
      'a secret with punctuation (made elsewhere; the CLI copy used to refuse it)',
      `AbCdEfGhIjKlMnOp.${'x!#$%&*+/=?^~'.repeat(3)}`,
      true,
    ],
    ['a 32-character secret', `AbCdEfGhIjKlMnOp.${'a'.repeat(32)}`, true],
    ['a 31-character secret', `AbCdEfGhIjKlMnOp.${'a'.repeat(31)}`, false],
    ['a 15-character prefix', `AbCdEfGhIjKlMnO.${'a'.repeat(40)}`, false],
    ['a prefix with "-"', `AbCdEfGhIjKlMn-p.${'a'.repeat(40)}`, false],
    ['a space in the secret', `AbCdEfGhIjKlMnOp.${'a'.repeat(20)} ${'a'.repeat(20)}`, false],
    ['a non-ASCII secret', `AbCdEfGhIjKlMnOp.${'é'.repeat(40)}`, false],
  ])('%s: %s → %s', (_what, key, ok) => {
    expect(API_KEY.test(key)).toBe(ok);
    // The gateway reads the same rule: a key outside it is "malformed", one inside it is at least looked up.
    const v = verifyKey(new Map(), key, Date.now());
    expect('failure' in v && v.failure).toBe(ok ? 'unknown' : 'malformed');
  });
});

describe('DNS names', () => {
  test.each([
    ['demo', true, true],
    ['a'.repeat(63), true, true],
    ['a'.repeat(64), false, true],
    ['fraud.detection', false, true],
    [`${'a'.repeat(63)}.${'b'.repeat(63)}.${'c'.repeat(63)}.${'d'.repeat(61)}`, false, true],
    [`${'a'.repeat(63)}.${'b'.repeat(63)}.${'c'.repeat(63)}.${'d'.repeat(62)}`, false, false],
    ['Demo', false, false],
    ['-demo', false, false],
    ['demo-', false, false],
    ['', false, false],
    ['fraud_detection', false, false],
  ])('%j: label %s, subdomain %s', (name, label, subdomain) => {
    expect(isDnsLabel(name)).toBe(label);
    expect(isDnsSubdomain(name)).toBe(subdomain);
  });
});

test('model servers are listed once', () => {
  expect(MODEL_SERVERS).toEqual(['python', 'sklearn', 'tensorflow', 'llm']);
});

describe('Kubernetes object helpers', () => {
  test('isObject: mappings only (a YAML timestamp is a Date, not a mapping)', () => {
    expect([{}, { a: 1 }].map(isObject)).toEqual([true, true]);
    expect([null, [], new Date(0), 'x', 1, undefined].map(isObject)).toEqual([
      false,
      false,
      false,
      false,
      false,
      false,
    ]);
  });

  test('readMeta: name and namespace required for namespaced kinds; timestamps as text; label values as strings', () => {
    expect(readMeta({ metadata: { name: 'x' } })).toBeUndefined();
    expect(readMeta({ metadata: { name: 'x' } }, false)).toEqual({ name: 'x', namespace: '' });
    expect(
      readMeta({
        metadata: {
          name: 'x',
          namespace: 'demo',
          generation: 3,
          creationTimestamp: new Date('2026-01-02T03:04:05Z'),
          labels: { tier: 1, on: true, a: 'b', bad: {} },
        },
      }),
    ).toEqual({
      name: 'x',
      namespace: 'demo',
      generation: 3,
      creationTimestamp: '2026-01-02T03:04:05.000Z',
      labels: { tier: '1', on: 'true', a: 'b' },
    });
  });

  test('secretData: data is base64-decoded, stringData wins', () => {
    expect(
      secretData({
        data: { a: Buffer.from('from-data').toString('base64'), b: Buffer.from('x').toString('base64') },
        stringData: { b: 'from-stringData' },
      }),
    ).toEqual({
      a: 'from-data',
      b: 'from-stringData',
    });
  });

  test('apiStatus: the client’s ApiException (code), its Watch (statusCode), our ApiStatusError; none for network errors', () => {
    expect(apiStatus({ code: 404, body: '' })).toBe(404);
    expect(apiStatus({ statusCode: 410 })).toBe(410);
    expect(apiStatus(new ApiStatusError(403, 'forbidden'))).toBe(403);
    expect(apiStatus(Object.assign(new Error('x'), { code: 'ECONNREFUSED' }))).toBeUndefined();
    expect(apiStatus(undefined)).toBeUndefined();
  });

  test('formatTime: metav1.Time, whole seconds (truncated, never rounded up)', () => {
    expect(formatTime(new Date('2027-01-01T00:00:00.999Z'))).toBe('2027-01-01T00:00:00Z');
    expect(formatTime(Date.parse('2027-01-01T00:00:01.000Z'))).toBe('2027-01-01T00:00:01Z');
  });
});
