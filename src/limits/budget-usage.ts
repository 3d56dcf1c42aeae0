// What budgets hold now, for the admin listener's /budgets (read by `servegate usage`) and /readyz: every key and
// project with a budget, or those a query names.
import type { RouteTable } from '../routing/types.js';
import type { RouteStore } from '../routing/store.js';
import { money, periodText, type BudgetSpec, type Budgets } from './budgets.js';

export interface BudgetUsage {
  scope: 'key' | 'project';
  name: string;
  period: string;
  limitTokens?: number;
  spentTokens: number;
  remainingTokens?: number;
  limitCost?: string;
  spentCost: string;
  remainingCost?: string;
  /** Seconds until the period resets (calendar) or its oldest spend leaves the window (rolling). */
  resetSeconds: number;
}

/** `/readyz`: budgets counted by each replica alone (no limits.redis.url) while any budget is set. */
export function budgetProblems(budgets: Budgets, store: RouteStore): string[] {
  if (budgets.store.shared) return [];
  if (!budgets.projectBudgets && !anyKeyBudget(store.current())) return [];
  return [
    'budgets: counted per replica (limits.redis.url is not set): with N replicas a key or project can spend up to N times its budget',
  ];
}

function anyKeyBudget(table: RouteTable): boolean {
  for (const list of table.keys.values()) for (const k of list) if (k.budget) return true;
  return false;
}

/**
 * The budgets `table` has now, as `${scope}\0${name}` (what /budgets lists): every key with a budget of its own, and
 * every project with a deployment and a budget. Their spend series stay; those of any other go (observe/metrics.ts).
 */
export function budgetNames(budgets: Budgets, table: RouteTable): Set<string> {
  const names = new Set<string>();
  for (const list of table.keys.values())
    for (const k of list) for (const s of budgets.specs(undefined, k)) names.add(`${s.scope}\0${s.name}`);
  for (const p of new Set(table.routes.map((r) => r.project)))
    for (const s of budgets.specs(p, undefined)) names.add(`${s.scope}\0${s.name}`);
  return names;
}

/** Every budget (or those of `q.key` / `q.project`) with what it holds now; `shared`: counted across replicas. */
export async function budgetUsage(
  budgets: Budgets,
  table: RouteTable,
  q: { key?: string; project?: string },
): Promise<{ shared: boolean; budgets: BudgetUsage[] } | { error: string }> {
  const specs: BudgetSpec[] = [];
  const wantKeys = q.key !== undefined || q.project === undefined;
  const wantProjects = q.project !== undefined || q.key === undefined;
  if (wantKeys) {
    const keys = [...table.keys.values()].flat().filter((k) => q.key === undefined || k.name === q.key);
    for (const k of keys.sort((a, b) => (a.name < b.name ? -1 : 1))) specs.push(...budgets.specs(undefined, k));
  }
  if (wantProjects) {
    const projects = new Set<string>(q.project !== undefined ? [q.project] : table.routes.map((r) => r.project));
    for (const p of [...projects].sort()) specs.push(...budgets.specs(p, undefined));
  }
  const spent = await budgets.usage(specs);
  if (!spent) return { error: 'the budget store (Redis) did not answer' };
  return {
    shared: budgets.store.shared,
    budgets: specs.map((s, i) => {
      const u: BudgetUsage = {
        scope: s.scope,
        name: s.name,
        period: periodText(s.limit.period),
        spentTokens: spent[i].tokens,
        spentCost: money(spent[i].costMicros),
        resetSeconds: Math.ceil(spent[i].resetMs / 1000),
      };
      if (s.limit.tokens) {
        u.limitTokens = s.limit.tokens;
        u.remainingTokens = Math.max(0, s.limit.tokens - spent[i].tokens);
      }
      if (s.limit.cost) {
        const limit = Math.round(s.limit.cost * 1e6);
        u.limitCost = money(limit);
        u.remainingCost = money(Math.max(0, limit - spent[i].costMicros));
      }
      return u;
    }),
  };
}
