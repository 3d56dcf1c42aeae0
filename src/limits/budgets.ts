// Budgets (SPEC §14): tokens and cost per key and project over a UTC day, month or rolling window. Charged when an
// answer ends, so a budget is overspent by at most the requests in flight when it ran out (docs/llm.md).
import { chargeable } from './buckets.js';
import { gatewayError, type GatewayError } from '../gateway/http/errors.js';
import { projectNamespaceForm as projectForm } from '../routing/names.js';
import { quoted } from '../routing/quote.js';

/** A budget's period: a calendar day or month (UTC), or a rolling window of `ms` (`text`: as written, e.g. `7d`). */
export type BudgetPeriod = { kind: 'day' } | { kind: 'month' } | { kind: 'rolling'; ms: number; text?: string };

/** A rolling window is counted in this many slots (spend leaves the window one slot at a time). */
export const ROLLING_SLOTS = 24;

const UNITS: Record<string, number> = { m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 };

/** `day`, `month`, or a rolling duration (`90m`, `12h`, `7d`, `2w`; 1 hour to 366 days); else a message. */
export function parseBudgetPeriod(raw: string): BudgetPeriod | string {
  const s = raw.trim();
  if (s === 'day' || s === 'month') return { kind: s };
  const m = /^(\d{1,6})([mhdw])$/.exec(s);
  const ms = m ? Number(m[1]) * UNITS[m[2]] : NaN;
  if (!(ms >= 3_600_000 && ms <= 366 * 86_400_000))
    return `budgetPeriod must be "day", "month" or a rolling duration of 1h to 366d such as 12h or 7d, got ${quoted(raw)}`;
  // Told back as written (`7d`, not `1w`): the window is the same (counted by its length), the name the one chosen.
  return { kind: 'rolling', ms, text: s };
}

/** A period as written back ("day", "month", "12h"). */
export function periodText(p: BudgetPeriod): string {
  if (p.kind !== 'rolling') return p.kind;
  if (p.text) return p.text;
  for (const u of ['w', 'd', 'h', 'm']) if (p.ms % UNITS[u] === 0) return `${p.ms / UNITS[u]}${u}`;
  return `${p.ms / 60_000}m`;
}

/** What a key Secret, a project's configuration or the project default says. Unset limit: none of that kind. */
export interface BudgetLimit {
  tokens?: number;
  /** In the currency of the prices. */
  cost?: number;
  period: BudgetPeriod;
}

/** The window a budget counts in now: a storage key and the slot of `now` (calendar windows have one slot). */
export interface Window {
  /** e.g. `key:servegate/ci-bot:month:2026-11`, `project:demo:r43200000`. */
  key: string;
  slot: number;
  /** Slots below this have left the window. */
  minSlot: number;
  /** When the window's storage may go (epoch ms). */
  expireAt: number;
  /** Calendar: the end of the period; rolling: undefined (the store says when the oldest slot leaves). */
  endsAt?: number;
  slotMs?: number;
}

export function windowOf(id: string, p: BudgetPeriod, now: number): Window {
  if (p.kind === 'rolling') {
    const slotMs = Math.ceil(p.ms / ROLLING_SLOTS);
    const slot = Math.floor(now / slotMs);
    return {
      key: `${id}:r${p.ms}`,
      slot,
      minSlot: slot - ROLLING_SLOTS + 1,
      expireAt: (slot + 1) * slotMs + p.ms,
      slotMs,
    };
  }
  const d = new Date(now);
  const y = d.getUTCFullYear();
  const mo = d.getUTCMonth();
  const start = p.kind === 'day' ? Date.UTC(y, mo, d.getUTCDate()) : Date.UTC(y, mo, 1);
  const end = p.kind === 'day' ? start + 86_400_000 : Date.UTC(y, mo + 1, 1);
  const tag = new Date(start).toISOString().slice(0, p.kind === 'day' ? 10 : 7);
  return { key: `${id}:${p.kind}:${tag}`, slot: 0, minSlot: 0, expireAt: end + 3_600_000, endsAt: end };
}

