// The whole path against a real kube-apiserver: charts/servegate installed with helm, `kubectl apply -f
// examples/cluster/demo.yaml`, the demo's sample servers (examples/backends/, as `npm start` runs them) listening in a
// network namespace of the test's own (the API server refuses loopback addresses in EndpointSlices; no kubelet runs,
// so the test writes the EndpointSlices the demo's Services would get), and servegate on the chart ServiceAccount's
// token. Requests reach the backends; the status is what `kubectl get sdep -o yaml` shows; an edit, a deletion and a
// key Secret created, rotated and deleted each reach the data plane within a second (docs/kubernetes-source.md,
// Latency). Needs root (or CAP_NET_ADMIN) and iproute2 for `ip netns`; fails saying so without them.
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { readFileSync, mkdtempSync, rmSync } from 'node:fs';
import { request } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parse } from 'yaml';
import { generateKey, hashKey, keySecretManifest } from '../../src/keys/index.js';
import { installChart, type ChartRelease } from '../support/helm.js';
import { startKubeCluster, type KubeCluster } from '../support/kube.js';
import { TestNetns } from '../support/netns.js';
import { ROOT } from '../support/paths.js';
import { describeRun } from '../support/processes.js';
import { waitFor } from '../support/wait.js';
import { startServegateProcess, type ServegateProcess } from '../support/servegate-process.js';

/** How soon a change written to the API server reaches the data plane (docs/kubernetes-source.md, Latency). */
const LATENCY_MS = 1000;
const PUBLIC_URL = 'https://models.example.test';
const DEMO_KEY = 'DemoKeyDoNotUse1.this-is-the-public-demo-key-never-use-it';
const BACKENDS = examplesBackends();

/** The demo's Services and the sample server behind each (ports as `npm start` uses them, src/cli/demo.ts). */
function examplesBackends() {
  const b = (service: string, file: string, port: number, env: Record<string, string> = {}) => ({
    service,
    file,
    port,
    env,
  });
  return [
    b('demo-v1', 'v1-server.mjs', 8081),
    b('demo-llm', 'llm-server.mjs', 8082, { MODEL: 'chat' }),
    b('demo-echo', 'echo-server.mjs', 8083),
    b('demo-fleet', 'vllm-replica.mjs', 8084, { MODEL: 'sim-llama', REPLICA_INDEX: '0' }),
    b('demo-fleet', 'vllm-replica.mjs', 8085, { MODEL: 'sim-llama', REPLICA_INDEX: '1' }),
    b('demo-fleet', 'vllm-replica.mjs', 8086, { MODEL: 'sim-llama', REPLICA_INDEX: '2' }),
  ];
}

let cluster: KubeCluster | undefined;
let netns: TestNetns | undefined;
let sg: ServegateProcess | undefined;
let rel: ChartRelease;
let dir: string;

beforeAll(async () => {
  netns = TestNetns.create(); // first: without `ip netns` there is nothing to run
  dir = mkdtempSync(join(tmpdir(), 'servegate-whole-'));
  // A control plane of this file's own: demo.yaml names its namespace ("demo"), which must be fresh.
  cluster = await startKubeCluster();
  const ns = netns;
  for (const b of BACKENDS) {
    ns.node([join(ROOT, 'examples', 'backends', b.file), String(b.port)], { ...b.env, HOST: ns.address });
  }
  await until('the sample servers in the network namespace', async () => {
    for (const b of BACKENDS) {
      const ok = await fetch(`http://${ns.address}:${b.port}/health`).then(
        (r) => r.ok,
        () => false,
      );
      if (!ok) return undefined;
    }
    return true;
  });

  rel = await installChart(cluster, {
    release: 'servegate',
    namespace: 'servegate',
    set: [`gateway.publicUrl=${PUBLIC_URL}`],
    dir,
  });
  await kubectl(['apply', '-f', 'examples/cluster/demo.yaml']);
  await kubectl(['apply', '-n', 'servegate', '-f', 'examples/keys/demo-key.yaml']);
  // The EndpointSlices the endpoint controller would write for the demo's Services: one ready endpoint per server,
  // the port named as the Service's port ("http").
  const slices = BACKENDS.map((b) => ({
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: {
      name: `${b.service}-${b.port}`,
      namespace: 'demo',
      labels: { 'kubernetes.io/service-name': b.service, 'endpointslice.kubernetes.io/managed-by': 'test' },
    },
    addressType: 'IPv4',
    endpoints: [{ addresses: [ns.address], conditions: { ready: true, serving: true, terminating: false } }],
    ports: [{ name: 'http', port: b.port, protocol: 'TCP' }],
  }));
  await kubectl(['apply', '-f', '-'], JSON.stringify({ apiVersion: 'v1', kind: 'List', items: slices }));

  sg = await startServegateProcess({
    kubeconfig: rel.kubeconfig,
    config: rel.configFile,
    namespace: rel.namespace,
    podName: rel.podName,
  });
  const admin = sg.admin;
  await until('servegate to be ready', async () =>
    (await fetch(`${admin}/readyz`).catch(() => undefined))?.status === 200 ? true : undefined,
  );
}, 240_000);

