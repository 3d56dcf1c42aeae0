// Budgets per key and per project (SPEC §14), in one gateway with in-process counters: tokens and cost (spec.pricing)
// charged from the answers' usage, streams included; the 429 insufficient_quota in each dialect with its
// x-servegate-budget-* headers; a stream in flight when the budget runs out finishes and the next request is refused;
// a project's budget shared by its keys, over a rolling window; `keys update` raising a budget takes effect at once;
// the metrics, /readyz (budgets per replica without Redis), /budgets and `servegate usage`.
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import {
  startOpenAIBackend,
  startPythonBackend,
  type OpenAIBackend,
  type RecordingBackend,
} from '../support/backends.js';
import { eventually, send, startGateway, type Gateway, type Reply } from '../support/harness.js';
import { metricValue } from '../support/metrics.js';
import { keysCommand } from '../../src/cli/keys.js';
import { usageCommand } from '../../src/cli/usage.js';
import type { CliIo } from '../../src/cli/io.js';

let llm: OpenAIBackend;
let py: RecordingBackend;
let gw: Gateway;
const chat = { model: 'chat', messages: [{ role: 'user' as const, content: 'hi' }] };

beforeAll(async () => {
  [llm, py] = await Promise.all([startOpenAIBackend(), startPythonBackend()]);
  llm.usage = { prompt: 30, completion: 20 }; // 50 tokens an answer; at the prices below 0.07
  gw = await startGateway({
    config: { limits: { projects: { team_a: { budgetTokens: 50, budgetPeriod: '12h' } } } },
    deployments: [
      { namespace: 'demo', name: 'echo', type: 'python', url: py.url },
      {
        namespace: 'demo',
        name: 'chat',
        modelServer: 'llm',
        url: llm.url,
        spec: { pricing: { inputPerMillion: 1000, outputPerMillion: 2000 } },
      },
      { namespace: 'team-a', project: 'team_a', name: 'chat', modelServer: 'llm', url: llm.url },
    ],
    keys: [
      { name: 'apikey-tokens', projects: 'demo', fields: { budgetTokens: '100' } },
      { name: 'apikey-cost', projects: 'demo', fields: { budgetCost: '0.1', budgetPeriod: 'day' } },
      { name: 'apikey-stream', projects: 'demo', fields: { budgetTokens: '60' } },
      { name: 'apikey-sdk', projects: 'demo', fields: { budgetTokens: '50' } },
      { name: 'apikey-raise', projects: 'demo', fields: { budgetTokens: '50' } },
      { name: 'apikey-team1', projects: 'team_a' },
      { name: 'apikey-team2', projects: 'team_a' },
      { name: 'apikey-free', projects: 'demo' },
    ],
  });
});

afterAll(async () => {
  await gw?.close();
  await Promise.all([llm?.close(), py?.close()]);
});

const post = (path: string, key: string, body: object = chat) =>
  send(`${gw.url}${path}`, { method: 'POST', headers: { authorization: `ApiKey ${gw.keys[key]}` }, body });
const metrics = async () => (await send(`${gw.adminUrl}/metrics`)).text;
const secondsToMonthEnd = () => {
  const d = new Date();
  return (Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1) - Date.now()) / 1000;
};

function expectQuota(r: Reply, dialect: 'openai' | 'kserve', message: RegExp): void {
  expect(r.status).toBe(429);
  if (dialect === 'openai') {
    expect(r.json().error).toMatchObject({ type: 'insufficient_quota', code: 'insufficient_quota' });
    expect(r.json().error.message).toMatch(message);
  } else expect(r.json().error).toMatch(message);
}

