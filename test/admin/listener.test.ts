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

  test('the admin port does not serve deployments: a POST is 405 naming GET and HEAD, a GET is 404', async () => {
    const before = v1.requests.length;
    const path = `${gw.adminUrl}/v1/demo/iris/v1/models/iris:predict`;
    const r = await send(path, { headers: { authorization: `ApiKey ${key}` }, body: { instances: [[1]] } });
    expect(r.status).toBe(405);
    expect(r.headers.allow).toBe('GET, HEAD');
    const g = await send(path, { headers: { authorization: `ApiKey ${key}` } });
    expect(g.status).toBe(404);
    expect(g.json().error).toMatch(/^no admin page at \/v1\/demo\/iris\/v1\/models\/iris:predict; try \/, \/healthz/);
    expect(v1.requests.length).toBe(before);
  });

  test('paths are exact (no case or trailing-slash aliases); HEAD works; answers are never cached', async () => {
    for (const path of ['/Healthz', '/healthz/', '/metrics/x']) {
      expect((await send(`${gw.adminUrl}${path}`)).status, path).toBe(404);
    }
    const head = await send(`${gw.adminUrl}/healthz`, { method: 'HEAD' });
    expect(head.status).toBe(200);
    expect(head.body.length).toBe(0);
    for (const path of ['/', '/healthz', '/readyz', '/metrics', '/deployments', '/api/stats', '/nope']) {
      const r = await send(`${gw.adminUrl}${path}`);
      expect(r.headers['cache-control'], path).toBe('no-store');
      expect(r.headers['x-powered-by'], path).toBeUndefined();
      expect(r.headers.etag, path).toBeUndefined();
    }
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
