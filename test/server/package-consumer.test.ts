// The package as a user installs it: `npm pack`, then a fresh project with only that tarball installed. Its
// `servegate/client` declarations type-check with `skipLibCheck: false`, `strict` and no @types/node or openai; the
// compiled consumer calls a real gateway through `Deployment`; `import('servegate')` gives the server-side API; its
// `servegate` command runs. And the checkout's own build leaves dist/cli/main.js executable.
//
// Nothing here reaches the network: the install is `npm ci --offline` from a lockfile made from the checkout's own
// (the dependencies' tarballs are in the npm cache since the checkout's `npm ci`), with a registry nobody listens on;
// every child process has a deadline.
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startV1Backend, type RecordingBackend } from '../support/backends.js';
import { startGateway, type Gateway } from '../support/harness.js';
import { CLI, ROOT } from '../support/paths.js';
import { describeRun, expectSuccess, offlineNpmEnv, runProcess } from '../support/processes.js';

const TSC = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
const NPM_TIMEOUT_MS = 120_000;
let dir: string;
let v1: RecordingBackend;
let gw: Gateway;

interface LockEntry {
  version?: string;
  resolved?: string;
  integrity?: string;
  dev?: boolean;
  devOptional?: boolean;
  optional?: boolean;
  link?: boolean;
  [k: string]: unknown;
}

/**
 * package-lock.json for a project whose one dependency is the packed tarball: the tarball's entry, and the checkout
 * lockfile's entries for everything it needs at run time (those not marked dev), at the same places — the checkout's
 * production dependencies sit at the top of its node_modules as they will in the consumer's. Entries without a
 * `resolved` address (npm's omit-lockfile-registry-resolved) get the registry's, so that `npm ci` never needs a
 * packument: the tarball itself is read from the npm cache by its integrity.
 */
function consumerLockfile(tarball: string, tarballBytes: Buffer): object {
  const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as Record<string, any>;
  const lock = JSON.parse(readFileSync(join(ROOT, 'package-lock.json'), 'utf8')) as {
    packages: Record<string, LockEntry>;
  };
  const packages: Record<string, LockEntry> = {
    '': { name: 'consumer', version: '1.0.0', dependencies: { servegate: `file:${tarball}` } },
    'node_modules/servegate': {
      version: pkg.version,
      resolved: `file:${tarball}`,
      integrity: `sha512-${createHash('sha512').update(tarballBytes).digest('base64')}`,
      license: pkg.license,
      dependencies: pkg.dependencies,
      bin: pkg.bin,
      engines: pkg.engines,
    },
  };
  for (const [path, entry] of Object.entries(lock.packages)) {
    if (!path.startsWith('node_modules/') || entry.dev || entry.link) continue;
    const { devOptional, ...rest } = entry;
    delete rest.dev;
    const name = path.slice(path.lastIndexOf('node_modules/') + 'node_modules/'.length);
    rest.resolved ??= `https://registry.npmjs.org/${name}/-/${name.split('/').pop()}-${entry.version}.tgz`;
    packages[path] = devOptional ? { ...rest, optional: true } : rest;
  }
  return { name: 'consumer', version: '1.0.0', lockfileVersion: 3, requires: true, packages };
}

beforeAll(async () => {
  if (!existsSync(join(ROOT, 'dist', 'index.js')))
    throw new Error('dist/index.js missing: npm test builds it first (or npm run build)');
  dir = mkdtempSync(join(tmpdir(), 'servegate-consumer-'));
  expectSuccess(
    await runProcess('npm', ['pack', '--ignore-scripts', '--silent', '--pack-destination', dir], {
      cwd: ROOT,
      env: offlineNpmEnv(),
      timeoutMs: NPM_TIMEOUT_MS,
    }),
  );
  const tarball = readdirSync(dir).find((f) => f.endsWith('.tgz'))!;
  writeFileSync(
    join(dir, 'package.json'),
    JSON.stringify({
      name: 'consumer',
      version: '1.0.0',
      private: true,
      type: 'module',
      dependencies: { servegate: `file:${tarball}` },
    }),
  );
  writeFileSync(
    join(dir, 'package-lock.json'),
    JSON.stringify(consumerLockfile(tarball, readFileSync(join(dir, tarball))), null, 2),
  );
  const install = await runProcess('npm', ['ci', '--offline', '--no-audit', '--no-fund', '--ignore-scripts'], {
    cwd: dir,
    env: offlineNpmEnv(),
    timeoutMs: NPM_TIMEOUT_MS,
  });
  if (install.code !== 0) {
    throw new Error(
      'npm ci --offline of the packed servegate failed. Its dependencies come from the npm cache, which `npm ci` in ' +
        `the checkout fills; run that first (this test never reaches the network).\n${describeRun(install)}`,
    );
  }
  v1 = await startV1Backend();
  gw = await startGateway({
    deployments: [{ namespace: 'demo', name: 'iris', modelServer: 'sklearn', url: v1.url }],
    keys: [{ name: 'apikey-consumer', projects: 'demo' }],
  });
}, 300_000);

