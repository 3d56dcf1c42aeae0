// The connection pools: after a burst, the clients of connections opened at once do not stay for the pool's life.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, expect, test } from '@jest/globals';
import { Pools } from '../../../src/gateway/forward/pools.js';
import { waitFor } from '../../support/wait.js';

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

test('a burst of 20 concurrent requests: its 20 connections are closed once older than the client TTL', async () => {
  const pools = new Pools(300_000, 150);
  try {
    const pool = pools.get(origin);
    const call = async () => {
      const r = await pool.request({ path: '/', method: 'GET' });
      return r.body.text();
    };
    // undici's own list of the pool's clients (no public count: PoolStats counts sockets, not client objects).
    const kClients = Object.getOwnPropertySymbols(pool).find((s) => s.description === 'clients')!;
    const clients = () => (pool as unknown as Record<symbol, unknown[]>)[kClients].length;
    expect(await Promise.all(Array.from({ length: 20 }, call))).toEqual(Array(20).fill('ok'));
    expect(pool.stats.connected).toBe(20);
    expect(clients()).toBeGreaterThanOrEqual(20); // one per connection (undici may hold one more, unconnected)
    // Older than the TTL: the next request's pick closes them, and goes on a fresh connection.
    await new Promise((r) => setTimeout(r, 200)); // the stimulus: connections aging past the 150 ms TTL
    expect(await call()).toBe('ok');
    await waitFor(() => clients() <= 2, 'the aged clients to leave the pool');
    expect(clients()).toBeLessThanOrEqual(2); // the one that served, and the spare undici keeps
  } finally {
    await pools.close();
  }
});
