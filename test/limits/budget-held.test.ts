// A budget that runs out while a request is held for scale from zero (SPEC §10, §14: the check is made before the body
// is forwarded; a hold lasts up to holdSeconds, an hour at most): when an endpoint is ready, the held request is
// refused with 429 insufficient_quota and never reaches the backend. Before, it was checked once on arrival and went
// on. Found by a hostile review.
import { afterAll, beforeAll, expect, test } from '@jest/globals';
import { request } from 'undici';
import { startKubernetesWith } from '../../src/cli/serve-kubernetes.js';
import { parseConfig } from '../../src/config/load.js';
import { silentLogger } from '../../src/log.js';
import type { Servegate } from '../../src/server.js';
import { startOpenAIBackend, type OpenAIBackend } from '../support/backends.js';
import { FakeApiServer } from '../support/fake-apiserver.js';
import { apiKey } from '../support/fixtures.js';
import { keySecretRaw, sdepRaw, serviceRaw, sliceRaw } from '../support/k8s-objects.js';
import { waitFor } from '../support/wait.js';

let api: FakeApiServer;
let gw: Servegate;
let warm: OpenAIBackend;
let cold: OpenAIBackend;
const key = apiKey('apikey-budget', 'demo');
key.secret.data.budgetTokens = '1';

function endpoint(name: string, port: number, ready: boolean, update = false): void {
  const slice = sliceRaw(`demo/${name}-1`, name, [{ name: 'http', port }], [{ ip: '127.0.0.1', ready }]);
  if (update) api.update(slice);
  else api.create(slice);
}

beforeAll(async () => {
  [warm, cold] = await Promise.all([startOpenAIBackend(), startOpenAIBackend()]);
  api = await FakeApiServer.start({ bookmarkIntervalMs: 500 });
  api.create(keySecretRaw(key.secret));
  for (const [name, b] of [
    ['warm', warm],
    ['cold', cold],
  ] as const) {
    const port = Number(new URL(b.url).port);
    api.create(serviceRaw(`demo/${name}`, [{ name: 'http', port }]));
    endpoint(name, port, name === 'warm');
    api.create(
      sdepRaw(`demo/${name}`, {
        modelServer: 'llm',
        backend: { service: name, port },
        ...(name === 'cold' ? { scaleFromZero: { holdSeconds: 20 } } : {}),
      }),
    );
  }
  gw = await startKubernetesWith(api.kubeConfig(), parseConfig({}, { port: 0, namespace: 'servegate' }), {
    port: 0,
    adminPort: 0,
    host: '127.0.0.1',
    logger: silentLogger,
    namespace: 'servegate',
    identity: 'budget-held-test',
    processMetrics: false,
    backoff: { initialMs: 50, maxMs: 500 },
  });
}, 30_000);

afterAll(async () => {
  await gw?.close();
  await api?.stop();
  await Promise.all([warm?.close(), cold?.close()]);
});

const chat = (deployment: string) =>
  request(`http://127.0.0.1:${gw.port}/v1/demo/${deployment}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `ApiKey ${key.key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: deployment, messages: [{ role: 'user', content: 'hi' }] }),
  }).then(async (r) => ({ status: r.statusCode, headers: r.headers, json: (await r.body.json()) as any }));

test('a request held while its budget ran out is refused when an endpoint is ready', async () => {
  const held = chat('cold');
  await waitFor(
    async () =>
      (await (await request(`http://127.0.0.1:${gw.adminPort}/metrics`)).body.text()).includes(
        'servegate_pending_requests{project="demo",deployment="cold"} 1',
      ),
    'the request to be held',
  );
  // Meanwhile the key's budget runs out on another deployment.
  expect((await chat('warm')).status).toBe(200);
  expect((await chat('warm')).status).toBe(429);
  endpoint('cold', Number(new URL(cold.url).port), true, true);
  const r = await held;
  expect(r.status).toBe(429);
  expect(r.json.error).toMatchObject({ code: 'insufficient_quota' });
  expect(r.headers['x-servegate-budget-remaining-tokens']).toBe('0');
  expect(cold.requests).toHaveLength(0);
}, 30_000);
