// A bad value in a key Secret or a ServingDeployment is quoted in its problem message cut at 64 characters, with its
// length and its control characters escaped: a 1 MB field with an escape sequence and a newline was echoed whole into
// /deployments, the admin page, the log and `servegate keys list` (found by a hostile review).
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import { keysCommand, type CliIo } from '../../../src/cli/keys.js';
import { quoted } from '../../../src/routing/quote.js';
import { eventually, send, startGateway, type Gateway } from '../../support/harness.js';

// 1,000,024 characters: an ANSI colour, a megabyte, then a forged log line.
const HUGE = `\u001b[31m${'A'.repeat(1_000_000)}\nlevel=error forged`;
const RUN = 'A'.repeat(100);

let gw: Gateway;

beforeAll(async () => {
  gw = await startGateway({
    deployments: [
      { name: 'good', namespace: 'demo', url: 'http://127.0.0.1:9' },
      { name: 'bad', namespace: 'demo', url: 'http://127.0.0.1:9', spec: { priority: HUGE } },
    ],
    keys: [
      { name: 'apikey-good', projects: 'demo' },
      { name: 'apikey-bad-weight', projects: 'demo', fields: { weight: HUGE } },
      { name: 'apikey-bad-period', projects: 'demo', fields: { budgetTokens: '10', budgetPeriod: HUGE } },
    ],
    files: {
      // Refused by the files source itself: a problem on /readyz.
      'bad-name.yaml': {
        apiVersion: 'v1',
        kind: 'Secret',
        metadata: { name: HUGE, namespace: 'servegate', labels: { 'serving.servegate.dev/api-key': 'true' } },
        stringData: { prefix: 'x' },
      },
    },
  });
});

afterAll(async () => {
  await gw?.close();
});

type Deployments = {
  deployments: { name: string; message?: string }[];
  keyProblems: { id: string; message: string }[];
};

async function problems(): Promise<Deployments> {
  return eventually(async () => {
    const body = (await send(`${gw.adminUrl}/deployments`)).json() as Deployments;
    // Counts and lengths, not the values: a failure must not print (or diff) a megabyte.
    expect(body.keyProblems.length).toBe(2);
    expect(body.deployments.find((d) => d.name === 'bad')?.message === undefined).toBe(false);
    return body;
  }, 10_000);
}

describe('a huge bad value in a problem message', () => {
  test('a key Secret field is quoted cut at 64 characters, with its length and its controls escaped', async () => {
    const { keyProblems } = await problems();
    const shown = `"\\u001b[31m${'A'.repeat(59)}…" (1000024 characters)`;
    for (const p of keyProblems) expect(p.message.length).toBeLessThan(200);
    expect(keyProblems).toEqual([
      { id: 'servegate/apikey-bad-period', origin: expect.any(String), message: expect.stringContaining(shown) },
      { id: 'servegate/apikey-bad-weight', origin: expect.any(String), message: expect.stringContaining(shown) },
    ]);
  });

  test('a ServingDeployment field is quoted the same way in its status message', async () => {
    const { deployments } = await problems();
    const message = deployments.find((d) => d.name === 'bad')!.message!;
    expect(message.length).toBeLessThan(200);
    expect(message).toContain(`got "\\u001b[31m${'A'.repeat(59)}…" (1000024 characters)`);
  });

  test('a key Secret name the files source refuses is quoted the same way on /readyz', async () => {
    const problems = await eventually(async () => {
      const body = (await send(`${gw.adminUrl}/readyz`)).json() as { problems: string[] };
      const mine = body.problems.filter((p) => p.includes('/bad-name.yaml#1: '));
      expect(mine.length).toBe(1);
      return mine;
    });
    expect(problems[0].length).toBeLessThan(300); // the file's path, the message and the value cut
    expect(problems[0]).toContain(`metadata.name "\\u001b[31m${'A'.repeat(59)}…" (1000024 characters)`);
  });

  test('the admin page and the log carry no run of the value and no raw escape or newline from it', async () => {
    await problems();
    const page = (await send(`${gw.adminUrl}/`)).text;
    expect(page.includes(RUN)).toBe(false);
    expect(page.includes('\u001b')).toBe(false);
    await eventually(() => expect(gw.logs.filter((l) => l.includes('apikey-bad-')).length).toBe(2));
    for (const line of gw.logs) {
      expect(line.length).toBeLessThan(2000);
      expect(line.includes(RUN)).toBe(false);
    }
  });

  test('servegate keys list shows each cell on one line of bounded width', async () => {
    let out = '';
    const io: CliIo = {
      stdout: (s) => void (out += s),
      stderr: () => undefined,
      env: {},
      now: () => Date.now(),
    };
    expect(await keysCommand(['list', '--manifests', gw.dir], io)).toBe(0);
    const lines = out.trimEnd().split('\n');
    expect(lines.length).toBe(5); // the header and four key Secrets: the forged line is not a row
    for (const l of lines) expect(l.length).toBeLessThan(700);
    expect(out.includes('\u001b')).toBe(false);
  });
});

describe('quoted', () => {
  test.each([
    ['a short string as JSON quotes it', 'month ', '"month "'],
    [
      'controls, quotes and backslashes escaped',
      'a\n"b"\\\u001b\u0085\u202e',
      '"a\\n\\"b\\"\\\\\\u001b\\u0085\\u202e"',
    ],
    ['a number or an object as its JSON text', 70000, '70000'],
    ['an object too long cut with its length', { a: 'x'.repeat(100) }, `{"a":"${'x'.repeat(58)}… (108 characters)`],
    ['a surrogate pair never cut in two', `${'x'.repeat(63)}😀`, `"${'x'.repeat(63)}…" (65 characters)`],
  ])('%s', (_what, value, text) => {
    expect(quoted(value)).toBe(text);
  });
});
