// The connection pools: after a burst, nothing of the connections opened at once stays — a connection that closes
// takes its client object with it, and one older than the TTL is closed once its request is done; the connector of
// http backends keeps nothing of the connect on the socket.
import { createServer, type Server } from 'node:http';
import { spawn } from 'node:child_process';
import { connect as netConnect, type AddressInfo, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import { connectPlain, Pools, type OriginPool } from '../../../src/gateway/forward/pools.js';
import { sleep, waitFor } from '../../support/wait.js';

let server: Server;
let origin: string;

beforeAll(async () => {
  // Each answer takes 50 ms, so a burst of requests opens one connection each.
  server = createServer((_req, res) => setTimeout(() => res.end('ok'), 50));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  await new Promise((r) => server.close(r));
});

const call = async (pool: OriginPool): Promise<string> => {
  const r = await pool.request({ path: '/', method: 'GET' });
  return r.body.text();
};

/** Runs `fn` on the pool of the test server's origin, in a Pools made with `args`, closed afterwards. */
async function withPool(fn: (pool: OriginPool) => Promise<void>, ...args: ConstructorParameters<typeof Pools>) {
  const pools = new Pools(...args);
  try {
    await fn(pools.get(origin));
  } finally {
    await pools.close();
  }
}

test('a burst of 20 concurrent requests: its 20 connections are closed once older than the client TTL', async () => {
  // A TTL long enough for the burst to end within it on a busy machine (a connection older than the TTL when its
  // request ends is closed then, which would make fewer than 20 here).
  await withPool(
    async (pool) => {
      expect(await Promise.all(Array.from({ length: 20 }, () => call(pool)))).toEqual(Array(20).fill('ok'));
      expect(pool.clients).toBe(20); // one per connection, no spare
      // Older than the TTL: the next request's pick closes them, and goes on a fresh connection.
      await sleep(1_100); // stays: the stimulus, connections aging past the 1 s TTL
      expect(await call(pool)).toBe('ok');
      expect(pool.clients).toBe(1); // the fresh one
    },
    300_000,
    1_000,
  );
});

test('connections closed by the backend leave the pool at once, without a request to notice', async () => {
  await withPool(async (pool) => {
    expect(await Promise.all(Array.from({ length: 20 }, () => call(pool)))).toEqual(Array(20).fill('ok'));
    expect(pool.clients).toBe(20);
    server.closeIdleConnections(); // the stimulus: the backend ends its idle keep-alive connections
    await waitFor(() => pool.clients === 0, 'the closed connections to leave the pool');
    // The pool still serves, on a new connection.
    expect(await call(pool)).toBe('ok');
    expect(pool.clients).toBe(1);
  });
});

test('free connections are reused: sequential requests do not open one connection each', async () => {
  await withPool(async (pool) => {
    for (let i = 0; i < 10; i++) expect(await call(pool)).toBe('ok');
    // undici frees a connection a microtask after the answer's end, so the next request may find it still busy.
    expect(pool.clients).toBeLessThanOrEqual(2);
  });
});

test('a request undici refuses on the spot (an invalid header value) leaves no client behind', async () => {
  await withPool(async (pool) => {
    for (let i = 0; i < 5; i++) {
      const err = await pool.request({ path: '/', method: 'GET', headers: { 'x-a': 'a\x7fb' } }).catch((e) => e);
      expect((err as Error).message).toMatch(/invalid x-a header/);
    }
    expect(pool.clients).toBeLessThanOrEqual(1); // the same free client each time, never connected
    expect(await call(pool)).toBe('ok'); // and it serves the next request
    expect(pool.clients).toBe(1);
  });
});

describe('connectPlain: the connector of http backends', () => {
  test('a connected socket carries no listener of the connect (undici would keep its error listener for life)', async () => {
    const port = Number(new URL(origin).port);
    const socket = await new Promise<Socket>((resolve, reject) =>
      connectPlain(
        { hostname: '127.0.0.1', host: `127.0.0.1:${port}`, protocol: 'http:', port: String(port), servername: '' },
        (err, s) => (err ? reject(err) : resolve(s as Socket)),
      ),
    );
    try {
      expect(socket.listenerCount('error')).toBe(0);
      expect(socket.listenerCount('connect')).toBe(0);
      expect(socket.remotePort).toBe(port);
    } finally {
      socket.destroy();
    }
  });

  test('a refused connect calls back once, with the socket error (the code the retry reads)', async () => {
    // A port that was just free: nothing listens there.
    const probe = createServer();
    await new Promise<void>((r) => probe.listen(0, '127.0.0.1', () => r()));
    const port = (probe.address() as AddressInfo).port;
    await new Promise((r) => probe.close(r));
    const calls: Array<string | undefined> = [];
    await new Promise<void>((resolve) =>
      connectPlain(
        { hostname: '127.0.0.1', host: `127.0.0.1:${port}`, protocol: 'http:', port: String(port), servername: '' },
        (err, _socket) => {
          calls.push((err as NodeJS.ErrnoException | null)?.code);
          resolve();
        },
      ),
    );
    await sleep(50); // stays: the window in which a second callback would come
    expect(calls).toEqual(['ECONNREFUSED']);
  });

  test('a connect that never completes ends with UND_ERR_CONNECT_TIMEOUT after the timeout, once, with no socket handed over', async () => {
    // A listener that never accepts, with a backlog of 0: once its accept queue is full the kernel drops further SYNs,
    // so a connect there hangs as one to a blackholed address would (loopback only).
    const listener = spawn(
      'python3',
      [
        '-c',
        "import socket,time\ns=socket.socket()\ns.bind(('127.0.0.1',0))\ns.listen(0)\nprint(s.getsockname()[1],flush=True)\ntime.sleep(20)",
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    const fillers: Socket[] = [];
    try {
      const port = await new Promise<number>((resolve, reject) => {
        listener.stdout.once('data', (d: Buffer) => resolve(Number(String(d).trim())));
        listener.once('error', reject);
      });
      // Fill the accept queue: connect until one does not complete within 300 ms.
      for (let i = 0; i < 8; i++) {
        const s = netConnect(port, '127.0.0.1');
        fillers.push(s);
        s.on('error', () => undefined);
        const connected = await new Promise<boolean>((r) => {
          const t = setTimeout(() => r(false), 300);
          s.once('connect', () => {
            clearTimeout(t);
            r(true);
          });
        });
        if (!connected) break;
      }
      const calls: Array<{ code: string | undefined; socket: unknown }> = [];
      const started = Date.now();
      await new Promise<void>((resolve) =>
        connectPlain(
          { hostname: '127.0.0.1', host: `127.0.0.1:${port}`, protocol: 'http:', port: String(port), servername: '' },
          (err, socket) => {
            calls.push({ code: (err as NodeJS.ErrnoException | null)?.code, socket });
            resolve();
          },
          200,
        ),
      );
      const waited = Date.now() - started;
      await sleep(50); // stays: the window in which a second callback would come
      expect(calls).toEqual([{ code: 'UND_ERR_CONNECT_TIMEOUT', socket: null }]);
      expect(waited).toBeGreaterThanOrEqual(190);
    } finally {
      for (const s of fillers) s.destroy();
      listener.kill();
    }
  });
});
