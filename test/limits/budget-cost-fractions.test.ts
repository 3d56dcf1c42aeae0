// Cost budgets at low prices (SPEC §14): a store counts whole micro-units of cost, and each answer's cost was rounded
// alone, so an answer worth under half a micro-unit was charged nothing however many came (an embedding of 10 tokens
// at 0.02 per million tokens is 0.2 of one: a million of them, 0.20 of the currency, were charged 0 and a cost budget
// never ran out). The fraction not charged is now owed to the next answer of the same budgets. Found by a hostile
// review.
import { expect, test } from '@jest/globals';
import { Budgets, MemoryBudgetStore, windowOf } from '../../src/limits/budgets.js';

const defaults = { perProject: { budgetTokens: 0, budgetCost: 0, budgetPeriod: 'month' }, projects: {} };
const embeddings = { inputPerMillion: 0.02, outputPerMillion: 0 };

function spentMicros(store: MemoryBudgetStore, budgets: Budgets, key: Parameters<Budgets['specs']>[1]): number {
  const now = Date.now();
  return store.read(
    budgets.specs(undefined, key).map((s) => windowOf(s.id, s.limit.period, now)),
    now,
  )[0].costMicros;
}

test('10,000 answers of 0.2 micro-units are charged 2,000 of them, not 0', () => {
  const store = new MemoryBudgetStore();
  const budgets = new Budgets(store, defaults);
  const key = { namespace: 'servegate', name: 'emb', budget: { cost: 1, period: { kind: 'month' as const } } };
  const specs = budgets.specs(undefined, key);
  for (let i = 0; i < 10_000; i++) budgets.charge(specs, 10, 0, embeddings);
  const spent = spentMicros(store, budgets, key);
  expect(spent).toBeGreaterThanOrEqual(1999);
  expect(spent).toBeLessThanOrEqual(2000);
});

test('a cost budget of 0.001 runs out after about 5,000 such answers', async () => {
  const store = new MemoryBudgetStore();
  const budgets = new Budgets(store, defaults);
  const key = { namespace: 'servegate', name: 'emb', budget: { cost: 0.001, period: { kind: 'day' as const } } };
  let answered = 0;
  for (; answered < 10_000; answered++) {
    const d = await budgets.decide(budgets.specs(undefined, key));
    if (!d.ok) break;
    budgets.charge(d.charge, 10, 0, embeddings);
  }
  expect(answered).toBeGreaterThanOrEqual(4999);
  expect(answered).toBeLessThanOrEqual(5001);
});

test('whole and larger costs are charged as before; a key and a project charged together owe alike', () => {
  const store = new MemoryBudgetStore();
  const budgets = new Budgets(store, {
    perProject: { budgetTokens: 0, budgetCost: 0, budgetPeriod: 'month' },
    projects: { demo: { budgetCost: 5 } },
  });
  const key = { namespace: 'servegate', name: 'chat', budget: { cost: 1, period: { kind: 'month' as const } } };
  const specs = budgets.specs('demo', key);
  budgets.charge(specs, 30, 20, { inputPerMillion: 1000, outputPerMillion: 2000 }); // 70,000 micro-units
  budgets.charge(specs, 3, 0, { inputPerMillion: 0.15, outputPerMillion: 0.6 }); // 0.45: owed
  budgets.charge(specs, 3, 0, { inputPerMillion: 0.15, outputPerMillion: 0.6 }); // 0.9: owed
  budgets.charge(specs, 1, 0, { inputPerMillion: 0.15, outputPerMillion: 0.6 }); // 1.05: one charged
  const now = Date.now();
  const spent = store.read(
    specs.map((s) => windowOf(s.id, s.limit.period, now)),
    now,
  );
  expect(spent.map((s) => s.costMicros)).toEqual([70_001, 70_001]);
});