describe('token budgets of a key', () => {
  test('admitted while spent < budget, then 429 insufficient_quota in each dialect with the budget headers', async () => {
    const first = await post('/v1/demo/chat/v1/chat/completions', 'apikey-tokens');
    expect(first.status).toBe(200);
    expect(first.headers).toMatchObject({
      'x-servegate-budget-limit-tokens': '100',
      'x-servegate-budget-remaining-tokens': '100',
    });
    const second = await post('/openai/v1/chat/completions', 'apikey-tokens', { ...chat, model: 'demo/chat' });
    expect(second.status).toBe(200);
    expect(second.headers['x-servegate-budget-remaining-tokens']).toBe('50');

    const refused = [
      await post('/v1/demo/chat/v1/chat/completions', 'apikey-tokens'),
      await post('/openai/v1/chat/completions', 'apikey-tokens', { ...chat, model: 'demo/chat' }),
      await post('/v1/demo/echo/anything', 'apikey-tokens'),
    ];
    const message = /API key "apikey-tokens" has spent 100 tokens of 100 of its month budget/;
    expectQuota(refused[0], 'openai', message);
    expectQuota(refused[1], 'openai', message);
    expectQuota(refused[2], 'kserve', message);
    for (const r of refused) {
      expect(r.headers).toMatchObject({
        'x-servegate-budget-limit-tokens': '100',
        'x-servegate-budget-remaining-tokens': '0',
      });
      const reset = Number(r.headers['x-servegate-budget-reset-tokens']);
      expect(Math.abs(reset - secondsToMonthEnd())).toBeLessThan(5);
      expect(r.headers['x-servegate-budget-limit-cost']).toBeUndefined();
    }
    expect(llm.requests.filter((q) => q.headers['x-servegate-key'] === 'apikey-tokens')).toHaveLength(2);
    expect(py.requests.filter((q) => q.headers['x-servegate-key'] === 'apikey-tokens')).toHaveLength(0);
    const text = await metrics();
    expect(metricValue(text, 'servegate_budget_spent_tokens', { scope: 'key', name: 'apikey-tokens' })).toBe(100);
    expect(metricValue(text, 'servegate_rate_limited_total', { scope: 'key', kind: 'tokens', reason: 'budget' })).toBe(
      3,
    );
    // Other keys are not affected.
    expect((await post('/v1/demo/chat/v1/chat/completions', 'apikey-free')).status).toBe(200);
  });

  test('the openai SDK raises a RateLimitError whose code is insufficient_quota', async () => {
    const client = new OpenAI({ baseURL: `${gw.url}/openai/v1`, apiKey: gw.keys['apikey-sdk'], maxRetries: 0 });
    await client.chat.completions.create({ ...chat, model: 'demo/chat' });
    const err = await client.chat.completions.create({ ...chat, model: 'demo/chat' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.RateLimitError);
    expect((err as InstanceType<typeof OpenAI.RateLimitError>).code).toBe('insufficient_quota');
  });

  test('a stream in flight when the budget runs out finishes whole; the next request is refused', async () => {
    llm.stream = { chunks: 5, delayMs: 40 };
    try {
      const body = { ...chat, stream: true, stream_options: { include_usage: true } };
      // Both are admitted (nothing spent yet) and both run while the budget runs out: 2 × 50 tokens against 60.
      const [a, b] = await Promise.all([
        post('/v1/demo/chat/v1/chat/completions', 'apikey-stream', body),
        post('/openai/v1/chat/completions', 'apikey-stream', { ...body, model: 'demo/chat' }),
      ]);
      for (const r of [a, b]) {
        expect(r.status).toBe(200);
        expect(r.text).toContain('tok4');
        expect(r.text.trimEnd().endsWith('data: [DONE]')).toBe(true);
        expect(r.text).not.toContain('"error"');
      }
      const next = await post('/v1/demo/chat/v1/chat/completions', 'apikey-stream', body);
      expectQuota(next, 'openai', /has spent 100 tokens of 60/);
      expect(next.headers['x-servegate-budget-remaining-tokens']).toBe('0');
    } finally {
      llm.stream = { chunks: 3, delayMs: 10 };
    }
  });

  test('keys update --budget-tokens raises the budget of a running gateway at once', async () => {
    await post('/v1/demo/chat/v1/chat/completions', 'apikey-raise');
    expect((await post('/v1/demo/chat/v1/chat/completions', 'apikey-raise')).status).toBe(429);
    const io = captureIo();
    const code = await keysCommand(
      ['update', '--name', 'apikey-raise', '--budget-tokens', '500', '--budget-period', '7d', '--manifests', gw.dir],
      io,
    );
    expect({ code, err: io.err() }).toEqual({
      code: 0,
      err: expect.stringContaining('updated API key "apikey-raise" (budgetTokens=500, budgetPeriod=7d)'),
    });
    // A new period (a rolling 7d) is counted from nothing.
    await eventually(async () => {
      const r = await post('/v1/demo/chat/v1/chat/completions', 'apikey-raise');
      expect(r.status).toBe(200);
      expect(r.headers['x-servegate-budget-limit-tokens']).toBe('500');
    });
  });
});

describe('cost budgets', () => {
  test('cost = tokens × spec.pricing; past the cost budget 429 with the -cost headers', async () => {
    expect((await post('/v1/demo/chat/v1/chat/completions', 'apikey-cost')).status).toBe(200); // 0.07
    const second = await post('/v1/demo/chat/v1/chat/completions', 'apikey-cost');
    expect(second.status).toBe(200);
    expect(second.headers).toMatchObject({
      'x-servegate-budget-limit-cost': '0.1',
      'x-servegate-budget-remaining-cost': '0.03',
    });
    const refused = await post('/v1/demo/chat/v1/chat/completions', 'apikey-cost');
    expectQuota(refused, 'openai', /API key "apikey-cost" has spent 0.14 of 0.1 of its day budget/);
    expect(refused.headers).toMatchObject({
      'x-servegate-budget-limit-cost': '0.1',
      'x-servegate-budget-remaining-cost': '0',
    });
    const d = new Date();
    const toDayEnd = (Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate() + 1) - Date.now()) / 1000;
    expect(Math.abs(Number(refused.headers['x-servegate-budget-reset-cost']) - toDayEnd)).toBeLessThan(5);
    expect(metricValue(await metrics(), 'servegate_budget_spent_cost', { scope: 'key', name: 'apikey-cost' })).toBe(
      0.14,
    );
  });
});

