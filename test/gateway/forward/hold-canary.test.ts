// The scale-from-zero queue (order, bounds, removal, expiry) and the canary split, without sockets.
import { describe, expect, test } from '@jest/globals';
import { sleep } from '../../support/wait.js';
import { HoldQueues, type Held } from '../../../src/gateway/forward/scale-from-zero.js';
import { TargetPicker } from '../../../src/gateway/forward/targets.js';
import type { Route } from '../../../src/routing/types.js';

const route = (id: string, extra: Partial<Route> = {}): Route =>
  ({
    id,
    namespace: 'demo',
    name: id.split('/')[1],
    resourceKind: 'ServingDeployment',
    project: 'demo',
    deployment: id.split('/')[1],
    kind: 'python',
    verbs: [],
    backend: { kind: 'url', url: 'http://127.0.0.1:1' },
    timeoutMs: 1000,
    ...extra,
  }) as Route;

/** A held request that forwards once `ready()` says so, and records what happened to it. */
function held(log: string[], name: string, ready: () => boolean): Held {
  return {
    tryForward: () => {
      if (!ready()) return false;
      log.push(`forwarded ${name}`);
      return true;
    },
    expire: () => log.push(`expired ${name}`),
  };
}

describe('HoldQueues', () => {
  test('forwards in arrival order once ready, per deployment; nothing before', () => {
    const q = new HoldQueues({ maxQueue: 10, maxQueueBytes: 1000 });
    const log: string[] = [];
    let ready = false;
    const a = route('demo/a');
    for (const n of ['1', '2', '3'])
      expect(
        q.add(
          a,
          held(log, n, () => ready),
          10,
          60_000,
        ),
      ).toBeUndefined();
    q.wake();
    expect(log).toEqual([]);
    expect(q.counts().get('demo/a')?.count).toBe(3);
    ready = true;
    q.wake();
    expect(log).toEqual(['forwarded 1', 'forwarded 2', 'forwarded 3']);
    expect(q.counts().size).toBe(0);
    q.close();
  });

  test('bounds: the request count, then the bytes of held bodies', () => {
    const q = new HoldQueues({ maxQueue: 2, maxQueueBytes: 100 });
    const log: string[] = [];
    const a = route('demo/a');
    const b = route('demo/b');
    expect(
      q.add(
        a,
        held(log, '1', () => false),
        10,
        60_000,
      ),
    ).toBeUndefined();
    expect(
      q.add(
        a,
        held(log, '2', () => false),
        10,
        60_000,
      ),
    ).toBeUndefined();
    expect(
      q.add(
        a,
        held(log, '3', () => false),
        10,
        60_000,
      ),
    ).toBe('count');
    // Per deployment: another one has its own room.
    expect(
      q.add(
        b,
        held(log, 'b1', () => false),
        100,
        60_000,
      ),
    ).toBeUndefined();
    expect(
      q.add(
        b,
        held(log, 'b2', () => false),
        1,
        60_000,
      ),
    ).toBe('bytes');
    q.close();
    expect(log.sort()).toEqual(['expired 1', 'expired 2', 'expired b1']);
  });

  test('a removed request (its client left) is neither forwarded nor expired, and frees its room', () => {
    const q = new HoldQueues({ maxQueue: 1, maxQueueBytes: 100 });
    const log: string[] = [];
    const a = route('demo/a');
    const gone = held(log, 'gone', () => true);
    expect(q.add(a, gone, 50, 60_000)).toBeUndefined();
    expect(q.remove(gone)).toBe(true);
    expect(q.remove(gone)).toBe(false);
    expect(
      q.add(
        a,
        held(log, 'next', () => false),
        100,
        60_000,
      ),
    ).toBeUndefined();
    q.close();
    expect(log).toEqual(['expired next']);
  });

  test('after the hold time the request expires, once', async () => {
    const q = new HoldQueues({ maxQueue: 10, maxQueueBytes: 100 });
    const log: string[] = [];
    q.add(
      route('demo/a'),
      held(log, '1', () => false),
      0,
      30,
    );
    await sleep(80); // stays: the stimulus, the hold time (30 ms) passing before the wake
    q.wake();
    expect(log).toEqual(['expired 1']);
    expect(q.counts().size).toBe(0);
  });
});

describe('canary split (TargetPicker.choose)', () => {
  const canary = (percent: number) =>
    route('demo/c', { canary: { backend: { kind: 'url', url: 'http://127.0.0.1:2' }, percent } });

  test.each([0, 1, 12.5, 30, 50, 99, 100])('%s %% of every 1,000 requests go to the canary, spread evenly', (p) => {
    const picker = new TargetPicker();
    const r = canary(p);
    const got = Array.from({ length: 1000 }, () => picker.choose(r)!.variant);
    expect(got.filter((v) => v === 'canary').length).toBe(Math.floor((1000 * p) / 100));
    // Evenly: no run of 100 requests is more than one request off the share.
    for (let i = 0; i + 100 <= 1000; i += 100)
      expect(Math.abs(got.slice(i, i + 100).filter((v) => v === 'canary').length - p)).toBeLessThanOrEqual(1);
  });

  test('without a canary no variant is named', () => {
    expect(new TargetPicker().choose(route('demo/p'))?.variant).toBeUndefined();
  });
});
