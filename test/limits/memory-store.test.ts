// The in-process limit store: token buckets per minute, all-or-nothing admission, token debt, bounded memory.
import { describe, expect, test } from '@jest/globals';
import { MemoryLimitStore } from '../../src/limits/memory.js';
import { clock } from '../support/limits.js';

describe('MemoryLimitStore', () => {
  test('admits exactly the per-minute limit at once, then refuses with the wait for one request', () => {
    const c = clock();
    const s = new MemoryLimitStore(c.now);
    const rpm = { id: 'key:a:rpm', limit: 6, cost: 1 as const };
    const answers = Array.from({ length: 10 }, () => s.admitNow([rpm]));
    expect(answers.map((a) => a.allowed)).toEqual([true, true, true, true, true, true, false, false, false, false]);
    expect(answers[5].buckets[0]).toEqual({ id: 'key:a:rpm', limit: 6, remaining: 0, resetMs: 60_000 });
    // 6 per minute: one more request every 10 s.
    expect(answers[6].retryAfterMs).toBe(10_000);
    c.advance(9_999);
    expect(s.admitNow([rpm]).allowed).toBe(false);
    c.advance(1);
    const next = s.admitNow([rpm]);
    expect(next.allowed).toBe(true);
    expect(next.buckets[0].remaining).toBe(0);
  });

  test('is all or nothing: a refusal by one bucket takes nothing from the others', () => {
    const s = new MemoryLimitStore(clock().now);
    const key = { id: 'key:a:rpm', limit: 100, cost: 1 as const };
    const dep = { id: 'deployment:p/d:rpm', limit: 1, cost: 1 as const };
    expect(s.admitNow([key, dep]).allowed).toBe(true);
    const refused = s.admitNow([key, dep]);
    expect(refused.allowed).toBe(false);
    expect(refused.buckets.map((b) => b.remaining)).toEqual([99, 0]);
    expect(refused.retryAfterMs).toBe(60_000);
  });

  test('tokens are charged after the fact; a bucket in debt refuses until it is positive again', () => {
    const c = clock();
    const s = new MemoryLimitStore(c.now);
    const tpm = { id: 'key:a:tpm', limit: 600, cost: 0 as const };
    expect(s.admitNow([tpm]).allowed).toBe(true);
    s.chargeNow('key:a:tpm', 600, 900); // one response reported 900 tokens: 300 in debt
    const refused = s.admitNow([tpm]);
    expect(refused.allowed).toBe(false);
    expect(refused.buckets[0]).toMatchObject({ remaining: 0, limit: 600 });
    expect(refused.retryAfterMs).toBe(30_001); // 300 tokens at 10 per second, then above 0
    c.advance(30_001);
    expect(s.admitNow([tpm]).allowed).toBe(true);
  });

  test('a full bucket is forgotten: memory follows the keys that spent recently, debts are kept', () => {
    const c = clock();
    const s = new MemoryLimitStore(c.now, 10);
    for (let i = 0; i < 9; i++) s.admitNow([{ id: `key:${i}:rpm`, limit: 60, cost: 1 }]);
    s.chargeNow('key:debt:tpm', 60, 120); // 60 tokens in debt: a minute to be positive, two to be full
    expect(s.size).toBe(10);
    c.advance(1_000); // 60 per minute: each request bucket has its one request back
    s.admitNow([{ id: 'key:new:rpm', limit: 60, cost: 1 }]); // the 11th bucket sweeps
    expect(s.size).toBe(2);
    expect(s.admitNow([{ id: 'key:debt:tpm', limit: 60, cost: 0 }]).allowed).toBe(false);
    expect(s.admitNow([{ id: 'key:0:rpm', limit: 60, cost: 0 }]).buckets[0].remaining).toBe(60);
  });
});
