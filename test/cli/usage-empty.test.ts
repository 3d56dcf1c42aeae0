// `servegate usage --key NAME` when no budget answers (SPEC §14): it names what was asked for instead of claiming that
// no budget is set at all, so that a misspelt key name is seen as one. Found by a hostile review.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, expect, test } from '@jest/globals';
import { usageCommand } from '../../src/cli/usage.js';
import type { CliIo } from '../../src/cli/io.js';

let admin: Server;
let url: string;

beforeAll(async () => {
  // An admin listener whose /budgets has nothing for the query.
  admin = createServer((_req, res) => {
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ shared: true, budgets: [] }));
  });
  await new Promise<void>((r) => admin.listen(0, '127.0.0.1', r));
  url = `http://127.0.0.1:${(admin.address() as AddressInfo).port}`;
});

afterAll(() => new Promise<void>((r) => admin.close(() => r())));

async function usage(args: string[]): Promise<{ code: number; err: string }> {
  let err = '';
  const io: CliIo = { stdout: () => undefined, stderr: (t) => void (err += t), env: {}, now: () => Date.now() };
  return { code: await usageCommand(['--admin', url, ...args], io), err };
}

test('a key or project asked for by name is named when it has no budget', async () => {
  expect(await usage(['--key', 'ci-bott'])).toEqual({
    code: 0,
    err: 'no budget is set for key "ci-bott" (servegate keys list shows each key\'s budget)\n',
  });
  expect((await usage(['--key', 'a', '--project', 'genai'])).err).toContain('for key "a" or project "genai"');
  expect((await usage([])).err).toBe('no budgets are set\n');
});
