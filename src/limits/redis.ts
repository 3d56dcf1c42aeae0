// Limit store shared by every replica through Redis. Each admission and each charge is one Lua script, so the check
// and the update are atomic across replicas (no read-modify-write race), and time is Redis's own clock (replicas'
// clocks may differ). A bucket key expires when the bucket would be full again, so Redis holds only buckets in use.
// Redis unreachable: commands fail at once (no offline queue) and `failOpen` decides the answer; reconnects go on.
import { Redis } from 'ioredis';
import { stateOf, waitOf, admits, type Admission, type BucketSpec, type LimitStore } from './buckets.js';

const PREFIX = 'servegate:limit:';

// KEYS: one per bucket. ARGV: limit, cost for each bucket. Returns {admitted 0/1, level of each bucket after}.
const ADMIT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local levels = {}
local ok = 1
for i = 1, #KEYS do
  local limit = tonumber(ARGV[2 * i - 1])
  local cost = tonumber(ARGV[2 * i])
  local v = redis.call('HMGET', KEYS[i], 'l', 't')
  local level = limit
  if v[1] then level = math.min(limit, tonumber(v[1]) + math.max(0, now - tonumber(v[2])) * limit / 60000) end
  levels[i] = level
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
    redis.call('HSET', KEYS[i], 'l', tostring(level), 't', now)
    redis.call('PEXPIRE', KEYS[i], math.ceil((limit - level) * 60000 / limit) + 1000)
  end
  out[i + 1] = tostring(level)
end
return out
`;

// KEYS[1]: the bucket. ARGV: limit, amount. Returns the level after.
const CHARGE = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local limit = tonumber(ARGV[1])
local v = redis.call('HMGET', KEYS[1], 'l', 't')
local level = limit
if v[1] then level = math.min(limit, tonumber(v[1]) + math.max(0, now - tonumber(v[2])) * limit / 60000) end
level = level - tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'l', tostring(level), 't', now)
redis.call('PEXPIRE', KEYS[1], math.ceil((limit - level) * 60000 / limit) + 1000)
return tostring(level)
`;

type Scripted = Redis & {
  sgAdmit(numKeys: number, ...args: Array<string | number>): Promise<string[] | [number, ...string[]]>;
  sgCharge(key: string, limit: number, amount: number): Promise<string>;
};

export interface RedisLimitOptions {
  url: string;
  /** Answer while Redis is unreachable: admit (true, default) or refuse. */
  failOpen: boolean;
  /** A command slower than this counts as a failure (ms). */
  commandTimeoutMs?: number;
  /** Called on every failed command or lost connection (the gateway counts them in a metric). */
  onError?: (err: Error) => void;
}

export class RedisLimitStore implements LimitStore {
  private readonly redis: Scripted;
  private lastError: string | undefined = 'connecting';
  private closed = false;

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
      this.lastError = undefined;
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
    const args: Array<string | number> = specs.map((s) => PREFIX + s.id);
    for (const s of specs) args.push(s.limit, s.cost);
    let reply: Array<string | number>;
    try {
      reply = await this.redis.sgAdmit(specs.length, ...args);
      this.lastError = undefined;
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
    if (!(amount > 0)) return;
    try {
      await this.redis.sgCharge(PREFIX + id, limit, amount);
      this.lastError = undefined;
    } catch (err) {
      this.failed(err as Error);
    }
  }

  problem(): string | undefined {
    return this.lastError === undefined ? undefined : `redis: ${this.lastError}`;
  }

  async close(): Promise<void> {
    this.closed = true;
    this.redis.disconnect(false);
  }

  private fallback(): Admission {
    const unavailable = this.problem() ?? 'redis: unavailable';
    return this.options.failOpen
      ? { allowed: true, buckets: [], retryAfterMs: 0, unavailable }
      : { allowed: false, buckets: [], retryAfterMs: 5_000, unavailable };
  }

  private failed(err: Error): void {
    if (this.closed) return;
    this.unhealthy(err);
    this.options.onError?.(err);
  }

  private unhealthy(err: Error): void {
    if (!this.closed) this.lastError = err.message || String(err);
  }
}
