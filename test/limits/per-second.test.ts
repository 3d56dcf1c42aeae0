// Requests per second per key: the token bucket, and the 429 it answers.
import { describe, expect, test } from '@jest/globals';
import { PerSecondLimiter } from '../../src/limits/per-second.js';

describe('PerSecondLimiter', () => {
  test('0 requests per second means unlimited', () => {
    const l = new PerSecondLimiter(0, 0);
    expect(l.enabled).toBe(false);
    for (let i = 0; i < 1000; i++) expect(l.wait('k', 0)).toBe(0);
  });

  test('a burst is allowed, then the caller is told how long to wait, then tokens refill', () => {
    const l = new PerSecondLimiter(1, 3);
    expect([l.wait('k', 0), l.wait('k', 0), l.wait('k', 0)]).toEqual([0, 0, 0]);
    expect(l.wait('k', 0)).toBe(1);
    expect(l.wait('k', 999)).toBe(1);
    expect(l.wait('k', 1000)).toBe(0);
  });

  test('keys have separate buckets', () => {
    const l = new PerSecondLimiter(1, 1);
    expect(l.wait('a', 0)).toBe(0);
    expect(l.wait('a', 0)).toBeGreaterThan(0);
    expect(l.wait('b', 0)).toBe(0);
  });

  test.each([
    [0.5, 2],
    [0.1, 10],
  ])('at %s/s an empty bucket waits %i s', (rate, wait) => {
    const l = new PerSecondLimiter(rate, 1);
    l.wait('k', 0);
    expect(l.wait('k', 0)).toBe(wait);
  });

  test('without a burst the bucket holds one second of requests', () => {
    const l = new PerSecondLimiter(5, 0);
    const answers = Array.from({ length: 6 }, () => l.wait('k', 0));
    expect(answers).toEqual([0, 0, 0, 0, 0, 1]);
  });

  test('an idle key never saves more than the burst', () => {
    const l = new PerSecondLimiter(10, 2);
    l.wait('k', 0);
    expect([l.wait('k', 3_600_000), l.wait('k', 3_600_000), l.wait('k', 3_600_000)].map((x) => x === 0)).toEqual([
      true,
      true,
      false,
    ]);
  });
});

describe('PerSecondLimiter refusal', () => {
  test('the 429 names the rate and carries Retry-After in whole seconds', () => {
    const l = new PerSecondLimiter(2, 1);
    const key = { namespace: 'servegate', name: 'ci-bot' };
    expect(l.take(key, 0)).toBeUndefined();
    const e = l.take(key, 0)!;
    expect({ status: e.status, code: e.code, message: e.message, headers: e.headers }).toEqual({
      status: 429,
      code: 'rate_limit_exceeded',
      message: 'rate limit of 2 requests/s for this API key exceeded',
      headers: { 'retry-after': '1' },
    });
    expect(l.take({ namespace: 'servegate', name: 'other' }, 0)).toBeUndefined();
  });
});