afterAll(async () => {
  await gw?.close();
  await v1?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('a project with only servegate installed', () => {
  test('has servegate and not openai', () => {
    const installed = readdirSync(join(dir, 'node_modules'));
    expect(installed).toContain('servegate');
    expect(installed).not.toContain('openai');
  });

  test('type-checks a client program (strict, skipLibCheck false, no Node.js types) and runs it against a real gateway', async () => {
    writeFileSync(
      join(dir, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          target: 'ES2022',
          module: 'NodeNext',
          moduleResolution: 'NodeNext',
          strict: true,
          skipLibCheck: false,
          types: [],
          outDir: 'out',
        },
        include: ['main.ts'],
      }),
    );
    writeFileSync(
      join(dir, 'main.ts'),
      `import { Deployment, GatewayError } from 'servegate/client';
const iris = new Deployment({ gatewayUrl: ${JSON.stringify(gw.url)}, project: 'demo', deployment: 'iris', modelServer: 'sklearn', apiKey: ${JSON.stringify(gw.keys['apikey-consumer'])} });
const url: string | null = iris.getInferenceUrl();
const answer = await iris.predict<{ predictions: number[]; received: unknown }>({ instances: [[6.8, 2.8, 4.8, 1.4]] });
let refused = '';
try {
  await new Deployment({ gatewayUrl: ${JSON.stringify(gw.url)}, project: 'demo', deployment: 'iris', modelServer: 'sklearn', apiKey: 'AAAAAAAAAAAAAAAA.${'b'.repeat(40)}' }).predict({ instances: [[1]] });
} catch (err) {
  if (err instanceof GatewayError) refused = String(err.status);
}
console.log(JSON.stringify({ url, predictions: answer.predictions, received: answer.received, refused }));
`,
    );
    // @types/node is in node_modules (the Kubernetes client depends on it): no file of it may be part of the program.
    const listed = expectSuccess(
      await runProcess(process.execPath, [TSC, '-p', 'tsconfig.json', '--listFilesOnly'], {
        cwd: dir,
        timeoutMs: 60_000,
      }),
    );
    const files = listed.stdout.split('\n');
    expect(files.filter((f) => f.includes('node_modules/servegate/'))).toEqual(
      expect.arrayContaining([expect.stringMatching(/servegate\/dist\/client\/index\.d\.ts$/)]),
    );
    expect(files.filter((f) => /@types\/node\/|node_modules\/openai\//.test(f))).toEqual([]);
    expectSuccess(await runProcess(process.execPath, [TSC, '-p', 'tsconfig.json'], { cwd: dir, timeoutMs: 60_000 }));
    // Asynchronously: the gateway it calls runs in this process.
    const out = expectSuccess(await runProcess(process.execPath, ['out/main.js'], { cwd: dir, timeoutMs: 30_000 }));
    expect(JSON.parse(out.stdout)).toEqual({
      url: `${gw.url}/v1/demo/iris/v1/models/iris:predict`,
      predictions: [1, 0], // what the test backend answers
      received: { instances: [[6.8, 2.8, 4.8, 1.4]] },
      refused: '401',
    });
    expect(v1.requests.at(-1)?.url).toBe('/v1/models/iris:predict');
  });

  test("import('servegate') gives the server-side API", async () => {
    const r = expectSuccess(
      await runProcess(
        process.execPath,
        [
          '--input-type=module',
          '-e',
          "const m = await import('servegate'); console.log([typeof m.startServegate, typeof m.FilesSource, typeof m.buildRouteTable, typeof m.generateKey].join(','))",
        ],
        { cwd: dir, timeoutMs: 30_000 },
      ),
    );
    expect(r.stdout.trim()).toBe('function,function,function,function');
  });

  test('`npx servegate --help` runs the installed command', async () => {
    const r = expectSuccess(
      await runProcess('npx', ['--offline', 'servegate', '--help'], {
        cwd: dir,
        env: offlineNpmEnv(),
        timeoutMs: 60_000,
      }),
    );
    expect(r.stdout).toMatch(/^Usage: servegate /m);
  });
});

describe("the checkout's build", () => {
  test('leaves dist/cli/main.js executable, so that the file (and npx servegate) runs as a program', async () => {
    // Built by npm run build (npm ci's prepare); npm test's tsc rewrites the file in place and keeps the mode.
    const mode = statSync(CLI).mode;
    expect({ file: CLI, executable: (mode & 0o111) === 0o111 }).toEqual({ file: CLI, executable: true });
    expect(readFileSync(CLI, 'utf8').startsWith('#!/usr/bin/env node\n')).toBe(true);
    const r = expectSuccess(await runProcess(CLI, ['--help'], { cwd: ROOT, timeoutMs: 30_000 }));
    expect(r.stdout).toMatch(/^Usage: servegate /m);
  });
});
