// SPEC §10 end to end: the real client against the fake API server, backends that record what reached them.
// KServe set-ups (serverless ExternalName predictors, transformers, V2, the Hugging Face runtime, the IS Ready
// condition), and the ServingDeployment fields protocol, backend.path, canary and scaleFromZero.
import { createServer, type IncomingMessage, type Server } from 'node:http';
import net, { type AddressInfo } from 'node:net';
import { Agent, request } from 'undici';
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import { waitFor } from '../support/wait.js';
import { startKubernetesWith } from '../../src/cli/serve-kubernetes.js';
import { parseConfig } from '../../src/config/load.js';
import { silentLogger } from '../../src/log.js';
import { Deployment } from '../../src/client/index.js';
import type { Servegate } from '../../src/server.js';
import { FakeApiServer } from '../support/fake-apiserver.js';
import { apiKey } from '../support/fixtures.js';
import { ISVC_API, keySecretRaw, SDEP_API, sdepRaw, serviceRaw, sliceRaw, type Obj } from '../support/k8s-objects.js';

interface Seen {
  name: string;
  method: string;
  path: string;
  host: string;
  body: string;
  at: number;
}

let api: FakeApiServer;
let gw: Servegate;
const servers: Server[] = [];
const seen: Seen[] = [];
const key = apiKey('apikey-ks', '*');
const agent = new Agent({ connections: 64 });

/** A backend on 127.0.0.1 that records every request and answers with its own name. */
async function backend(name: string, delayMs = 0): Promise<number> {
  const s = createServer((req: IncomingMessage, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      seen.push({
        name,
        method: req.method ?? '',
        path: req.url ?? '',
        host: req.headers.host ?? '',
        body: Buffer.concat(chunks).toString(),
        at: Date.now(),
      });
      setTimeout(() => {
        res.setHeader('content-type', 'application/json');
        res.end(JSON.stringify({ from: name, path: req.url }));
      }, delayMs);
    });
  });
  servers.push(s);
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', () => r()));
  return (s.address() as AddressInfo).port;
}

async function call(path: string, opts: { method?: string; body?: string; signal?: AbortSignal } = {}) {
  const r = await request(`http://127.0.0.1:${gw.port}${path}`, {
    method: (opts.method ?? (opts.body !== undefined ? 'POST' : 'GET')) as 'GET',
    headers: { authorization: `ApiKey ${key.key}`, 'content-type': 'application/json' },
    body: opts.body,
    dispatcher: agent,
    signal: opts.signal,
  });
  const text = await r.body.text();
  let json: any;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: r.statusCode, headers: r.headers, json, text };
}

const seenBy = (name: string) => seen.filter((s) => s.name === name);

/** Two "pods" on one port: 127.0.0.1 and 127.0.0.2, each answering with its address. */
async function twoPods(): Promise<number> {
  const pod = (ip: string) =>
    createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        res.setHeader('content-type', 'application/json');
        res.end(JSON.stringify({ from: ip }));
      });
    });
  const a = pod('127.0.0.1');
  servers.push(a);
  await new Promise<void>((r) => a.listen(0, '127.0.0.1', () => r()));
  const port = (a.address() as AddressInfo).port;
  const b = pod('127.0.0.2');
  servers.push(b);
  await new Promise<void>((r) => b.listen(port, '127.0.0.2', () => r()));
  return port;
}

function isvc(ref: string, spec: Obj, ready?: { status: string; reason?: string; message?: string }, extra: Obj = {}) {
  const [namespace, name] = ref.split('/');
  return {
    apiVersion: ISVC_API,
    kind: 'InferenceService',
    metadata: { name, namespace, ...extra },
    spec,
    ...(ready ? { status: { conditions: [{ type: 'Ready', ...ready }] } } : {}),
  };
}

/** A ClusterIP Service on `port` with one EndpointSlice listing 127.0.0.1 (ready or not). */
function serviceWithEndpoint(ref: string, port: number, ready = true): void {
  const [ns, name] = ref.split('/');
  api.create(serviceRaw(ref, [{ name: 'http', port }]));
  api.create(sliceRaw(`${ns}/${name}-1`, name, [{ name: 'http', port }], [{ ip: '127.0.0.1', ready }]));
}

