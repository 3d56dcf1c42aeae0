// Feeding a usage meter (src/gateway/openai/usage-meter.ts) an answer in pieces, as a backend's reads would come.
import type { UsageMeter } from '../../src/gateway/openai/usage-meter.js';

/** Feeds `buf` in pieces cut at `cuts` (ascending); returns the bytes out, end() included. */
export function feed(m: UsageMeter, buf: Buffer, cuts: number[]): Buffer {
  const out: Buffer[] = [];
  let from = 0;
  let t = 1;
  for (const c of [...cuts, buf.length]) {
    const piece = m.push(buf.subarray(from, c), t++);
    if (piece) out.push(Buffer.from(piece));
    from = c;
  }
  const rest = m.end();
  if (rest) out.push(Buffer.from(rest));
  return Buffer.concat(out);
}
