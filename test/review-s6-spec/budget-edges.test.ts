// SPEC §14 budgets as an independent acceptance check reads them, on cases the project's own tests do not reach end
// to end: `limits.perProject` as every project's default (a named project's unset fields from it), reached by the
// project's namespace form and on a predictive route (429 in the KServe dialect); the headers of a key budget and a
// project budget together (each kind tells the budget with the least left); a cost budget without spec.pricing
// (cost 0: never refused); embeddings charged their prompt tokens; a stream on /openai/v1 that did not ask for usage
// charged all the same; and a fallback to another project's deployment charged at the fallback's prices to the
// project that was asked.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import { startOpenAIBackend, startV1Backend, type OpenAIBackend, type RecordingBackend } from '../support/backends.js';
import { send, startGateway, type Gateway, type Reply } from '../support/harness.js';

let llm: OpenAIBackend;
let v1: RecordingBackend;
let down: Server;
let gw: Gateway;
const chat = { model: 'chat', messages: [{ role: 'user' as const, content: 'hi' }] };

beforeAll(async () => {
  [llm, v1] = await Promise.all([startOpenAIBackend(), startV1Backend()]);
  llm.usage = { prompt: 30, completion: 20 }; // 50 tokens an answer
  down = createServer((_req, res) => res.writeHead(503).end('busy'));
  await new Promise<void>((r) => down.listen(0, '127.0.0.1', r));
  const downUrl = `http://127.0.0.1:${(down.address() as AddressInfo).port}`;
  gw = await startGateway({
    config: {
      limits: {
        perProject: { budgetTokens: 120, budgetPeriod: 'day' },
        // Its tokens and period come from perProject.
        projects: { big: { budgetCost: 5 }, free: { budgetTokens: 0 }, first: { budgetTokens: 0 } },
      },
    },
    deployments: [
      { namespace: 'team-b', project: 'team_b', name: 'chat', modelServer: 'llm', url: llm.url },
      { namespace: 'team-b', project: 'team_b', name: 'iris', modelServer: 'sklearn', url: v1.url },
      {
        namespace: 'big',
        name: 'chat',
        modelServer: 'llm',
        url: llm.url,
        spec: { pricing: { inputPerMillion: 0.15, outputPerMillion: 0.6 } },
      },
      { namespace: 'free', name: 'chat', modelServer: 'llm', url: llm.url },
      {
        namespace: 'first',
        name: 'chat',
        modelServer: 'llm',
        url: downUrl,
        spec: { pricing: { inputPerMillion: 1, outputPerMillion: 1 }, fallbacks: ['second/chat'] },
      },
      {
        namespace: 'second',
        name: 'chat',
        modelServer: 'llm',
        url: llm.url,
        spec: { pricing: { inputPerMillion: 100, outputPerMillion: 200 } },
      },
    ],
    keys: [
      { name: 'apikey-team-b', projects: 'team_b' },
      { name: 'apikey-both', projects: 'big', fields: { budgetTokens: '1000', budgetCost: '0.00005' } },
      { name: 'apikey-no-pricing', projects: 'free', fields: { budgetCost: '0.01' } },
      { name: 'apikey-embed', projects: 'free', fields: { budgetTokens: '3' } },
      { name: 'apikey-stream', projects: 'free', fields: { budgetTokens: '40' } },
      { name: 'apikey-fallback', projects: 'first,second', fields: { budgetCost: '10' } },
    ],
  });
});

afterAll(async () => {
  await gw?.close();
  await Promise.all([llm?.close(), v1?.close(), new Promise((r) => down?.close(r))]);
});

const post = (path: string, key: string, body: object = chat) =>
  send(`${gw.url}${path}`, { method: 'POST', headers: { authorization: `Bearer ${gw.keys[key]}` }, body });
const budget = (r: Reply) =>
  Object.fromEntries(Object.entries(r.headers).filter(([h]) => h.startsWith('x-servegate-budget-limit')));
const left = (r: Reply, kind: 'tokens' | 'cost') => r.headers[`x-servegate-budget-remaining-${kind}`];
const budgets = async () =>
  (await send(`${gw.adminUrl}/budgets`)).json().budgets as Array<{ scope: string; name: string } & object>;
const budgetOf = async (scope: string, name: string) =>
  (await budgets()).find((b) => b.scope === scope && b.name === name) as Record<string, unknown> | undefined;