function setEndpointReady(ref: string, port: number, ready: boolean): void {
  const [ns, name] = ref.split('/');
  api.update(sliceRaw(`${ns}/${name}-1`, name, [{ name: 'http', port }], [{ ip: '127.0.0.1', ready }]));
}

const deploymentsJson = async () => {
  const r = await request(`http://127.0.0.1:${gw.adminPort}/deployments`);
  return (await r.body.json()) as { deployments: Array<Record<string, any>> };
};
const statusOf = async (id: string) =>
  (await deploymentsJson()).deployments.find((d) => `${d.namespace}/${d.name}` === id);
const metrics = async () => (await request(`http://127.0.0.1:${gw.adminPort}/metrics`)).body.text();

function readyCondition(ref: string): Obj | undefined {
  const [ns, name] = ref.split('/');
  const obj = api.get(SDEP_API, 'ServingDeployment', ns, name) as Obj | undefined;
  return (obj?.status?.conditions as Obj[] | undefined)?.find((c) => c.type === 'Ready');
}

let ports: Record<string, number>;

beforeAll(async () => {
  ports = {
    knative: await backend('knative'),
    transformer: await backend('transformer'),
    predictor: await backend('predictor'),
    v2: await backend('v2'),
    hf: await backend('hf'),
    primary: await backend('primary'),
    canary: await backend('canary'),
    cold: await backend('cold'),
    slow: await backend('slow', 700),
  };
  api = await FakeApiServer.start({ bookmarkIntervalMs: 500 });
  api.create(keySecretRaw(key.secret));

  // Serverless: Knative makes the predictor Service an ExternalName pointing at its gateway.
  api.create({
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name: 'sless-predictor', namespace: 'kserve-test' },
    spec: { type: 'ExternalName', externalName: 'localhost', ports: [{ name: 'http', port: ports.knative }] },
  });
  api.create(
    isvc('kserve-test/sless', { predictor: { model: { modelFormat: { name: 'sklearn' } } } }, { status: 'True' }),
  );

  // Raw mode with a transformer: traffic goes to the transformer, never straight to the predictor.
  serviceWithEndpoint('kserve-test/tx-transformer', ports.transformer);
  serviceWithEndpoint('kserve-test/tx-predictor', ports.predictor);
  api.create(
    isvc(
      'kserve-test/tx',
      { predictor: { model: { modelFormat: { name: 'sklearn' } } }, transformer: { containers: [{ image: 't' }] } },
      { status: 'True' },
    ),
  );

  // V2 (MLServer via protocolVersion), and the Hugging Face runtime (OpenAI routes under /openai).
  serviceWithEndpoint('kserve-test/mls-predictor', ports.v2);
  api.create(
    isvc(
      'kserve-test/mls',
      { predictor: { model: { modelFormat: { name: 'sklearn' }, protocolVersion: 'v2' } } },
      { status: 'True' },
    ),
  );
  serviceWithEndpoint('kserve-test/llama-predictor', ports.hf);
  api.create(
    isvc('kserve-test/llama', { predictor: { model: { modelFormat: { name: 'huggingface' } } } }, { status: 'True' }),
  );

  // An LLM InferenceService with two ready endpoints in its EndpointSlice (two pods: 127.0.0.1 and 127.0.0.2, one port).
  const fleetPort = await twoPods();
  api.create(serviceRaw('kserve-test/fleet-predictor', [{ name: 'http', port: fleetPort }]));
  api.create(
    sliceRaw(
      'kserve-test/fleet-predictor-1',
      'fleet-predictor',
      [{ name: 'http', port: fleetPort }],
      [
        { ip: '127.0.0.1', ready: true },
        { ip: '127.0.0.2', ready: true },
      ],
    ),
  );
  api.create(
    isvc('kserve-test/fleet', { predictor: { model: { modelFormat: { name: 'huggingface' } } } }, { status: 'True' }),
  );

  // An InferenceService KServe reports not ready.
  serviceWithEndpoint('kserve-test/broken-predictor', ports.predictor);
  api.create(
    isvc(
      'kserve-test/broken',
      { predictor: { model: { modelFormat: { name: 'sklearn' } } } },
      { status: 'False', reason: 'RevisionFailed', message: 'image pull backoff' },
    ),
  );

  // ServingDeployments: V2 with a path prefix, a canary, scale from zero, and no ready endpoint without a hold.
  serviceWithEndpoint('demo/triton', ports.v2);
  api.create(
    sdepRaw('demo/digits', {
      modelServer: 'python',
      protocol: 'v2',
      backend: { service: 'triton', port: ports.v2, path: '/serving' },
    }),
  );
  serviceWithEndpoint('demo/primary', ports.primary);
  serviceWithEndpoint('demo/canary', ports.canary);
  api.create(
    sdepRaw('demo/split', {
      type: 'python',
      modelServer: undefined,
      backend: { service: 'primary', port: ports.primary },
      canary: { backend: { service: 'canary', port: ports.canary }, percent: 30 },
    }),
  );
  // Python deployments whose Service has no ready endpoint yet: three hold (one with a 1 s timeout), one does not.
  const scaledDown = (name: string, port: number, spec: Obj) => {
    serviceWithEndpoint(`demo/${name}`, port, false);
    api.create(
      sdepRaw(`demo/${name}`, { type: 'python', modelServer: undefined, backend: { service: name, port }, ...spec }),
    );
  };
  scaledDown('cold', ports.cold, { scaleFromZero: { holdSeconds: 10 } });
  scaledDown('slow', ports.slow, { scaleFromZero: { holdSeconds: 10 }, timeoutSeconds: 1 });
  scaledDown('brief', ports.cold, { scaleFromZero: { holdSeconds: 1 } });
  scaledDown('down', ports.cold, {});
  scaledDown('unsent', ports.cold, { scaleFromZero: { holdSeconds: 20 } });

  const config = parseConfig(
    {
      publicUrl: 'https://models.example.com',
      kubernetes: { kserve: { enabled: true } },
      limits: { scaleFromZeroMaxQueue: 3, scaleFromZeroMaxQueueBytes: 4096, requestBodyIdleTimeoutSeconds: 2 },
    },
    { port: 0, namespace: 'servegate' },
  );
  gw = await startKubernetesWith(api.kubeConfig(), config, {
    port: 0,
    adminPort: 0,
    host: '127.0.0.1',
    logger: silentLogger,
    namespace: 'servegate',
    identity: 'kserve-test',
    processMetrics: false,
    backoff: { initialMs: 50, maxMs: 500 },
  });
});

