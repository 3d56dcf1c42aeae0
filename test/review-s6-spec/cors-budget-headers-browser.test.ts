// SPEC §5 (browsers read the gateway's answers, its own errors included) with SPEC §9 and §14's headers: a page's
// script can read what a budget or per-minute 429 says — x-servegate-budget-limit/-remaining/-reset-tokens (and
// -cost), x-ratelimit-*, and x-should-retry: false, which docs/llm.md relies on so that OpenAI SDKs raise a budget's
// 429 at once instead of retrying it twice. Before, Access-Control-Expose-Headers named only x-request-id,
// retry-after and www-authenticate: a browser saw none of them (null), so the OpenAI SDK in a page retried every
// budget refusal and a page could not show what is left. Headless Chromium. Found by an independent check of §14.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, expect } from '@jest/globals';
import { startOpenAIBackend, type OpenAIBackend } from '../support/backends.js';
import { browserTest, launchChromium } from '../support/browser.js';
import { startGateway, type Gateway } from '../support/harness.js';

let llm: OpenAIBackend;
let gw: Gateway;
let pageServer: http.Server;
let pageOrigin: string;
let browser: Browser | undefined;

beforeAll(async () => {
  llm = await startOpenAIBackend();
  llm.usage = { prompt: 30, completion: 20 };
  pageServer = http.createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/html' });
    res.end('<!doctype html><title>budget page</title><p>page</p>');
  });
  await new Promise<void>((r) => pageServer.listen(0, '127.0.0.1', r));
  pageOrigin = `http://127.0.0.1:${(pageServer.address() as AddressInfo).port}`;
  gw = await startGateway({
    config: { cors: { allowedOrigins: [pageOrigin] } },
    deployments: [{ namespace: 'demo', name: 'chat', modelServer: 'llm', url: llm.url }],
    keys: [
      { name: 'apikey-budget', projects: 'demo', fields: { budgetTokens: '50', budgetCost: '0' } },
      { name: 'apikey-rpm', projects: 'demo', rpm: 1 },
    ],
  });
});

afterAll(async () => {
  await browser?.close();
  await gw?.close();
  await llm?.close();
  await new Promise((r) => pageServer?.close(r));
});

const READ = [
  'x-servegate-budget-limit-tokens',
  'x-servegate-budget-remaining-tokens',
  'x-servegate-budget-reset-tokens',
  'x-should-retry',
  'x-ratelimit-limit-requests',
  'x-ratelimit-remaining-requests',
  'x-ratelimit-reset-requests',
];

browserTest(
  "a page's script reads the budget and rate-limit headers of the gateway's answers",
  async () => {
    browser = await launchChromium();
    const page = await browser.newPage();
    await page.goto(`${pageOrigin}/`);
    const call = (key: string) =>
      page.evaluate(
        async ({ url, key, names }) => {
          const r = await fetch(url, {
            method: 'POST',
            headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
            body: JSON.stringify({ model: 'chat', messages: [{ role: 'user', content: 'hi' }] }),
          });
          await r.text();
          return { status: r.status, headers: Object.fromEntries(names.map((n: string) => [n, r.headers.get(n)])) };
        },
        { url: `${gw.url}/v1/demo/chat/v1/chat/completions`, key, names: READ },
      );

    const admitted = await call(gw.keys['apikey-budget']);
    expect(admitted.status).toBe(200);
    expect(admitted.headers['x-servegate-budget-remaining-tokens']).toBe('50');
    const refused = await call(gw.keys['apikey-budget']);
    expect(refused.status).toBe(429);
    expect(refused.headers).toMatchObject({
      'x-servegate-budget-limit-tokens': '50',
      'x-servegate-budget-remaining-tokens': '0',
      'x-should-retry': 'false',
    });
    expect(Number(refused.headers['x-servegate-budget-reset-tokens'])).toBeGreaterThan(0);

    expect((await call(gw.keys['apikey-rpm'])).status).toBe(200);
    const limited = await call(gw.keys['apikey-rpm']);
    expect(limited.status).toBe(429);
    expect(limited.headers).toMatchObject({ 'x-ratelimit-limit-requests': '1', 'x-ratelimit-remaining-requests': '0' });
    expect(limited.headers['x-ratelimit-reset-requests']).not.toBeNull();
  },
  60_000,
);
