// The gateway's own request ids: version 4 UUIDs from fresh random bytes, as crypto.randomUUID() makes them.
import { newRequestId } from '../../../src/gateway/http/request-id.js';
import { describe, expect, it } from '@jest/globals';

const V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

describe('newRequestId', () => {
  const N = 64_000;
  const ids = Array.from({ length: N }, newRequestId);

  it('makes version 4 UUIDs with the RFC 9562 variant', () => {
    const bad = ids.filter((id) => !V4.test(id));
    expect(bad).toEqual([]);
  });

  it('never repeats one, across many refills of its random pool', () => {
    expect(new Set(ids).size).toBe(N);
  });

  it('draws every random digit evenly: each of the 16 values at each free position', () => {
    // 30 free hex digits (32 less the version digit; the variant digit has 2 free bits and is left out).
    const free = [...Array(36).keys()].filter((i) => ![8, 13, 14, 18, 19, 23].includes(i));
    const counts = free.map(() => new Array<number>(16).fill(0));
    for (const id of ids) for (let p = 0; p < free.length; p++) counts[p][parseInt(id[free[p]], 16)]++;
    // Expected N / 16 = 4,000 each; a standard deviation of ~61: 3,700..4,300 is about ±5 sigma.
    const outside = counts.flatMap((c, p) =>
      c.map((n, v) => ({ at: free[p], v, n })).filter((x) => x.n < 3700 || x.n > 4300),
    );
    expect(outside).toEqual([]);
    // The variant digit: 8, 9, a, b about equally.
    const variant = new Map<string, number>();
    for (const id of ids) variant.set(id[19], (variant.get(id[19]) ?? 0) + 1);
    expect([...variant.keys()].sort()).toEqual(['8', '9', 'a', 'b']);
    for (const n of variant.values()) expect(n).toBeGreaterThan(15_000);
  });

  it('returns a string of its own each time (the buffer it is written in is reused)', () => {
    const a = newRequestId();
    const b = newRequestId();
    expect(a).not.toBe(b);
    expect(a).toMatch(V4);
  });
});
