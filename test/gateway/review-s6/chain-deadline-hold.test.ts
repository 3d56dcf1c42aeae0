// Review of the request path's reshaping (2026-11-27, R1): the chain's deadline rides on each try's UpstreamCall and a
// wait moves the previous call's deadline on. Pinned for the scale-from-zero hold (SPEC §10; docs/llm.md: "A fallback
// held for scale from zero does not spend the deadline while it is held"): a fallback held longer than the first
// deployment's whole timeoutSeconds is still answered once an endpoint is ready, not 504.
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
let failing: RecordingBackend;
let cold: RecordingBackend;
const key = apiKey('apikey-hold-deadline', 'demo');

const slice = (name: string, port: number, ready: boolean) =>
  sliceRaw(`demo/${name}-1`, name, [{ name: 'http', port }], [{ ip: '127.0.0.1', ready }]);

beforeAll(async () => {
  failing = await new RecordingBackend((_req, res: ServerResponse) => {
    res.writeHead(503, { 'content-type': 'application/json' });
    res.end('{"error":{"message":"overloaded","type":"server_error"}}');
  }).listen();
  // Answers in 1.2 s: longer than undici's coarse clock takes to fire a headers timeout of nothing left, well within
  // the 2 s left when the hold began.
  cold = await new RecordingBackend((_req, res: ServerResponse) => {
    setTimeout(() => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{"object":"chat.completion","choices":[]}');
    }, 1200).unref();
  }).listen();
  api = await FakeApiServer.start({ bookmarkIntervalMs: 500 });
  api.create(keySecretRaw(key.secret));
  for (const [name, b] of [
    ['first', failing],
    ['cold', cold],
  ] as const) {
    api.create(serviceRaw(`demo/${name}`, [{ name: 'http', port: b.port }]));
    api.create(slice(name, b.port, name === 'first'));
  }
  api.create(
    sdepRaw('demo/first', {
      modelServer: 'llm',
      backend: { service: 'first', port: failing.port },
      timeoutSeconds: 2,
      fallbacks: ['cold'],
    }),
  );
  api.create(
    sdepRaw('demo/cold', {
      modelServer: 'llm',
      backend: { service: 'cold', port: cold.port },
      scaleFromZero: { holdSeconds: 20 },
    }),
  );
  gw = await startKubernetesWith(api.kubeConfig(), parseConfig({}, { port: 0, namespace: 'servegate' }), {
    port: 0,
    adminPort: 0,
    host: '127.0.0.1',
    logger: silentLogger,
    namespace: 'servegate',
    identity: 'review-s6-hold-deadline',
    processMetrics: false,
    backoff: { initialMs: 50, maxMs: 500 },
  });
}, 30_000);

afterAll(async () => {
  await gw?.close();
  await api?.stop();
  await Promise.all([failing?.close(), cold?.close()]);
});

const metrics = async () => (await (await request(`http://127.0.0.1:${gw.adminPort}/metrics`)).body.text()) as string;

test('a fallback held past the first deployment’s timeoutSeconds is answered once an endpoint is ready', async () => {
  await waitFor(async () => {
    const d = JSON.parse(await (await request(`http://127.0.0.1:${gw.adminPort}/deployments`)).body.text());
    return ['first', 'cold'].every((n) => d.deployments.some((x: { name: string }) => x.name === n));
  }, 'both deployments to be routed');
  const t0 = performance.now();
  const answer = request(`http://127.0.0.1:${gw.port}/v1/demo/first/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `ApiKey ${key.key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'first', messages: [{ role: 'user', content: 'hi' }] }),
  }).then(async (r) => ({ status: r.statusCode, text: await r.body.text() }));
  await waitFor(
    async () => (await metrics()).includes('servegate_pending_requests{project="demo",deployment="cold"} 1'),
    'the fallback to be held',
  );
  // Stays: a hold past the chain's 2 s is the stimulus (nothing to wait on but the time itself).
  await new Promise((r) => setTimeout(r, 2500 - (performance.now() - t0)));
  expect(cold.requests).toHaveLength(0);
  api.update(slice('cold', cold.port, true));
  const r = await answer;
  expect(failing.requests).toHaveLength(1);
  expect([r.status, r.text.slice(0, 200)]).toEqual([200, '{"object":"chat.completion","choices":[]}']);
  expect(performance.now() - t0).toBeGreaterThan(3500);
}, 30_000);
