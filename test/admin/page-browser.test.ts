// The deployments page in a real browser (SPEC §11): every deployment with project, kind, server, status, URLs and
// snippets; the filter box hides what does not match; live requests/s, 5xx share and p99 fill in from /api/stats;
// /deployments carries project, type and modelServer. SERVEGATE_NO_BROWSER=1 skips only the browser part.
import { afterAll, beforeAll, expect, test } from '@jest/globals';
import type { Browser } from 'playwright-core';
import { startOpenAIBackend, startPythonBackend, startV1Backend, type RecordingBackend } from '../support/backends.js';
import { browserDescribe, launchChromium } from '../support/browser.js';
import { send, startGateway, type Gateway } from '../support/harness.js';

let backends: RecordingBackend[] = [];
let gw: Gateway;
let browser: Browser | undefined;

beforeAll(async () => {
  const [v1, llm, py] = await Promise.all([startV1Backend(), startOpenAIBackend(), startPythonBackend()]);
  backends = [v1, llm, py];
  gw = await startGateway({
    config: { publicUrl: 'https://models.example.com' },
    deployments: [
      { namespace: 'demo', name: 'iris', modelServer: 'sklearn', url: v1.url },
      { namespace: 'genai', name: 'chat', modelServer: 'llm', url: llm.url },
      { namespace: 'fraud-detection', name: 'scorer', project: 'fraud_detection', type: 'python', url: py.url },
    ],
    keys: [{ name: 'apikey-page', projects: '*' }],
  });
});

afterAll(async () => {
  await browser?.close();
  await gw?.close();
  await Promise.all(backends.map((b) => b.close()));
});

test('/deployments gives project, type and modelServer of each deployment', async () => {
  const d = (await send(`${gw.adminUrl}/deployments`)).json().deployments;
  expect(d.map((x: Record<string, unknown>) => [x.name, x.project, x.type, x.modelServer])).toEqual([
    ['iris', 'demo', 'model', 'sklearn'],
    ['scorer', 'fraud_detection', 'python', undefined],
    ['chat', 'genai', 'model', 'llm'],
  ]);
});

browserDescribe('the page in headless Chromium', () => {
  test('lists every deployment; the filter box narrows the rows; live figures fill in; copy works', async () => {
    browser = await launchChromium();
    const page = await browser.newPage();
    await page.goto(`${gw.adminUrl}/`);
    const visibleNames = () =>
      page.$$eval('#rows tr:not([hidden]) td:nth-child(2)', (tds) => tds.map((td) => td.firstChild?.textContent));
    expect(await visibleNames()).toEqual(['iris', 'scorer', 'chat']);
    expect(await page.textContent('body')).toContain('https://models.example.com/v1/genai/chat/v1');

    await page.fill('#filter', 'llm');
    expect(await visibleNames()).toEqual(['chat']);
    await page.fill('#filter', 'fraud python');
    expect(await visibleNames()).toEqual(['scorer']);
    await page.fill('#filter', 'nothing-matches');
    expect(await visibleNames()).toEqual([]);
    await page.fill('#filter', '');

    // Traffic, then the page's poll (every 5 s) shows it.
    const key = gw.keys['apikey-page'];
    for (let i = 0; i < 20; i++) {
      const r = await send(`${gw.url}/v1/demo/iris/v1/models/iris:predict`, {
        headers: { authorization: `ApiKey ${key}` },
        body: { instances: [[1]] },
      });
      expect(r.status).toBe(200);
    }
    await page.waitForFunction(
      `document.querySelector('[data-live="demo/iris"][data-f="rps"]').textContent !== '–'`,
      undefined,
      { timeout: 12_000 },
    );
    expect(await page.textContent('[data-live="demo/iris"][data-f="err"]')).toBe('0.0%');
    expect(await page.textContent('[data-live="demo/iris"][data-f="p99"]')).toMatch(/^\d+ ms$/);
    expect(await page.textContent('[data-live="fraud_detection/scorer"][data-f="rps"]')).toBe('–'); // no traffic there

    // The chat row's snippets: open, copy.
    const chat = page.locator('#rows tr', { hasText: 'chat' });
    await chat.locator('summary').click();
    expect(await chat.locator('pre').first().textContent()).toContain('"authorization: ApiKey $SERVEGATE_KEY"');
    const copy = chat.locator('button[data-copy]').first();
    await copy.click();
    await page.waitForFunction((el) => el?.textContent === 'Copied', await copy.elementHandle(), { timeout: 3000 });
  });
});
