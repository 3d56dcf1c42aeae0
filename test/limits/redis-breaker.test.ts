// The Redis store's circuit breaker: a Redis that holds the connection open and never replies would cost every limited
// request the command timeout. After a few consecutive failures the breaker opens — requests are answered at once per
// failOpen, without asking Redis, and still counted — while a background PING probes Redis; the first answer closes it.
// A fake hung Redis (answers the connection handshake, then reads and never writes) needs nothing installed; the
// recovery tests use a real redis-server (skipped visibly without it; CI=true makes that a failure).
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, test } from '@jest/globals';
import { createServer, type Server, type Socket } from 'node:net';
import { Redis } from 'ioredis';
import { RedisLimitStore, type RedisLimitOptions } from '../../src/limits/redis.js';
import { RedisServer, hasRedis } from '../support/redis.js';
import { waitFor } from '../support/wait.js';

const TIMEOUT_MS = 300;
const spec = [{ id: 'key:hung:rpm', limit: 100, cost: 1 as const }];

/**
 * A Redis that accepts connections and completes the client's handshake (HELLO refused, CLIENT +OK, INFO), then reads
 * every command and never answers: what a hung Redis (stopped process, stuck script, black-holed network) looks like.
 */
class HungRedis {
  readonly commands: string[] = [];
  connections = 0;
  private readonly sockets = new Set<Socket>();
  private constructor(private readonly server: Server) {}

  static async start(): Promise<HungRedis> {
    const server = createServer();
    const h = new HungRedis(server);
    server.on('connection', (s) => h.accept(s));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return h;
  }

  get url(): string {
    return `redis://127.0.0.1:${(this.server.address() as { port: number }).port}/0`;
  }

  async stop(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise((resolve) => this.server.close(resolve));
  }

  private accept(socket: Socket): void {
    this.connections++;
    this.sockets.add(socket);
    socket.on('close', () => this.sockets.delete(socket));
    socket.on('error', () => {});
    let buf = Buffer.alloc(0);
    socket.on('data', (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      for (;;) {
        const parsed = parseCommand(buf);
        if (!parsed) break;
        buf = buf.subarray(parsed.used);
        const name = parsed.args[0]?.toLowerCase() ?? '';
        this.commands.push(name);
        if (name === 'hello') socket.write("-ERR unknown command 'hello'\r\n");
        else if (name === 'client') socket.write('+OK\r\n');
        else if (name === 'info') {
          const info = '# Server\r\nredis_version:7.0.0\r\nloading:0\r\n';
          socket.write(`$${Buffer.byteLength(info)}\r\n${info}\r\n`);
        }
        // Anything else (EVALSHA, EVAL, PING, ...): read, never answered.
      }
    });
  }
}

/** One RESP command (an array of bulk strings) from the front of `buf`, or undefined until it is complete. */
function parseCommand(buf: Buffer): { args: string[]; used: number } | undefined {
  const line = (from: number) => {
    const end = buf.indexOf('\r\n', from);
    return end === -1 ? undefined : { text: buf.toString('latin1', from, end), next: end + 2 };
  };
  const head = line(0);
  if (!head || head.text[0] !== '*') return undefined;
  const n = Number(head.text.slice(1));
  let at = head.next;
  const args: string[] = [];
  for (let i = 0; i < n; i++) {
    const len = line(at);
    if (!len) return undefined;
    const size = Number(len.text.slice(1));
    if (buf.length < len.next + size + 2) return undefined;
    args.push(buf.toString('utf8', len.next, len.next + size));
    at = len.next + size + 2;
  }
  return { args, used: at };
}

const stores: RedisLimitStore[] = [];
function store(url: string, more: Partial<RedisLimitOptions> = {}, errors: Error[] = []): RedisLimitStore {
  const s = new RedisLimitStore({
    url,
    failOpen: true,
    commandTimeoutMs: TIMEOUT_MS,
    onError: (e) => errors.push(e),
    ...more,
  });
  stores.push(s);
  return s;
}
afterEach(async () => {
  await Promise.all(stores.splice(0).map((s) => s.close()));
});

async function timed<T>(f: () => Promise<T>): Promise<{ value: T; ms: number }> {
  const t = performance.now();
  const value = await f();
  return { value, ms: performance.now() - t };
}

