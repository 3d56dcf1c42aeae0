// Regenerates docs/admin-page.png: runs `servegate demo` on free ports, sends a little traffic so the live figures
// have something to show, and photographs the admin page in headless Chromium (Debian's chromium, playwright-core;
// no browser download). Usage: npm run build && node scripts/admin-screenshot.mjs [out.png]
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { freePort } from '../bench/lib/procs.mjs';

const root = fileURLToPath(new URL('..', import.meta.url));
const out = process.argv[2] ?? `${root}docs/admin-page.png`;

const [port, adminPort] = [await freePort(), await freePort()];
const demo = spawn(
  process.execPath,
  [
    'dist/cli/main.js',
    'demo',
    '--port',
    String(port),
    '--admin-port',
    String(adminPort),
    '--host',
    '127.0.0.1',
    '--backend-ports',
    '0,0,0',
  ],
  { cwd: root, stdio: ['ignore', 'pipe', 'ignore'] },
);
let printed = '';
demo.stdout.on('data', (c) => (printed += c));
try {
  const deadline = Date.now() + 20_000;
  while (!/ApiKey [A-Za-z0-9]{16}\.[A-Za-z0-9_-]+/.test(printed)) {
    if (Date.now() > deadline) throw new Error(`demo did not start:\n${printed}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  const key = /ApiKey ([A-Za-z0-9]{16}\.[A-Za-z0-9_-]+)/.exec(printed)[1];
  const deployments = (await (await fetch(`http://127.0.0.1:${adminPort}/deployments`)).json()).deployments;
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'],
  });
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    await page.goto(`http://127.0.0.1:${adminPort}/`);
    // A few requests per deployment (some refused), so requests/s and error ratio are not all zero.
    for (let i = 0; i < 40; i++) {
      for (const d of deployments) {
        const local = (u) => u.replace(/^https?:\/\/[^/]+/, `http://127.0.0.1:${port}`);
        const headers = {
          'content-type': 'application/json',
          ...(i % 10 === 0 ? {} : { authorization: `ApiKey ${key}` }),
        };
        const [url, body] = d.inferenceUrl
          ? [local(d.inferenceUrl), { instances: [[6.8, 2.8, 4.8, 1.4]] }]
          : d.openaiUrl
            ? [`${local(d.openaiUrl)}/chat/completions`, { model: d.name, messages: [{ role: 'user', content: 'hi' }] }]
            : d.url
              ? [`${local(d.url)}/hello`, { hello: 'world' }]
              : [];
        if (!url) continue;
        await fetch(url, { method: 'POST', headers, body: JSON.stringify(body) }).catch(() => undefined);
      }
    }
    await page.waitForTimeout(6_000); // the page polls /api/stats every 5 s
    await page.locator('details summary').first().click(); // one deployment's snippets, open
    await page.screenshot({ path: out, fullPage: true });
    console.log(`wrote ${out}`);
  } finally {
    await browser.close();
  }
} finally {
  demo.kill('SIGTERM');
}
