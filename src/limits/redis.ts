// Limit store shared by every replica through Redis: one Lua script per admission or charge (atomic across replicas,
// on Redis's clock, since replicas' clocks differ); a key expires when its bucket would be full again.
// Unreachable: commands fail at once and `failOpen` answers. Hung: each command would wait out its timeout, so after
// BREAKER_THRESHOLD failures in a row a breaker answers per `failOpen` until a PING gets a reply.
import { Redis } from 'ioredis';
import { stateOf, waitOf, admits, chargeable, type Admission, type BucketSpec, type LimitStore } from './buckets.js';

const PREFIX = 'servegate:limit:';

/** Consecutive failed commands (timeouts or errors) that open the breaker. */
const BREAKER_THRESHOLD = 3;
/** While open, Redis is sent a PING this often; the first reply closes the breaker. */
const PROBE_INTERVAL_MS = 1_000;

// Shared by both scripts: a level now, refilled and never below floorOf (buckets.ts). A level below -limit was written
// by an older version (unbounded debt, its huge expiry failed): `fix` asks the caller to write it back with an expiry.
const BUCKET = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function floor_of(limit)
  return limit / 60000 - limit
end
local function level_of(key, limit)
  local v = redis.call('HMGET', key, 'l', 't')
  if not v[1] then return limit, false end
  local l, at = tonumber(v[1]), tonumber(v[2])
  if not l or not at or l ~= l then
    redis.call('DEL', key)
    return limit, false
  end
  local fix = l < -limit
  l = math.max(floor_of(limit), l)
  return math.min(limit, l + math.max(0, now - at) * limit / 60000), fix
end
local function write(key, limit, level)
  redis.call('HSET', key, 'l', tostring(level), 't', now)
  redis.call('PEXPIRE', key, math.min(121000, math.max(1, math.ceil((limit - level) * 60000 / limit) + 1000)))
end
`;

// KEYS: one per bucket. ARGV: limit, cost for each bucket. Returns {admitted 0/1, level of each bucket after}.
const ADMIT = `${BUCKET}
local levels = {}
local fixes = {}
local ok = 1
for i = 1, #KEYS do
  local limit = tonumber(ARGV[2 * i - 1])
  local cost = tonumber(ARGV[2 * i])
  local level, fix = level_of(KEYS[i], limit)
  levels[i] = level
  fixes[i] = fix
  if cost > 0 then
    if level < cost then ok = 0 end
  elseif level <= 0 then
    ok = 0
  end
end
local out = { ok }
for i = 1, #KEYS do
  local limit = tonumber(ARGV[2 * i - 1])
  local cost = tonumber(ARGV[2 * i])
  local level = levels[i]
  if ok == 1 and cost > 0 then
    level = level - cost
    write(KEYS[i], limit, level)
  elseif fixes[i] then
    write(KEYS[i], limit, level)
  end
  out[i + 1] = tostring(level)
