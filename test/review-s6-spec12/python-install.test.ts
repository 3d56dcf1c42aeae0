// SPEC §13: `clients/python/` is "installable with `pip install ./clients/python` (and `--no-build-isolation` where no
// index is reachable)". An acceptance tester with no package index makes a fresh venv and runs exactly that; nothing
// but the checkout is on the machine (R4 conformance probe, session 6). The index is a dead loopback address.
import { afterAll, beforeAll, expect, test } from '@jest/globals';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ROOT } from '../support/paths.js';
import { describeRun, expectSuccess, runProcess } from '../support/processes.js';

const PYTHON = process.env.SERVEGATE_PYTHON || 'python3';

function pythonEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!/^(PIP_|PYTHON)/.test(k)) env[k] = v;
  return {
    ...env,
    PIP_CONFIG_FILE: '/dev/null',
    PIP_INDEX_URL: 'http://127.0.0.1:9/simple/',
    PIP_DISABLE_PIP_VERSION_CHECK: '1',
    PIP_NO_INPUT: '1',
    PIP_DEFAULT_TIMEOUT: '5',
    PIP_RETRIES: '0',
    PYTHONDONTWRITEBYTECODE: '1',
    PYTHONNOUSERSITE: '1',
  };
}

let work: string;
let venvPython: string;

beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), 'servegate-r4-python-'));
  expectSuccess(await runProcess(PYTHON, ['-m', 'venv', join(work, 'venv')], { env: pythonEnv(), timeoutMs: 120_000 }));
  venvPython = join(work, 'venv', 'bin', 'python');
}, 150_000);

afterAll(() => {
  if (work) rmSync(work, { recursive: true, force: true });
});

test('pip install --no-build-isolation ./clients/python works in a fresh venv with no index', async () => {
  const run = await runProcess(
    venvPython,
    ['-m', 'pip', 'install', '--no-cache-dir', '--no-index', '--no-build-isolation', './clients/python'],
    { cwd: ROOT, env: pythonEnv(), timeoutMs: 120_000 },
  );
  expect({ code: run.code, run: run.code === 0 ? '' : describeRun(run) }).toEqual({ code: 0, run: '' });
  const imported = await runProcess(venvPython, ['-c', 'import servegate; print(servegate.Deployment.__name__)'], {
    cwd: work,
    env: pythonEnv(),
    timeoutMs: 30_000,
  });
  expect(imported.stdout.trim()).toBe('Deployment');
}, 150_000);