/** One budget a request must pass. */
export interface BudgetSpec {
  scope: 'key' | 'project';
  /** The key's name or the project's, for metrics, headers and `servegate usage`. */
  name: string;
  /** Stable storage id: `key:<namespace>/<secret>` or `project:<namespace form>`. */
  id: string;
  limit: BudgetLimit;
}

/** What a window holds now. Cost in micro-units of the currency (whole numbers add up exactly). */
export interface Spent {
  tokens: number;
  costMicros: number;
  /** Milliseconds until the window resets (calendar) or its oldest spend leaves it (rolling). */
  resetMs: number;
}

export interface BudgetStore {
  /** What each window holds now (`undefined`: the store could not be asked). */
  read(windows: readonly Window[], now: number): Spent[] | undefined | Promise<Spent[] | undefined>;
  /** Adds to each window; resolves with what each holds after (`undefined`: not counted). */
  charge(windows: readonly Window[], tokens: number, costMicros: number, now: number): Promise<Spent[] | undefined>;
  /** True when every replica counts in the same place. */
  readonly shared: boolean;
}

/** One replica's budgets: windows in a Map, dropped when they expire. */
export class MemoryBudgetStore implements BudgetStore {
  readonly shared = false;
  private readonly windows = new Map<string, { slots: Map<number, [number, number]>; expireAt: number }>();

  read(windows: readonly Window[], now: number): Spent[] {
    return windows.map((w) => this.spent(w, now));
  }

  async charge(windows: readonly Window[], tokens: number, costMicros: number, now: number): Promise<Spent[]> {
    return this.chargeNow(windows, tokens, costMicros, now);
  }

  chargeNow(windows: readonly Window[], tokens: number, costMicros: number, now: number): Spent[] {
    if (this.windows.size > 10_000) this.sweep(now);
    return windows.map((w) => {
      let entry = this.windows.get(w.key);
      if (!entry) this.windows.set(w.key, (entry = { slots: new Map(), expireAt: w.expireAt }));
      entry.expireAt = w.expireAt;
      const s = entry.slots.get(w.slot) ?? [0, 0];
      entry.slots.set(w.slot, [s[0] + tokens, s[1] + costMicros]);
      return this.spent(w, now);
    });
  }

  private spent(w: Window, now: number): Spent {
    const entry = this.windows.get(w.key);
    let tokens = 0;
    let costMicros = 0;
    let oldest = Infinity;
    if (entry && entry.expireAt > now) {
      for (const [slot, [t, c]] of entry.slots) {
        if (slot < w.minSlot) entry.slots.delete(slot);
        else {
          tokens += t;
          costMicros += c;
          oldest = Math.min(oldest, slot);
        }
      }
    }
    return { tokens, costMicros, resetMs: resetOf(w, oldest, now) };
  }

  private sweep(now: number): void {
    for (const [k, e] of this.windows) if (e.expireAt <= now) this.windows.delete(k);
  }
}

/** Calendar: the period's end; rolling: when the oldest slot with spend leaves the window (nothing spent: 0). */
export function resetOf(w: Window, oldestSlot: number, now: number): number {
  if (w.endsAt !== undefined) return Math.max(0, w.endsAt - now);
  if (!Number.isFinite(oldestSlot)) return 0;
  return Math.max(0, (oldestSlot + ROLLING_SLOTS) * w.slotMs! - now);
}

/** The prices of one deployment: per million tokens. */
export interface Pricing {
  inputPerMillion: number;
  outputPerMillion: number;
}

/**
 * Micro-units of cost: tokens × price per million (a price per million tokens is micro-units per token), not rounded:
 * a small answer at a low price is a fraction of one (10 tokens at 0.02 per million: 0.2).
 */
export function costMicros(pricing: Pricing | undefined, prompt: number, completion: number): number {
  if (!pricing) return 0;
  return chargeable(prompt) * pricing.inputPerMillion + chargeable(completion) * pricing.outputPerMillion;
}

/** What the budgets need of a key record. */
export interface BudgetedKey {
  namespace: string;
  name: string;
  secretName?: string;
  budget?: BudgetLimit;
}

