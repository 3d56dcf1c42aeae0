// `servegate url <project>/<deployment>`: the URLs of each kind from manifests (as the gateway reads them) and from
// the cluster (status preferred), plus the installed command end to end.
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, test } from '@jest/globals';
import { expect } from '../support/expect.js';
import { stringify } from 'yaml';
import type { CliIo } from '../../src/cli/keys.js';
import { urlCommand } from '../../src/cli/url.js';
import { FakeApiServer } from '../support/fake-apiserver.js';

const run = promisify(execFile);
const MAIN = new URL('../../dist/cli/main.js', import.meta.url).pathname;

function sdepDoc(ns: string, name: string, spec: Record<string, unknown>, extra: Record<string, unknown> = {}) {
  return {
    apiVersion: 'serving.servegate.dev/v1alpha1',
    kind: 'ServingDeployment',
    metadata: { name, namespace: ns, ...extra },
    spec,
  };
}

const DOCS = [
  sdepDoc('fraud-detection', 'fraud', {
    project: 'fraud_detection',
    type: 'model',
    modelServer: 'sklearn',
    backend: { url: 'http://127.0.0.1:9' },
  }),
  sdepDoc('demo', 'mnist', {
    type: 'model',
    modelServer: 'tensorflow',
    modelName: 'digits',
    backend: { url: 'http://127.0.0.1:9' },
  }),
  sdepDoc('demo', 'chat', { type: 'model', modelServer: 'llm', backend: { url: 'http://127.0.0.1:9' } }),
  sdepDoc('demo', 'echo', { type: 'python', backend: { url: 'http://127.0.0.1:9' } }),
  sdepDoc('demo', 'broken', { type: 'model', backend: { url: 'http://127.0.0.1:9' } }),
];

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'servegate-url-'));
  writeFileSync(join(dir, 'deployments.yaml'), DOCS.map((d) => stringify(d)).join('---\n'));
  writeFileSync(
    join(dir, 'config.yaml'),
    'publicUrl: https://models.example.com\nserverlessDomain: serving.example.com\n',
  );
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function url(argv: string[], env: NodeJS.ProcessEnv = {}) {
  let out = '';
  let err = '';
  const io: CliIo = {
    stdout: (t) => void (out += t),
    stderr: (t) => void (err += t),
    env: { HOME: '/nonexistent-home', ...env },
    now: () => Date.now(),
  };
  const code = await urlCommand(argv, io);
  return { code, out, err };
}

const B = 'https://models.example.com/v1';

describe('servegate url --manifests', () => {
  test.each([
    [
      'fraud_detection/fraud',
      {
        url: `${B}/fraud_detection/fraud`,
        inferenceUrl: `${B}/fraud_detection/fraud/v1/models/fraud:predict`,
        hostname: 'fraud.fraud-detection.serving.example.com',
      },
    ],
    [
      'demo/mnist',
      {
        url: `${B}/demo/mnist`,
        inferenceUrl: `${B}/demo/mnist/v1/models/digits:predict`,
        hostname: 'mnist.demo.serving.example.com',
      },
    ],
    ['demo/chat', { url: `${B}/demo/chat`, openaiUrl: `${B}/demo/chat/v1`, hostname: 'chat.demo.serving.example.com' }],
    ['demo/echo', { url: `${B}/demo/echo`, endpointUrl: `${B}/demo/echo`, hostname: 'echo.demo.serving.example.com' }],
  ])('%s prints exactly its URLs', async (ref, want) => {
    const r = await url([ref, '--manifests', dir, '--config', join(dir, 'config.yaml'), '-o', 'json']);
    expect(r.code, r.err).toBe(0);
    const got = JSON.parse(r.out);
    for (const k of ['url', 'inferenceUrl', 'openaiUrl', 'endpointUrl', 'hostname'])
      expect(got[k], k).toBe((want as Record<string, string>)[k]);
  });

  test('the text output is one "field: value" line per URL', async () => {
    const r = await url(['fraud_detection/fraud', '--manifests', dir, '--config', join(dir, 'config.yaml')]);
    expect(r.out).toBe(
      [
        `url:          ${B}/fraud_detection/fraud`,
        `inferenceUrl: ${B}/fraud_detection/fraud/v1/models/fraud:predict`,
        'hostname:     fraud.fraud-detection.serving.example.com',
        '',
      ].join('\n'),
    );
  });

  test('the namespace form of a project finds the same deployment', async () => {
    const r = await url([
      'fraud-detection/fraud',
      '--manifests',
      dir,
      '--config',
      join(dir, 'config.yaml'),
      '-o',
      'url',
    ]);
    expect(r.out).toBe(`${B}/fraud_detection/fraud/v1/models/fraud:predict\n`);
  });

  test('--public-url overrides the configuration; without either the default is http://localhost:8080', async () => {
    const a = await url([
      'demo/chat',
      '--manifests',
      dir,
      '--config',
      join(dir, 'config.yaml'),
      '--public-url',
      'https://gw.example.org/',
      '-o',
      'url',
    ]);
    expect(a.out).toBe('https://gw.example.org/v1/demo/chat/v1\n');
    const b = await url(['demo/chat', '--manifests', dir, '-o', 'url']);
    expect(b.out).toBe('http://localhost:8080/v1/demo/chat/v1\n');
  });

  test.each([
    [
      ['demo/broken', '--manifests'],
      1,
      'error[SG_NOT_SERVED]: ServingDeployment demo/broken is not served: InvalidSpec',
    ],
    [['demo/nope', '--manifests'], 1, 'error[SG_NOT_FOUND]: no deployment demo/nope'],
    [['demo', '--manifests'], 2, 'is not <project>/<deployment>'],
    [
      ['demo/chat', '-o', 'xml', '--manifests'],
      2,
      "argument 'xml' is invalid. Allowed choices are text, json, yaml, url",
    ],
    [['demo/chat', 'extra', '--manifests'], 2, 'error[SG_USAGE]: too many arguments'],
  ])('%j fails with exit %i: %s', async (argv, code, message) => {
    const r = await url([...argv, dir]);
    expect(r.code).toBe(code);
    expect(r.err).toContain(message);
    expect(r.out).toBe('');
  });

  test('a bad configuration file is refused naming the key', async () => {
    writeFileSync(join(dir, 'bad-config.yml.txt'), 'cors:\n  allowedOrigins: [not-a-url]\n');
    const r = await url([
      'demo/chat',
      '--manifests',
      join(dir, 'deployments.yaml'),
      '--config',
      join(dir, 'bad-config.yml.txt'),
    ]);
    expect(r.code).toBe(2);
    expect(r.err).toContain('error[SG_CONFIG]');
    expect(r.err).toContain('cors.allowedOrigins.0');
  });
});

