// Part B against a real control plane: kube-apiserver and etcd built from their Go modules (`npm run kube:build`,
// test/kube), started on loopback by test/kube/cluster.mjs. 10,000 ServingDeployments (and as many key Secrets) are
// created through the API while servegate runs on the Kubernetes source as a follower (another replica holds the
// Lease); measured: time from create to served (p50/p99) during the bulk load and on the full table, time until all
// are served, the gateway's RSS, and the API server's own cost of servegate's lists and watches.
//
// The API server refuses loopback addresses in EndpointSlices and these benches send traffic to loopback only, so the
// deployments have no endpoints: "served" is the gateway answering for the route (503 no ready endpoint) where it
// answered 404 before. The fake's Part B (bench/kubernetes.mjs) measures 200s with endpoints.
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { Agent, Pool, request } from 'undici';
import { parseAllDocuments } from 'yaml';
import { kubeCacheDir } from '../test/kube/cache.mjs';
import { cpuMsOf, otherLeaderLease } from './kubernetes.mjs';
import { deploymentObject, keySecretObject, makeKey } from './lib/manifests.mjs';
import { memoryOf, startProcess, stopProcess, waitFor } from './lib/procs.mjs';
import { goal, log, mb, ms } from './lib/report.mjs';
import { CLI, liveHeap, startGateway } from './lib/servegate.mjs';

const KEYS_NAMESPACE = 'servegate';
const BODY = '{"instances":[[6.8,2.8,4.8,1.4]]}';
const CONCURRENCY = 16;

export function realGoalTexts(ctx) {
  const n = ctx.deployments.toLocaleString('en-US');
  return {
    createToServed: `real API server: create → served p99 <= 50 ms at ${n} (the fake's line)`,
    memory: `real API server: gateway RSS after full GC <= 200 MB, ${n} deployments`,
  };
}

const pctl = (sorted, p) => sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];

const cpuSecondsOf = (pid) => cpuMsOf(pid) / 1000;

