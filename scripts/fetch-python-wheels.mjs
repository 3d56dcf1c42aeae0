// Puts the Python client's build backend (flit_core, a wheel with no dependencies) where test/client/python.test.ts
// looks for it (node_modules/.cache/servegate-python-wheels), with pip from the package index. Run by `npm ci`
// (prepare), so that the test itself installs clients/python with `pip --no-index --find-links <that folder>` and
// never needs the index. pip is python3's own, else that of a throwaway venv (python3-venv's ensurepip). Best effort:
// without python3 or the index it says so and exits 0 (the Python client's test then says how to get the wheel).
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const ROOT = join(import.meta.dirname, '..');
const WHEELS = join(ROOT, 'node_modules', '.cache', 'servegate-python-wheels');
// The one requirement of clients/python/pyproject.toml's [build-system], pinned.
const BACKEND = 'flit_core==3.12.0';
const PYTHON = process.env.SERVEGATE_PYTHON || 'python3';
const wheel = `${BACKEND.replace('==', '-')}-py3-none-any.whl`;

if (existsSync(join(WHEELS, wheel))) process.exit(0);
const say = (msg) => console.warn(`fetch-python-wheels: ${msg}`);
const run = (cmd, args) => spawnSync(cmd, args, { encoding: 'utf8', timeout: 180_000 });
const work = mkdtempSync(join(tmpdir(), 'servegate-pip-'));
try {
  let python = PYTHON;
  if (run(python, ['-m', 'pip', '--version']).status !== 0) {
    const venv = run(python, ['-m', 'venv', join(work, 'venv')]);
    if (venv.status !== 0) {
      say(`no pip for ${PYTHON} and no venv to get one (${(venv.stderr || venv.error?.message || '').trim()})`);
      process.exit(0);
    }
    python = join(work, 'venv', 'bin', 'python');
  }
  mkdirSync(WHEELS, { recursive: true });
  const pip = run(python, [
    '-m',
    'pip',
    'download',
    '--disable-pip-version-check',
    '--only-binary=:all:',
    '--no-deps',
    '--dest',
    WHEELS,
    BACKEND,
  ]);
  if (pip.status !== 0 || !readdirSync(WHEELS).includes(wheel)) {
    say(`could not download ${BACKEND} (${(pip.stderr || pip.error?.message || '').trim().split('\n').pop()})`);
  } else {
    console.log(`fetch-python-wheels: ${join(WHEELS, wheel)}`);
  }
} finally {
  rmSync(work, { recursive: true, force: true });
}