export interface BudgetDefaults {
  /** limits.perProject: every project's budget unless limits.projects names it (0 = none). */
  perProject: { budgetTokens: number; budgetCost: number; budgetPeriod: string };
  /** limits.projects.<project>. */
  projects: Record<string, { budgetTokens?: number; budgetCost?: number; budgetPeriod?: string }>;
}

/** What a budgeted request carries to its end: the budgets it passed, charged with its tokens. */
export type BudgetCharge = readonly BudgetSpec[];

export type BudgetDecision =
  | { ok: true; headers: Record<string, string>; charge: BudgetCharge | undefined; unavailable?: string }
  | { ok: false; error: GatewayError; refusing: BudgetSpec[] };

/** Called with every window's spend after a charge (the metrics). */
export type SpentListener = (spec: BudgetSpec, spent: Spent) => void;

/** What a request without any budget passes: shared, never written. */
const NO_BUDGETS: readonly BudgetSpec[] = Object.freeze([]);

export class Budgets {
  private readonly projects = new Map<string, BudgetLimit>();
  private readonly perProject: BudgetLimit | undefined;
  /** Some project has a budget: without one, a request of a key without one has nothing to check (no allocation). */
  private readonly anyProject: boolean;
  /**
   * The fraction of a micro-unit of cost not charged yet, per set of budgets charged together: stores count whole
   * micro-units, and rounding each answer alone charged nothing for answers under half of one (embeddings at cents per
   * million tokens), however many. Each set's part charged is the floor of what it owes; the rest is owed next time.
   */
  private readonly owed = new Map<string, number>();
  /** A shared store's windows as this replica last read or charged them (runOut): spend and when it resets. */
  private readonly seen = new Map<string, { tokens: number; costMicros: number; resetAt: number }>();

  constructor(
    readonly store: BudgetStore,
    defaults: BudgetDefaults,
    private readonly options: { failOpen: boolean; onSpent?: SpentListener; now?: () => number } = { failOpen: true },
  ) {
    this.perProject = limitOf(defaults.perProject, 'limits.perProject');
    for (const [p, b] of Object.entries(defaults.projects)) {
      const d = defaults.perProject;
      const merged = {
        budgetTokens: b.budgetTokens ?? d.budgetTokens,
        budgetCost: b.budgetCost ?? d.budgetCost,
        budgetPeriod: b.budgetPeriod ?? d.budgetPeriod,
      };
      const limit = limitOf(merged, `limits.projects.${p}`);
      this.projects.set(projectForm(p), limit ?? { period: { kind: 'month' } });
    }
    this.anyProject = this.projectBudgets;
  }

  /** True when any budget is configured for projects (keys carry their own). */
  get projectBudgets(): boolean {
    return this.perProject !== undefined || [...this.projects.values()].some(isLimited);
  }

  /** The budgets a request must pass: its key's and its project's. Empty (the common case) costs nothing more. */
  specs(project: string | undefined, key: BudgetedKey | undefined): readonly BudgetSpec[] {
    const keyLimited = key?.budget !== undefined && isLimited(key.budget);
    if (!keyLimited && !this.anyProject) return NO_BUDGETS;
    const specs: BudgetSpec[] = [];
    if (keyLimited)
      specs.push({
        scope: 'key',
        name: key!.name,
        id: `key:${key!.namespace}/${key!.secretName ?? key!.name}`,
        limit: key!.budget!,
      });
    if (project !== undefined && this.anyProject) {
      const form = projectForm(project);
      const limit = this.projects.get(form) ?? this.perProject;
      if (limit && isLimited(limit)) specs.push({ scope: 'project', name: project, id: `project:${form}`, limit });
    }
    return specs;
  }

  /** Admits while every budget has something left; sync in process, a promise with Redis. */
  decide(specs: readonly BudgetSpec[]): BudgetDecision | Promise<BudgetDecision> {
    if (specs.length === 0) return { ok: true, headers: {}, charge: undefined };
    const now = this.now();
    const windows = specs.map((s) => windowOf(s.id, s.limit.period, now));
    const read = this.store.read(windows, now);
    if (!(read instanceof Promise)) return this.answer(specs, read);
    return read.then((r) => {
      if (r) this.saw(windows, r, now);
      return this.answer(specs, r);
    });
  }

