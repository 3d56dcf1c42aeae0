// Failed-authentication throttling per client address: the window, the threshold, other addresses, bounded memory.
import { describe, expect, test } from '@jest/globals';
import { AuthFailureLimiter } from '../../src/limits/auth-failures.js';
import { clock } from '../support/limits.js';

describe('AuthFailureLimiter', () => {
  test('more than maxFailures in the window blocks the address until the window ends; others are untouched', () => {
    const c = clock(5_000_000);
    const l = new AuthFailureLimiter({ maxFailures: 3, windowSeconds: 60 }, c.now);
    for (let i = 0; i < 3; i++) l.failed('10.0.0.1');
    expect(l.blockedFor('10.0.0.1')).toBe(0); // exactly maxFailures: still allowed
    c.advance(10_000);
    l.failed('10.0.0.1');
    expect(l.blockedFor('10.0.0.1')).toBe(50_000);
    expect(l.blockedFor('10.0.0.2')).toBe(0);
    c.advance(49_999);
    expect(l.blockedFor('10.0.0.1')).toBe(1);
    c.advance(1);
    expect(l.blockedFor('10.0.0.1')).toBe(0);
    l.failed('10.0.0.1'); // a new window starts with one failure
    expect(l.blockedFor('10.0.0.1')).toBe(0);
  });

  test('maxFailures 0 turns it off', () => {
    const l = new AuthFailureLimiter({ maxFailures: 0, windowSeconds: 60 });
    for (let i = 0; i < 1000; i++) l.failed('10.0.0.1');
    expect(l.enabled).toBe(false);
    expect(l.blockedFor('10.0.0.1')).toBe(0);
    expect(l.size).toBe(0);
  });

  test('memory is bounded: ended windows are swept, then the oldest live ones dropped', () => {
    const c = clock(5_000_000);
    const l = new AuthFailureLimiter({ maxFailures: 1, windowSeconds: 1, maxAddresses: 100 }, c.now);
    for (let i = 0; i < 100; i++) l.failed(`10.0.${i >> 8}.${i & 255}`);
    c.advance(1_000);
    l.failed('10.9.9.9'); // 101st: every earlier window has ended
    expect(l.size).toBe(1);
    for (let i = 0; i < 150; i++) l.failed(`10.1.${i >> 8}.${i & 255}`);
    expect(l.size).toBeLessThanOrEqual(100);
  });
});