/** Sum of an API server counter's samples whose labels match every `want` pair. */
function counter(text, name, want) {
  let sum = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`)) continue;
    const labels = line.slice(name.length + 1, line.lastIndexOf('}'));
    if (Object.entries(want).every(([k, v]) => labels.includes(`${k}="${v}"`)))
      sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return sum;
}

export async function runRealKubernetesBench(ctx) {
  const bin = join(kubeCacheDir(), 'bin', 'kube-apiserver');
  if (!existsSync(bin) || !existsSync(CLI)) {
    log(
      `  SKIPPED: ${existsSync(CLI) ? 'the real control plane is not built (npm run kube:build)' : 'dist/ not built'}`,
    );
    return { skipped: true };
  }
  const count = ctx.deployments;
  const dir = join(ctx.dir, 'kubernetes-real');
  const started = [];
  const results = { deployments: count, goals: {} };
  try {
    const cluster = startProcess('kube-apiserver+etcd', process.execPath, [
      join(ctx.root, 'test/kube/cluster.mjs'),
      '--dir',
      join(dir, 'cluster'),
      '--parent',
      String(process.pid),
    ]);
    started.push(cluster);
    const stateFile = join(dir, 'cluster', 'state.json');
    await waitFor('kube-apiserver ready', () => existsSync(stateFile), {
      timeoutMs: 120_000,
      child: cluster,
      intervalMs: 200,
    });
    const state = JSON.parse(readFileSync(stateFile, 'utf8'));
    const tls = { ca: readFileSync(state.ca), cert: readFileSync(state.adminCert), key: readFileSync(state.adminKey) };
    const agent = new Agent({ connect: tls, connections: CONCURRENCY * 2 });
    const api = async (method, path, body) => {
      const res = await request(`${state.server}${path}`, {
        method,
        dispatcher: agent,
        headers: { 'content-type': 'application/json' },
        body: body && JSON.stringify(body),
      });
      const text = await res.body.text();
      if (res.statusCode >= 300 && !(res.statusCode === 409 && method === 'POST')) {
        throw new Error(`${method} ${path}: ${res.statusCode} ${text.slice(0, 300)}`);
      }
      return text;
    };
    const create = (obj) => {
      const [group, version] = obj.apiVersion.includes('/') ? obj.apiVersion.split('/') : [undefined, obj.apiVersion];
      const base = group ? `/apis/${group}/${version}` : `/api/${version}`;
      const plural = {
        Namespace: 'namespaces',
        Service: 'services',
        Secret: 'secrets',
        Lease: 'leases',
        ServingDeployment: 'servingdeployments',
      }[obj.kind];
      const ns = obj.metadata.namespace ? `/namespaces/${obj.metadata.namespace}` : '';
      return api('POST', `${base}${ns}/${plural}`, obj);
    };
    const pool = async (items, fn) => {
      let next = 0;
      await Promise.all(
        Array.from({ length: CONCURRENCY }, async () => {
          while (next < items.length) await fn(items[next++]);
        }),
      );
    };

    for (const f of readdirSync(join(ctx.root, 'crds')).filter((n) => n.endsWith('.yaml'))) {
      for (const doc of parseAllDocuments(readFileSync(join(ctx.root, 'crds', f), 'utf8'))) {
        const crd = doc.toJS();
        if (crd) await api('POST', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions', crd);
      }
    }
    await waitFor(
      'the ServingDeployment CRD established',
      async () => {
        const crd = JSON.parse(
          await api(
            'GET',
            '/apis/apiextensions.k8s.io/v1/customresourcedefinitions/servingdeployments.serving.servegate.dev',
          ),
        );
        return crd.status?.conditions?.some((c) => c.type === 'Established' && c.status === 'True');
      },
      { timeoutMs: 30_000, intervalMs: 200 },
    );

    const namespaces = Array.from({ length: Math.min(100, count) }, (_, i) => `p-${String(i).padStart(3, '0')}`);
    await pool([KEYS_NAMESPACE, ...namespaces], (ns) =>
      create({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns } }),
    );
    await pool(namespaces, (ns) =>
      create({
        apiVersion: 'v1',
        kind: 'Service',
        metadata: { name: 'backend', namespace: ns },
        spec: { ports: [{ name: 'http', port: 8080, protocol: 'TCP' }] },
      }),
    );
    await create(otherLeaderLease());
    const load = makeKey();
    await create(
      keySecretObject({
        name: 'bench-load',
        namespace: KEYS_NAMESPACE,
        prefix: load.prefix,
        sha256: load.sha256,
        projects: '*',
      }),
    );
    const headers = { 'content-type': 'application/json', authorization: `ApiKey ${load.key}` };
    const path = (ns, name) => `/v1/${ns}/${name}/v1/models/${name}:predict`;

    // What the API server has served so far (the bench's own set-up): the baseline of servegate's lists and watches.
    const metricsBefore = await api('GET', '/metrics');
    const watchesBefore = counter(metricsBefore, 'apiserver_longrunning_requests', { verb: 'WATCH' });
    // The gateway, as a follower, on the admin kubeconfig.
    const probeNs = namespaces[0];
    await create(deploymentObject({ namespace: probeNs, name: 'probe', backend: { service: 'backend', port: 8080 } }));
    const gw = await startGateway(join(dir), ['--kubernetes'], {
      accessLog: false,
      env: { KUBECONFIG: state.kubeconfig, POD_NAMESPACE: KEYS_NAMESPACE, POD_NAME: 'bench-real' },
      ready: async (g) => {
        const p = new Pool(`http://127.0.0.1:${g.port}`, { connections: 1 });
        try {
          await waitFor(
            'servegate serving its first route',
            async () => (await status(p, path(probeNs, 'probe'), headers)) === 503,
            {
              child: g.child,
              timeoutMs: 60_000,
              intervalMs: 100,
            },
          );
        } finally {
          await p.close();
        }
      },
    });
    started.push(gw.child);
    const gwPool = new Pool(`http://127.0.0.1:${gw.port}`, { connections: 4 });
    const apiCpu0 = cpuSecondsOf(state.apiserverPid);
    const etcdCpu0 = cpuSecondsOf(state.etcdPid);

    // 1. The bulk load: count deployments and count key Secrets through the API; every 50th create is followed by
    //    probes of its route until served.
    const items = Array.from({ length: count }, (_, i) => ({
      i,
      ns: namespaces[i % namespaces.length],
      name: `d-${String(i).padStart(5, '0')}`,
    }));
    const during = [];
    const t0 = performance.now();
    await pool(items, async ({ i, ns, name }) => {
      const k = makeKey();
      await create(
        keySecretObject({
          name: `key-${String(i).padStart(5, '0')}`,
          namespace: KEYS_NAMESPACE,
          prefix: k.prefix,
          sha256: k.sha256,
          projects: ns,
        }),
      );
      const start = performance.now();
      await create(deploymentObject({ namespace: ns, name, backend: { service: 'backend', port: 8080 } }));
      if (i % 50 === 0) {
        while (performance.now() - start < 10_000) {
          if ((await status(gwPool, path(ns, name), headers)) === 503) {
            during.push(performance.now() - start);
            break;
          }
        }
      }
    });
    const createdMs = performance.now() - t0;
    const last = items[items.length - 1];
    await waitFor(
      'the last deployment served',
      async () => (await status(gwPool, path(last.ns, last.name), headers)) === 503,
      { timeoutMs: 60_000, intervalMs: 20 },
    );
    const allServedMs = performance.now() - t0;
    const apiCpuBulk = cpuSecondsOf(state.apiserverPid) - apiCpu0;
    const etcdCpuBulk = cpuSecondsOf(state.etcdPid) - etcdCpu0;
    during.sort((a, b) => a - b);
    results.bulk = {
      createdMs,
      allServedMs,
      samples: during.length,
      p50Ms: pctl(during, 50),
      p99Ms: pctl(during, 99),
      apiCpuS: apiCpuBulk,
      etcdCpuS: etcdCpuBulk,
    };
    log(
      `  real kube-apiserver ${state.server} (etcd ${state.etcdUrl}); servegate as a follower on the admin kubeconfig`,
    );
    log(
      `  bulk: ${count.toLocaleString('en-US')} ServingDeployments + ${count.toLocaleString('en-US')} key Secrets created through the API in ${(createdMs / 1000).toFixed(1)} s (${CONCURRENCY} at a time); all served ${(allServedMs / 1000).toFixed(1)} s after the first create`,
    );
    log(
      `    create → served during the load (${during.length} samples): p50 ${ms(results.bulk.p50Ms)}, p99 ${ms(results.bulk.p99Ms)}`,
    );
    log(`    CPU during the load: kube-apiserver ${apiCpuBulk.toFixed(1)} s, etcd ${etcdCpuBulk.toFixed(1)} s`);

    // 2. One create at a time on the full table.
    const single = [];
    for (let i = 0; i < ctx.events; i++) {
      const ns = namespaces[i % namespaces.length];
      const name = `new-${String(i).padStart(4, '0')}`;
      const start = performance.now();
      await create(deploymentObject({ namespace: ns, name, backend: { service: 'backend', port: 8080 } }));
      while (performance.now() - start < 10_000) {
        if ((await status(gwPool, path(ns, name), headers)) === 503) {
          single.push(performance.now() - start);
          break;
        }
      }
      await sleep(10);
    }
    single.sort((a, b) => a - b);
    results.createToServed = {
      events: ctx.events,
      served: single.length,
      p50Ms: pctl(single, 50),
      p99Ms: pctl(single, 99),
      maxMs: single[single.length - 1],
    };
    log(
      `  create → served at ${count.toLocaleString('en-US')}, one at a time (${ctx.events}): p50 ${ms(results.createToServed.p50Ms)}, p99 ${ms(results.createToServed.p99Ms)}, max ${ms(results.createToServed.maxMs)}`,
    );

    // 3. Steady state: what servegate's lists and watches cost the API server, over 10 quiet seconds.
    const api1 = cpuSecondsOf(state.apiserverPid);
    await sleep(10_000);
    const idleApiCpu = (cpuSecondsOf(state.apiserverPid) - api1) / 10;
    const metricsAfter = await api('GET', '/metrics');
    const delta = (verb, resource) =>
      counter(metricsAfter, 'apiserver_request_total', { verb, resource }) -
      counter(metricsBefore, 'apiserver_request_total', { verb, resource });
    const watchesOpen = counter(metricsAfter, 'apiserver_longrunning_requests', { verb: 'WATCH' }) - watchesBefore;
    results.apiserver = {
      lists: Object.fromEntries(
        ['servingdeployments', 'secrets', 'services', 'endpointslices'].map((r) => [r, delta('LIST', r)]),
      ),
      watchesStarted: Object.fromEntries(
        ['servingdeployments', 'secrets', 'services', 'endpointslices'].map((r) => [r, delta('WATCH', r)]),
      ),
      watchesOpen,
      idleCpuCores: idleApiCpu,
      rss: memoryOf(state.apiserverPid)?.rss,
      etcdRss: memoryOf(state.etcdPid)?.rss,
    };
    const a = results.apiserver;
    log(
      `  API server load from servegate since it started: LIST ${Object.entries(a.lists)
        .map(([r, n]) => `${r} ${n}`)
        .join(', ')}; WATCH ended (restarted) ${Object.entries(a.watchesStarted)
        .map(([r, n]) => `${r} ${n}`)
        .join(', ')}; watches of servegate open now ${a.watchesOpen}`,
    );
    log(
      `  API server at rest with ${count.toLocaleString('en-US')} deployments watched: ${(idleApiCpu * 100).toFixed(1)} % of a core, RSS ${mb(a.rss)} (etcd ${mb(a.etcdRss)})`,
    );

    // 4. The gateway's memory.
    results.memory = { ...memoryOf(gw.child.pid), ...(await liveHeap(gw.child)) };
    log(
      `  servegate memory: RSS ${mb(results.memory.rss)} (peak ${mb(results.memory.peak)}); after a full GC: RSS ${mb(results.memory.rssAfterGc)}, live heap ${mb(results.memory.liveHeap)}`,
    );
    await gwPool.close();
    await agent.close();

    const texts = realGoalTexts(ctx);
    const p99 = results.createToServed.p99Ms;
    results.goals.createToServed = goal(
      texts.createToServed,
      `${ms(p99)} (bulk p99 ${ms(results.bulk.p99Ms)})`,
      single.length === ctx.events && p99 <= 50,
      'B',
    );
    const m = results.memory.rssAfterGc;
    results.goals.memory = goal(texts.memory, mb(m), m === undefined ? undefined : m <= 200 * 1024 * 1024, 'B');
    return results;
  } finally {
    for (const child of started.reverse()) await stopProcess(child);
  }
}

async function status(pool, path, headers) {
  const res = await pool.request({ path, method: 'POST', headers, body: BODY });
  await res.body.dump();
  return res.statusCode;
}