  /**
   * A request admitted a while ago that is about to be forwarded (its turn in the fair queue came): the refusal when a
   * budget it passed ran out meanwhile, else undefined. Synchronous, the store not asked again: in process from the
   * counts themselves; with a shared store from what this replica last read or got back from a charge (the other
   * replicas' spend since then shows at its next read). A window not seen yet counts as nothing spent, as does a rolling
   * one whose oldest spend seen has left it since.
   */
  runOut(charge: BudgetCharge | undefined): Extract<BudgetDecision, { ok: false }> | undefined {
    if (!charge || charge.length === 0) return undefined;
    const now = this.now();
    const windows = charge.map((s) => windowOf(s.id, s.limit.period, now));
    let spent: Spent[];
    if (!this.store.shared) {
      const read = this.store.read(windows, now);
      if (!read || read instanceof Promise) return undefined;
      spent = read;
    } else {
      spent = windows.map((w) => {
        const seen = this.seen.get(w.key);
        // Not seen, or a rolling window whose oldest spend seen has left it since: what it holds now is not known.
        if (!seen || (w.endsAt === undefined && now >= seen.resetAt))
          return { tokens: 0, costMicros: 0, resetMs: w.endsAt === undefined ? 0 : w.endsAt - now };
        return { tokens: seen.tokens, costMicros: seen.costMicros, resetMs: Math.max(0, seen.resetAt - now) };
      });
    }
    if (!charge.some((s, i) => exceeded(s.limit, spent[i]))) return undefined;
    const decided = this.answer(charge, spent);
    return decided.ok ? undefined : decided;
  }

  /** A shared store's answer for `windows` at `now`, kept for runOut. */
  private saw(windows: readonly Window[], spent: readonly Spent[], now: number): void {
    if (!this.store.shared) return;
    if (this.seen.size > 10_000) this.seen.clear();
    windows.forEach((w, i) =>
      this.seen.set(w.key, {
        tokens: spent[i].tokens,
        costMicros: spent[i].costMicros,
        resetAt: now + spent[i].resetMs,
      }),
    );
  }

  /** Charges the tokens (and their cost at `pricing`) of one answer to every budget the request passed. */
  charge(charge: BudgetCharge | undefined, prompt: number, completion: number, pricing: Pricing | undefined): void {
    if (!charge || charge.length === 0) return;
    const tokens = chargeable(prompt) + chargeable(completion);
    const cost = this.wholeMicros(charge, costMicros(pricing, prompt, completion));
    if (tokens === 0 && cost === 0) return;
    const now = this.now();
    const windows = charge.map((s) => windowOf(s.id, s.limit.period, now));
    void this.store.charge(windows, tokens, cost, now).then((after) => {
      if (!after) return;
      this.saw(windows, after, now);
      if (this.options.onSpent) charge.forEach((s, i) => this.options.onSpent!(s, after[i]));
    });
  }

  /** The whole micro-units to charge `charge` for an answer of `exact` micro-units, with what it owed before. */
  private wholeMicros(charge: BudgetCharge, exact: number): number {
    if (!(exact > 0)) return 0;
    const id = charge.length === 1 ? charge[0].id : charge.map((s) => s.id).join('\n');
    const total = exact + (this.owed.get(id) ?? 0);
    const whole = Math.floor(total);
    const rest = total - whole;
    if (rest > 1e-9) {
      if (this.owed.size >= 10_000 && !this.owed.has(id)) this.owed.clear();
      this.owed.set(id, rest);
    } else this.owed.delete(id);
    return whole;
  }

  /** What each budget holds now (the admin endpoint and `servegate usage`). */
  async usage(specs: BudgetSpec[]): Promise<Spent[] | undefined> {
    const now = this.now();
    return this.store.read(
      specs.map((s) => windowOf(s.id, s.limit.period, now)),
      now,
    );
  }

  private now(): number {
    return (this.options.now ?? Date.now)();
  }

