// SPEC §14 metrics servegate_budget_spent_tokens / _cost {scope, name}: a key whose Secret is deleted, or whose budget
// is set to 0 (none), has no budget any more (/budgets and `servegate usage` no longer list it), and its series go
// with it, as servegate_queue_length's do for a deleted deployment (1d52398). Before, the last figure stayed in
// /metrics for the life of the process: a dashboard kept showing a deleted key's spend, and every deleted key left two
// series behind. A key that keeps its budget keeps its series. Found by an independent check of SPEC §14.
import { afterAll, beforeAll, expect, test } from '@jest/globals';
import { startOpenAIBackend, type OpenAIBackend } from '../support/backends.js';
import { eventually, send, startGateway, type Gateway } from '../support/harness.js';
import { metricValue } from '../support/metrics.js';

let llm: OpenAIBackend;
let gw: Gateway;

beforeAll(async () => {
  llm = await startOpenAIBackend();
  llm.usage = { prompt: 30, completion: 20 };
  gw = await startGateway({
    deployments: [
      { namespace: 'demo', name: 'chat', modelServer: 'llm', url: llm.url, spec: { pricing: { inputPerMillion: 1 } } },
    ],
    keys: [
      { name: 'apikey-gone', projects: 'demo', fields: { budgetTokens: '1000' } },
      { name: 'apikey-unbudgeted', projects: 'demo', fields: { budgetTokens: '1000' } },
      { name: 'apikey-kept', projects: 'demo', fields: { budgetTokens: '1000' } },
    ],
  });
});

afterAll(async () => {
  await gw?.close();
  await llm?.close();
});

const post = (key: string) =>
  send(`${gw.url}/v1/demo/chat/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `ApiKey ${gw.keys[key]}` },
    body: { model: 'chat', messages: [{ role: 'user', content: 'hi' }] },
  });
const spent = async (name: string) => {
  const text = (await send(`${gw.adminUrl}/metrics`)).text;
  return {
    tokens: metricValue(text, 'servegate_budget_spent_tokens', { scope: 'key', name }),
    cost: metricValue(text, 'servegate_budget_spent_cost', { scope: 'key', name }),
  };
};
const listed = async (name: string) =>
  ((await send(`${gw.adminUrl}/budgets?key=${name}`)).json().budgets as unknown[]).length;

test("a deleted key's budget series go; a key whose budget is removed loses them; others stay", async () => {
  for (const k of ['apikey-gone', 'apikey-unbudgeted', 'apikey-kept']) expect((await post(k)).status).toBe(200);
  for (const k of ['apikey-gone', 'apikey-unbudgeted', 'apikey-kept'])
    expect(await spent(k)).toEqual({ tokens: 50, cost: 0.00003 });

  gw.removeKey('apikey-gone');
  gw.writeKey({
    name: 'apikey-unbudgeted',
    projects: 'demo',
    key: gw.keys['apikey-unbudgeted'],
    fields: { budgetTokens: '0' },
  });
  await eventually(async () => {
    expect(await listed('apikey-gone')).toBe(0);
    expect(await listed('apikey-unbudgeted')).toBe(0);
  });
  // The table that dropped them is in place: their series go with it (a scrape after the change).
  await eventually(async () => {
    expect(await spent('apikey-gone')).toEqual({ tokens: undefined, cost: undefined });
    expect(await spent('apikey-unbudgeted')).toEqual({ tokens: undefined, cost: undefined });
  });
  expect(await spent('apikey-kept')).toEqual({ tokens: 50, cost: 0.00003 });
  expect(await listed('apikey-kept')).toBe(1);
  // The key without a budget still works, and a charge does not bring its series back.
  expect((await post('apikey-unbudgeted')).status).toBe(200);
  expect(await spent('apikey-unbudgeted')).toEqual({ tokens: undefined, cost: undefined });
});
