// The whole Kubernetes mode end to end: the real client against the fake API server, the gateway serving the
// ready endpoints of backend Services, and status written back.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import { waitFor } from '../support/wait.js';
import { startKubernetesWith } from '../../src/cli/serve-kubernetes.js';
import { parseConfig } from '../../src/config/load.js';
import type { Servegate } from '../../src/server.js';
import { FakeApiServer } from '../support/fake-apiserver.js';
import { apiKey } from '../support/fixtures.js';
import { keySecretRaw, SDEP_API, sdepRaw, serviceRaw, sliceRaw, type Obj } from '../support/k8s-objects.js';

let api: FakeApiServer;
let gw: Servegate;
const backends: Server[] = [];
const hits: Record<string, number> = {};
let port = 0;
const demoKey = apiKey('apikey-demo', 'demo');
const otherKey = apiKey('apikey-other', 'other');

function backend(host: string, listenPort: number): Promise<number> {
  const s = createServer((req, res) => {
    hits[host] = (hits[host] ?? 0) + 1;
    req.resume();
    req.on('end', () => {
      res.setHeader('content-type', 'application/json');
      res.end(
        JSON.stringify({
          predictions: [host],
          key: req.headers['x-servegate-key'],
          auth: req.headers.authorization ?? null,
        }),
      );
    });
  });
  backends.push(s);
  return new Promise((resolve) => s.listen(listenPort, host, () => resolve((s.address() as AddressInfo).port)));
}

async function call(path: string, key = demoKey.key, body = '{"instances":[[1,2]]}') {
  const r = await request(`http://127.0.0.1:${gw.port}${path}`, {
    method: 'POST',
    headers: { authorization: `ApiKey ${key}`, 'content-type': 'application/json' },
    body,
  });
  const text = await r.body.text();
  return {
    status: r.statusCode,
    headers: r.headers,
    text,
    json: (() => {
      try {
        return JSON.parse(text);
      } catch {
        return undefined;
      }
    })(),
  };
}

const predict = (deployment: string, key?: string) =>
  call(`/v1/demo/${deployment}/v1/models/${deployment}:predict`, key);

function readyCondition(obj: Obj | undefined): Obj | undefined {
  return (obj?.status?.conditions as Obj[] | undefined)?.find((c) => c.type === 'Ready');
}

beforeAll(async () => {
  port = await backend('127.0.0.1', 0);
  await backend('127.0.0.2', port);
  api = await FakeApiServer.start({ bookmarkIntervalMs: 500 });
  api.create(serviceRaw('demo/iris-svc', [{ name: 'http', port: 80, targetPort: 'web' }]));
  api.create(
    sliceRaw(
      'demo/iris-svc-abc',
      'iris-svc',
      [{ name: 'http', port }],
      [
        { ip: '127.0.0.1', ready: true },
        { ip: '127.0.0.2', ready: true },
      ],
    ),
  );
  api.create(sdepRaw('demo/iris', { backend: { service: 'iris-svc', port: 80 } }));
  api.create(keySecretRaw(demoKey.secret));
  api.create(keySecretRaw(otherKey.secret));
  const config = parseConfig(
    {
      publicUrl: 'https://models.example.com',
      kubernetes: { leaderElection: { leaseDurationSeconds: 3, renewDeadlineSeconds: 2, retryPeriodSeconds: 1 } },
    },
    { port: 0, namespace: 'servegate' },
  );
  gw = await startKubernetesWith(api.kubeConfig(), config, {
    port: 0,
    adminPort: 0,
    host: '127.0.0.1',
    logger: (await import('../../src/log.js')).silentLogger,
    namespace: 'servegate',
    identity: 'test-replica',
    processMetrics: false,
    backoff: { initialMs: 50, maxMs: 500 },
  });
});

afterAll(async () => {
  await gw?.close();
  await api?.stop();
  await Promise.all(backends.map((s) => new Promise((r) => s.close(r))));
});