afterAll(async () => {
  await gw?.close();
  await api?.stop();
  await agent.close();
  await Promise.all(servers.map((s) => new Promise((r) => s.close(r))));
});

const predictBody = '{"instances":[[1,2]]}';

describe('KServe InferenceServices', () => {
  test("serverless: an ExternalName predictor is reached on its external name and port, with Knative's Host", async () => {
    const before = seenBy('knative').length;
    const r = await call('/v1/kserve-test/sless/v1/models/sless:predict', { body: predictBody });
    expect(r.status).toBe(200);
    expect(r.json.from).toBe('knative');
    const got = seenBy('knative').slice(before);
    expect(got).toHaveLength(1);
    expect(got[0]).toMatchObject({
      path: '/v1/models/sless:predict',
      host: 'sless-predictor.kserve-test.svc.cluster.local',
      body: predictBody,
    });
    expect(await statusOf('kserve-test/sless')).toMatchObject({ ready: true, reason: 'Routed' });
  });

  test('a transformer is what the request reaches, not the predictor', async () => {
    const before = { t: seenBy('transformer').length, p: seenBy('predictor').length };
    const r = await call('/v1/kserve-test/tx/v1/models/tx:predict', { body: predictBody });
    expect(r.status).toBe(200);
    expect(r.json.from).toBe('transformer');
    expect(seenBy('transformer').length - before.t).toBe(1);
    expect(seenBy('predictor').length - before.p).toBe(0);
  });

  test('protocolVersion v2: the Open Inference Protocol routes are served, V1 verbs are refused naming the V2 ones', async () => {
    const ok = await call('/v1/kserve-test/mls/v2/models/mls/infer', {
      body: '{"inputs":[{"name":"x","shape":[1,2],"datatype":"FP32","data":[1,2]}]}',
    });
    expect(ok.status).toBe(200);
    expect(ok.json.path).toBe('/v2/models/mls/infer');
    for (const path of ['/v2/models/mls', '/v2/models/mls/ready', '/v2/health/live', '/v2/health/ready']) {
      const r = await call(`/v1/kserve-test/mls${path}`);
      expect([path, r.status]).toEqual([path, 200]);
      expect(r.json.path).toBe(path);
    }
    const noInputs = await call('/v1/kserve-test/mls/v2/models/mls/infer', { body: '{"instances":[[1]]}' });
    expect(noInputs.status).toBe(400);
    expect(noInputs.json.error).toMatch(/"inputs" array/);
    const v1 = await call('/v1/kserve-test/mls/v1/models/mls:predict', { body: predictBody });
    expect(v1.status).toBe(404);
    expect(v1.json.error).toContain('POST /v2/models/mls/infer');
    const other = await call('/v1/kserve-test/mls/v2/models/other/infer', { body: '{"inputs":[]}' });
    expect(other.status).toBe(404);
    expect(other.json.error).toContain('model "other" is not served here');
    const get = await call('/v1/kserve-test/mls/v2/models/mls/infer');
    expect(get.status).toBe(405);
    expect(get.headers.allow).toBe('POST');
  });

  test('the Hugging Face runtime: /v1/chat/completions is forwarded under /openai', async () => {
    const r = await call('/v1/kserve-test/llama/v1/chat/completions?x=1', {
      body: '{"model":"llama","messages":[{"role":"user","content":"hi"}]}',
    });
    expect(r.status).toBe(200);
    expect(r.json).toEqual({ from: 'hf', path: '/openai/v1/chat/completions?x=1' });
    // The one OpenAI base URL (SPEC §9) puts the prefix there too.
    const b = await call('/openai/v1/chat/completions', {
      body: '{"model":"kserve-test/llama","messages":[{"role":"user","content":"hi"}]}',
    });
    expect(b.status).toBe(200);
    expect(b.json.path).toBe('/openai/v1/chat/completions');
  });

  test('an InferenceService whose Ready condition is False: 503 with Retry-After, the backend never reached, and /deployments says why', async () => {
    const before = seenBy('predictor').length;
    const r = await call('/v1/kserve-test/broken/v1/models/broken:predict', { body: predictBody });
    expect(r.status).toBe(503);
    expect(r.headers['retry-after']).toBe('5');
    expect(r.json.error).toContain('RevisionFailed: image pull backoff');
    expect(seenBy('predictor').length).toBe(before);
    expect(await statusOf('kserve-test/broken')).toMatchObject({
      ready: false,
      reason: 'InferenceServiceNotReady',
    });
    // KServe reports it ready: served at once.
    const obj = api.get(ISVC_API, 'InferenceService', 'kserve-test', 'broken') as Obj;
    api.update({ ...obj, status: { conditions: [{ type: 'Ready', status: 'True' }] } });
    await waitFor(async () =>
      expect((await call('/v1/kserve-test/broken/v1/models/broken:predict', { body: predictBody })).status).toBe(200),
    );
  });
});

