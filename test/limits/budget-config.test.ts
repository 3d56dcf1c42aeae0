// Budgets in the gateway configuration (SPEC §14, chart values under gateway:): a value that would budget nothing or
// refuse everything is refused at start with the field named, found by a hostile review.
import { readFileSync } from 'node:fs';
import AjvModule from 'ajv';
import { describe, expect, test } from '@jest/globals';
import { parseConfig } from '../../src/config/load.js';
import { Budgets, MemoryBudgetStore } from '../../src/limits/budgets.js';

const Ajv = AjvModule as unknown as typeof AjvModule.default;
const chartSchema = JSON.parse(
  readFileSync(new URL('../../charts/servegate/values.schema.json', import.meta.url), 'utf8'),
) as { $schema: string; properties: { gateway: object } };
const chartGateway = new Ajv({ allErrors: true, strict: false }).compile({
  $schema: chartSchema.$schema,
  ...chartSchema.properties.gateway,
});

const parse = (limits: Record<string, unknown>) => parseConfig({ limits }, { port: 0, namespace: 'servegate' });

function refusal(limits: Record<string, unknown>): string {
  try {
    parse(limits);
  } catch (err) {
    return (err as Error).message;
  }
  throw new Error(`accepted: ${JSON.stringify(limits)}`);
}

describe('cost budgets in the configuration', () => {
  test.each([
    [{ perProject: { budgetCost: 1e-9 } }, 'limits.perProject.budgetCost'],
    [{ perProject: { budgetCost: 0.0000004 } }, 'limits.perProject.budgetCost'],
    [{ projects: { genai: { budgetCost: 1e-7 } } }, 'limits.projects.genai.budgetCost'],
    [{ projects: { genai: { budgetCost: 1e300 } } }, 'limits.projects.genai.budgetCost'],
    [{ projects: { genai: { budgetCost: -1 } } }, 'limits.projects.genai.budgetCost'],
  ])('%j is refused naming %s', (limits, field) => {
    expect(refusal(limits)).toContain(`${field}: must be 0 (no cost budget) or from 0.000001`);
  });

  test('0, one millionth and a large budget are kept; one millionth admits until a millionth is spent', () => {
    const c = parse({
      perProject: { budgetCost: 0.000001 },
      projects: { big: { budgetCost: 5e11 }, off: { budgetCost: 0 } },
    });
    const budgets = new Budgets(new MemoryBudgetStore(), c.limits);
    const d = budgets.decide(budgets.specs('demo', undefined));
    expect(d).toMatchObject({ ok: true, headers: { 'x-servegate-budget-limit-cost': '0.000001' } });
    expect(budgets.specs('big', undefined)[0].limit.cost).toBe(5e11);
    expect(budgets.specs('off', undefined)).toEqual([]);
  });
});

describe('project names under limits.projects', () => {
  test('a name that is no project name is refused, not silently never applied', () => {
    expect(refusal({ projects: { 'Team A!': { budgetTokens: 5 } } })).toMatch(
      /limits\.projects\.Team A!: must be a project name/,
    );
    expect(refusal({ projects: { 'genai/chat': { budgetTokens: 5 } } })).toMatch(/must be a project name/);
  });

  test('one project named twice (written and namespace form) is refused instead of one budget silently winning', () => {
    expect(refusal({ projects: { team_a: { budgetTokens: 5 }, 'team-a': { budgetTokens: 10 } } })).toContain(
      'limits.projects.team-a: names the same project as "team_a"',
    );
    expect(refusal({ projects: { Fraud: { budgetTokens: 5 }, fraud: { budgetTokens: 10 } } })).toContain(
      'names the same project as "Fraud"',
    );
  });

  test('distinct projects in either form are kept', () => {
    const c = parse({ projects: { team_a: { budgetTokens: 5 }, 'fraud-detection': { budgetTokens: 7 } } });
    const budgets = new Budgets(new MemoryBudgetStore(), c.limits);
    expect(budgets.specs('team-a', undefined)[0].limit.tokens).toBe(5);
    expect(budgets.specs('fraud_detection', undefined)[0].limit.tokens).toBe(7);
  });
});

describe('the chart refuses the same values before they reach a gateway', () => {
  test.each([
    [{ perProject: { budgetCost: 1e-9 } }, false],
    [{ projects: { genai: { budgetCost: 1e300 } } }, false],
    [{ projects: { 'Team A!': { budgetTokens: 5 } } }, false],
    [
      { perProject: { budgetCost: 0 }, projects: { genai: { budgetCost: 0.000001 }, team_a: { budgetCost: 20 } } },
      true,
    ],
  ])('gateway.limits %j valid: %s', (limits, valid) => {
    expect(chartGateway({ limits })).toBe(valid);
  });
});
