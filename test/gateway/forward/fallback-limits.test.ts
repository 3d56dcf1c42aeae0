// Fallbacks and what bounds them (SPEC §9, §12): a fallback deployment's own `spec.limits` are checked and charged as
// a direct call's (one past its limits is skipped like a failing one; the last one's 429 is the answer), its tokens
// are charged to it, and the whole chain has the first deployment's `timeoutSeconds` as its one deadline.
import { performance } from 'node:perf_hooks';
import type { ServerResponse } from 'node:http';
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import { RecordingBackend } from '../../support/backends.js';
import { send, startGateway, type Gateway } from '../../support/harness.js';
import { metricValue } from '../../support/metrics.js';
import { waitFor } from '../../support/wait.js';

/** 10 prompt and 12 completion tokens an answer: 20 answers are the 440 tokens. */
const USAGE = { prompt_tokens: 10, completion_tokens: 12, total_tokens: 22 };

function answer(res: ServerResponse, model: unknown): void {
  const text = JSON.stringify({
    id: 'x',
    object: 'chat.completion',
    model,
    choices: [{ index: 0, message: { role: 'assistant', content: 'hello there' } }],
    usage: USAGE,
  });
  res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

let failing: RecordingBackend;
let slowFailing: RecordingBackend;
let hanging: RecordingBackend;
let ok: Record<string, RecordingBackend>;
let gw: Gateway;

const doc = (name: string, url: string, extra: Record<string, unknown> = {}) => ({
  apiVersion: 'serving.servegate.dev/v1alpha1',
  kind: 'ServingDeployment',
  metadata: { name, namespace: 'demo' },
  spec: { type: 'model', modelServer: 'llm', backend: { url }, ...extra },
});

beforeAll(async () => {
  failing = await new RecordingBackend((_req, res) => {
    res.writeHead(503, { 'content-type': 'application/json' });
    res.end('{"error":{"message":"overloaded","type":"server_error"}}');
  }).listen();
  // Fails after 1 s: half of the chain's 2 s deadline is gone when the fallback is called.
  slowFailing = await new RecordingBackend((_req, res) => {
    setTimeout(() => {
      res.writeHead(503, { 'content-type': 'application/json' });
      res.end('{"error":{"message":"slow and overloaded","type":"server_error"}}');
    }, 1000).unref();
  }).listen();
  // Never answers (until the gateway gives up on it).
  hanging = await new RecordingBackend(() => undefined).listen();
  ok = {};
  for (const name of ['small', 'tokens', 'full', 'spare']) {
    ok[name] = await new RecordingBackend((_req, res, rec) => {
      answer(res, (JSON.parse(rec.body.toString() || '{}') as { model?: unknown }).model);
    }).listen();
  }
  gw = await startGateway({
    files: {
      'llm.yaml': [
        // The case: a fallback with 2 rpm / 60 tpm.
        doc('chat', failing.url, { fallbacks: ['small'] }),
        doc('small', ok.small.url, { limits: { requestsPerMinute: 2, tokensPerMinute: 60 } }),
        // Tokens alone: 30 tpm admits a request while any budget is left, so two 22-token answers spend it.
        doc('chat-tokens', failing.url, { fallbacks: ['tokens'] }),
        doc('tokens', ok.tokens.url, { limits: { tokensPerMinute: 30 } }),
        // A fallback past its limits is skipped like a failing one.
        doc('chat-skip', failing.url, { fallbacks: ['full', 'spare'] }),
        doc('full', ok.full.url, { limits: { requestsPerMinute: 1 } }),
        doc('spare', ok.spare.url),
        // One deadline for the chain: 2 s in all, whatever the fallbacks' own timeoutSeconds.
        doc('chat-slow', slowFailing.url, { timeoutSeconds: 2, fallbacks: ['stuck'] }),
        doc('stuck', hanging.url, { timeoutSeconds: 30 }),
      ],
    },
    keys: [{ name: 'k', projects: 'demo' }],
  });
});

afterAll(async () => {
  await gw?.close();
  await Promise.all([failing, slowFailing, hanging, ...Object.values(ok ?? {})].filter(Boolean).map((b) => b.close()));
});

const ask = (deployment: string) =>
  send(`${gw.url}/v1/demo/${deployment}/v1/chat/completions`, {
    headers: { authorization: `Bearer ${gw.keys.k}` },
    body: { model: deployment, messages: [{ role: 'user', content: 'hi' }] },
  });
const metrics = async () => (await send(`${gw.adminUrl}/metrics`)).text;

describe('a fallback’s own limits (SPEC §9)', () => {
  test('20 requests in a minute through a 2 rpm fallback: 2 reach it, the rest get its 429 in the OpenAI dialect', async () => {
    const statuses: number[] = [];
    let last: Awaited<ReturnType<typeof ask>> | undefined;
    for (let i = 0; i < 20; i++) {
      last = await ask('chat');
      statuses.push(last.status);
    }
    expect(statuses.filter((s) => s === 200)).toHaveLength(2);
    expect(statuses.slice(0, 2)).toEqual([200, 200]);
    expect(statuses.slice(2).every((s) => s === 429)).toBe(true);
    expect(ok.small.requests).toHaveLength(2);
    expect(last!.json().error).toMatchObject({ code: 'rate_limit_exceeded', type: expect.any(String) });
    expect(last!.json().error.message).toContain('2 requests per minute for deployment demo/small');
    expect(last!.headers['retry-after']).toMatch(/^\d+$/);
    // One set of rate-limit headers: the refusing deployment's.
    expect(last!.headers['x-ratelimit-remaining-requests']).toBe('0');
    expect(last!.headers['x-ratelimit-limit-requests']).toBe('2');
    // The same bucket a direct call passes.
    expect((await ask('small')).status).toBe(429);
    // The access log is written asynchronously, in batches: the lines may follow the answers; wait for them.
    const refusedLine = () =>
      gw.logs
        .map((l) => JSON.parse(l) as Record<string, unknown>)
        .filter((l) => l.path === '/v1/demo/chat/v1/chat/completions' && l.status === 429)
        .at(-1);
    const line = await waitFor(() => refusedLine() ?? false, 'the access log line of a refusal');
    expect(line).toMatchObject({ deployment: 'small', error: expect.stringContaining('rate limit exceeded') });
  });

  test('its tokens are charged to it: 30 tpm is spent by two 22-token answers', async () => {
    expect((await ask('chat-tokens')).status).toBe(200);
    const second = await ask('chat-tokens');
    expect([second.status, second.headers['x-ratelimit-remaining-tokens']]).toEqual([200, '8']);
    const third = await ask('chat-tokens');
    expect(third.status).toBe(429);
    expect(third.json().error.message).toContain('30 tokens per minute for deployment demo/tokens');
    expect(ok.tokens.requests).toHaveLength(2);
    expect((await ask('tokens')).status).toBe(429);
  });

  test('a fallback past its limits is skipped like a failing one, and the metric says why', async () => {
    const first = await ask('chat-skip');
    expect([first.status, first.headers['x-servegate-deployment']]).toEqual([200, 'demo/full']);
    const second = await ask('chat-skip');
    expect([second.status, second.headers['x-servegate-deployment']]).toEqual([200, 'demo/spare']);
    expect(ok.full.requests).toHaveLength(1);
    expect(ok.spare.requests).toHaveLength(1);
    expect(
      metricValue(await metrics(), 'servegate_fallbacks_total', {
        project: 'demo',
        deployment: 'chat-skip',
        to: 'demo/spare',
        reason: 'rate_limited',
      }),
    ).toBe(1);
  });
});

describe('one deadline for the chain (SPEC §12)', () => {
  test('the first deployment’s timeoutSeconds bounds the whole request: 504 at 2 s, not 1 s + the fallback’s 30 s', async () => {
    const t0 = performance.now();
    const r = await ask('chat-slow');
    const ms = performance.now() - t0;
    expect(r.status).toBe(504);
    expect(hanging.requests).toHaveLength(1);
    expect(r.json().error.message).toContain(
      "did not answer within the request's 2s (the timeoutSeconds of demo/chat-slow",
    );
    // undici runs timeouts of a second or more on a coarse clock (about half a second a tick): not before 1.4 s.
    expect(ms).toBeGreaterThanOrEqual(1400);
    expect(ms).toBeLessThan(4000);
  });
});
