// The realtime gate reads the client's frames (masked, fragmented, split anywhere) and holds back only what it must:
// a refused response.create is never forwarded, every other byte goes on in order; the frame cursor finds where the
// backend's stream is between messages.
import { describe, expect, test } from '@jest/globals';
import { FrameCursor, RealtimeGate } from '../../../src/gateway/openai/realtime-gate.js';
import { gatewayError, type GatewayError } from '../../../src/gateway/http/errors.js';

function frame(opcode: number, payload: Buffer, fin = true, mask = true): Buffer {
  const len = payload.length;
  const m = mask ? 0x80 : 0;
  const head =
    len < 126
      ? [(fin ? 0x80 : 0) | opcode, m | len]
      : len < 65536
        ? [(fin ? 0x80 : 0) | opcode, m | 126, len >> 8, len & 0xff]
        : [
            (fin ? 0x80 : 0) | opcode,
            m | 127,
            0,
            0,
            0,
            0,
            len >>> 24,
            (len >>> 16) & 0xff,
            (len >>> 8) & 0xff,
            len & 0xff,
          ];
  if (!mask) return Buffer.concat([Buffer.from(head), payload]);
  const key = Buffer.from([9, 8, 7, 6]);
  return Buffer.concat([Buffer.from(head), key, Buffer.from(payload.map((b, i) => b ^ key[i & 3]))]);
}
const text = (o: unknown) => Buffer.from(JSON.stringify(o));
const LIMIT = gatewayError('rate_limit_exceeded', 'rate limit exceeded');

/** Runs `stream` through a gate split every `step` bytes; what went on, and the decisions asked. */
function run(stream: Buffer, step: number, answer: (take: boolean) => GatewayError | undefined) {
  const out: Buffer[] = [];
  const asked: boolean[] = [];
  const refused: Array<string | undefined> = [];
  const gate = new RealtimeGate({
    forward: (b) => out.push(Buffer.from(b)),
    decide: (take) => {
      asked.push(take);
      return answer(take);
    },
    refused: (_e, id) => refused.push(id),
    hold: () => undefined,
  });
  for (let i = 0; i < stream.length; i += step) gate.push(stream.subarray(i, i + step));
  return { out: Buffer.concat(out), asked, refused };
}

describe('RealtimeGate', () => {
  const create = text({ type: 'response.create', event_id: 'e1' });
  const append = frame(1, text({ type: 'input_audio_buffer.append', audio: 'AAAA' }));
  const ping = frame(9, Buffer.from('p'));
  // A response.create in two fragments with a ping between them, then an append.
  const stream = Buffer.concat([frame(1, create.subarray(0, 9), false), ping, frame(0, create.subarray(9)), append]);

  test.each([1, 3, 64, stream.length])('split every %i bytes: an admitted response.create goes on whole', (step) => {
    const r = run(stream, step, () => undefined);
    expect(r.asked).toEqual([true]);
    // The ping passes first (the message was held until whole), then the message, then the append.
    expect(r.out).toEqual(
      Buffer.concat([ping, frame(1, create.subarray(0, 9), false), frame(0, create.subarray(9)), append]),
    );
  });

  test.each([1, 7, stream.length])('split every %i bytes: a refused one is dropped, the rest goes on', (step) => {
    const r = run(stream, step, () => LIMIT);
    expect(r.refused).toEqual(['e1']);
    expect(r.out).toEqual(Buffer.concat([ping, append]));
  });

  test('a message too large to read passes while no window is exhausted, and takes nothing', () => {
    const big = frame(1, Buffer.from(`{"type":"response.create","pad":"${'x'.repeat(1 << 20)}"}`));
    const ok = run(Buffer.concat([big, append]), 65536, () => undefined);
    expect(ok.asked).toEqual([false]);
    expect(ok.out).toEqual(Buffer.concat([big, append]));
    const no = run(Buffer.concat([big, append]), 65536, () => LIMIT);
    expect(no.out).toEqual(append);
  });

  test('binary messages and other events are not decided', () => {
    const r = run(Buffer.concat([frame(2, Buffer.from([1, 2, 3])), append]), 5, () => LIMIT);
    expect(r.asked).toEqual([]);
  });
});

describe('FrameCursor', () => {
  test('quiet only between messages: not inside a frame, a split header, or a fragmented message', () => {
    const a = frame(1, Buffer.from('{"type":"x"'), false, false);
    const ping = frame(9, Buffer.alloc(0), true, false);
    const b = frame(0, Buffer.from('}'), true, false);
    const stream = Buffer.concat([a, ping, b, frame(1, Buffer.alloc(300), true, false)]);
    const quietAt: number[] = [];
    const c = new FrameCursor();
    for (let i = 0; i < stream.length; i++) {
      c.read(stream.subarray(i, i + 1), false);
      if (c.quiet) quietAt.push(i + 1);
    }
    expect(quietAt).toEqual([a.length + ping.length + b.length, stream.length]);
    // read(…, true) stops at the first quiet point.
    const d = new FrameCursor();
    expect(d.read(stream, true)).toBe(a.length + ping.length + b.length);
  });
});