afterAll(async () => {
  await sg?.stop();
  netns?.remove();
  await cluster?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

async function kubectl(args: string[], input?: string): Promise<string> {
  const r = await cluster!.kubectl(args, { input });
  if (r.code !== 0) throw new Error(describeRun(r));
  return r.stdout;
}

/** A write as the cluster admin, straight to the API server (timed: no kubectl start-up in the figure). */
function write(method: string, path: string, body?: object, contentType = 'application/merge-patch+json') {
  const s = cluster!.state;
  return new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = request(
      `${s.server}${path}`,
      {
        method,
        agent: false,
        ca: readFileSync(s.ca),
        cert: readFileSync(s.adminCert),
        key: readFileSync(s.adminKey),
        headers: { 'content-type': contentType },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8').on('data', (d: string) => (text += d));
        res.on('end', () => {
          const status = res.statusCode ?? 0;
          if (status >= 300) reject(new Error(`${method} ${path}: ${status} ${text}`));
          else resolve({ status, body: text });
        });
      },
    );
    req.on('error', reject);
    req.end(body ? JSON.stringify(body) : undefined);
  });
}

/** Waits until `f` gives a value (test/support/wait.ts polls; an error thrown meanwhile is retried, then named). */
function until<T>(what: string, f: () => Promise<T | undefined>, timeoutMs = 30_000): Promise<T> {
  return waitFor(async () => (await f()) ?? false, what, timeoutMs, 20) as Promise<T>;
}

/** Runs the write, then polls until `seen` holds; returns the milliseconds from the start of the write. */
async function timed(what: string, writeIt: () => Promise<unknown>, seen: () => Promise<boolean>): Promise<number> {
  const t0 = performance.now();
  await writeIt();
  await until(what, async () => ((await seen()) ? true : undefined), 10_000);
  return performance.now() - t0;
}

async function call(
  path: string,
  o: { method?: string; key?: string | null; body?: object } = {},
): Promise<{ status: number; text: string; headers: Headers }> {
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  const key = o.key === undefined ? DEMO_KEY : o.key;
  if (key) headers.authorization = `ApiKey ${key}`;
  const r = await fetch(`${sg!.base}${path}`, {
    method: o.method ?? (o.body ? 'POST' : 'GET'),
    headers,
    body: o.body ? JSON.stringify(o.body) : undefined,
  });
  return { status: r.status, text: await r.text(), headers: r.headers };
}

const chat = (model: string, stream = false) => ({
  model,
  stream,
  messages: [{ role: 'user', content: 'Hello from the whole path' }],
});

interface Condition {
  type: string;
  status: string;
  reason: string;
  observedGeneration?: number;
}
interface Sdep {
  metadata: { name: string; generation: number };
  status?: {
    observedGeneration?: number;
    url?: string;
    inferenceUrl?: string;
    openaiUrl?: string;
    endpointUrl?: string;
    hostname?: string;
    conditions?: Condition[];
  };
}

/** `kubectl get sdep -n demo -o yaml`, by name. */
async function sdeps(): Promise<Map<string, Sdep>> {
  const list = parse(await kubectl(['get', 'sdep', '-n', 'demo', '-o', 'yaml'])) as { items: Sdep[] };
  return new Map(list.items.map((i) => [i.metadata.name, i]));
}

function ready(o: Sdep | undefined): Condition | undefined {
  return o?.status?.conditions?.find((c) => c.type === 'Ready');
}

