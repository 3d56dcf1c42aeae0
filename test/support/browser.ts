// Headless Chromium (playwright-core) for the real-browser CORS test. A missing binary is an error, not a skip,
// unless SERVEGATE_NO_BROWSER is set.
import { existsSync } from 'node:fs';
import { describe, test } from '@jest/globals';
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

/**
 * `test` for a browser test: skipped (and reported as skipped) when SERVEGATE_NO_BROWSER is set, except under CI=true,
 * where switching the browser off is itself a failure. A missing binary fails in launchChromium either way.
 */
export const browserTest = (
  browserDisabled ? (process.env.CI === 'true' ? failInCi(test) : test.skip) : test
) as typeof test;
export const browserDescribe = (
  browserDisabled && process.env.CI !== 'true' ? describe.skip : describe
) as typeof describe;

function failInCi(t: typeof test): typeof test {
  const f = ((name: string) =>
    t(name, () => {
      throw new Error('SERVEGATE_NO_BROWSER is set under CI=true: the browser tests must run in CI');
    })) as unknown as typeof test;
  return f;
}
