// Hostile review of the realtime gate (issue 31 item 4): a client message is held until whole to see its `type`, and
// the gate joined everything it held to each chunk that came. A 600 KB response.create trickled in 100-byte chunks
// was copied 1.8 GB (1.7 s of one core), in 10-byte chunks 18 GB (47 s), so one session could keep the event loop of
// every tenant busy. The chunks are now joined once the frame is whole: copying is linear in the message. The meter
// of the backend's frames (realtime-meter.ts) joined its chunks the same way.
import { afterEach, describe, expect, jest, test } from '@jest/globals';
import { RealtimeGate } from '../../../src/gateway/openai/realtime-gate.js';
import { RealtimeMeter } from '../../../src/gateway/openai/realtime-meter.js';
import type { TokenUsage } from '../../../src/gateway/openai/usage-meter.js';

/** A masked text frame of `payload`. */
function frame(payload: Buffer): Buffer {
  const len = payload.length;
  const head = Buffer.from([0x81, 0xff, 0, 0, 0, 0, len >>> 24, (len >>> 16) & 0xff, (len >>> 8) & 0xff, len & 0xff]);
  const key = Buffer.from([1, 2, 3, 4]);
  return Buffer.concat([head, key, Buffer.from(payload.map((b, i) => b ^ key[i & 3]))]);
}

describe('a message trickled in small chunks', () => {
  afterEach(() => {
    jest.restoreAllMocks();
  });

  test.each([100, 10])('in %i-byte chunks is copied about once, and forwarded whole', (step) => {
    const create = Buffer.from(`{"type":"response.create","pad":"${' '.repeat(600_000)}"}`);
    const msg = frame(create);
    const out: Buffer[] = [];
    const asked: boolean[] = [];
    const gate = new RealtimeGate({
      forward: (b) => out.push(Buffer.from(b)),
      decide: (take) => {
        asked.push(take);
        return undefined;
      },
      refused: () => undefined,
      hold: () => undefined,
    });
    // The bytes every Buffer.concat makes while the message comes (the gate's own copies).
    let copied = 0;
    const concat = Buffer.concat.bind(Buffer);
    jest.spyOn(Buffer, 'concat').mockImplementation((list: readonly Uint8Array[], total?: number) => {
      const b = concat(list, total);
      copied += b.length;
      return b;
    });
    for (let i = 0; i < msg.length; i += step) gate.push(msg.subarray(i, i + step));
    jest.restoreAllMocks();
    expect(asked).toEqual([true]);
    expect(Buffer.concat(out).equals(msg)).toBe(true);
    // Joined once, its payload unmasked once and read once: a few times the message, not its square.
    expect(copied).toBeLessThan(4 * msg.length);
  });
});

describe("a backend's message trickled in small chunks", () => {
  afterEach(() => {
    jest.restoreAllMocks();
  });

  test('is copied about once by the meter, and its usage read', () => {
    const done = Buffer.from(
      JSON.stringify({
        type: 'response.done',
        response: { usage: { input_tokens: 7, output_tokens: 11 }, pad: ' '.repeat(600_000) },
      }),
    );
    const len = done.length;
    const msg = Buffer.concat([
      Buffer.from([0x81, 0x7f, 0, 0, 0, 0, len >>> 24, (len >>> 16) & 0xff, (len >>> 8) & 0xff, len & 0xff]),
      done,
    ]);
    const usage: TokenUsage[] = [];
    const meter = new RealtimeMeter((u) => usage.push(u));
    let copied = 0;
    const concat = Buffer.concat.bind(Buffer);
    jest.spyOn(Buffer, 'concat').mockImplementation((list: readonly Uint8Array[], total?: number) => {
      const b = concat(list, total);
      copied += b.length;
      return b;
    });
    for (let i = 0; i < msg.length; i += 100) meter.push(msg.subarray(i, i + 100));
    jest.restoreAllMocks();
    expect(usage).toEqual([{ prompt: 7, completion: 11 }]);
    expect(copied).toBeLessThan(4 * msg.length);
  });
});
