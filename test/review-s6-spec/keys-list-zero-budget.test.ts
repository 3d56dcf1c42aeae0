// SPEC §14: a key Secret's budgetTokens / budgetCost of 0 is no budget (docs/llm.md: "0 = none"; the gateway applies
// none and /budgets lists none). `servegate keys list` (which docs/llm.md says "shows each key's budget") printed such
// a key as "0 tokens per month" — read as a budget of nothing, every request refused — and `keys update --budget-tokens
// 0` left "0 tokens, cost 2.5 per 7d". Found by an independent check of SPEC §14.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, expect, test } from '@jest/globals';
import { keysCommand } from '../../src/cli/keys.js';
import type { CliIo } from '../../src/cli/io.js';

const dir = mkdtempSync(join(tmpdir(), 'servegate-r2-keys-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function keys(argv: string[]): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const io: CliIo = {
    stdout: (t) => void (out += t),
    stderr: (t) => void (err += t),
    env: { HOME: '/nonexistent-home' },
    now: () => Date.now(),
  };
  const code = await keysCommand([...argv, '--manifests', dir], io);
  return { code, out, err };
}

/** The LIMITS cell of `name` in the `keys list` table. */
function limitsOf(table: string, name: string): string {
  const [header, ...rows] = table.trimEnd().split('\n');
  const row = rows.find((r) => r.startsWith(`${name} `));
  if (!row) throw new Error(`no row for ${name} in\n${table}`);
  const from = header.indexOf('LIMITS');
  return row.slice(from, header.indexOf('FILE')).trim();
}

test('a budget of 0 (none) is not listed as a budget of 0 tokens; a real one still is', async () => {
  expect((await keys(['create', '--name', 'zero', '--projects', 'demo', '--budget-tokens', '0'])).code).toBe(0);
  expect((await keys(['create', '--name', 'real', '--projects', 'demo', '--budget-tokens', '500'])).code).toBe(0);
  const both = ['create', '--name', 'both', '--projects', 'demo', '--budget-tokens', '100', '--budget-cost', '2.5'];
  expect((await keys([...both, '--budget-period', '7d'])).code).toBe(0);
  expect((await keys(['update', '--name', 'both', '--budget-tokens', '0'])).code).toBe(0);

  const list = await keys(['list']);
  expect(list.code).toBe(0);
  expect(limitsOf(list.out, 'zero')).toBe('default');
  expect(limitsOf(list.out, 'real')).toBe('500 tokens per month');
  expect(limitsOf(list.out, 'both')).toBe('cost 2.5 per 7d');

  expect((await keys(['update', '--name', 'both', '--budget-cost', '0'])).code).toBe(0);
  const json = JSON.parse((await keys(['list', '-o', 'json'])).out) as Array<{ name: string; budget?: string }>;
  expect(json.find((k) => k.name === 'both')?.budget).toBeUndefined();
  expect(json.find((k) => k.name === 'real')?.budget).toBe('500 tokens per month');
});