describe('ServingDeployment: protocol v2 and backend.path', () => {
  test('V2 routes with the path prefix before the forwarded path; status carries the V2 inference URL', async () => {
    const r = await call('/v1/demo/digits/v2/models/digits/infer', { body: '{"inputs":[]}' });
    expect(r.status).toBe(200);
    expect(r.json.path).toBe('/serving/v2/models/digits/infer');
    const legacy = await request(`http://127.0.0.1:${gw.port}/v2/health/ready`, {
      headers: { authorization: `ApiKey ${key.key}`, host: 'digits.demo.serving.local' },
    });
    expect(legacy.statusCode).toBe(200);
    expect(((await legacy.body.json()) as { path: string }).path).toBe('/serving/v2/health/ready');
    await waitFor(() => {
      const obj = api.get(SDEP_API, 'ServingDeployment', 'demo', 'digits') as Obj;
      expect(obj.status?.inferenceUrl).toBe('https://models.example.com/v1/demo/digits/v2/models/digits/infer');
    });
  });
});

describe('the client library with protocol v2', () => {
  test('infer() posts to the V2 inference URL; predict() refuses before sending', async () => {
    const d = new Deployment({
      gatewayUrl: `http://127.0.0.1:${gw.port}`,
      project: 'demo',
      deployment: 'digits',
      modelServer: 'python',
      protocol: 'v2',
      apiKey: key.key,
    });
    expect(d.getInferenceUrl()).toBe(`http://127.0.0.1:${gw.port}/v1/demo/digits/v2/models/digits/infer`);
    expect(await d.infer({ inputs: [] })).toEqual({ from: 'v2', path: '/serving/v2/models/digits/infer' });
    await expect(d.predict({ instances: [] })).rejects.toThrow(/use infer\(\)/);
  });
});

