// The openai SDK and an exhausted budget (SPEC §14): the 429 insufficient_quota carries `x-should-retry: false`, which
// the OpenAI SDKs obey, so a client left at its default retries (2) gets its RateLimitError at once. Before, every
// such call was sent three times, about 1 and 2 s apart, for a refusal that lasts until the period resets. Found by a
// hostile review.
import OpenAI from 'openai';
import { afterAll, beforeAll, expect, test } from '@jest/globals';
import { startOpenAIBackend, type OpenAIBackend } from '../support/backends.js';
import { send, startGateway, type Gateway } from '../support/harness.js';
import { metricValue } from '../support/metrics.js';

let llm: OpenAIBackend;
let gw: Gateway;

beforeAll(async () => {
  llm = await startOpenAIBackend();
  llm.usage = { prompt: 30, completion: 20 };
  gw = await startGateway({
    deployments: [{ namespace: 'demo', name: 'chat', modelServer: 'llm', url: llm.url }],
    keys: [
      { name: 'apikey-spent', projects: 'demo', fields: { budgetTokens: '50' } },
      { name: 'apikey-rpm', projects: 'demo', rpm: 1 },
    ],
  });
});

afterAll(async () => {
  await gw?.close();
  await llm?.close();
});

const refusals = async () =>
  metricValue((await send(`${gw.adminUrl}/metrics`)).text, 'servegate_rate_limited_total', {
    scope: 'key',
    kind: 'tokens',
    reason: 'budget',
  }) ?? 0;

test('an SDK with its default retries asks once and raises RateLimitError insufficient_quota at once', async () => {
  const client = new OpenAI({ baseURL: `${gw.url}/openai/v1`, apiKey: gw.keys['apikey-spent'] });
  const chat = { model: 'demo/chat', messages: [{ role: 'user' as const, content: 'hi' }] };
  await client.chat.completions.create(chat); // spends the 50 tokens
  const started = Date.now();
  const err = await client.chat.completions.create(chat).catch((e: unknown) => e);
  expect(err).toBeInstanceOf(OpenAI.RateLimitError);
  expect((err as InstanceType<typeof OpenAI.RateLimitError>).code).toBe('insufficient_quota');
  expect((err as InstanceType<typeof OpenAI.RateLimitError>).headers.get('x-should-retry')).toBe('false');
  expect(await refusals()).toBe(1);
  expect(Date.now() - started).toBeLessThan(500);
});

test('a per-minute 429 stays retryable: it does come back in seconds', async () => {
  const r1 = await send(`${gw.url}/v1/demo/chat/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `ApiKey ${gw.keys['apikey-rpm']}` },
    body: { model: 'chat', messages: [{ role: 'user', content: 'hi' }] },
  });
  expect(r1.status).toBe(200);
  const r2 = await send(`${gw.url}/v1/demo/chat/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `ApiKey ${gw.keys['apikey-rpm']}` },
    body: { model: 'chat', messages: [{ role: 'user', content: 'hi' }] },
  });
  expect(r2.status).toBe(429);
  expect(r2.json().error.code).toBe('rate_limit_exceeded');
  expect(r2.headers['x-should-retry']).toBeUndefined();
});
