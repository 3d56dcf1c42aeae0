// The admin page's live figures: requests/s, share of 5xx and p99 over the last minute, from two samples of totals.
import { describe, expect, test } from '@jest/globals';
import { LiveStats, quantile } from '../../src/admin/live-stats.js';
import { Metrics } from '../../src/observe/metrics.js';

describe('quantile', () => {
  const bounds = [0.1, 0.5, 1];
  test.each([
    [0.5, [10, 0, 0], 10, 0.05], // halfway into the first bucket
    [0.99, [0, 100, 0], 100, 0.1 + 0.4 * 0.99],
    [0.99, [50, 0, 50], 100, 0.5 + 0.5 * (49 / 50)],
    [0.99, [0, 0, 0], 10, 1], // all beyond the largest bound: that bound, as Prometheus answers
  ])('q=%p over %j (count %i) = %p', (q, counts, count, want) => {
    expect(quantile(q, bounds, counts, count)).toBeCloseTo(want, 10);
  });
});

describe('LiveStats', () => {
  test('figures are differences over the window: requests/s, 5xx share, p99; none before a second sample', () => {
    let t = 1_000_000;
    const m = new Metrics(false);
    const live = new LiveStats(m, () => t);
    for (let i = 0; i < 10; i++) m.observeRequest('demo', 'iris', 200, 0.004);
    const first = live.read().get('demo/iris')!;
    expect(first.requestsPerSecond).toBeNull();

    t += 10_000;
    for (let i = 0; i < 95; i++) m.observeRequest('demo', 'iris', 200, 0.02);
    for (let i = 0; i < 5; i++) m.observeRequest('demo', 'iris', 503, 2);
    const f = live.read().get('demo/iris')!;
    expect(f.requestsPerSecond).toBeCloseTo(10, 10); // 100 answers in 10 s; the 10 before the window do not count
    expect(f.errorRatio).toBeCloseTo(0.05, 10);
    // 99th of 100: inside the (1, 2.5] bucket that holds the five 2 s answers
    expect(f.p99Seconds).toBeGreaterThan(1);
    expect(f.p99Seconds).toBeLessThanOrEqual(2.5);

    t += 61_000; // the window moved past every sample: only the last one (61 s old) is gone, so no base
    const idle = live.read().get('demo/iris')!;
    expect(idle.requestsPerSecond).toBeNull();
    t += 5_000;
    expect(live.read().get('demo/iris')).toMatchObject({ requestsPerSecond: 0, errorRatio: null, p99Seconds: null });
  });
});
