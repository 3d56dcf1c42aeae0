// Headless Chromium (playwright-core) for the real-browser CORS test. A missing binary is an error, not a skip,
// unless SERVEGATE_NO_BROWSER is set.
import { existsSync } from 'node:fs';
import { chromium, type Browser } from 'playwright-core';

export const CHROMIUM = process.env.SERVEGATE_CHROMIUM ?? '/usr/bin/chromium';

/** True when the browser test was switched off on purpose (SERVEGATE_NO_BROWSER=1). */
export const browserDisabled = Boolean(process.env.SERVEGATE_NO_BROWSER);

export async function launchChromium(): Promise<Browser> {
  if (!existsSync(CHROMIUM)) {
    throw new Error(`${CHROMIUM} not found: install it (apt-get install -y chromium) or set SERVEGATE_NO_BROWSER=1`);
  }
  return chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'],
  });
}
