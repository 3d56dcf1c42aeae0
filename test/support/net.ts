// Loopback helpers shared by the socket-level tests: a free port, a deadline on a promise, and a test file's raw
// connections to a gateway (closed after each test) with what a backend saw since a given request count.
import { createServer } from 'node:net';
import { afterEach } from '@jest/globals';
import type { RecordingBackend } from './backends.js';
import { backendSawSince, Conn } from './raw-backend.js';

/** A loopback port free at the time of the call (another process may take it before it is used). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

/** `p`, or a failure naming `what` once `ms` have passed without it settling. */
export async function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let t: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      p,
      new Promise<never>((_, reject) => (t = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms))),
    ]);
  } finally {
    clearTimeout(t);
  }
}

export interface RawClients {
  /** The connections opened by the running test; all are closed after it. */
  open: Conn[];
  /** A raw connection to `port` (the gateway's by default). */
  connect(port?: number): Promise<Conn>;
  /** The upstream paths `backend` saw since its request count was `before`, once a marker request is answered. */
  seenSince(backend: RecordingBackend, before: number, markerPath: string): Promise<string[]>;
}

/**
 * Raw clients of the gateway that `gateway()` returns (read at call time: the gateway is started in a beforeAll),
 * using the API key `key()` for the marker requests. Call at the top of a test file: it registers the afterEach.
 */
export function rawClients(gateway: () => { port: number; url: string }, key: () => string): RawClients {
  const open: Conn[] = [];
  afterEach(() => {
    for (const c of open.splice(0)) c.close();
  });
  return {
    open,
    async connect(port = gateway().port) {
      const c = await Conn.connect(port);
      open.push(c);
      return c;
    },
    seenSince: (backend, before, markerPath) => backendSawSince(gateway().url, key(), backend, before, markerPath),
  };
}