describe('kubernetes mode', () => {
  test('requests reach the ready endpoints of the backend Service, balanced per request, without the client key', async () => {
    for (const k of Object.keys(hits)) delete hits[k];
    for (let i = 0; i < 10; i++) {
      const r = await predict('iris');
      expect(r.status).toBe(200);
      expect(r.json.auth).toBeNull();
      expect(r.json.key).toBe('apikey-demo');
    }
    expect(hits['127.0.0.1']).toBe(5);
    expect(hits['127.0.0.2']).toBe(5);
  });

  test('the controller writes status: URLs, hostname, observedGeneration and Ready=True/Routed', async () => {
    await waitFor(() => {
      const obj = api.get(SDEP_API, 'ServingDeployment', 'demo', 'iris') as Obj;
      expect(readyCondition(obj)).toMatchObject({ status: 'True', reason: 'Routed' });
      expect(obj.status).toMatchObject({
        observedGeneration: 1,
        url: 'https://models.example.com/v1/demo/iris',
        inferenceUrl: 'https://models.example.com/v1/demo/iris/v1/models/iris:predict',
        hostname: 'iris.demo.serving.local',
      });
    });
  });

  test('an endpoint that turns not-ready gets no traffic; none ready → 503 JSON with Retry-After', async () => {
    api.update(
      sliceRaw(
        'demo/iris-svc-abc',
        'iris-svc',
        [{ name: 'http', port }],
        [
          { ip: '127.0.0.1', ready: false },
          { ip: '127.0.0.2', ready: true },
        ],
      ),
    );
    await waitFor(async () => {
      for (const k of Object.keys(hits)) delete hits[k];
      for (let i = 0; i < 4; i++) expect((await predict('iris')).status).toBe(200);
      expect(hits['127.0.0.1']).toBeUndefined();
    });
    api.update(
      sliceRaw('demo/iris-svc-abc', 'iris-svc', [{ name: 'http', port }], [{ ip: '127.0.0.1', ready: false }]),
    );
    await waitFor(async () => {
      const r = await predict('iris');
      expect(r.status).toBe(503);
      expect(r.headers['retry-after']).toBeDefined();
      expect(r.json.error).toMatch(/no ready endpoint/);
    });
    api.update(
      sliceRaw(
        'demo/iris-svc-abc',
        'iris-svc',
        [{ name: 'http', port }],
        [
          { ip: '127.0.0.1', ready: true },
          { ip: '127.0.0.2', ready: true },
        ],
      ),
    );
    await waitFor(async () => expect((await predict('iris')).status).toBe(200));
  });

  test('a new ServingDeployment is served and gets Ready=True; deleting it makes it 404', async () => {
    api.create(serviceRaw('demo/fresh-svc', [{ name: 'http', port: 80 }]));
    api.create(sliceRaw('demo/fresh-svc-1', 'fresh-svc', [{ name: 'http', port }], [{ ip: '127.0.0.1' }]));
    api.create(sdepRaw('demo/fresh', { backend: { service: 'fresh-svc', port: 80 } }));
    await waitFor(async () => expect((await predict('fresh')).status).toBe(200));
    await waitFor(() =>
      expect(readyCondition(api.get(SDEP_API, 'ServingDeployment', 'demo', 'fresh') as Obj)?.status).toBe('True'),
    );
    api.delete(SDEP_API, 'ServingDeployment', 'demo', 'fresh');
    await waitFor(async () => expect((await predict('fresh')).status).toBe(404));
  });

  test('backend.url is refused in the cluster (InvalidSpec) and never routed; a missing Service is BackendNotFound', async () => {
    api.create(sdepRaw('demo/sneaky', { backend: { url: 'http://127.0.0.1:9' } }));
    api.create(sdepRaw('demo/orphan', { backend: { service: 'nowhere', port: 80 } }));
    await waitFor(() => {
      expect(readyCondition(api.get(SDEP_API, 'ServingDeployment', 'demo', 'sneaky') as Obj)).toMatchObject({
        status: 'False',
        reason: 'InvalidSpec',
      });
      expect(readyCondition(api.get(SDEP_API, 'ServingDeployment', 'demo', 'orphan') as Obj)).toMatchObject({
        status: 'False',
        reason: 'BackendNotFound',
      });
    });
    expect((await predict('sneaky')).status).toBe(404);
    expect((await predict('orphan')).status).toBe(404);
    expect((await predict('iris')).status).toBe(200);
  });

  test('keys: another project gets 403; a deleted key Secret is refused without a restart', async () => {
    expect((await predict('iris', otherKey.key)).status).toBe(403);
    const temp = apiKey('apikey-temp', 'demo');
    api.create(keySecretRaw(temp.secret));
    await waitFor(async () => expect((await predict('iris', temp.key)).status).toBe(200));
    api.delete('v1', 'Secret', 'servegate', 'apikey-temp');
    await waitFor(async () => expect((await predict('iris', temp.key)).status).toBe(401));
  });

  test('with the API server down the gateway keeps serving its last routes and readiness reports the staleness', async () => {
    await api.down();
    try {
      await waitFor(
        async () => {
          const r = await request(`http://127.0.0.1:${gw.adminPort}/readyz`);
          const body = (await r.body.json()) as { ready: boolean; stalenessSeconds: number };
          expect(r.statusCode).toBe(200);
          expect(body.stalenessSeconds).toBeGreaterThan(0);
        },
        'readiness to report the stale source',
        8000,
      );
      expect((await predict('iris')).status).toBe(200);
    } finally {
      await api.up();
    }
    api.create(sdepRaw('demo/after', { backend: { service: 'iris-svc', port: 80 } }));
    await waitFor(
      async () => expect((await predict('after')).status).toBe(200),
      'the deployment created after the outage',
      8000,
    );
  });
});
