// The admin listener (SPEC §1): health, readiness, Prometheus metrics and the page listing deployments.
import { afterAll, beforeAll, describe, test } from '@jest/globals';
import { expect } from '../support/expect.js';
import { startOpenAIBackend, startPythonBackend, startV1Backend, type RecordingBackend } from '../support/backends.js';
import { eventually, send, startGateway, type Gateway } from '../support/harness.js';

let v1: RecordingBackend;
let llm: RecordingBackend;
let py: RecordingBackend;
let gw: Gateway;
let key: string;

beforeAll(async () => {
  [v1, llm, py] = await Promise.all([startV1Backend(), startOpenAIBackend(), startPythonBackend()]);
  gw = await startGateway({
    config: { publicUrl: 'https://models.example.com', serverlessDomain: 'serving.example.com' },
    deployments: [
      { namespace: 'demo', name: 'iris', modelServer: 'sklearn', url: v1.url },
      { namespace: 'genai', name: 'chat', modelServer: 'llm', url: llm.url },
      { namespace: 'fraud-detection', name: 'scorer', project: 'fraud_detection', type: 'python', url: py.url },
    ],
    keys: [{ name: 'apikey-admin-test', projects: 'demo,genai' }],
  });
  key = gw.keys['apikey-admin-test'];
});

afterAll(async () => {
  await gw?.close();
  await Promise.all([v1, llm, py].map((b) => b?.close()));
});

describe('admin listener', () => {
  test('/healthz is 200', async () => {
    expect((await send(`${gw.adminUrl}/healthz`)).status).toBe(200);
  });

  test('/readyz is 200 once the routes are loaded', async () => {
    expect((await send(`${gw.adminUrl}/readyz`)).status).toBe(200);
  });

  test('the admin port does not serve deployments', async () => {
    const before = v1.requests.length;
    const r = await send(`${gw.adminUrl}/v1/demo/iris/v1/models/iris:predict`, {
      headers: { authorization: `ApiKey ${key}` },
      body: { instances: [[1]] },
    });
    expect([404, 405]).toContain(r.status);
    expect(v1.requests.length).toBe(before);
  });

  test('/metrics counts requests by project, deployment and status, and auth failures by reason', async () => {
    const predict = () =>
      send(`${gw.url}/v1/demo/iris/v1/models/iris:predict`, {
        headers: { authorization: `ApiKey ${key}` },
        body: { instances: [[1]] },
      });
    expect((await predict()).status).toBe(200);
    expect((await predict()).status).toBe(200);
    expect((await send(`${gw.url}/v1/demo/iris/v1/models/iris:predict`, { body: { instances: [[1]] } })).status).toBe(
      401,
    );
    expect(
      (
        await send(`${gw.url}/v1/demo/iris/v1/models/iris:predict`, {
          headers: { authorization: `ApiKey AAAAAAAAAAAAAAAA.${'c'.repeat(40)}` },
          body: {},
        })
      ).status,
    ).toBe(401);
    expect(
      (await send(`${gw.url}/v1/fraud_detection/scorer/x`, { headers: { authorization: `ApiKey ${key}` } })).status,
    ).toBe(403);

    const r = await send(`${gw.adminUrl}/metrics`);
    expect(r.status).toBe(200);
    expect(String(r.headers['content-type'])).toMatch(/^text\/plain/);
    const samples = r.text.split('\n').filter((l) => l && !l.startsWith('#'));

    const served = samples.filter(
      (l) => /project="demo"/.test(l) && /deployment="iris"/.test(l) && /="200"/.test(l) && /_total\{/.test(l),
    );
    expect(served.length, r.text).toBeGreaterThan(0);
    expect(Math.max(...served.map((l) => Number(l.split(' ').at(-1))))).toBeGreaterThanOrEqual(2);

    const authFailures = samples.filter(
      (l) => /auth/i.test(l.split('{')[0]) && /reason="[^"]+"/.test(l) && Number(l.split(' ').at(-1)) > 0,
    );
    const reasons = new Set(authFailures.map((l) => /reason="([^"]+)"/.exec(l)![1]));
    // missing header, unknown key and project not granted are told apart
    expect(reasons.size, r.text).toBeGreaterThanOrEqual(2);
  });

  test('/metrics never carries a key', async () => {
    const r = await send(`${gw.adminUrl}/metrics`);
    expect(r.text).not.toContain(key.split('.')[1]);
  });

  test('a page lists every deployment with its URLs', async () => {
    const r = await eventually(async () => {
      const res = await send(`${gw.adminUrl}/`);
      expect(res.status).toBe(200);
      return res;
    });
    for (const text of [
      'iris',
      'chat',
      'scorer',
      'https://models.example.com/v1/demo/iris/v1/models/iris:predict',
      'https://models.example.com/v1/genai/chat/v1',
      'https://models.example.com/v1/fraud_detection/scorer',
      'iris.demo.serving.example.com',
      'scorer.fraud-detection.serving.example.com',
    ]) {
      expect(r.text, text).toContain(text);
    }
  });
});
