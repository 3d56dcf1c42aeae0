// The body clocks, in simulated seconds: idle after limits.requestBodyIdleTimeoutSeconds without a byte, slow below
// the minimum rate over any 10 s once the body has been coming 10 s, and the gateway's own back-pressure never counted.
import { describe, expect, test } from '@jest/globals';
import { BodyClock } from '../../../src/gateway/http/body-clock.js';

/** Looks once a second for `seconds`, the body growing by `perSecond` bytes; the first verdict and when. */
function run(clock: BodyClock, seconds: number, perSecond: (s: number) => number, pressed = (_s: number) => false) {
  let bytes = 0;
  for (let s = 1; s <= seconds; s++) {
    bytes += perSecond(s);
    const v = clock.look(s * 1000, bytes, pressed(s));
    if (v) return { verdict: v, at: s };
  }
  return undefined;
}

describe('BodyClock (idle 30 s, at least 100 bytes/s)', () => {
  const clock = () => new BodyClock(0, 0, 30_000, 100);

  test.each([
    ['a body at 150 bytes/s goes on', (_s: number) => 150, undefined],
    [
      'a body at 5 bytes/s is slow once a whole window after the first 10 s is measured',
      (_s: number) => 5,
      { verdict: 'slow', at: 20 },
    ],
    [
      'fast for 15 s, then 10 bytes/s: slow once the last 10 s average below the rate ([14 s, 24 s]: 59 bytes/s)',
      (s: number) => (s <= 15 ? 500 : 10),
      { verdict: 'slow', at: 24 },
    ],
    ['no byte at all: slow at 20 s, before the 30 s idle bound', (_s: number) => 0, { verdict: 'slow', at: 20 }],
  ])('%s', (_name, perSecond, want) => {
    expect(run(clock(), 60, perSecond)).toEqual(want);
  });

  test('idle without a rate bound: no byte for 30 s', () => {
    expect(run(new BodyClock(0, 0, 30_000, 0), 60, () => 0)).toEqual({ verdict: 'idle', at: 30 });
  });

  test("seconds in which the gateway held the body back (bytes waiting in the request's buffer) do not count", () => {
    // 5 bytes/s, but the gateway is the slow side every fourth second: the window keeps restarting.
    expect(
      run(
        clock(),
        60,
        () => 5,
        (s) => s % 4 === 0,
      ),
    ).toBeUndefined();
  });
});

describe('BodyClock reset for the next body on a connection', () => {
  test('nothing of the body before carries over: idle and the rate window count from the reset', () => {
    const c = new BodyClock(0, 0, 30_000, 100);
    // A first body that went slow at 20 s.
    expect(run(c, 60, () => 5)).toEqual({ verdict: 'slow', at: 20 });
    // Reset at 100 s with 5,000 bytes read on the connection: a body at 150 bytes/s goes on, idle only 30 s after.
    c.reset(5_000, 100_000, 30_000, 100);
    let bytes = 5_000;
    for (let s = 101; s <= 160; s++) expect(c.look(s * 1000, (bytes += 150), false)).toBeUndefined();
    expect(c.look(161_000, bytes, false)).toBeUndefined();
    expect(c.look(190_000, bytes, false)).toBe('idle');
    // With other bounds: idle after 2 s, no rate bound.
    c.reset(bytes, 200_000, 2_000, 0);
    expect(c.look(201_000, bytes, false)).toBeUndefined();
    expect(c.look(202_000, bytes, false)).toBe('idle');
  });
});
