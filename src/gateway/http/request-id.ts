// The request id the gateway makes when the client sent none: a random (version 4) UUID, as crypto.randomUUID()
// makes, from the same CSPRNG. Written as bytes into one buffer and read out as one flat string: randomUUID() builds
// its 36 characters piece by piece (590 bytes of garbage per request, bench/allocations.mjs --sample).
import { randomFillSync } from 'node:crypto';

/** Random bytes for 256 ids at a time, refilled when used up. */
const POOL = 256 * 16;
const pool = Buffer.allocUnsafeSlow(POOL);
let used = POOL;
const out = Buffer.allocUnsafeSlow(36);
const HEX = Buffer.from('0123456789abcdef', 'latin1');

/** A new UUID, version 4 and the RFC 9562 variant: "xxxxxxxx-xxxx-4xxx-[89ab]xxx-xxxxxxxxxxxx". */
export function newRequestId(): string {
  if (used === POOL) {
    randomFillSync(pool);
    used = 0;
  }
  const at = used;
  used += 16;
  pool[at + 6] = (pool[at + 6] & 0x0f) | 0x40;
  pool[at + 8] = (pool[at + 8] & 0x3f) | 0x80;
  let o = 0;
  for (let i = 0; i < 16; i++) {
    if (i === 4 || i === 6 || i === 8 || i === 10) out[o++] = 45; /* - */
    const b = pool[at + i];
    out[o++] = HEX[b >> 4];
    out[o++] = HEX[b & 15];
  }
  return out.toString('latin1', 0, 36);
}
