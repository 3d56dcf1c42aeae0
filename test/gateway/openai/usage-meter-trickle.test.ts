// Hostile review of the usage meter (issue 31 item 6): a backend's line that ends in a later chunk was joined whole to
// each chunk that came (and, stripping, the event held so far at each chunk's end). A 900 KB line sent in 100-byte
// chunks was copied 4.05 GB (2.5 s here), an event of 20,000 lines one a chunk 9.2 GB (16 s), so one tenant's backend
// could hold the event loop of every tenant. Pieces are now joined as they pair up: 14-15 times the stream's bytes.
import { afterEach, describe, expect, jest, test } from '@jest/globals';
import { SseUsageMeter } from '../../../src/gateway/openai/usage-meter.js';

/** Bytes every Buffer.concat makes while `fn` runs. */
function copiedBy(fn: () => void): number {
  let copied = 0;
  const concat = Buffer.concat.bind(Buffer);
  jest.spyOn(Buffer, 'concat').mockImplementation((list: readonly Uint8Array[], total?: number) => {
    const b = concat(list, total);
    copied += b.length;
    return b;
  });
  try {
    fn();
  } finally {
    jest.restoreAllMocks();
  }
  return copied;
}

describe('a stream trickled in small chunks', () => {
  afterEach(() => {
    jest.restoreAllMocks();
  });

  const usage = `data: ${JSON.stringify({ id: 'x', choices: [], usage: { prompt_tokens: 3, completion_tokens: 5 } })}\n\n`;

  test.each([false, true])('one long line (strip %s) is copied a few times, not once per chunk', (strip) => {
    const line = `data: ${JSON.stringify({ choices: [{ delta: { content: 'x'.repeat(900_000) } }] })}\n\n`;
    const stream = Buffer.from(line + usage);
    const m = new SseUsageMeter(strip);
    const out: Buffer[] = [];
    const copied = copiedBy(() => {
      for (let i = 0; i < stream.length; i += 100) {
        const o = m.push(stream.subarray(i, i + 100), i);
        if (o) out.push(Buffer.from(o));
      }
    });
    const rest = m.end();
    if (rest) out.push(rest);
    expect(m.usage).toEqual({ prompt: 3, completion: 5 });
    expect(m.textBytes).toBe(900_000);
    // Stripping, the usage the client did not ask for is taken out; the rest passes unchanged.
    expect(Buffer.concat(out).toString()).toBe(strip ? line : line + usage);
    expect(copied).toBeLessThan(25 * stream.length);
  });

  test('an event of many short lines, one a chunk, held to be stripped, is copied a few times', () => {
    const lines = 20_000;
    const event = `${'data: {"choices":[{"delta":{"content":"y"}}]}\n'.repeat(lines)}\n`;
    const stream = Buffer.from(event + usage);
    const m = new SseUsageMeter(true);
    const out: Buffer[] = [];
    const line = event.indexOf('\n') + 1;
    const copied = copiedBy(() => {
      for (let i = 0; i < stream.length; i += line) {
        const o = m.push(stream.subarray(i, i + line), i);
        if (o) out.push(Buffer.from(o));
      }
    });
    expect(m.usage).toEqual({ prompt: 3, completion: 5 });
    expect(Buffer.concat(out).toString()).toBe(event);
    expect(copied).toBeLessThan(25 * stream.length);
  });
});
