// SPEC §14 names rolling periods as `12h`, `7d`; docs/llm.md's example is `genai: {budgetCost: 200, budgetPeriod: 7d}`.
// What the gateway tells about a budget — `servegate usage`'s PERIOD column, /budgets' `period` and the 429's message
// — names its period as it was written. Before, it was rewritten to the largest whole unit: a `7d` budget printed as
// `1w`, `24h` as `1d`, `120m` as `2h`, so an operator (or a check) looking for the period they set did not find it.
// The count is the same either way (`7d` and `1w` are one window). Found by an independent check of SPEC §14.
import { afterAll, beforeAll, expect, test } from '@jest/globals';
import { startOpenAIBackend, type OpenAIBackend } from '../support/backends.js';
import { send, startGateway, type Gateway } from '../support/harness.js';
import { usageCommand } from '../../src/cli/usage.js';
import type { CliIo } from '../../src/cli/io.js';

let llm: OpenAIBackend;
let gw: Gateway;

beforeAll(async () => {
  llm = await startOpenAIBackend();
  llm.usage = { prompt: 30, completion: 20 };
  gw = await startGateway({
    config: { limits: { projects: { genai: { budgetTokens: 50, budgetPeriod: '7d' } } } },
    deployments: [{ namespace: 'genai', name: 'chat', modelServer: 'llm', url: llm.url }],
    keys: [
      { name: 'apikey-24h', projects: 'genai', fields: { budgetTokens: '1000', budgetPeriod: '24h' } },
      { name: 'apikey-120m', projects: 'genai', fields: { budgetTokens: '1000', budgetPeriod: '120m' } },
    ],
  });
});

afterAll(async () => {
  await gw?.close();
  await llm?.close();
});

const post = (key: string) =>
  send(`${gw.url}/openai/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${gw.keys[key]}` },
    body: { model: 'genai/chat', messages: [{ role: 'user', content: 'hi' }] },
  });

test('usage, /budgets and the 429 name each rolling period as it was written', async () => {
  expect((await post('apikey-24h')).status).toBe(200);
  const refused = await post('apikey-120m');
  expect(refused.status).toBe(429);
  expect(refused.json().error.message).toMatch(/project "genai" has spent 50 tokens of 50 of its 7d budget/);

  const budgets = (await send(`${gw.adminUrl}/budgets`)).json().budgets as Array<{ name: string; period: string }>;
  expect(Object.fromEntries(budgets.map((b) => [b.name, b.period]))).toEqual({
    'apikey-120m': '120m',
    'apikey-24h': '24h',
    genai: '7d',
  });

  let out = '';
  const io: CliIo = { stdout: (t) => void (out += t), stderr: () => undefined, env: {}, now: () => Date.now() };
  expect(await usageCommand(['--admin', gw.adminUrl], io)).toBe(0);
  expect(out).toMatch(/^key +apikey-120m +120m +0 /m);
  expect(out).toMatch(/^key +apikey-24h +24h +50 /m);
  expect(out).toMatch(/^project +genai +7d +50 +0 of 50 /m);
});