describe('ServingDeployment: canary', () => {
  test('30 % of 10,000 requests go to the canary (within ±2 %), every answer says which variant, metrics carry the variant', async () => {
    const before = { p: seenBy('primary').length, c: seenBy('canary').length };
    const variants: Record<string, number> = {};
    let next = 0;
    const worker = async () => {
      while (next < 10_000) {
        next++;
        const r = await request(`http://127.0.0.1:${gw.port}/v1/demo/split/x`, {
          headers: { authorization: `ApiKey ${key.key}` },
          dispatcher: agent,
        });
        const body = (await r.body.json()) as { from: string };
        const v = String(r.headers['x-servegate-variant']);
        expect(body.from).toBe(v);
        variants[v] = (variants[v] ?? 0) + 1;
      }
    };
    await Promise.all(Array.from({ length: 32 }, worker));
    const total = variants.primary + variants.canary;
    expect(total).toBe(10_000);
    expect(Math.abs(variants.canary / total - 0.3)).toBeLessThanOrEqual(0.02);
    expect(seenBy('canary').length - before.c).toBe(variants.canary);
    expect(seenBy('primary').length - before.p).toBe(variants.primary);
    const text = await metrics();
    expect(text).toMatch(
      new RegExp(
        `servegate_requests_total\\{project="demo",deployment="split",status="200",variant="canary"\\} ${variants.canary}\\n`,
      ),
    );
    expect(text).toContain(
      'servegate_request_duration_seconds_count{project="demo",deployment="split",variant="primary"}',
    );
    // Deployments without a canary keep their series without the label.
    expect(text).toMatch(/servegate_requests_total\{project="kserve-test",deployment="tx",status="200"\} \d+/);
  }, 60_000);

  test.each([
    [0, 'primary'],
    [100, 'canary'],
  ])('percent %i is exact: every request goes to the %s', async (percent, only) => {
    const obj = api.get(SDEP_API, 'ServingDeployment', 'demo', 'split') as Obj;
    api.update({ ...obj, spec: { ...obj.spec, canary: { ...obj.spec.canary, percent } } });
    await waitFor(async () => expect((await call('/v1/demo/split/x')).headers['x-servegate-variant']).toBe(only));
    const got = new Set<string>();
    for (let i = 0; i < 200; i++) got.add(String((await call('/v1/demo/split/x')).headers['x-servegate-variant']));
    expect([...got]).toEqual([only]);
  });

  test('a canary with no ready endpoint sends its share to the primary', async () => {
    const obj = api.get(SDEP_API, 'ServingDeployment', 'demo', 'split') as Obj;
    api.update({ ...obj, spec: { ...obj.spec, canary: { ...obj.spec.canary, percent: 50 } } });
    setEndpointReady('demo/canary', ports.canary, false);
    await waitFor(async () => {
      const got = new Set<string>();
      for (let i = 0; i < 20; i++) got.add((await call('/v1/demo/split/x')).json.from);
      expect([...got]).toEqual(['primary']);
    });
    setEndpointReady('demo/canary', ports.canary, true);
  });
});

describe('InferenceService with several ready endpoints (SPEC §12)', () => {
  const ask = async (tenant: string) => {
    const r = await call('/v1/kserve-test/fleet/v1/chat/completions', {
      body: JSON.stringify({
        model: 'fleet',
        messages: [
          { role: 'system', content: `You answer for ${tenant}. `.repeat(40) },
          { role: 'user', content: 'q' },
        ],
      }),
    });
    expect(r.status).toBe(200);
    return r.json.from as string;
  };

  test('requests sharing a prompt prefix go to one pod; different prefixes use both', async () => {
    await waitFor(async () => expect((await statusOf('kserve-test/fleet'))?.endpoints).toHaveLength(2));
    for (const tenant of ['a', 'b', 'c']) {
      const first = await ask(tenant);
      for (let i = 0; i < 4; i++) expect(await ask(tenant)).toBe(first);
    }
    const pods = new Set<string>();
    for (let i = 0; i < 30; i++) pods.add(await ask(`tenant-${i}`));
    expect([...pods].sort()).toEqual(['127.0.0.1', '127.0.0.2']);
    expect((await statusOf('kserve-test/fleet'))?.balancing).toBe('llm');
  });
});