end
return out
`;

// KEYS[1]: the bucket. ARGV: limit, amount. Returns the level after (nil when there was nothing to charge). The
// amount was bounded by the caller; here again: not a positive number charges nothing, the debt stops at the floor.
const CHARGE = `${BUCKET}
local limit = tonumber(ARGV[1])
local amount = tonumber(ARGV[2])
if not limit or limit <= 0 or not amount or amount ~= amount or amount <= 0 then return false end
local level = level_of(KEYS[1], limit)
level = math.max(floor_of(limit), level - amount)
write(KEYS[1], limit, level)
return tostring(level)
`;

type Scripted = Redis & {
  sgAdmit(numKeys: number, ...args: Array<string | number>): Promise<string[] | [number, ...string[]]>;
  sgCharge(key: string, limit: number, amount: number): Promise<string | null>;
};

export interface RedisLimitOptions {
  url: string;
  /** Answer while Redis is unreachable: admit (true, default) or refuse. */
  failOpen: boolean;
  /** A command slower than this counts as a failure (ms). */
  commandTimeoutMs?: number;
  /** Every failed command, lost connection, and answer given by the open breaker (the gateway's metric). */
  onError?: (err: Error) => void;
}

export class RedisLimitStore implements LimitStore {
  private readonly redis: Scripted;
  private lastError: string | undefined = 'connecting';
  private closed = false;
  /** Commands failed in a row (reset by any reply). */
  private failures = 0;
  /** Set while the breaker is open: how many failures in a row opened it. */
  private openAfter: number | undefined;
  private probeTimer: NodeJS.Timeout | undefined;

  constructor(private readonly options: RedisLimitOptions) {
    const redis = new Redis(options.url, {
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      commandTimeout: options.commandTimeoutMs ?? 500,
      connectTimeout: 2_000,
      retryStrategy: (times) => Math.min(100 * times, 2_000),
      // The gateway's own answer matters more than a reply to a command sent before a reconnect.
      autoResendUnfulfilledCommands: false,
    });
    redis.defineCommand('sgAdmit', { lua: ADMIT });
    redis.defineCommand('sgCharge', { numberOfKeys: 1, lua: CHARGE });
    redis.on('ready', () => {
      // Connected again; an open breaker still waits for a reply to its PING (a hung Redis accepts connections).
      if (this.openAfter === undefined) this.lastError = undefined;
    });
    // Connection trouble only changes what /readyz says; `onError` counts the commands (requests) it affected.
    redis.on('error', (err: Error) => this.unhealthy(err));
    redis.on('close', () => {
      if (this.lastError === undefined) this.unhealthy(new Error('connection closed'));
    });
    this.redis = redis as Scripted;
  }

  /** Resolves once connected (or after `timeoutMs`, with the store still usable: it reconnects on its own). */
  async whenReady(timeoutMs = 2_000): Promise<boolean> {
    if (this.redis.status === 'ready') return true;
    return new Promise((resolve) => {
      const t = setTimeout(() => {
        this.redis.off('ready', ok);
        resolve(false);
      }, timeoutMs);
      const ok = () => {
        clearTimeout(t);
        resolve(true);
      };
      this.redis.once('ready', ok);
    });
  }

  async admit(specs: readonly BucketSpec[]): Promise<Admission> {
    if (specs.length === 0) return { allowed: true, buckets: [], retryAfterMs: 0 };
    if (this.openAfter !== undefined) return this.shortCircuit();
    const args: Array<string | number> = specs.map((s) => PREFIX + s.id);
    for (const s of specs) args.push(s.limit, s.cost);
    let reply: Array<string | number>;
    try {
      reply = await this.redis.sgAdmit(specs.length, ...args);
      this.answered();
    } catch (err) {
      this.failed(err as Error);
      return this.fallback();
    }
    const allowed = Number(reply[0]) === 1;
    const levels = specs.map((_, i) => Number(reply[i + 1]));
    const buckets = specs.map((s, i) => stateOf(s.id, s.limit, levels[i]));
    if (allowed) return { allowed, buckets, retryAfterMs: 0 };
    const retryAfterMs = Math.max(
      ...specs.map((s, i) => (admits(levels[i], s.cost) ? 0 : waitOf(s.limit, levels[i], s.cost))),
    );
    return { allowed, buckets, retryAfterMs };
  }

  async charge(id: string, limit: number, amount: number): Promise<void> {
    const units = chargeable(amount);
    if (units === 0 || !(limit > 0) || !Number.isFinite(limit)) return;
    if (this.openAfter !== undefined) {
      this.shortCircuit();
      return;
    }
    try {
      await this.redis.sgCharge(PREFIX + id, limit, units);
      this.answered();
    } catch (err) {
      this.failed(err as Error);
    }
  }

  /** A command under the same breaker (the budgets' scripts); undefined when Redis did not answer. */
  async command<T>(send: (redis: Redis) => Promise<T>): Promise<T | undefined> {
    if (this.openAfter !== undefined) {
      this.shortCircuit();
      return undefined;
    }
    try {
      const reply = await send(this.redis);
      this.answered();
      return reply;
    } catch (err) {
      this.failed(err as Error);
      return undefined;
    }
  }

  get failOpen(): boolean {
    return this.options.failOpen;
  }

  problem(): string | undefined {
    if (this.openAfter !== undefined) {
      return `redis: circuit open after ${this.openAfter} failed commands in a row (last: ${this.lastError ?? 'none'}); answering without Redis until it replies to a PING`;
    }
    return this.lastError === undefined ? undefined : `redis: ${this.lastError}`;
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.probeTimer);
    this.probeTimer = undefined;
    this.redis.disconnect(false);
  }

  private fallback(): Admission {
    const unavailable = this.problem() ?? 'redis: unavailable';
    return this.options.failOpen
      ? { allowed: true, buckets: [], retryAfterMs: 0, unavailable }
      : { allowed: false, buckets: [], retryAfterMs: 5_000, unavailable };
  }

  /** The breaker is open: the configured answer at once, counted like any answer given without Redis. */
  private shortCircuit(): Admission {
    this.options.onError?.(new Error('circuit open'));
    return this.fallback();
  }

  /** Redis replied: it is healthy, and an open breaker closes. */
  private answered(): void {
    this.failures = 0;
    this.lastError = undefined;
    if (this.openAfter !== undefined) {
      this.openAfter = undefined;
      clearTimeout(this.probeTimer);
      this.probeTimer = undefined;
    }
  }

  private failed(err: Error): void {
    if (this.closed) return;
    this.unhealthy(err);
    this.options.onError?.(err);
    this.failures++;
    if (this.openAfter === undefined && this.failures >= BREAKER_THRESHOLD) {
      this.openAfter = this.failures;
      this.scheduleProbe();
    }
  }

  private scheduleProbe(): void {
    if (this.closed || this.openAfter === undefined) return;
    this.probeTimer = setTimeout(() => void this.probe(), PROBE_INTERVAL_MS);
    this.probeTimer.unref();
  }

  /** One PING while the breaker is open: a reply closes it; a connection that takes it and never answers is renewed. */
  private async probe(): Promise<void> {
    this.probeTimer = undefined;
    if (this.closed || this.openAfter === undefined) return;
    try {
      await this.redis.ping();
      if (!this.closed) this.answered();
    } catch (err) {
      if (this.closed) return;
      this.unhealthy(err as Error);
      // The connection looks up but does not answer (a hung server, or a peer gone without a reset): drop it and
      // connect again, so that a Redis back elsewhere, or a half-open connection, does not keep the breaker open.
      if ((err as Error).message === 'Command timed out' && this.redis.status === 'ready') this.redis.disconnect(true);
      this.scheduleProbe();
    }
  }

  private unhealthy(err: Error): void {
    if (!this.closed) this.lastError = err.message || String(err);
  }
}
