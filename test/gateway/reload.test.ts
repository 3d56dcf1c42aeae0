// Live reload of the files source: deployments added, edited and deleted in the manifest folder are served or
// gone within about a second, without a restart; a bad document is reported while the others keep serving.
import { afterAll, beforeAll, describe, test } from '@jest/globals';
import { expect } from '../support/expect.js';
import {
  startOpenAIBackend,
  startPythonBackend,
  startV1Backend,
  type OpenAIBackend,
  type RecordingBackend,
} from '../support/backends.js';
import { eventually, send, startGateway, type Gateway } from '../support/harness.js';
import { metricValue } from '../support/metrics.js';

let v1a: RecordingBackend;
let v1b: RecordingBackend;
let py: RecordingBackend;
let gw: Gateway;
let key: string;
const auth = () => ({ authorization: `ApiKey ${key}` });
const predict = (dep: string, model = dep, verb = 'predict') =>
  send(`${gw.url}/v1/demo/${dep}/v1/models/${model}:${verb}`, { headers: auth(), body: { instances: [[1]] } });

beforeAll(async () => {
  [v1a, v1b, py] = await Promise.all([startV1Backend(), startV1Backend(), startPythonBackend()]);
  gw = await startGateway({
    deployments: [{ namespace: 'demo', name: 'iris', modelServer: 'sklearn', url: v1a.url }],
    keys: [{ name: 'apikey-reload', projects: 'demo' }],
  });
  key = gw.keys['apikey-reload'];
});

afterAll(async () => {
  await gw?.close();
  await Promise.all([v1a, v1b, py].map((b) => b?.close()));
});

