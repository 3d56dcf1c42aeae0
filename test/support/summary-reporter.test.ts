// The closing line "jest: N passed, N failed, N skipped" must never read green on a red run. Runs jest on fixture
// files that fail in each way a file can (a beforeAll that throws, an afterAll that throws, a module that throws at
// import, a plain failing test) and checks the whole line and the exit code.
import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, test } from '@jest/globals';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

test('files that fail to load or in a hook are counted as failures in the closing line', () => {
  const run = spawnSync(
    process.execPath,
    [
      '--experimental-vm-modules',
      '--disable-warning=ExperimentalWarning',
      join(ROOT, 'node_modules/jest/bin/jest.js'),
      '--testMatch',
      '**/test/fixtures/reporter/*.check.ts',
      '--maxWorkers=1',
    ],
    { cwd: ROOT, encoding: 'utf8', env: { ...process.env, CI: 'true' }, timeout: 60_000 },
  );
  const lines = run.stdout.trim().split('\n');
  // before-all-fails: 2 failed; after-all-fails: 1 passed + the file's hook 1 failed; does-not-load: 1 failed;
  // mixed: 1 passed, 1 failed, 1 skipped, 1 todo.
  expect(lines.at(-1)).toBe('jest: 2 passed, 5 failed, 2 skipped');
  expect(run.status).toBe(1);
});