describe('limits.perProject', () => {
  test("is every project's budget, by either form of its name, on every route; refusal in the route's dialect", async () => {
    const answers = [
      await post('/v1/team-b/chat/v1/chat/completions', 'apikey-team-b'),
      await post('/openai/v1/chat/completions', 'apikey-team-b', { ...chat, model: 'team-b/chat' }),
      await post('/openai/v1/chat/completions', 'apikey-team-b', { ...chat, model: 'chat' }),
    ];
    expect(answers.map((r) => [r.status, left(r, 'tokens')])).toEqual([
      [200, '120'],
      [200, '70'],
      [200, '20'],
    ]);
    const predict = await post('/v1/team_b/iris/v1/models/iris:predict', 'apikey-team-b', { instances: [[1]] });
    expect(predict.status).toBe(429);
    expect(predict.json()).toEqual({
      error: 'budget exhausted: project "team_b" has spent 150 tokens of 120 of its day budget',
    });
    expect(predict.headers).toMatchObject({
      'x-servegate-budget-limit-tokens': '120',
      'x-servegate-budget-remaining-tokens': '0',
      'x-should-retry': 'false',
    });
    expect(predict.headers['retry-after']).toBeUndefined();
    expect(v1.requests).toHaveLength(0);
    expect(await budgetOf('project', 'team_b')).toMatchObject({ period: 'day', limitTokens: 120, spentTokens: 150 });
  });

  test("a named project's unset fields come from it; 0 there is none", async () => {
    expect(await budgetOf('project', 'big')).toMatchObject({ period: 'day', limitTokens: 120, limitCost: '5' });
    expect(await budgetOf('project', 'free')).toBeUndefined();
  });
});

test('a key budget and a project budget together: each kind tells the one with the least left', async () => {
  // Per answer 30 × 0.15 + 20 × 0.6 = 16.5 millionths: the key's cost (0.00005) and the project's tokens (120) bind.
  const r = [];
  for (let i = 0; i < 3; i++) r.push(await post('/v1/big/chat/v1/chat/completions', 'apikey-both'));
  expect(r.map((a) => a.status)).toEqual([200, 200, 200]);
  expect(budget(r[0])).toEqual({
    'x-servegate-budget-limit-tokens': '120',
    'x-servegate-budget-limit-cost': '0.00005',
  });
  expect(r.map((a) => [left(a, 'tokens'), left(a, 'cost')])).toEqual([
    ['120', '0.00005'],
    ['70', '0.000034'],
    ['20', '0.000017'],
  ]);
  const refused = await post('/v1/big/chat/v1/chat/completions', 'apikey-both');
  expect(refused.status).toBe(429);
  expect(refused.json().error).toMatchObject({ type: 'insufficient_quota', code: 'insufficient_quota' });
  expect(refused.json().error.message).toMatch(
    /project "big" has spent 150 tokens of 120 and 0.000049 of 5 of its day budget/,
  );
});

test('without spec.pricing a cost budget is never spent', async () => {
  for (let i = 0; i < 3; i++) {
    const r = await post('/v1/free/chat/v1/chat/completions', 'apikey-no-pricing');
    expect([r.status, left(r, 'cost')]).toEqual([200, '0.01']);
  }
  expect(await budgetOf('key', 'apikey-no-pricing')).toMatchObject({ spentTokens: 150, spentCost: '0' });
});

test('embeddings are charged their prompt tokens; a stream that did not ask for usage is charged it', async () => {
  const embed = () => post('/openai/v1/embeddings', 'apikey-embed', { model: 'free/chat', input: 'x' });
  expect((await embed()).status).toBe(200); // 2 tokens
  expect((await embed()).status).toBe(200);
  const refused = await embed();
  expect(refused.status).toBe(429);
  expect(refused.json().error.message).toMatch(/API key "apikey-embed" has spent 4 tokens of 3/);

  const stream = { ...chat, model: 'free/chat', stream: true };
  const first = await post('/openai/v1/chat/completions', 'apikey-stream', stream);
  expect(first.status).toBe(200);
  expect(first.text).not.toContain('"usage"'); // taken back out: the client did not ask for it
  const next = await post('/openai/v1/chat/completions', 'apikey-stream', stream);
  expect(next.status).toBe(429);
  expect(next.json().error.message).toMatch(/API key "apikey-stream" has spent 50 tokens of 40/);
});

test("a fallback's answer costs its own prices and is charged to the project that was asked", async () => {
  llm.usage = { prompt: 1000, completion: 1000 };
  try {
    const r = await post('/v1/first/chat/v1/chat/completions', 'apikey-fallback');
    expect(r.status).toBe(200);
    expect(r.headers['x-servegate-deployment']).toBe('second/chat');
    // 1000 × 100 / 10^6 + 1000 × 200 / 10^6, not 0.002 at the first deployment's prices.
    expect(await budgetOf('key', 'apikey-fallback')).toMatchObject({ spentTokens: 2000, spentCost: '0.3' });
    expect(await budgetOf('project', 'second')).toMatchObject({ spentTokens: 0 });
  } finally {
    llm.usage = { prompt: 30, completion: 20 };
  }
});
