// Per-minute limits at the gateway (SPEC §9), in process: a key's Secret rpm, a deployment's spec.limits, tokens
// charged from the answers' usage (streamed and not), the 429 with Retry-After and the OpenAI x-ratelimit-* headers in
// the route's dialect, the openai SDK seeing a RateLimitError; failed-authentication throttling per address; and the
// per-second bucket per key. Every 429 the gateway makes is tested here.
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import {
  startOpenAIBackend,
  startPythonBackend,
  type OpenAIBackend,
  type RecordingBackend,
} from '../support/backends.js';
import { send, startGateway, type Gateway, type Reply } from '../support/harness.js';
import { metricValue } from '../support/metrics.js';

let llm: OpenAIBackend;
let py: RecordingBackend;
let gw: Gateway;
const chat = { model: 'chat', messages: [{ role: 'user' as const, content: 'hi' }] };

beforeAll(async () => {
  [llm, py] = await Promise.all([startOpenAIBackend(), startPythonBackend()]);
  llm.usage = { prompt: 30, completion: 20 }; // 50 tokens an answer
  gw = await startGateway({
    config: { trustForwardedHeaders: true, auth: { failureLimit: { maxFailures: 3, windowSeconds: 60 } } },
    deployments: [
      { namespace: 'demo', name: 'echo', type: 'python', url: py.url },
      { namespace: 'demo', name: 'capped', type: 'python', url: py.url, limits: { requestsPerMinute: 2 } },
      { namespace: 'demo', name: 'chat', modelServer: 'llm', url: llm.url },
    ],
    keys: [
      { name: 'apikey-rpm', projects: 'demo', rpm: 3 },
      { name: 'apikey-free', projects: 'demo' },
      { name: 'apikey-tpm', projects: 'demo', tpm: 60 },
      { name: 'apikey-tpm-stream', projects: 'demo', tpm: 60 },
      { name: 'apikey-valid', projects: 'demo' },
    ],
  });
});

afterAll(async () => {
  await gw?.close();
  await Promise.all([llm?.close(), py?.close()]);
});

const call = (path: string, key: string, headers: Record<string, string> = {}) =>
  send(`${gw.url}${path}`, { headers: { authorization: `ApiKey ${gw.keys[key]}`, ...headers } });
const metrics = async () => (await send(`${gw.adminUrl}/metrics`)).text;

describe('requests per minute', () => {
  test("a key's Secret rpm: exactly that many, then 429 with Retry-After and the x-ratelimit headers; other keys unaffected", async () => {
    const answers = [];
    for (let i = 0; i < 5; i++) answers.push(await call('/v1/demo/echo/rpm', 'apikey-rpm'));
    expect(answers.map((r) => r.status)).toEqual([200, 200, 200, 429, 429]);
    expect(answers[0].headers).toMatchObject({
      'x-ratelimit-limit-requests': '3',
      'x-ratelimit-remaining-requests': '2',
      'x-ratelimit-reset-requests': '20s',
    });
    expect(answers[2].headers['x-ratelimit-remaining-requests']).toBe('0');
    const refused = answers[3];
    expect(refused.headers['retry-after']).toBe('20'); // 3 per minute: one back every 20 s
    expect(refused.headers['x-ratelimit-remaining-requests']).toBe('0');
    expect(refused.json()).toEqual({
      error: 'rate limit exceeded: 3 requests per minute for API key servegate/apikey-rpm; retry after 20 s',
    });
    expect((await call('/v1/demo/echo/rpm', 'apikey-free')).status).toBe(200);
    expect((await call('/v1/demo/echo/rpm', 'apikey-free')).headers['x-ratelimit-limit-requests']).toBeUndefined();
    expect(
      metricValue(await metrics(), 'servegate_rate_limited_total', {
        scope: 'key',
        kind: 'requests',
        reason: 'per_minute',
      }),
    ).toBe(2);
  });

  test("a deployment's spec.limits apply across keys", async () => {
    const statuses = [];
    for (const key of ['apikey-free', 'apikey-valid', 'apikey-free'])
      statuses.push((await call('/v1/demo/capped/x', key)).status);
    expect(statuses).toEqual([200, 200, 429]);
    expect(
      metricValue(await metrics(), 'servegate_rate_limited_total', {
        scope: 'deployment',
        kind: 'requests',
        reason: 'per_minute',
      }),
    ).toBe(1);
  });
});

describe('tokens per minute, charged from usage', () => {
  test('a non-streamed answer reporting 50 tokens spends a 60-token budget: the next one is admitted, the one after refused', async () => {
    const client = new OpenAI({ baseURL: `${gw.url}/v1/demo/chat/v1`, apiKey: gw.keys['apikey-tpm'], maxRetries: 0 });
    await client.chat.completions.create(chat);
    await client.chat.completions.create(chat); // 10 tokens left before it: admitted, then in debt
    const err = await client.chat.completions.create(chat).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(OpenAI.RateLimitError);
    const e = err as InstanceType<typeof OpenAI.RateLimitError>;
    expect(e.status).toBe(429);
    expect(e.code).toBe('rate_limit_exceeded');
    expect(e.message).toContain('60 tokens per minute for API key servegate/apikey-tpm');
    expect(Number(e.headers?.get('retry-after'))).toBeGreaterThanOrEqual(40); // 40 tokens of debt at 1 per second
    expect(e.headers?.get('x-ratelimit-limit-tokens')).toBe('60');
    expect(e.headers?.get('x-ratelimit-remaining-tokens')).toBe('0');
  });

  test('a streamed answer is charged too (its usage chunk)', async () => {
    const client = new OpenAI({
      baseURL: `${gw.url}/v1/demo/chat/v1`,
      apiKey: gw.keys['apikey-tpm-stream'],
      maxRetries: 0,
    });
    for (let i = 0; i < 2; i++) {
      const stream = await client.chat.completions.create({
        ...chat,
        stream: true,
        stream_options: { include_usage: true },
      });
      for await (const chunk of stream) void chunk;
    }
    const third = await send(`${gw.url}/v1/demo/chat/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${gw.keys['apikey-tpm-stream']}`, 'content-type': 'application/json' },
      body: { ...chat, stream: true },
    });
    expect(third.status).toBe(429);
    expect(third.json().error).toMatchObject({ code: 'rate_limit_exceeded', type: 'rate_limit_error' });
    expect(
      metricValue(await metrics(), 'servegate_rate_limited_total', {
        scope: 'key',
        kind: 'tokens',
        reason: 'per_minute',
      }),
    ).toBe(2);
  });
});

