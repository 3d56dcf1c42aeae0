// CORS at the gateway (SPEC §5) for exact, wildcard, "*" and empty allowed origins, and one real browser.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import {
  startOpenAIBackend,
  startPythonBackend,
  type OpenAIBackend,
  type RecordingBackend,
} from '../../support/backends.js';
import { browserTest, launchChromium } from '../../support/browser.js';
import { send, startGateway, type Gateway } from '../../support/harness.js';

let py: RecordingBackend;
let llm: OpenAIBackend;
let pageServer: http.Server;
let pageOrigin: string;
let otherPageServer: http.Server;
let otherPageOrigin: string;
const gws: Record<'exact' | 'wildcard' | 'star' | 'empty', Gateway> = {} as never;

async function pageHost(): Promise<{ server: http.Server; origin: string }> {
  const server = http.createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/html' });
    res.end('<!doctype html><title>servegate cors page</title><p>page</p>');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { server, origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
}

beforeAll(async () => {
  py = await startPythonBackend();
  llm = await startOpenAIBackend();
  ({ server: pageServer, origin: pageOrigin } = await pageHost());
  ({ server: otherPageServer, origin: otherPageOrigin } = await pageHost());
  const start = (allowedOrigins: string[], maxAgeSeconds = 600) =>
    startGateway({
      config: { cors: { allowedOrigins, maxAgeSeconds } },
      deployments: [
        { namespace: 'demo', name: 'app', type: 'python', url: py.url },
        { namespace: 'demo', name: 'chat', modelServer: 'llm', url: llm.url },
      ],
      keys: [{ name: 'apikey-cors', projects: 'demo' }],
    });
  [gws.exact, gws.wildcard, gws.star, gws.empty] = await Promise.all([
    start(['https://app.example.com', pageOrigin], 321),
    start(['https://*.example.com']),
    start(['*']),
    start([]),
  ]);
});

afterAll(async () => {
  await Promise.all(Object.values(gws).map((g) => g?.close()));
  await py?.close();
  await llm?.close();
  await new Promise((r) => pageServer?.close(r));
  await new Promise((r) => otherPageServer?.close(r));
});

const preflight = (gw: Gateway, origin: string, method = 'POST', reqHeaders = 'authorization, content-type') =>
  send(`${gw.url}/v1/demo/app/cors`, {
    method: 'OPTIONS',
    headers: { origin, 'access-control-request-method': method, 'access-control-request-headers': reqHeaders },
  });

const list = (v: string | string[] | undefined) =>
  String(v ?? '')
    .split(',')
    .map((s) => s.trim().toLowerCase())
    .filter(Boolean);

const corsHeaderNames = (headers: http.IncomingHttpHeaders) =>
  Object.keys(headers).filter((h) => h.startsWith('access-control-'));

function expectEchoed(headers: http.IncomingHttpHeaders, origin: string) {
  expect(headers['access-control-allow-origin']).toBe(origin);
  expect(headers['access-control-allow-credentials']).toBe('true');
  expect(list(headers.vary)).toContain('origin');
}

describe('exact allowed origins', () => {
  test('a preflight from an allowed origin is answered 204 without a key and never forwarded', async () => {
    const before = py.requests.length;
    const r = await preflight(gws.exact, 'https://app.example.com', 'PUT');
    expect(r.status).toBe(204);
    expectEchoed(r.headers, 'https://app.example.com');
    expect(list(r.headers['access-control-allow-headers'])).toEqual(
      expect.arrayContaining(['authorization', 'content-type']),
    );
    expect(list(r.headers['access-control-allow-methods'])).toContain('put');
    expect(r.headers['access-control-max-age']).toBe('321');
    expect(py.requests.length).toBe(before);
  });

  test('a preflight for an unknown deployment is answered too, and not forwarded', async () => {
    const before = py.requests.length;
    const r = await send(`${gws.exact.url}/v1/demo/nope/x`, {
      method: 'OPTIONS',
      headers: { origin: 'https://app.example.com', 'access-control-request-method': 'POST' },
    });
    expect(r.status).toBe(204);
    expectEchoed(r.headers, 'https://app.example.com');
    expect(py.requests.length).toBe(before);
  });

  test('an actual request from an allowed origin carries the CORS headers', async () => {
    const r = await send(`${gws.exact.url}/v1/demo/app/get`, {
      headers: { origin: 'https://app.example.com', authorization: `ApiKey ${gws.exact.keys['apikey-cors']}` },
    });
    expect(r.status).toBe(200);
    expectEchoed(r.headers, 'https://app.example.com');
    expect(py.last().url).toBe('/get');
  });

  test.each([
    ['401 without a key', '/v1/demo/app/x', () => undefined, 401],
    ['401 with a wrong key', '/v1/demo/app/x', () => `ApiKey AAAAAAAAAAAAAAAA.${'b'.repeat(40)}`, 401],
    ['404 for an unknown deployment', '/v1/demo/nope/x', () => `ApiKey ${gws.exact.keys['apikey-cors']}`, 404],
  ])("the gateway's own %s carries the CORS headers", async (_what, path, authorization, status) => {
    const a = authorization();
    const r = await send(`${gws.exact.url}${path}`, {
      headers: a ? { origin: 'https://app.example.com', authorization: a } : { origin: 'https://app.example.com' },
    });
    expect(r.status).toBe(status);
    expectEchoed(r.headers, 'https://app.example.com');
  });

  test.each(['https://evil.example.com', 'http://app.example.com', 'https://app.example.com.evil.net', 'null'])(
    'a disallowed origin %s gets no CORS headers and its preflight is not forwarded',
    async (origin) => {
      const before = py.requests.length;
      const pre = await preflight(gws.exact, origin);
      expect(corsHeaderNames(pre.headers)).toEqual([]);
      expect(py.requests.length).toBe(before);
      const r = await send(`${gws.exact.url}/v1/demo/app/x`, {
        headers: { origin, authorization: `ApiKey ${gws.exact.keys['apikey-cors']}` },
      });
      expect(r.status).toBe(200);
      expect(corsHeaderNames(r.headers)).toEqual([]);
    },
  );

  test('OPTIONS without Access-Control-Request-Method is not a preflight: it needs a key', async () => {
    const before = py.requests.length;
    const r = await send(`${gws.exact.url}/v1/demo/app/x`, {
      method: 'OPTIONS',
      headers: { origin: 'https://app.example.com' },
    });
    expect(r.status).toBe(401);
    expect(py.requests.length).toBe(before);
  });
});

describe('wildcard allowed origins', () => {
  test.each(['https://app.example.com', 'https://a-b.example.com'])(
    '%s matches https://*.example.com and is echoed',
    async (origin) => {
      const before = py.requests.length;
      const pre = await preflight(gws.wildcard, origin);
      expect(pre.status).toBe(204);
      expectEchoed(pre.headers, origin);
      expect(py.requests.length).toBe(before);
      const r = await send(`${gws.wildcard.url}/v1/demo/app/w`, {
        headers: { origin, authorization: `ApiKey ${gws.wildcard.keys['apikey-cors']}` },
      });
      expect(r.status).toBe(200);
      expectEchoed(r.headers, origin);
    },
  );

  test.each([
    'https://example.com',
    'http://app.example.com',
    'https://app.example.com.evil.net',
    'https://evilexample.com',
  ])('%s does not match https://*.example.com', async (origin) => {
    const before = py.requests.length;
    const pre = await preflight(gws.wildcard, origin);
    expect(corsHeaderNames(pre.headers)).toEqual([]);
    expect(py.requests.length).toBe(before);
    const r = await send(`${gws.wildcard.url}/v1/demo/app/w`, {
      headers: { origin, authorization: `ApiKey ${gws.wildcard.keys['apikey-cors']}` },
    });
    expect(corsHeaderNames(r.headers)).toEqual([]);
  });
});

describe('"*" allows every origin', () => {
  test('a preflight is answered with * and no credentials', async () => {
    const before = py.requests.length;
    const r = await preflight(gws.star, 'https://anything.test');
    expect(r.status).toBe(204);
    expect(r.headers['access-control-allow-origin']).toBe('*');
    expect(r.headers['access-control-allow-credentials']).toBeUndefined();
    expect(list(r.headers['access-control-allow-headers'])).toEqual(
      expect.arrayContaining(['authorization', 'content-type']),
    );
    expect(r.headers['access-control-max-age']).toBeDefined();
    expect(py.requests.length).toBe(before);
  });

  test('actual responses and a 401 carry *', async () => {
    const ok = await send(`${gws.star.url}/v1/demo/app/s`, {
      headers: { origin: 'https://x.test', authorization: `ApiKey ${gws.star.keys['apikey-cors']}` },
    });
    expect(ok.status).toBe(200);
    expect(ok.headers['access-control-allow-origin']).toBe('*');
    expect(ok.headers['access-control-allow-credentials']).toBeUndefined();
    const denied = await send(`${gws.star.url}/v1/demo/app/s`, { headers: { origin: 'https://x.test' } });
    expect(denied.status).toBe(401);
    expect(denied.headers['access-control-allow-origin']).toBe('*');
  });
});

describe('an empty list adds no CORS headers at all', () => {
  test('a preflight gets no CORS headers and is not forwarded', async () => {
    const before = py.requests.length;
    const r = await preflight(gws.empty, 'https://app.example.com');
    expect(corsHeaderNames(r.headers)).toEqual([]);
    expect(py.requests.length).toBe(before);
  });

  test('actual responses and errors get no CORS headers', async () => {
    const ok = await send(`${gws.empty.url}/v1/demo/app/e`, {
      headers: { origin: 'https://app.example.com', authorization: `ApiKey ${gws.empty.keys['apikey-cors']}` },
    });
    expect(ok.status).toBe(200);
    expect(corsHeaderNames(ok.headers)).toEqual([]);
    const denied = await send(`${gws.empty.url}/v1/demo/app/e`, { headers: { origin: 'https://app.example.com' } });
    expect(denied.status).toBe(401);
    expect(corsHeaderNames(denied.headers)).toEqual([]);
  });
});

describe('a real browser', () => {
  let browser: Browser | undefined;
  afterAll(async () => {
    await browser?.close();
  });

  browserTest(
    'headless Chromium on an allowed origin calls a deployment with a key, reads the JSON, a 401 and an LLM stream',
    async () => {
      browser = await launchChromium();
      const page = await browser.newPage();
      await page.goto(`${pageOrigin}/`);
      const before = py.requests.length;
      const gwUrl = gws.exact.url;
      const key = gws.exact.keys['apikey-cors'];

      const ok = await page.evaluate(
        async ({ gwUrl, key }) => {
          const res = await fetch(`${gwUrl}/v1/demo/app/from-browser?q=1`, {
            method: 'POST',
            headers: { authorization: `ApiKey ${key}`, 'content-type': 'application/json' },
            body: JSON.stringify({ hello: 'browser' }),
          });
          return { status: res.status, body: (await res.json()) as { error: unknown } };
        },
        { gwUrl, key },
      );
      expect(ok.status).toBe(200);
      expect(ok.body).toMatchObject({ backend: 'python', method: 'POST', path: '/from-browser?q=1' });
      // The browser sent a preflight (authorization + JSON make it non-simple); the gateway answered it itself.
      const seen = py.requests.slice(before);
      expect(seen.map((r) => r.method)).toEqual(['POST']);
      expect(seen[0].headers.origin).toBe(pageOrigin);
      expect(seen[0].headers.authorization).toBeUndefined();

      const denied = await page.evaluate(async (gwUrl) => {
        const res = await fetch(`${gwUrl}/v1/demo/app/from-browser`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: '{}',
        });
        return { status: res.status, body: (await res.json()) as { error: unknown } };
      }, gwUrl);
      expect(denied.status).toBe(401);
      expect(typeof denied.body.error).toBe('string');
      expect(py.requests.length).toBe(before + 1);

      // An LLM stream read chunk by chunk in the page.
      llm.stream = { chunks: 4, delayMs: 80 };
      const streamed = await page.evaluate(
        async ({ gwUrl, key }) => {
          const res = await fetch(`${gwUrl}/v1/demo/chat/v1/chat/completions`, {
            method: 'POST',
            headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
            body: JSON.stringify({ model: 'tiny-llm', messages: [{ role: 'user', content: 'hi' }], stream: true }),
          });
          const reader = res.body!.getReader();
          const decoder = new TextDecoder();
          let text = '';
          let reads = 0;
          for (;;) {
            const { done, value } = await reader.read();
            if (done) break;
            reads++;
            text += decoder.decode(value, { stream: true });
          }
          return { status: res.status, type: res.headers.get('content-type'), text, reads };
        },
        { gwUrl, key },
      );
      expect(streamed.status).toBe(200);
      expect(streamed.type).toMatch(/^text\/event-stream/);
      for (let i = 0; i < 4; i++) expect(streamed.text).toContain(`tok${i}`);
      expect(streamed.text).toContain('data: [DONE]');
      expect(streamed.reads).toBeGreaterThanOrEqual(2);

      // The same call from an origin that is not allowed is blocked by the browser.
      const page2 = await browser.newPage();
      await page2.goto(`${otherPageOrigin}/`);
      const blocked = await page2.evaluate(
        async ({ gwUrl, key }) => {
          try {
            await fetch(`${gwUrl}/v1/demo/app/from-browser`, { headers: { authorization: `ApiKey ${key}` } });
            return 'read';
          } catch (e) {
            return `blocked: ${(e as Error).name}`;
          }
        },
        { gwUrl, key },
      );
      expect(blocked).toBe('blocked: TypeError');
      expect(py.requests.length).toBe(before + 1);
    },
  );
});
