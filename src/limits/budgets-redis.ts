// Budgets shared by every replica (SPEC §14): a window is one Redis hash (t<slot>, c<slot>), read and charged by one
// Lua script each (atomic across replicas), on the per-minute limits' connection and breaker.
import type { RedisLimitStore } from './redis.js';
import { resetOf, type BudgetStore, type Spent, type Window } from './budgets.js';

const PREFIX = 'servegate:budget:';

// Shared: the sums of one window's slots from `min` on (older slots are deleted when `prune`), and its oldest slot.
const SUM = `
local function sum(key, min, prune)
  local all = redis.call('HGETALL', key)
  local t, c, oldest = 0, 0, -1
  for i = 1, #all, 2 do
    local f = all[i]
    local slot = tonumber(string.sub(f, 2))
    if slot == nil or slot < min then
      if prune then redis.call('HDEL', key, f) end
    else
      local v = tonumber(all[i + 1]) or 0
      if string.sub(f, 1, 1) == 't' then t = t + v else c = c + v end
      if oldest < 0 or slot < oldest then oldest = slot end
    end
  end
  return { tostring(t), tostring(c), tostring(oldest) }
end
`;

// KEYS: one per window. ARGV: min slot per window. Returns tokens, cost, oldest slot per window.
const READ = `${SUM}
local out = {}
for i = 1, #KEYS do
  local s = sum(KEYS[i], tonumber(ARGV[i]), false)
  out[#out + 1] = s[1]; out[#out + 1] = s[2]; out[#out + 1] = s[3]
end
return out
`;

// KEYS: one per window. ARGV: tokens, cost micro-units, then slot, min slot, expire-at (ms) per window.
const CHARGE = `${SUM}
local tokens = tonumber(ARGV[1])
local cost = tonumber(ARGV[2])
local out = {}
for i = 1, #KEYS do
  local slot = ARGV[3 * i]
  if tokens > 0 then redis.call('HINCRBY', KEYS[i], 't' .. slot, tokens) end
  if cost > 0 then redis.call('HINCRBY', KEYS[i], 'c' .. slot, cost) end
  redis.call('PEXPIREAT', KEYS[i], ARGV[3 * i + 2])
  local s = sum(KEYS[i], tonumber(ARGV[3 * i + 1]), true)
  out[#out + 1] = s[1]; out[#out + 1] = s[2]; out[#out + 1] = s[3]
end
return out
`;

export class RedisBudgetStore implements BudgetStore {
  readonly shared = true;
  constructor(private readonly redis: RedisLimitStore) {}

  async read(windows: readonly Window[], now: number): Promise<Spent[] | undefined> {
    const args = [...windows.map((w) => PREFIX + w.key), ...windows.map((w) => w.minSlot)];
    const reply = await this.redis.command((r) => r.eval(READ, windows.length, ...args) as Promise<string[]>);
    return reply && spentOf(windows, reply, now);
  }

  async charge(
    windows: readonly Window[],
    tokens: number,
    costMicros: number,
    now: number,
  ): Promise<Spent[] | undefined> {
    const args: Array<string | number> = windows.map((w) => PREFIX + w.key);
    args.push(tokens, costMicros);
    for (const w of windows) args.push(w.slot, w.minSlot, w.expireAt);
    const reply = await this.redis.command((r) => r.eval(CHARGE, windows.length, ...args) as Promise<string[]>);
    return reply && spentOf(windows, reply, now);
  }
}

function spentOf(windows: readonly Window[], reply: string[], now: number): Spent[] {
  return windows.map((w, i) => {
    const oldest = Number(reply[3 * i + 2]);
    return {
      tokens: Number(reply[3 * i]) || 0,
      costMicros: Number(reply[3 * i + 1]) || 0,
      resetMs: resetOf(w, oldest < 0 ? Infinity : oldest, now),
    };
  });
}
