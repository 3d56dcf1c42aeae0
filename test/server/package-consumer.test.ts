// The package as a user installs it: `npm pack`, then a fresh project with only that tarball installed. Its
// `servegate/client` declarations type-check with `skipLibCheck: false`, `strict` and no @types/node or openai; the
// compiled consumer calls a real gateway through `Deployment`; `import('servegate')` gives the server-side API.
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import { execFile, execFileSync } from 'node:child_process';
import { promisify } from 'node:util';
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startV1Backend, type RecordingBackend } from '../support/backends.js';
import { startGateway, type Gateway } from '../support/harness.js';

const run = promisify(execFile);
import { ROOT } from '../support/paths.js';
const TSC = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
let dir: string;
let v1: RecordingBackend;
let gw: Gateway;

beforeAll(async () => {
  if (!existsSync(join(ROOT, 'dist', 'index.js')))
    throw new Error('dist/index.js missing: npm test builds it first (or npm run build)');
  dir = mkdtempSync(join(tmpdir(), 'servegate-consumer-'));
  execFileSync('npm', ['pack', '--ignore-scripts', '--silent', '--pack-destination', dir], {
    cwd: ROOT,
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const tarball = readdirSync(dir).find((f) => f.endsWith('.tgz'))!;
  writeFileSync(
    join(dir, 'package.json'),
    JSON.stringify({ name: 'consumer', version: '1.0.0', private: true, type: 'module' }),
  );
  execFileSync('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', '--ignore-scripts', `./${tarball}`], {
    cwd: dir,
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  v1 = await startV1Backend();
  gw = await startGateway({
    deployments: [{ namespace: 'demo', name: 'iris', modelServer: 'sklearn', url: v1.url }],
    keys: [{ name: 'apikey-consumer', projects: 'demo' }],
  });
}, 180_000);

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
    const files = (
      await run(process.execPath, [TSC, '-p', 'tsconfig.json', '--listFilesOnly'], { cwd: dir })
    ).stdout.split('\n');
    expect(files.filter((f) => f.includes('node_modules/servegate/'))).toEqual(
      expect.arrayContaining([expect.stringMatching(/servegate\/dist\/client\/index\.d\.ts$/)]),
    );
    expect(files.filter((f) => /@types\/node\/|node_modules\/openai\//.test(f))).toEqual([]);
    await run(process.execPath, [TSC, '-p', 'tsconfig.json'], { cwd: dir });
    // Asynchronously: the gateway it calls runs in this process.
    const out = (await run(process.execPath, ['out/main.js'], { cwd: dir })).stdout;
    expect(JSON.parse(out)).toEqual({
      url: `${gw.url}/v1/demo/iris/v1/models/iris:predict`,
      predictions: [1, 0], // what the test backend answers
      received: { instances: [[6.8, 2.8, 4.8, 1.4]] },
      refused: '401',
    });
    expect(v1.requests.at(-1)?.url).toBe('/v1/models/iris:predict');
  });

  test("import('servegate') gives the server-side API", async () => {
    const { stdout: out } = await run(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        "const m = await import('servegate'); console.log([typeof m.startServegate, typeof m.FilesSource, typeof m.buildRouteTable, typeof m.generateKey].join(','))",
      ],
      { cwd: dir },
    );
    expect(out.trim()).toBe('function,function,function,function');
  });
});