describe("a project's budget", () => {
  test("is shared by the project's keys, over a rolling window", async () => {
    const first = await post('/v1/team_a/chat/v1/chat/completions', 'apikey-team1');
    expect(first.status).toBe(200);
    const refused = await post('/v1/team-a/chat/v1/chat/completions', 'apikey-team2');
    expectQuota(refused, 'openai', /project "team_a" has spent 50 tokens of 50 of its 12h budget/);
    // The spend leaves the window with its slot: within 12 h.
    const reset = Number(refused.headers['x-servegate-budget-reset-tokens']);
    expect(reset).toBeGreaterThan(11 * 3600);
    expect(reset).toBeLessThanOrEqual(12 * 3600 + 1800);
    expect(metricValue(await metrics(), 'servegate_budget_spent_tokens', { scope: 'project', name: 'team_a' })).toBe(
      50,
    );
  });
});

describe('what the gateway tells', () => {
  test('/readyz says budgets are counted per replica without Redis', async () => {
    const r = await send(`${gw.adminUrl}/readyz`);
    expect(r.status).toBe(200);
    expect(r.json().problems).toContainEqual(expect.stringContaining('budgets: counted per replica'));
  });

  test('/budgets and servegate usage print spend and what is left', async () => {
    const r = await send(`${gw.adminUrl}/budgets?key=apikey-tokens`);
    expect(r.json()).toEqual({
      shared: false,
      budgets: [
        {
          scope: 'key',
          name: 'apikey-tokens',
          period: 'month',
          limitTokens: 100,
          spentTokens: 100,
          remainingTokens: 0,
          spentCost: '0.14',
          resetSeconds: expect.any(Number),
        },
      ],
    });
    const io = captureIo();
    expect(await usageCommand(['--admin', gw.adminUrl, '--project', 'team_a'], io)).toBe(0);
    expect(io.out()).toMatch(/^SCOPE +NAME +PERIOD +TOKENS SPENT +TOKENS LEFT/);
    expect(io.out()).toMatch(/project +team_a +12h +50 +0 of 50 +0 +- +\d+s/);
    expect(io.err()).toContain('counts budgets alone');
  });
});

function captureIo(): CliIo & { out: () => string; err: () => string } {
  let out = '';
  let err = '';
  return {
    stdout: (t) => void (out += t),
    stderr: (t) => void (err += t),
    env: { HOME: '/nonexistent-home' },
    now: () => Date.now(),
    out: () => out,
    err: () => err,
  };
}
