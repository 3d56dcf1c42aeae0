// Budgets.runOut (SPEC §14): what a request admitted earlier finds when its turn in the fair queue comes, without
// asking the store again; forward/next-target.ts refuses it with 429 insufficient_quota when a budget it passed ran out
// while it waited (test/limits/budget-queued.test.ts, through a gateway). Found by a hostile review.
import { expect, test } from '@jest/globals';
import { Budgets, MemoryBudgetStore, windowOf, type BudgetStore } from '../../src/limits/budgets.js';
import { waitFor } from '../support/wait.js';

const defaults = { perProject: { budgetTokens: 0, budgetCost: 0, budgetPeriod: 'month' }, projects: {} };

test('in process: refused once the counts reach the budget, with the refusal of an admission', async () => {
  const budgets = new Budgets(new MemoryBudgetStore(), defaults);
  const key = { namespace: 'servegate', name: 'k', budget: { tokens: 10, cost: 1, period: { kind: 'day' as const } } };
  const specs = budgets.specs('demo', key);
  expect(budgets.runOut(undefined)).toBeUndefined();
  expect(budgets.runOut(specs)).toBeUndefined();
  budgets.charge(specs, 5, 4, undefined);
  expect(budgets.runOut(specs)).toBeUndefined();
  budgets.charge(specs, 0, 1, undefined);
  const refused = budgets.runOut(specs)!;
  expect(refused.refusing.map((s) => s.scope)).toEqual(['key']);
  expect(refused.error.message).toMatch(/API key "k" has spent 10 tokens of 10 and 0 of 1 of its day budget/);
  expect(refused.error.headers).toMatchObject({
    'x-servegate-budget-limit-tokens': '10',
    'x-servegate-budget-remaining-tokens': '0',
  });
});

test('with a shared store, the turn is judged from what this replica last read or got back from a charge', async () => {
  // A store shared by replicas (Redis, in the product): it answers asynchronously; runOut never asks it.
  const memory = new MemoryBudgetStore();
  let asked = 0;
  const shared: BudgetStore = {
    shared: true,
    read: async (w, now) => (asked++, memory.read(w, now)),
    charge: (w, tokens, cost, now) => memory.charge(w, tokens, cost, now),
  };
  const budgets = new Budgets(shared, {
    perProject: { budgetTokens: 0, budgetCost: 0, budgetPeriod: 'month' },
    projects: {},
  });
  const key = { namespace: 'servegate', name: 'k', budget: { tokens: 100, period: { kind: 'day' as const } } };
  const specs = budgets.specs('demo', key);
  const admitted = await budgets.decide(specs);
  expect(admitted.ok).toBe(true);
  expect(budgets.runOut(specs)).toBeUndefined();
  // Another replica spends 99: not seen here until this replica reads or charges again.
  await memory.charge(
    specs.map((s) => windowOf(s.id, s.limit.period, Date.now())),
    99,
    0,
    Date.now(),
  );
  expect(budgets.runOut(specs)).toBeUndefined();
  // This replica's own charge comes back with the shared total (99 + 1): spent.
  budgets.charge(specs, 1, 0, undefined);
  await waitFor(() => budgets.runOut(specs) !== undefined, 'the charge to come back');
  const refused = budgets.runOut(specs)!;
  expect(refused.error.code).toBe('insufficient_quota');
  expect(refused.error.headers).toMatchObject({ 'x-servegate-budget-remaining-tokens': '0' });
  expect(asked).toBe(1);
});

test('with a shared store, a rolling window whose oldest spend left it since it was seen is not refused on old figures', async () => {
  let now = 1_800_000_000_000;
  const memory = new MemoryBudgetStore();
  const shared: BudgetStore = {
    shared: true,
    read: async (w, at) => memory.read(w, at),
    charge: (w, tokens, cost, at) => memory.charge(w, tokens, cost, at),
  };
  const budgets = new Budgets(shared, defaults, { failOpen: true, now: () => now });
  const key = {
    namespace: 'servegate',
    name: 'k',
    budget: { tokens: 100, period: { kind: 'rolling' as const, ms: 3_600_000 } },
  };
  const specs = budgets.specs(undefined, key);
  budgets.charge(specs, 100, 0, undefined);
  await waitFor(() => budgets.runOut(specs) !== undefined, 'the charge to come back');
  // Still in the window a second before it leaves; gone an hour after it was spent.
  now += 3_599_000;
  expect(budgets.runOut(specs)).toBeDefined();
  now += 1_000;
  expect(budgets.runOut(specs)).toBeUndefined();
});