describe('servegate url in the cluster (fake API server)', () => {
  let fake: FakeApiServer;
  let kubeconfig: string;
  beforeAll(async () => {
    fake = await FakeApiServer.start();
    kubeconfig = join(dir, 'kubeconfig');
    writeFileSync(kubeconfig, fake.kubeConfig().exportConfig());
    const withStatus = fake.create(
      sdepDoc('fraud-detection', 'fraud', {
        project: 'fraud_detection',
        type: 'model',
        modelServer: 'sklearn',
        backend: { service: 'fraud', port: 80 },
      }),
    );
    fake.update({
      ...withStatus,
      status: {
        url: 'https://status.example.com/v1/fraud_detection/fraud',
        inferenceUrl: 'https://status.example.com/v1/fraud_detection/fraud/v1/models/fraud:predict',
        hostname: 'fraud.fraud-detection.serving.example.com',
        conditions: [{ type: 'Ready', status: 'True', reason: 'Routed', message: '' }],
      },
    });
    fake.create(
      sdepDoc('demo', 'chat', { type: 'model', modelServer: 'llm', backend: { service: 'chat', port: 8000 } }),
    );
    const unready = fake.create(sdepDoc('demo', 'down', { type: 'python', backend: { service: 'down', port: 80 } }));
    fake.update({
      ...unready,
      status: {
        url: 'https://status.example.com/v1/demo/down',
        endpointUrl: 'https://status.example.com/v1/demo/down',
        conditions: [
          { type: 'Ready', status: 'False', reason: 'BackendNotFound', message: 'Service demo/down not found' },
        ],
      },
    });
    fake.create(
      sdepDoc(
        'other',
        'chat',
        { project: 'demo', type: 'model', modelServer: 'llm', backend: { service: 'chat', port: 8000 } },
        { creationTimestamp: '2099-01-01T00:00:00Z' },
      ),
    );
    const isvc = (name: string, model: Record<string, unknown>, ready: Record<string, unknown>) => ({
      apiVersion: 'serving.kserve.io/v1beta1',
      kind: 'InferenceService',
      metadata: { name, namespace: 'kserve-test' },
      spec: { predictor: { model } },
      status: { conditions: [{ type: 'Ready', ...ready }] },
    });
    fake.create(isvc('iris', { modelFormat: { name: 'sklearn' }, protocolVersion: 'v2' }, { status: 'True' }));
    fake.create(
      isvc(
        'pending',
        { modelFormat: { name: 'sklearn' } },
        { status: 'False', reason: 'PredictorConfigurationReady', message: 'revision failed' },
      ),
    );
  });
  afterAll(async () => {
    await fake?.stop();
  });

  test('an InferenceService is found too: its URLs (V2 protocol here), and a note when this configuration does not enable KServe', async () => {
    const r = await url(['kserve-test/iris', '--config', join(dir, 'config.yaml'), '-o', 'json'], {
      KUBECONFIG: kubeconfig,
    });
    expect(r.code, r.err).toBe(0);
    expect(JSON.parse(r.out)).toMatchObject({
      resource: 'kserve-test/iris',
      url: `${B}/kserve-test/iris`,
      inferenceUrl: `${B}/kserve-test/iris/v2/models/iris/infer`,
    });
    expect(r.err).toContain('kubernetes.kserve.enabled');
  });

  test('an InferenceService whose Ready condition is False is not served: an error with its reason', async () => {
    const r = await url(['kserve-test/pending', '--kubeconfig', kubeconfig]);
    expect(r.code).toBe(1);
    expect(r.out).toBe('');
    expect(r.err).toBe(
      'error[SG_NOT_SERVED]: InferenceService kserve-test/pending is not served now: the InferenceService is not ready (Ready=False, PredictorConfigurationReady: revision failed)\n',
    );
  });

  test('the URLs the controller wrote to status are printed as they are', async () => {
    const r = await url(['fraud_detection/fraud', '-o', 'json', '--kubeconfig', kubeconfig]);
    expect(r.code, r.err).toBe(0);
    expect(JSON.parse(r.out)).toMatchObject({
      url: 'https://status.example.com/v1/fraud_detection/fraud',
      inferenceUrl: 'https://status.example.com/v1/fraud_detection/fraud/v1/models/fraud:predict',
      resource: 'fraud-detection/fraud',
    });
  });

  test('without a status the URLs are computed from the configuration, with a note', async () => {
    const r = await url(['demo/chat', '--config', join(dir, 'config.yaml'), '-o', 'url'], { KUBECONFIG: kubeconfig });
    expect(r.code, r.err).toBe(0);
    expect(r.out).toBe(`${B}/demo/chat/v1\n`);
    expect(r.err).toContain('no URLs in its status');
  });

  test('--public-url wins over the status', async () => {
    const r = await url([
      'fraud_detection/fraud',
      '--public-url',
      'https://new.example.com',
      '-o',
      'url',
      '--kubeconfig',
      kubeconfig,
    ]);
    expect(r.out).toBe('https://new.example.com/v1/fraud_detection/fraud/v1/models/fraud:predict\n');
  });

  test('of two resources claiming one project/deployment the oldest is reported, as the gateway routes', async () => {
    const all = await url(['demo/chat', '-o', 'json', '--kubeconfig', kubeconfig]);
    expect(JSON.parse(all.out).resource).toBe('demo/chat');
    const narrowed = await url(['demo/chat', '-n', 'other', '-o', 'json', '--kubeconfig', kubeconfig]);
    expect(JSON.parse(narrowed.out).resource).toBe('other/chat');
  });

  test('a deployment that does not exist is an error', async () => {
    const r = await url(['demo/none', '--kubeconfig', kubeconfig]);
    expect(r.code).toBe(1);
    expect(r.err).toContain('error[SG_NOT_FOUND]: no deployment demo/none');
  });

  test.each([[[]], [['--public-url', 'https://new.example.com']]])(
    'a deployment the controller reports not Ready is not served: an error with its reason, no URLs (%j)',
    async (extra) => {
      const r = await url(['demo/down', '--kubeconfig', kubeconfig, ...extra]);
      expect(r.code).toBe(1);
      expect(r.out).toBe('');
      expect(r.err).toBe(
        'error[SG_NOT_SERVED]: demo/down is not served: BackendNotFound: Service demo/down not found\n',
      );
    },
  );

  test("without a cluster the hint names what url offers instead (not another command's flags)", async () => {
    const r = await url(['demo/chat']);
    expect(r.code).toBe(1);
    expect(r.err).toContain('error[SG_CLUSTER]: no cluster configured');
    expect(r.err).toContain('--manifests DIR');
    expect(r.err).not.toContain('-o yaml');
  });
});

describe('the servegate command (dist/cli/main.js, built by npm test)', () => {
  test('servegate url prints the URLs', async () => {
    const { stdout } = await run(process.execPath, [
      MAIN,
      'url',
      'demo/echo',
      '--manifests',
      dir,
      '--config',
      join(dir, 'config.yaml'),
      '-o',
      'json',
    ]);
    expect(JSON.parse(stdout).endpointUrl).toBe(`${B}/demo/echo`);
  });

  test('servegate keys create -o yaml prints a manifest and the key', async () => {
    const { stdout, stderr } = await run(process.execPath, [
      MAIN,
      'keys',
      'create',
      '--name',
      'ci-bot',
      '--projects',
      'demo',
      '-o',
      'yaml',
    ]);
    expect(stdout).toContain('serving.servegate.dev/api-key: "true"');
    expect(stderr).toMatch(/^[A-Za-z0-9]{16}\.[A-Za-z0-9_-]{43}$/m);
  });

  test.each([['keys'], ['url']])('servegate %s --help exits 0 with usage', async (cmd) => {
    const { stdout } = await run(process.execPath, [MAIN, cmd, '--help']);
    expect(stdout).toContain(`Usage: servegate ${cmd}`);
  });
});
