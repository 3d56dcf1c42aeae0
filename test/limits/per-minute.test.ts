// The gateway side of SPEC §9 limits: which buckets a request passes, the 429 and its OpenAI headers, token charges.
import { describe, expect, test } from '@jest/globals';
import { MemoryLimitStore } from '../../src/limits/memory.js';
import type { Admission, BucketSpec, LimitStore } from '../../src/limits/buckets.js';
import { PerMinuteLimits, duration } from '../../src/limits/per-minute.js';
import { renderError } from '../../src/gateway/http/errors.js';
import { clock, sync } from '../support/limits.js';

const route = { project: 'demo', deployment: 'chat', namespace: 'demo', name: 'chat' };
const key = { namespace: 'servegate', name: 'ci-bot' };

describe('PerMinuteLimits.specs', () => {
  test('no limit anywhere: no bucket, admitted with no headers', () => {
    const l = new PerMinuteLimits(new MemoryLimitStore(), { requestsPerMinute: 0, tokensPerMinute: 0 });
    const specs = l.specs(route, key);
    expect(specs).toEqual([]);
    expect(sync(l.decide(specs))).toEqual({ ok: true, headers: {}, charge: undefined });
  });

  test("the key's Secret fields win over the defaults; the deployment's limits apply to every key", () => {
    const l = new PerMinuteLimits(new MemoryLimitStore(), { requestsPerMinute: 60, tokensPerMinute: 1000 });
    expect(l.specs(route, key)).toEqual([
      { id: 'key:servegate/ci-bot:rpm', limit: 60, cost: 1 },
      { id: 'key:servegate/ci-bot:tpm', limit: 1000, cost: 0 },
    ]);
    expect(
      l.specs(
        { ...route, limits: { requestsPerMinute: 5 } },
        { ...key, limits: { requestsPerMinute: 0, tokensPerMinute: 50 } },
      ),
    ).toEqual([
      { id: 'key:servegate/ci-bot:tpm', limit: 50, cost: 0 },
      { id: 'deployment:demo/chat:rpm', limit: 5, cost: 1 },
    ]);
  });
});

describe('PerMinuteLimits.decide', () => {
  test('admitted requests carry the tightest remaining budget; the refusal is a 429 naming the limit, with Retry-After', () => {
    const c = clock();
    const l = new PerMinuteLimits(new MemoryLimitStore(c.now), { requestsPerMinute: 0, tokensPerMinute: 0 });
    const specs = l.specs(
      { ...route, limits: { requestsPerMinute: 2, tokensPerMinute: 100 } },
      { ...key, limits: { requestsPerMinute: 10 } },
    );
    const first = sync(l.decide(specs));
    expect(first).toMatchObject({
      ok: true,
      headers: {
        'x-ratelimit-limit-requests': '2',
        'x-ratelimit-remaining-requests': '1',
        'x-ratelimit-reset-requests': '30s',
        'x-ratelimit-limit-tokens': '100',
        'x-ratelimit-remaining-tokens': '100',
        'x-ratelimit-reset-tokens': '0ms',
      },
      charge: { tokens: [{ id: 'deployment:demo/chat:tpm', limit: 100 }] },
    });
    expect(sync(l.decide(specs)).ok).toBe(true);
    const refused = sync(l.decide(specs));
    if (refused.ok) throw new Error('third request admitted');
    expect(refused.error.status).toBe(429);
    expect(refused.error.headers).toMatchObject({
      'retry-after': '30',
      'x-ratelimit-remaining-requests': '0',
      'x-ratelimit-limit-requests': '2',
    });
    expect(refused.error.message).toBe(
      'rate limit exceeded: 2 requests per minute for deployment demo/chat; retry after 30 s',
    );
    expect(JSON.parse(renderError(refused.error, 'openai')).error).toMatchObject({
      code: 'rate_limit_exceeded',
      type: 'rate_limit_error',
    });
  });

  test('tokens reported by a response are charged to every token bucket the request passed', () => {
    const c = clock();
    const l = new PerMinuteLimits(new MemoryLimitStore(c.now), { requestsPerMinute: 0, tokensPerMinute: 600 });
    const specs = l.specs({ ...route, limits: { tokensPerMinute: 10_000 } }, key);
    const ok = sync(l.decide(specs));
    if (!ok.ok) throw new Error('refused');
    l.charge(ok.charge, 700);
    const refused = sync(l.decide(specs));
    if (refused.ok) throw new Error('admitted in debt');
    expect(refused.error.message).toMatch(/600 tokens per minute for API key servegate\/ci-bot/);
    expect(refused.error.headers['retry-after']).toBe('11'); // 100 tokens in debt at 10 per second: just over 10 s
    c.advance(10_001);
    const again = sync(l.decide(specs));
    expect(again.ok && again.headers['x-ratelimit-remaining-tokens']).toBe('0');
  });

  test('a store that cannot be asked: fail-open admits without figures, fail-closed is a 503 with Retry-After', async () => {
    const down = (allowed: boolean): LimitStore => ({
      admit: async (): Promise<Admission> => ({
        allowed,
        buckets: [],
        retryAfterMs: 5_000,
        unavailable: 'redis: connection refused',
      }),
      charge: async () => {},
      problem: () => 'redis: connection refused',
      close: async () => {},
    });
    const spec: BucketSpec[] = [{ id: 'key:x:rpm', limit: 1, cost: 1 }];
    const open = await new PerMinuteLimits(down(true), { requestsPerMinute: 1, tokensPerMinute: 0 }).decide(spec);
    expect(open).toEqual({ ok: true, headers: {}, charge: undefined, unavailable: 'redis: connection refused' });
    const closed = await new PerMinuteLimits(down(false), { requestsPerMinute: 1, tokensPerMinute: 0 }).decide(spec);
    if (closed.ok) throw new Error('fail-closed admitted');
    expect(closed.error.status).toBe(503);
    expect(closed.error.headers).toEqual({ 'retry-after': '5' });
  });
});

test.each([
  [0, '0ms'],
  [250, '250ms'],
  [1000, '1s'],
  [1540, '1.5s'],
  [59_900, '59.9s'],
  [60_000, '1m0s'],
  [360_000, '6m0s'],
  [61_500, '1m2s'],
])('duration(%i) = %s', (ms, text) => {
  expect(duration(ms)).toBe(text);
});
