// A request body read whole into one buffer that doubles as bytes arrive: a body costs its size (twice while it grows),
// not its chunks plus their join. Room follows what came, never a declared Content-Length: a client that declares
// 32 MiB and trickles holds only what it sent.
import type { IncomingMessage } from 'node:http';

/** The smallest buffer (and room asked for): a body's first bytes. */
const STEP = 1024;

export type CollectEnd = { body: Buffer } | { problem: 'too_large' | 'no_room' };

/**
 * Reads `req` to its end, asking `grow` for room before each buffer (reading pauses until it answers). Returns what
 * stops the read without `done` (the request was answered otherwise).
 */
export function collectBody(
  req: IncomingMessage,
  declared: number | undefined,
  max: number,
  grow: (capacity: number, go: (ok: boolean) => void) => void,
  done: (end: CollectEnd) => void,
): () => void {
  let buf: Buffer | undefined;
  let size = 0;
  let stopped = false;
  const stop = (): void => {
    stopped = true;
    // The request object lives as long as the answer (a stream: minutes): nothing of the reading stays on it.
    req.off('data', onData);
    req.off('end', onEnd);
    buf = undefined;
  };
  const finish = (end: CollectEnd): void => {
    stop();
    done(end);
  };
  const copy = (c: Buffer): void => {
    c.copy(buf!, size);
    size += c.length;
  };
  const onData = (c: Buffer): void => {
    if (size + c.length > max) return finish({ problem: 'too_large' });
    if (buf && size + c.length <= buf.length) return copy(c);
    // Node's parser never passes more than Content-Length: a declared body grows up to it, a chunked one up to max.
    if (declared !== undefined && size + c.length > declared) return finish({ problem: 'too_large' });
    const capacity = Math.min(declared ?? max, Math.max(size + c.length, (buf?.length ?? 0) * 2, STEP));
    req.pause();
    grow(capacity, (ok) => {
      if (stopped) return;
      if (!ok) return finish({ problem: 'no_room' });
      const next = Buffer.allocUnsafeSlow(capacity);
      if (buf) buf.copy(next, 0, 0, size);
      buf = next;
      copy(c);
      req.resume();
    });
  };
  const onEnd = (): void => {
    const body = buf ? buf.subarray(0, size) : Buffer.alloc(0);
    finish({ body });
  };
  req.on('data', onData);
  req.on('end', onEnd);
  return stop;
}