describe('live reload of the manifest folder', () => {
  test('a new deployment manifest is served without a restart', async () => {
    expect((await send(`${gw.url}/v1/demo/fresh/hello`, { headers: auth() })).status).toBe(404);
    gw.writeDeployment({ namespace: 'demo', name: 'fresh', type: 'python', url: py.url });
    await eventually(async () =>
      expect((await send(`${gw.url}/v1/demo/fresh/hello`, { headers: auth() })).status).toBe(200),
    );
    expect(py.last().url).toBe('/hello');
  });

  test("an edited deployment's new backend takes the traffic", async () => {
    expect((await predict('iris')).status).toBe(200);
    expect(v1a.requests.length).toBeGreaterThan(0);
    gw.writeDeployment({ namespace: 'demo', name: 'iris', modelServer: 'sklearn', url: v1b.url });
    await eventually(async () => {
      const before = v1b.requests.length;
      expect((await predict('iris')).status).toBe(200);
      expect(v1b.requests.length).toBe(before + 1);
    });
  });

  test("an edited deployment's model server changes the verbs it offers", async () => {
    expect((await predict('iris', 'iris', 'classify')).status).toBe(404);
    gw.writeDeployment({ namespace: 'demo', name: 'iris', modelServer: 'tensorflow', url: v1b.url });
    await eventually(async () => expect((await predict('iris', 'iris', 'classify')).status).toBe(200));
  });

  test('a deleted deployment manifest is 404', async () => {
    gw.writeDeployment({ namespace: 'demo', name: 'doomed', type: 'python', url: py.url });
    await eventually(async () =>
      expect((await send(`${gw.url}/v1/demo/doomed/x`, { headers: auth() })).status).toBe(200),
    );
    gw.removeDeployment('demo', 'doomed');
    await eventually(async () =>
      expect((await send(`${gw.url}/v1/demo/doomed/x`, { headers: auth() })).status).toBe(404),
    );
  });

  test('a stream in flight finishes when its deployment is deleted meanwhile', async () => {
    const llm: OpenAIBackend = await startOpenAIBackend();
    try {
      llm.stream = { chunks: 8, delayMs: 100 };
      gw.writeDeployment({ namespace: 'demo', name: 'chat', modelServer: 'llm', url: llm.url });
      const body = { model: 'tiny-llm', messages: [{ role: 'user', content: 'x' }], stream: true };
      await eventually(async () =>
        expect((await send(`${gw.url}/v1/demo/chat/v1/models`, { headers: auth() })).status).toBe(200),
      );
      const streaming = send(`${gw.url}/v1/demo/chat/v1/chat/completions`, { headers: auth(), body });
      await eventually(() => expect(llm.requests.filter((r) => r.sent.length > 0).length).toBe(1), 2000, 10);
      gw.removeDeployment('demo', 'chat');
      await eventually(async () =>
        expect((await send(`${gw.url}/v1/demo/chat/v1/models`, { headers: auth() })).status).toBe(404),
      );
      const r = await streaming;
      expect(r.status).toBe(200);
      expect(r.text).toContain('tok7');
      expect(r.text).toContain('data: [DONE]');
    } finally {
      await llm.close();
    }
  });

  test('a bad document is reported while the other deployments keep serving', async () => {
    gw.writeManifest(
      'broken.yaml',
      'apiVersion: serving.servegate.dev/v1alpha1\nkind: ServingDeployment\nmetadata: {name: [unclosed\n',
    );
    gw.writeDeployment({ namespace: 'demo', name: 'second', type: 'python', url: py.url });
    gw.writeManifest('bad-spec.yaml', {
      apiVersion: 'serving.servegate.dev/v1alpha1',
      kind: 'ServingDeployment',
      metadata: { name: 'badspec', namespace: 'demo' },
      spec: { type: 'model', modelServer: 'not-a-server', backend: { url: py.url } },
    });
    // The good document written in the same moment is picked up...
    await eventually(async () =>
      expect((await send(`${gw.url}/v1/demo/second/x`, { headers: auth() })).status).toBe(200),
    );
    // ...the older ones keep serving...
    expect((await predict('iris')).status).toBe(200);
    expect((await send(`${gw.url}/v1/demo/fresh/x`, { headers: auth() })).status).toBe(200);
    // ...the invalid one is not routed...
    expect((await send(`${gw.url}/v1/demo/badspec/x`, { headers: auth() })).status).toBe(404);
    // ...and both problems are reported: the YAML error in the log, the invalid spec on the admin page.
    await eventually(() => expect(gw.logs.some((l) => l.includes('broken.yaml'))).toBe(true));
    const page = await send(`${gw.adminUrl}/`);
    expect(page.text).toContain('badspec');
    expect(page.text).toContain('InvalidSpec');
  });

  test('a broken manifest added on its own is reported in the log, naming the file', async () => {
    gw.writeManifest('lonely-broken.yaml', 'kind: ServingDeployment\nmetadata: {name: [oops\n');
    await eventually(() => expect(gw.logs.some((l) => l.includes('lonely-broken.yaml'))).toBe(true));
    expect((await predict('iris')).status).toBe(200);
  });

  test('a key Secret with bad fields is ignored and reported (log and metric); the other keys keep working', async () => {
    gw.writeManifest('key-bad-runtime.yaml', {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: {
        name: 'apikey-bad-runtime',
        namespace: 'servegate',
        labels: { 'serving.servegate.dev/api-key': 'true' },
      },
      stringData: { prefix: 'tooShort', sha256: 'zz', projects: 'demo' },
    });
    await eventually(() => expect(gw.logs.some((l) => l.includes('apikey-bad-runtime'))).toBe(true));
    const invalidKeys = async () =>
      metricValue((await send(`${gw.adminUrl}/metrics`)).text, 'servegate_invalid_resources', { reason: 'InvalidKey' });
    expect(await invalidKeys()).toBe(1);
    expect((await predict('iris')).status).toBe(200);
    gw.removeManifest('key-bad-runtime.yaml');
    await eventually(async () => expect(await invalidKeys()).toBe(0));
  });

  test('a fixed document is served again', async () => {
    gw.writeManifest('bad-spec.yaml', {
      apiVersion: 'serving.servegate.dev/v1alpha1',
      kind: 'ServingDeployment',
      metadata: { name: 'badspec', namespace: 'demo' },
      spec: { type: 'python', backend: { url: py.url } },
    });
    await eventually(async () =>
      expect((await send(`${gw.url}/v1/demo/badspec/x`, { headers: auth() })).status).toBe(200),
    );
  });
});
