// Review of the request path's reshaping (2026-11-27, R1), deadlines across a fallback chain: the chain's one deadline
// is the first deployment's timeoutSeconds (docs/llm.md: "a fallback's own timeoutSeconds does not extend it"), and
// the 504 says so. It was set by the first try made (next-target.ts deadlineFor): when the first deployment had no
// ready endpoint (and no hold), the first try was the fallback's, so the fallback's own timeoutSeconds became the
// chain's, 30 s here instead of the first deployment's 1 s, while a 504 would still name the 1 s.
import type { ServerResponse } from 'node:http';
import { afterAll, beforeAll, expect, test } from '@jest/globals';
import { request } from 'undici';
import { startKubernetesWith } from '../../../src/cli/serve-kubernetes.js';
import { parseConfig } from '../../../src/config/load.js';
import { silentLogger } from '../../../src/log.js';
import type { Servegate } from '../../../src/server.js';
import { RecordingBackend } from '../../support/backends.js';
import { FakeApiServer } from '../../support/fake-apiserver.js';
import { apiKey } from '../../support/fixtures.js';
import { keySecretRaw, sdepRaw, serviceRaw, sliceRaw } from '../../support/k8s-objects.js';
import { waitFor } from '../../support/wait.js';

let api: FakeApiServer;
let gw: Servegate;
let down: RecordingBackend;
let slow: RecordingBackend;
const key = apiKey('apikey-deadline', 'demo');

beforeAll(async () => {
  down = await new RecordingBackend((_req, res: ServerResponse) => void res.end('{}')).listen();
  // Answers after 4 s: past the chain's 1 s, well within the fallback's own 30 s.
  slow = await new RecordingBackend((_req, res: ServerResponse) => {
    setTimeout(() => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{"object":"chat.completion","choices":[]}');
    }, 4000).unref();
  }).listen();
  api = await FakeApiServer.start({ bookmarkIntervalMs: 500 });
  api.create(keySecretRaw(key.secret));
  for (const [name, b, ready] of [
    ['first', down, false],
    ['slow', slow, true],
  ] as const) {
    api.create(serviceRaw(`demo/${name}`, [{ name: 'http', port: b.port }]));
    api.create(sliceRaw(`demo/${name}-1`, name, [{ name: 'http', port: b.port }], [{ ip: '127.0.0.1', ready }]));
  }
  api.create(
    sdepRaw('demo/first', {
      modelServer: 'llm',
      backend: { service: 'first', port: down.port },
      timeoutSeconds: 1,
      fallbacks: ['slow'],
    }),
  );
  api.create(
    sdepRaw('demo/slow', { modelServer: 'llm', backend: { service: 'slow', port: slow.port }, timeoutSeconds: 30 }),
  );
  gw = await startKubernetesWith(api.kubeConfig(), parseConfig({}, { port: 0, namespace: 'servegate' }), {
    port: 0,
    adminPort: 0,
    host: '127.0.0.1',
    logger: silentLogger,
    namespace: 'servegate',
    identity: 'review-s6-deadline',
    processMetrics: false,
    backoff: { initialMs: 50, maxMs: 500 },
  });
}, 30_000);

afterAll(async () => {
  await gw?.close();
  await api?.stop();
  await Promise.all([down?.close(), slow?.close()]);
});

test('the first deployment has no ready endpoint: its fallback still gets only the first one’s timeoutSeconds', async () => {
  await waitFor(async () => {
    const d = JSON.parse(await (await request(`http://127.0.0.1:${gw.adminPort}/deployments`)).body.text());
    return ['first', 'slow'].every((n) => d.deployments.some((x: { name: string }) => x.name === n));
  }, 'both deployments to be routed');
  const t0 = performance.now();
  const r = await request(`http://127.0.0.1:${gw.port}/v1/demo/first/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `ApiKey ${key.key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'first', messages: [{ role: 'user', content: 'hi' }] }),
  });
  const text = await r.body.text();
  const ms = performance.now() - t0;
  expect(slow.requests).toHaveLength(1);
  expect(down.requests).toHaveLength(0);
  expect([r.statusCode, text.slice(0, 300)]).toEqual([504, expect.stringContaining("the request's 1s")]);
  // undici fires a headers timeout of a second or more on a coarse clock (about half a second a tick).
  expect(ms).toBeLessThan(3000);
}, 30_000);