  private answer(specs: readonly BudgetSpec[], spent: Spent[] | undefined): BudgetDecision {
    if (!spent) {
      if (this.options.failOpen) return { ok: true, headers: {}, charge: specs, unavailable: 'budget store' };
      const error = gatewayError(
        'limits_unavailable',
        'budgets cannot be checked now (their store is unreachable); retry shortly',
        { 'retry-after': '5' },
      );
      return { ok: false, error, refusing: [] };
    }
    const refusing = specs.filter((s, i) => exceeded(s.limit, spent[i]));
    const headers = budgetHeaders(specs, spent);
    if (refusing.length === 0) return { ok: true, headers, charge: specs };
    const what = refusing.map((s) => {
      const i = specs.indexOf(s);
      return `${s.scope === 'key' ? 'API key' : 'project'} "${s.name}" has spent ${describeSpent(s.limit, spent[i])} of its ${periodText(s.limit.period)} budget`;
    });
    // The OpenAI SDKs retry a 429 twice (after about 1 and 2 s) unless told not to; a budget does not come back.
    headers['x-should-retry'] = 'false';
    return {
      ok: false,
      error: gatewayError('insufficient_quota', `budget exhausted: ${what.join('; ')}`, headers),
      refusing,
    };
  }
}

function isLimited(b: BudgetLimit): boolean {
  return (b.tokens ?? 0) > 0 || (b.cost ?? 0) > 0;
}

function exceeded(b: BudgetLimit, s: Spent): boolean {
  return (
    ((b.tokens ?? 0) > 0 && s.tokens >= b.tokens!) || ((b.cost ?? 0) > 0 && s.costMicros >= Math.round(b.cost! * 1e6))
  );
}

function describeSpent(b: BudgetLimit, s: Spent): string {
  const parts: string[] = [];
  if ((b.tokens ?? 0) > 0) parts.push(`${s.tokens} tokens of ${b.tokens}`);
  if ((b.cost ?? 0) > 0) parts.push(`${money(s.costMicros)} of ${b.cost}`);
  return parts.join(' and ');
}

/** Micro-units as a decimal (at most 6 places, no trailing zeros). */
export function money(micros: number): string {
  return String(Math.round(micros) / 1e6);
}

/** `x-servegate-budget-*`: per kind, the budget with the least left (it refuses first); reset in whole seconds. */
export function budgetHeaders(specs: readonly BudgetSpec[], spent: readonly Spent[]): Record<string, string> {
  const h: Record<string, string> = {};
  for (const kind of ['tokens', 'cost'] as const) {
    let best: { limit: number; left: number; resetMs: number } | undefined;
    specs.forEach((s, i) => {
      const limit = kind === 'tokens' ? (s.limit.tokens ?? 0) : Math.round((s.limit.cost ?? 0) * 1e6);
      if (!(limit > 0)) return;
      const used = kind === 'tokens' ? spent[i].tokens : spent[i].costMicros;
      const left = Math.max(0, limit - used);
      if (!best || left < best.left) best = { limit, left, resetMs: spent[i].resetMs };
    });
    if (!best) continue;
    const b = best as { limit: number; left: number; resetMs: number };
    h[`x-servegate-budget-limit-${kind}`] = kind === 'tokens' ? String(b.limit) : money(b.limit);
    h[`x-servegate-budget-remaining-${kind}`] = kind === 'tokens' ? String(b.left) : money(b.left);
    h[`x-servegate-budget-reset-${kind}`] = String(Math.ceil(b.resetMs / 1000));
  }
  return h;
}

/** A project's budget as configuration writes it; undefined when it sets no limit. Throws on a bad period. */
function limitOf(
  c: { budgetTokens?: number; budgetCost?: number; budgetPeriod?: string },
  where: string,
): BudgetLimit | undefined {
  const period = parseBudgetPeriod(c.budgetPeriod ?? 'month');
  if (typeof period === 'string') throw new Error(`${where}.${period}`);
  const limit: BudgetLimit = { period };
  if ((c.budgetTokens ?? 0) > 0) limit.tokens = c.budgetTokens;
  if ((c.budgetCost ?? 0) > 0) limit.cost = c.budgetCost;
  return isLimited(limit) ? limit : undefined;
}