describe('failed-authentication throttling (maxFailures 3 here)', () => {
  const from = (addr: string) => ({ 'x-forwarded-for': addr });
  test('an address past maxFailures gets 429 for its failing requests; a valid key from it is served', async () => {
    const bad = { authorization: 'ApiKey AAAAAAAAAAAAAAAA.bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb' };
    const statuses = [];
    for (let i = 0; i < 6; i++)
      statuses.push((await send(`${gw.url}/v1/demo/echo/x`, { headers: { ...bad, ...from('203.0.113.7') } })).status);
    // The 4th failure is "more than 3": from the 5th request on, 429.
    expect(statuses).toEqual([401, 401, 401, 401, 429, 429]);
    // SPEC §9 (amended): many clients share one NAT or proxy address; a valid key is always served.
    const valid = await call('/v1/demo/echo/x', 'apikey-valid', from('203.0.113.7'));
    expect(valid.status).toBe(200);
    const failing = await send(`${gw.url}/v1/demo/echo/x`, { headers: { ...bad, ...from('203.0.113.7') } });
    expect(failing.status).toBe(429);
    expect(failing.json().error).toMatch(/^too many failed authentications from 203\.0\.113\.7; retry after \d+ s$/);
    expect(Number(failing.headers['retry-after'])).toBeGreaterThan(50);
    expect((await call('/v1/demo/echo/x', 'apikey-valid', from('198.51.100.9'))).status).toBe(200);
    expect(
      metricValue(await metrics(), 'servegate_rate_limited_total', {
        scope: 'client',
        kind: 'auth_failures',
        reason: 'failed_auth',
      }),
    ).toBe(3);
  });
});

function expectKServeError(r: Reply, status: number) {
  expect(r.status).toBe(status);
  expect(String(r.headers['content-type'])).toMatch(/^application\/json/);
  const body = r.json();
  expect(typeof body.error).toBe('string');
  expect(body.error.length).toBeGreaterThan(0);
}

function expectOpenAIError(r: Reply, status: number) {
  expect(r.status).toBe(status);
  expect(String(r.headers['content-type'])).toMatch(/^application\/json/);
  const body = r.json();
  expect(typeof body.error).toBe('object');
  expect(body.error).toMatchObject({ type: 'rate_limit_error', code: 'rate_limit_exceeded' });
}

describe('per second per key (limits.rateLimitPerKey)', () => {
  let limited: Gateway;
  beforeAll(async () => {
    limited = await startGateway({
      // A burst of 2 and one token back every 100 s: nothing refills while the tests run, so the burst alone decides
      // (at 1/s, a slow machine taking over a second for the six requests would get a third one through).
      config: { limits: { rateLimitPerKey: 0.01, rateLimitBurst: 2 } },
      deployments: [
        { namespace: 'demo', name: 'app', type: 'python', url: py.url },
        { namespace: 'demo', name: 'chat', modelServer: 'llm', url: llm.url },
      ],
      keys: [
        { name: 'apikey-busy', projects: 'demo' },
        { name: 'apikey-quiet', projects: 'demo' },
      ],
    });
  });
  afterAll(async () => {
    await limited?.close();
  });

  test('a key over its rate gets 429 that never reaches the backend, while another key is unaffected', async () => {
    const busy = { authorization: `ApiKey ${limited.keys['apikey-busy']}` };
    const before = py.requests.length;
    const statuses: number[] = [];
    const replies: Reply[] = [];
    for (let i = 0; i < 6; i++) {
      const r = await send(`${limited.url}/v1/demo/app/rl`, { headers: busy });
      statuses.push(r.status);
      replies.push(r);
    }
    expect(statuses).toEqual([200, 200, 429, 429, 429, 429]);
    const ok = statuses.filter((s) => s === 200).length;
    expect(statuses.filter((s) => s === 429).length).toBe(6 - ok);
    expectKServeError(
      replies.find((r) => r.status === 429)!,
      429,
    );
    expect(replies[2].headers['retry-after']).toBe('100');
    expect(py.requests.length - before).toBe(ok);
    expect(
      metricValue((await send(`${limited.adminUrl}/metrics`)).text, 'servegate_rate_limited_total', {
        scope: 'key',
        kind: 'requests',
        reason: 'per_second',
      }),
    ).toBe(4);

    const quiet = await send(`${limited.url}/v1/demo/app/rl`, {
      headers: { authorization: `ApiKey ${limited.keys['apikey-quiet']}` },
    });
    expect(quiet.status).toBe(200);
  });

  test('429 on an OpenAI route is an OpenAI error object', async () => {
    const busy = { authorization: `ApiKey ${limited.keys['apikey-busy']}` };
    let last: Reply | undefined;
    for (let i = 0; i < 5; i++) last = await send(`${limited.url}/v1/demo/chat/v1/models`, { headers: busy });
    expectOpenAIError(last!, 429);
  });
});
