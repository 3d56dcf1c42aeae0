// The Python client (clients/python) as a user gets it: `pip install` of the folder into a fresh venv with no package
// index (with build isolation and with --no-build-isolation: its in-tree build backend needs only the standard
// library), and the wheel it builds, checked and installed; imported from there; then its own unittest
// suite against a real gateway and real backends (every call, every error, each kind), with the URL cases the
// TypeScript client computes so that both clients are compared; and the deployments page's Python snippets run as shown.
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Deployment, type DeploymentOptions } from '../../src/client/index.js';
import {
  closedPort,
  startDelayBackend,
  startOpenAIBackend,
  startPythonBackend,
  startV1Backend,
  type OpenAIBackend,
  type RecordingBackend,
} from '../support/backends.js';
import { deploymentDoc, send, startGateway, type Gateway } from '../support/harness.js';
import { ROOT } from '../support/paths.js';
import { describeRun, expectSuccess, runProcess, type RunResult } from '../support/processes.js';

const PYTHON = process.env.SERVEGATE_PYTHON || 'python3';
const CLIENT_DIR = join(ROOT, 'clients', 'python');
const MAX_BODY = 65_536;

/** The environment for python and pip: no package index (a dead address), no user config, no bytecode in the tree. */
function pythonEnv(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
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
    PYTHONUNBUFFERED: '1',
    NO_PROXY: '127.0.0.1,localhost',
    no_proxy: '127.0.0.1,localhost',
    ...extra,
  };
}

// Python keyword arguments → the TypeScript client's options.
type PyKwargs = Record<string, string>;
function tsOptions(kw: PyKwargs, apiKey: string): DeploymentOptions {
  return {
    gatewayUrl: kw.gateway_url,
    project: kw.project,
    deployment: kw.deployment,
    apiKey: kw.api_key ?? apiKey,
    ...(kw.type !== undefined ? { type: kw.type as DeploymentOptions['type'] } : {}),
    ...(kw.model_server !== undefined ? { modelServer: kw.model_server as DeploymentOptions['modelServer'] } : {}),
    ...(kw.model_name !== undefined ? { modelName: kw.model_name } : {}),
    ...(kw.protocol !== undefined ? { protocol: kw.protocol as 'v1' | 'v2' } : {}),
  };
}

const GW = 'https://models.example.com';
const fraud = { gateway_url: GW, project: 'fraud_detection', deployment: 'fraud' };
const URL_CASES: Array<[string, PyKwargs]> = [
  ['sklearn', { ...fraud, model_server: 'sklearn' }],
  ['sklearn with the model name given', { ...fraud, model_server: 'sklearn', model_name: 'fraud' }],
  ['sklearn with another model name', { ...fraud, model_server: 'sklearn', model_name: 'fraud-v2.1' }],
  ['python model server', { ...fraud, model_server: 'python' }],
  ['tensorflow', { ...fraud, model_server: 'tensorflow', model_name: 'digits' }],
  ['V2 (Open Inference Protocol)', { ...fraud, model_server: 'sklearn', protocol: 'v2' }],
  ['V2 with a model name', { ...fraud, model_server: 'tensorflow', protocol: 'v2', model_name: 'm' }],
  ['V1 said explicitly', { ...fraud, model_server: 'sklearn', protocol: 'v1' }],
  ['llm', { ...fraud, model_server: 'llm' }],
  ['llm with a served model name', { ...fraud, model_server: 'llm', model_name: 'meta-llama/Llama-3.1-8B' }],
  ['python deployment', { ...fraud, type: 'python' }],
  ['type model said explicitly', { ...fraud, type: 'model', model_server: 'sklearn' }],
  ['"scikit-learn"', { ...fraud, model_server: 'scikit-learn' }],
  ['"TensorFlow"', { ...fraud, model_server: 'TensorFlow' }],
  ['"tf"', { ...fraud, model_server: 'tf' }],
  ['"vllm"', { ...fraud, model_server: 'vllm' }],
  ['the namespace form of the project', { ...fraud, project: 'fraud-detection', model_server: 'sklearn' }],
  ['names with dots and underscores', { gateway_url: GW, project: 'a.b_c', deployment: 'd_1.x', type: 'python' }],
  ['a trailing slash', { ...fraud, gateway_url: `${GW}/`, model_server: 'sklearn' }],
  ['trailing slashes', { ...fraud, gateway_url: `${GW}///`, model_server: 'llm' }],
  ['a port and a path prefix', { ...fraud, gateway_url: 'http://10.0.0.1:8080/serving', model_server: 'llm' }],
  ['a path prefix with a slash', { ...fraud, gateway_url: 'http://gw.local/a/b/', type: 'python' }],
  ['an IPv6 gateway', { ...fraud, gateway_url: 'http://[::1]:8080', model_server: 'tensorflow' }],
  ['an upper-case scheme', { ...fraud, gateway_url: 'HTTPS://Models.Example.com', model_server: 'sklearn' }],
];
const REFUSED_CASES: Array<[string, PyKwargs]> = [
  ['no model server', { ...fraud }],
  ['an unknown model server', { ...fraud, model_server: 'pytorch' }],
  ['a model server on a python deployment', { ...fraud, type: 'python', model_server: 'sklearn' }],
  ['an unknown type', { ...fraud, type: 'server' }],
  ['a gateway URL without a scheme', { ...fraud, gateway_url: 'models.example.com', model_server: 'sklearn' }],
  ['an ftp gateway URL', { ...fraud, gateway_url: 'ftp://models.example.com', model_server: 'sklearn' }],
  ['a gateway URL with a query', { ...fraud, gateway_url: `${GW}/?a=1`, model_server: 'sklearn' }],
  ['a gateway URL with a fragment', { ...fraud, gateway_url: `${GW}/#x`, model_server: 'sklearn' }],
  ['no key', { ...fraud, model_server: 'sklearn', api_key: '' }],
  ['a project with a slash', { ...fraud, project: 'a/b', model_server: 'sklearn' }],
  ['a deployment with a space', { ...fraud, deployment: 'a b', model_server: 'sklearn' }],
  ['a deployment that starts with a dash', { ...fraud, deployment: '-d', model_server: 'sklearn' }],
  ['an unknown protocol', { ...fraud, model_server: 'sklearn', protocol: 'v3' }],
  ['protocol v2 on an llm', { ...fraud, model_server: 'llm', protocol: 'v2' }],
];