describe('ServingDeployment: scale from zero', () => {
  test('status: Ready=True ScaledToZero when it holds; Ready=False NoReadyEndpoints when it does not', async () => {
    await waitFor(() => {
      expect(readyCondition('demo/cold')).toMatchObject({ status: 'True', reason: 'ScaledToZero' });
      expect(readyCondition('demo/down')).toMatchObject({ status: 'False', reason: 'NoReadyEndpoints' });
    });
    const down = await call('/v1/demo/down/x');
    expect(down.status).toBe(503);
    expect(down.headers['retry-after']).toBe('5');
  });

  test('held requests are forwarded in arrival order when an endpoint becomes ready 2 s later; the gauge counts them meanwhile', async () => {
    const start = Date.now();
    const answers: Array<Promise<Awaited<ReturnType<typeof call>>>> = [];
    for (let i = 0; i < 3; i++) {
      answers.push(call(`/v1/demo/cold/req-${i}`, { body: `{"n":${i}}` }));
      // The next request is sent once this one is held, so the arrival order is the order sent.
      await waitFor(async () =>
        expect(await metrics()).toContain(`servegate_pending_requests{project="demo",deployment="cold"} ${i + 1}`),
      );
    }
    expect(seenBy('cold')).toHaveLength(0);
    // Stays: the stimulus is an endpoint ready 2 s later; the gauge and backend read after it show nothing moved.
    await new Promise((r) => setTimeout(r, 2000 - (Date.now() - start)));
    expect(await metrics()).toContain('servegate_pending_requests{project="demo",deployment="cold"} 3');
    expect(seenBy('cold')).toHaveLength(0);
    setEndpointReady('demo/cold', ports.cold, true);
    const done = await Promise.all(answers);
    expect(done.map((d) => d.status)).toEqual([200, 200, 200]);
    expect(Date.now() - start).toBeGreaterThanOrEqual(2000);
    expect(seenBy('cold').map((s) => s.path)).toEqual(['/req-0', '/req-1', '/req-2']);
    expect(seenBy('cold').map((s) => s.body)).toEqual(['{"n":0}', '{"n":1}', '{"n":2}']);
    expect(await metrics()).toContain('servegate_pending_requests{project="demo",deployment="cold"} 0');
    await waitFor(() => expect(readyCondition('demo/cold')).toMatchObject({ status: 'True', reason: 'Routed' }));
  });

  test('the hold does not count against timeoutSeconds (1 s here): held 1.5 s, then a 0.7 s answer arrives', async () => {
    const start = Date.now();
    const answer = call('/v1/demo/slow/work');
    await waitFor(async () =>
      expect(await metrics()).toContain('servegate_pending_requests{project="demo",deployment="slow"} 1'),
    );
    // Stays: a hold past timeoutSeconds (1 s) is the stimulus; the gauge and backend read after it show it held.
    await new Promise((r) => setTimeout(r, 1500 - (Date.now() - start)));
    expect(await metrics()).toContain('servegate_pending_requests{project="demo",deployment="slow"} 1');
    expect(seenBy('slow')).toHaveLength(0);
    setEndpointReady('demo/slow', ports.slow, true);
    const r = await answer;
    expect(r.status).toBe(200);
    expect(r.json.from).toBe('slow');
    expect(Date.now() - start).toBeGreaterThanOrEqual(2100);
  });

  test('after holdSeconds: 503 with Retry-After: 5, and the request never reaches the backend', async () => {
    const start = Date.now();
    const r = await call('/v1/demo/brief/late');
    expect(r.status).toBe(503);
    expect(r.headers['retry-after']).toBe('5');
    expect(r.json.error).toMatch(/no ready endpoint within 1s/);
    expect(Date.now() - start).toBeGreaterThanOrEqual(950);
    expect(seen.some((s) => s.path === '/late')).toBe(false);
  });

  test('a held body counts the bytes received, not declared; one that sends nothing is timed out like any other', async () => {
    // 16 MiB declared, nothing sent: it takes none of the 4 KiB byte bound.
    const silent = net.connect(gw.port, '127.0.0.1');
    let answer = '';
    silent.on('data', (c: Buffer) => (answer += c.toString('latin1')));
    const closed = new Promise<void>((r) => silent.once('close', () => r()));
    silent.write(
      `POST /v1/demo/unsent/never-sent HTTP/1.1\r\nHost: x\r\nAuthorization: ApiKey ${key.key}\r\n` +
        'Content-Type: application/octet-stream\r\nContent-Length: 16777216\r\n\r\n',
    );
    await waitFor(async () =>
      expect(await metrics()).toContain('servegate_pending_requests{project="demo",deployment="unsent"} 1'),
    );
    // Another request with a 3 KiB body is held beside it (3 KiB of the 4 KiB are taken: by this one alone).
    const ac = new AbortController();
    const small = call('/v1/demo/unsent/held-small', {
      body: JSON.stringify({ pad: 'y'.repeat(3000) }),
      signal: ac.signal,
    }).then(
      (r) => r.status,
      (e: Error) => e.name,
    );
    await waitFor(async () =>
      expect(await metrics()).toContain('servegate_pending_requests{project="demo",deployment="unsent"} 2'),
    );
    // The silent one: 408 after requestBodyIdleTimeoutSeconds (2 s here), held or not, and its connection closes.
    await closed;
    expect(answer).toMatch(/^HTTP\/1\.1 408 /);
    expect(answer).toContain('the request body sent no data for 2s');
    await waitFor(async () =>
      expect(await metrics()).toContain('servegate_pending_requests{project="demo",deployment="unsent"} 1'),
    );
    ac.abort();
    expect(await small).toBe('AbortError');
    expect(seen.some((s) => s.path === '/never-sent' || s.path === '/held-small')).toBe(false);
  });

  test('a client that leaves while held is dropped from the queue and never forwarded', async () => {
    const ac = new AbortController();
    const gone = call('/v1/demo/brief/gone', { signal: ac.signal }).then(
      (r) => `answered ${r.status}`,
      (e: Error) => e.name,
    );
    await waitFor(async () =>
      expect(await metrics()).toContain('servegate_pending_requests{project="demo",deployment="brief"} 1'),
    );
    ac.abort();
    expect(await gone).toBe('AbortError');
    await waitFor(async () =>
      expect(await metrics()).toContain('servegate_pending_requests{project="demo",deployment="brief"} 0'),
    );
    setEndpointReady('demo/brief', ports.cold, true);
    await waitFor(async () => expect((await call('/v1/demo/brief/after')).status).toBe(200));
    expect(seen.some((s) => s.path === '/gone')).toBe(false);
    setEndpointReady('demo/brief', ports.cold, false);
    await waitFor(async () => expect(readyCondition('demo/brief')).toMatchObject({ reason: 'ScaledToZero' }));
  });

  test('the queue is bounded: past 3 held requests, or 4 KiB of held bodies, 503 at once', async () => {
    const obj = api.get(SDEP_API, 'ServingDeployment', 'demo', 'brief') as Obj;
    api.update({ ...obj, spec: { ...obj.spec, scaleFromZero: { holdSeconds: 3 } } });
    await waitFor(async () => expect((await statusOf('demo/brief'))?.message).toMatch(/up to 3s/));
    const held = [1, 2, 3].map((i) => call(`/v1/demo/brief/q${i}`, { body: '{}' }));
    await waitFor(async () =>
      expect(await metrics()).toContain('servegate_pending_requests{project="demo",deployment="brief"} 3'),
    );
    const t = Date.now();
    const over = await call('/v1/demo/brief/q4', { body: '{}' });
    expect(over.status).toBe(503);
    expect(over.json.error).toMatch(/queue of waiting requests is full/);
    expect(Date.now() - t).toBeLessThan(1000);
    expect((await Promise.all(held)).map((r) => r.status)).toEqual([503, 503, 503]);
    // Bytes: one 5 KiB body is over the 4 KiB bound on its own.
    const big = await call('/v1/demo/brief/big', { body: JSON.stringify({ pad: 'x'.repeat(5000) }) });
    expect(big.status).toBe(503);
    expect(big.json.error).toMatch(/queue of waiting requests is full/);
  });
});