describe('the whole path: helm install, examples/cluster/demo.yaml, backends in a network namespace', () => {
  test('requests reach the sample servers: predictive predict, an LLM stream, the python echo, the LLM fleet', async () => {
    const predict = await call('/v1/demo/iris/v1/models/iris:predict', { body: { instances: [[5.1, 3.5, 1.4, 0.2]] } });
    expect(predict.status).toBe(200);
    expect((JSON.parse(predict.text) as { predictions: unknown[] }).predictions).toHaveLength(1);

    const stream = await call('/v1/demo/chat/v1/chat/completions', { body: chat('chat', true) });
    expect(stream.status).toBe(200);
    expect(stream.headers.get('content-type')).toMatch(/^text\/event-stream/);
    expect(stream.text).toMatch(/^data: \{.*"object":"chat\.completion\.chunk"/m);
    expect(stream.text.trimEnd().endsWith('data: [DONE]')).toBe(true);

    const echo = await call('/v1/demo/echo/any/path?x=1', { method: 'PUT', body: { hello: 'world' } });
    expect(echo.status).toBe(200);
    const echoed = JSON.parse(echo.text) as { method: string; path: string; query: object; body: string };
    expect([echoed.method, echoed.path, echoed.query, JSON.parse(echoed.body)]).toEqual([
      'PUT',
      '/any/path',
      { x: '1' },
      { hello: 'world' },
    ]);

    const fleet = await call('/v1/demo/fleet/v1/chat/completions', { body: chat('fleet') });
    expect(fleet.status).toBe(200);
    expect(fleet.headers.get('x-vllm-replica')).toMatch(/^[012]$/);

    // Without a key: 401, as everywhere.
    expect((await call('/v1/demo/iris/v1/models/iris:predict', { key: null, body: { instances: [[1]] } })).status).toBe(
      401,
    );
  }, 60_000);

  test('kubectl get sdep -o yaml shows every deployment Ready (Routed) for its generation, with its URLs', async () => {
    const all = await until('every ServingDeployment Ready for its generation', async () => {
      const m = await sdeps();
      const done = [...m.values()].every((o) => {
        const c = ready(o);
        return c?.status === 'True' && c.observedGeneration === o.metadata.generation;
      });
      return done && m.size === 5 ? m : undefined;
    });
    const base = `${PUBLIC_URL}/v1/demo`;
    const seen = Object.fromEntries(
      [...all].map(([name, o]) => [
        name,
        {
          reason: ready(o)?.reason,
          observedGeneration: o.status?.observedGeneration === o.metadata.generation,
          url: o.status?.url,
          inferenceUrl: o.status?.inferenceUrl,
          openaiUrl: o.status?.openaiUrl,
          endpointUrl: o.status?.endpointUrl,
          hostname: o.status?.hostname,
        },
      ]),
    );
    const expected = (name: string, extra: object) => ({
      reason: 'Routed',
      observedGeneration: true,
      url: `${base}/${name}`,
      inferenceUrl: undefined,
      openaiUrl: undefined,
      endpointUrl: undefined,
      hostname: `${name}.demo.serving.local`,
      ...extra,
    });
    expect(seen).toEqual({
      iris: expected('iris', { inferenceUrl: `${base}/iris/v1/models/iris:predict` }),
      mnist: expected('mnist', { inferenceUrl: `${base}/mnist/v1/models/mnist:predict` }),
      chat: expected('chat', { openaiUrl: `${base}/chat/v1` }),
      fleet: expected('fleet', { openaiUrl: `${base}/fleet/v1` }),
      echo: expected('echo', { endpointUrl: `${base}/echo` }),
    });
  }, 60_000);

  test('a deployment edited and one deleted reach the data plane, and the status, within a second', async () => {
    const sd = '/apis/serving.servegate.dev/v1alpha1/namespaces/demo/servingdeployments';
    const echo = async () => (await call('/v1/demo/echo/ping')).status;
    expect(await echo()).toBe(200);
    // spec.backend.port to a port the Service does not have: the route is refused (BackendNotFound), so the
    // deployment is not served (404) until the port is right again.
    const edit = await timed(
      'the edited backend port on the data plane',
      () => write('PATCH', `${sd}/echo`, { spec: { backend: { port: 81 } } }),
      async () => (await echo()) === 404,
    );
    const generation = (JSON.parse((await write('GET', `${sd}/echo`)).body) as Sdep).metadata.generation;
    const notFound = await until('the Ready condition of the edited generation', async () => {
      const c = ready((await sdeps()).get('echo'));
      return c?.observedGeneration === generation ? c : undefined;
    });
    expect([notFound.status, notFound.reason]).toEqual(['False', 'BackendNotFound']);
    // And back: served again, and the status says so (read straight from the API server, so that the figure is
    // servegate's and not kubectl's start-up; kubectl shows the same object below).
    const back = await timed(
      'the restored backend port on the data plane',
      () => write('PATCH', `${sd}/echo`, { spec: { backend: { port: 80 } } }),
      async () => (await echo()) === 200,
    );
    const t0 = performance.now();
    await until('Ready again', async () => {
      const c = ready(JSON.parse((await write('GET', `${sd}/echo`)).body) as Sdep);
      return c?.observedGeneration === generation + 1 && c.status === 'True' ? true : undefined;
    });
    const statusMs = back + performance.now() - t0;
    expect(ready((await sdeps()).get('echo'))).toMatchObject({ status: 'True', reason: 'Routed' });

    const before = await call('/v1/demo/mnist/v1/models/mnist:predict', { body: { instances: [[1, 2]] } });
    expect(before.status).toBe(200);
    const deletion = await timed(
      'the deleted deployment to be gone from the data plane',
      () => write('DELETE', `${sd}/mnist`),
      async () =>
        (await call('/v1/demo/mnist/v1/models/mnist:predict', { body: { instances: [[1, 2]] } })).status === 404,
    );
    // Its neighbour on the same Service is untouched.
    expect((await call('/v1/demo/iris/v1/models/iris:predict', { body: { instances: [[1, 2]] } })).status).toBe(200);
    if (process.env.SERVEGATE_TEST_FIGURES) console.log({ edit, back, statusMs, deletion });
    expect(Math.max(edit, back, deletion)).toBeLessThan(LATENCY_MS);
    expect(statusMs).toBeLessThan(LATENCY_MS);
  }, 60_000);

  test('a key Secret created, rotated and deleted reaches the data plane within a second', async () => {
    const secrets = '/api/v1/namespaces/servegate/secrets';
    const path = '/v1/demo/iris/v1/models/iris:predict';
    const first = generateKey();
    const status = async (key: string) => (await call(path, { key, body: { instances: [[1, 2, 3, 4]] } })).status;
    expect(await status(first.key)).toBe(401);

    const created = await timed(
      'the new key to be accepted',
      () =>
        write(
          'POST',
          secrets,
          keySecretManifest({ name: 'ci-bot', prefix: first.prefix, sha256: first.sha256, projects: ['demo'] }),
          'application/json',
        ),
      async () => (await status(first.key)) === 200,
    );

    // Rotation: the same Secret (and prefix), a new secret part; its sha256 changes.
    const rotatedKey = `${first.prefix}.${randomBytes(32).toString('base64url')}`;
    const rotated = await timed(
      'the rotated key to replace the old one',
      () => write('PATCH', `${secrets}/ci-bot`, { stringData: { sha256: hashKey(rotatedKey) } }),
      async () => (await status(rotatedKey)) === 200,
    );
    expect(await status(first.key)).toBe(401);

    const deleted = await timed(
      'the deleted key to be refused',
      () => write('DELETE', `${secrets}/ci-bot`),
      async () => (await status(rotatedKey)) === 401,
    );
    expect(await status(DEMO_KEY)).toBe(200);
    if (process.env.SERVEGATE_TEST_FIGURES) console.log({ created, rotated, deleted });
    expect(Math.max(created, rotated, deleted)).toBeLessThan(LATENCY_MS);
  }, 60_000);

  test('all of it on the chart ServiceAccount: the Lease held, no refusal by the API server in the log', async () => {
    const lease = await kubectl(['get', 'lease', 'servegate-controller', '-n', 'servegate', '-o', 'json']);
    expect((JSON.parse(lease) as { spec: { holderIdentity: string } }).spec.holderIdentity).toBe(rel.podName);
    const refused = sg!
      .log()
      .split('\n')
      .filter((l) => !l.includes('"msg":"request"')) // the access log: the test's own 401s and 404s
      .filter((l) => /forbidden|\b403\b|unauthori[sz]ed|\b401\b/i.test(l));
    expect(refused).toEqual([]);
  });
});