describe('the Python client (clients/python)', () => {
  let work: string;
  let venvPython: string;
  let version: RunResult;
  const installs: RunResult[] = [];
  let imported: RunResult;
  let wheelFiles: RunResult;
  let gw: Gateway;
  let v1: RecordingBackend;
  let llm: OpenAIBackend;
  let py: RecordingBackend;
  let delay: RecordingBackend;
  let key: string;
  let otherProjectKey: string;

  beforeAll(async () => {
    work = mkdtempSync(join(tmpdir(), 'servegate-python-'));
    version = await runProcess(
      PYTHON,
      ['-c', 'import sys, venv, ensurepip; assert sys.version_info >= (3, 9), sys.version; print(sys.version)'],
      { env: pythonEnv(), timeoutMs: 30_000 },
    );
    if (version.code !== 0) {
      throw new Error(
        `the Python client's tests need ${PYTHON} 3.9 or later with venv and ensurepip ` +
          `(Debian: apt-get install python3 python3-venv; or set SERVEGATE_PYTHON)\n${describeRun(version)}`,
      );
    }
    const venv = join(work, 'venv');
    expectSuccess(await runProcess(PYTHON, ['-m', 'venv', venv], { env: pythonEnv(), timeoutMs: 120_000 }));
    venvPython = join(venv, 'bin', 'python');
    // `pip install ./clients/python` as SPEC §13 and the README say, with build isolation and, as where no index is
    // reachable, --no-build-isolation (the in-tree backend needs nothing but the standard library; the index is a
    // dead address throughout), then the wheel it builds.
    const offline = ['--no-cache-dir', '--no-index'];
    const pip = (...args: string[]) =>
      runProcess(venvPython, ['-m', 'pip', ...args], { cwd: ROOT, env: pythonEnv(), timeoutMs: 120_000 });
    // First into the fresh venv with --no-build-isolation (SPEC §13's install where no index is reachable: nothing
    // but pip is there to build with), then with build isolation.
    installs.push(await pip('install', ...offline, '--no-build-isolation', './clients/python'));
    installs.push(await pip('install', ...offline, '--force-reinstall', './clients/python'));
    const dist = join(work, 'dist');
    expectSuccess(await pip('wheel', ...offline, '--no-deps', '--wheel-dir', dist, './clients/python'));
    const wheel = join(
      dist,
      readdirSync(dist).find((f) => f.endsWith('.whl'))!,
    );
    installs.push(await pip('install', ...offline, '--force-reinstall', wheel));
    wheelFiles = await runProcess(
      venvPython,
      [
        '-c',
        'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); print(chr(10).join(sorted(z.namelist())));' +
          'print(z.read("servegate-0.1.0.dist-info/METADATA").decode())',
        wheel,
      ],
      { env: pythonEnv(), timeoutMs: 30_000 },
    );
    imported = await runProcess(venvPython, ['-c', 'import servegate; print(servegate.__file__)'], {
      cwd: work,
      env: pythonEnv(),
      timeoutMs: 30_000,
    });

    [v1, llm, py, delay] = await Promise.all([
      startV1Backend(),
      startOpenAIBackend(),
      startPythonBackend(),
      startDelayBackend(10_000),
    ]);
    const refused = `http://127.0.0.1:${await closedPort()}`;
    gw = await startGateway({
      config: { limits: { maxRequestBodyBytes: MAX_BODY } },
      deployments: [
        {
          namespace: 'fraud-detection',
          name: 'fraud',
          project: 'fraud_detection',
          modelServer: 'sklearn',
          url: v1.url,
        },
        { namespace: 'demo', name: 'iris', modelServer: 'python', url: v1.url },
        { namespace: 'demo', name: 'mnist', modelServer: 'tensorflow', modelName: 'digits', url: v1.url },
        { namespace: 'demo', name: 'chat', modelServer: 'llm', url: llm.url },
        { namespace: 'demo', name: 'limited', modelServer: 'llm', url: llm.url, limits: { requestsPerMinute: 1 } },
        { namespace: 'demo', name: 'echo', type: 'python', url: py.url },
        { namespace: 'demo', name: 'slow', type: 'python', url: delay.url, timeoutSeconds: 1 },
        { namespace: 'demo', name: 'sleepy', type: 'python', url: delay.url },
        { namespace: 'demo', name: 'broken', type: 'python', url: refused },
      ],
      files: {
        'deploy-demo-oip.yaml': (() => {
          const doc = deploymentDoc({ namespace: 'demo', name: 'oip', modelServer: 'sklearn', url: v1.url }) as {
            spec: Record<string, unknown>;
          };
          doc.spec.protocol = 'v2';
          return doc;
        })(),
      },
      keys: [
        { name: 'python-client', projects: 'fraud_detection,demo' },
        { name: 'other-project', projects: 'elsewhere' },
      ],
    });
    key = gw.keys['python-client'];
    otherProjectKey = gw.keys['other-project'];
  }, 300_000);

  afterAll(async () => {
    await gw?.close();
    await Promise.all([v1?.close(), llm?.close(), py?.close(), delay?.close()]);
    if (work) rmSync(work, { recursive: true, force: true });
  });

  test('pip installs it into a fresh venv with no package index (the folder, and the wheel it builds)', () => {
    expect(installs).toHaveLength(3);
    for (const r of installs) {
      if (r.code !== 0) throw new Error(describeRun(r));
      expect(r.stdout).toMatch(/Successfully installed servegate-\d+\.\d+\.\d+/);
    }
    // The wheel: the package and its py.typed, the metadata of pyproject.toml, nothing else (no tests, no build files).
    if (wheelFiles.code !== 0) throw new Error(describeRun(wheelFiles));
    const [names, metadata] = [
      wheelFiles.stdout.split('\n').filter((l) => /^servegate[-/]/.test(l)),
      wheelFiles.stdout,
    ];
    expect(names).toEqual([
      'servegate-0.1.0.dist-info/METADATA',
      'servegate-0.1.0.dist-info/RECORD',
      'servegate-0.1.0.dist-info/WHEEL',
      'servegate/__init__.py',
      'servegate/_deployment.py',
      'servegate/_errors.py',
      'servegate/_http.py',
      'servegate/_version.py',
      'servegate/py.typed',
    ]);
    expect(metadata).toMatch(/^Requires-Python: >=3\.9$/m);
    expect(metadata).toMatch(/^License-Expression: Apache-2\.0$/m);
    if (imported.code !== 0) throw new Error(describeRun(imported));
    expect(imported.stdout.trim().startsWith(join(work, 'venv'))).toBe(true);
  });

  test("its unittest suite passes against the gateway: every call, every error, each kind, the TS client's URLs", async () => {
    expect(imported?.code).toBe(0);
    const urlCases = URL_CASES.map(([name, kwargs]) => {
      const d = new Deployment(tsOptions(kwargs, key));
      const expected = {
        base: d.getBaseUrl(),
        inference: d.getInferenceUrl(),
        openai: d.getOpenaiUrl(),
        endpoint: d.getEndpointUrl(),
      };
      return { name, kwargs, expected };
    });
    const refusedCases = REFUSED_CASES.map(([name, kwargs]) => {
      // Each case is one the TypeScript client refuses too.
      expect(() => new Deployment(tsOptions(kwargs, key))).toThrow();
      return { name, kwargs };
    });
    const fixture = join(work, 'fixture.json');
    writeFileSync(
      fixture,
      JSON.stringify({
        gatewayUrl: gw.url,
        key,
        otherProjectKey,
        closedUrl: `http://127.0.0.1:${await closedPort()}`,
        maxRequestBodyBytes: MAX_BODY,
        installedIn: join(work, 'venv'),
        urlCases,
        refusedCases,
      }),
    );
    // Asynchronously: the gateway it calls runs in this process.
    const r = await runProcess(venvPython, ['-m', 'unittest', 'discover', '-s', 'tests', '-t', '.', '-v'], {
      cwd: CLIENT_DIR,
      env: pythonEnv({ SERVEGATE_TEST_FIXTURE: fixture }),
      timeoutMs: 180_000,
    });
    const report = describeRun(r);
    if (r.code !== 0) throw new Error(report);
    expect({ ok: /\nOK\s*$/.test(r.stderr), skipped: /skipped/i.test(r.stderr) }).toEqual({ ok: true, skipped: false });
    const ran = Number(/^Ran (\d+) tests? in /m.exec(r.stderr)?.[1] ?? 0);
    expect(ran).toBeGreaterThanOrEqual(60);
    // The gateway suite ran, not only the offline tests.
    for (const name of [
      'test_urls',
      'test_predict_reaches_an_sklearn_model_at_the_seed_url',
      'test_429_with_retry_after_on_a_rate_limited_llm',
      'test_a_timeout_has_no_status',
      'test_the_package_comes_from_the_install_under_test',
    ])
      expect(r.stderr).toMatch(new RegExp(`^${name} \\(.*\\) \\.\\.\\. ok$`, 'm'));
  }, 240_000);

  test("the deployments page's Python snippets run as shown, for each kind", async () => {
    expect(imported?.code).toBe(0);
    const page = await send(`${gw.adminUrl}/`);
    expect(page.status).toBe(200);
    const unescape = (s: string) =>
      s.replace(
        /&(amp|lt|gt|quot|#39);/g,
        (_, e: string) => ({ amp: '&', lt: '<', gt: '>', quot: '"', '#39': "'" })[e]!,
      );
    const pythonBlocks = [
      ...page.text.matchAll(
        /<div class="bar">Python<button[^>]*>Copy<\/button><\/div><pre id="s\d+">([\s\S]*?)<\/pre>/g,
      ),
    ].map((m) => unescape(m[1]));
    // The page shows the gateway's publicUrl (http://localhost:0 in this harness): call the real port instead.
    const deployments = (await send(`${gw.adminUrl}/deployments`)).json().deployments as Array<{ url: string }>;
    const publicUrl = deployments[0].url.replace(/\/v1\/[^/]+\/[^/]+$/, '');
    const byDeployment = (name: string) => {
      const block = pythonBlocks.find((b) => b.includes(`deployment="${name}"`));
      if (!block) throw new Error(`no Python snippet for ${name} in:\n${pythonBlocks.join('\n---\n')}`);
      expect(block).toContain('from servegate import Deployment');
      return block.split(publicUrl).join(gw.url);
    };
    const cases: Array<[string, RegExp]> = [
      ['fraud', /'predictions': \[1, 0\]/],
      ['mnist', /'path': '\/v1\/models\/digits:predict'/],
      ['oip', /'path': '\/v2\/models\/oip\/infer'/],
      ['chat', /^echo: Hello!$/m],
      ['echo', /^200 \{"backend":"python"/],
    ];
    for (const [name, output] of cases) {
      const file = join(work, `snippet-${name}.py`);
      writeFileSync(file, byDeployment(name));
      const r = await runProcess(venvPython, [file], {
        cwd: work,
        env: pythonEnv({ SERVEGATE_KEY: key }),
        timeoutMs: 60_000,
      });
      if (r.code !== 0 || !output.test(r.stdout)) throw new Error(`${name}: ${describeRun(r)}`);
    }
  }, 120_000);
});