describe('a hung Redis (connection open, no replies)', () => {
  let hung: HungRedis;
  beforeAll(async () => {
    hung = await HungRedis.start();
  });
  afterAll(async () => {
    await hung?.stop();
  });

  test('after 3 timeouts the breaker opens: answered at once (fail-open), still counted, Redis probed', async () => {
    const errors: Error[] = [];
    const s = store(hung.url, {}, errors);
    expect(await s.whenReady()).toBe(true);
    for (let i = 0; i < 3; i++) {
      const { value, ms } = await timed(() => s.admit(spec));
      expect(value).toMatchObject({ allowed: true, buckets: [] });
      expect(ms).toBeGreaterThanOrEqual(TIMEOUT_MS - 50); // each waited for the command timeout
    }
    const { value: open, ms } = await timed(() => s.admit(spec));
    expect(ms).toBeLessThan(50);
    expect(open).toMatchObject({ allowed: true, buckets: [], unavailable: expect.stringMatching(/circuit open/) });
    expect(s.problem()).toMatch(/^redis: circuit open/);
    expect(errors).toHaveLength(4); // the metric still counts every request answered without Redis
    const charged = await timed(() => s.charge('key:hung:tpm', 1000, 10));
    expect(charged.ms).toBeLessThan(50);
    expect(errors).toHaveLength(5);
    // In the background, Redis is probed (and a connection that never answers is replaced).
    await waitFor(() => hung.commands.includes('ping'), 'a PING probe');
    await waitFor(() => hung.connections >= 2, 'a new connection after a probe timed out', 10_000);
    expect(s.problem()).toMatch(/^redis: circuit open/);
  });

  test('fail-closed: once open, refused at once with the store-unavailable answer', async () => {
    const s = store(hung.url, { failOpen: false });
    expect(await s.whenReady()).toBe(true);
    for (let i = 0; i < 3; i++) expect((await s.admit(spec)).allowed).toBe(false);
    const { value, ms } = await timed(() => s.admit(spec));
    expect(ms).toBeLessThan(50);
    expect(value).toEqual({
      allowed: false,
      buckets: [],
      retryAfterMs: 5_000,
      unavailable: expect.stringMatching(/^redis: circuit open/),
    });
  });
});

if (!hasRedis && process.env.CI === 'true') {
  test('redis-server is installed (CI installs it)', () => {
    throw new Error('redis-server not found: .ci/run installs it (apt-get install redis-server)');
  });
}

(hasRedis ? describe : describe.skip)('the breaker against a real redis-server', () => {
  let redis: RedisServer;
  beforeEach(async () => {
    redis = await RedisServer.start();
  });
  afterEach(async () => {
    await redis?.stop();
  });

  test('Redis killed: the breaker opens; Redis back on the same port: it closes and limits apply again', async () => {
    const s = store(redis.url);
    expect(await s.whenReady()).toBe(true);
    expect((await s.admit(spec)).buckets).toHaveLength(1);
    await redis.stop();
    for (let i = 0; i < 3; i++) expect((await s.admit(spec)).unavailable).toMatch(/^redis: /);
    expect(s.problem()).toMatch(/^redis: circuit open/);
    const { ms } = await timed(() => s.admit(spec));
    expect(ms).toBeLessThan(50);

    await redis.start();
    await waitFor(() => s.problem() === undefined, 'the breaker to close', 10_000);
    const after = await s.admit(spec);
    expect(after.unavailable).toBeUndefined();
    expect(after.buckets[0]).toMatchObject({ id: 'key:hung:rpm', remaining: 99 }); // an empty Redis: a full budget
  });

  test('Redis frozen (SIGSTOP: connection open, no replies): the breaker opens; thawed (SIGCONT): it closes', async () => {
    const s = store(redis.url);
    expect(await s.whenReady(5_000)).toBe(true);
    const client = new Redis(redis.url);
    const info = await client.info('server').finally(() => client.disconnect());
    const pid = Number(/process_id:(\d+)/.exec(info)![1]);
    process.kill(pid, 'SIGSTOP');
    try {
      for (let i = 0; i < 3; i++) {
        const { value, ms } = await timed(() => s.admit(spec));
        expect(value.unavailable).toMatch(/timed out/);
        expect(ms).toBeGreaterThanOrEqual(TIMEOUT_MS - 50);
      }
      const { value, ms } = await timed(() => s.admit(spec));
      expect(ms).toBeLessThan(50);
      expect(value.unavailable).toMatch(/^redis: circuit open/);
    } finally {
      process.kill(pid, 'SIGCONT');
    }
    await waitFor(() => s.problem() === undefined, 'the breaker to close', 10_000);
    const after = await s.admit(spec);
    expect(after.unavailable).toBeUndefined();
    expect(after.buckets).toHaveLength(1);
  });
});
