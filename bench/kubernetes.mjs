// Part B: the gateway on the Kubernetes source with 10,000 ServingDeployments and 10,000 key Secrets, served by
// the test suite's FakeApiServer (real HTTP, real @kubernetes/client-node in the gateway), in this process.
// Measures: watch event → route served (p50/p99 over ~200 creates), throughput with 10k routes vs 1 route
// (alternating rounds), start-up time and RSS.
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { Pool, request } from 'undici';
import { stringify } from 'yaml';
import { startBackend } from './gateway.mjs';
import { runAutocannon, runWrk, writeWrkScript } from './lib/load.mjs';
import { deploymentObject, keySecretObject, makeKey } from './lib/manifests.mjs';
import { routesConfig, startNginx } from './lib/nginx.mjs';
import { freePort, groupCpuSeconds, memoryOf, stopProcess, waitFor } from './lib/procs.mjs';
import { goal, log, mb, ms, ratio, rps, table } from './lib/report.mjs';
import { CLI, heapOf, imageAllocator, liveHeap, startGateway } from './lib/servegate.mjs';

const KEYS_NAMESPACE = 'servegate';
const LEASE_NAME = 'servegate-controller'; // config default kubernetes.leaderElection.leaseName
const SERVICE_PORT = 8080;
const BODY = '{"instances":[[6.8,2.8,4.8,1.4]]}';

const predictPath = (ns, name) => `/v1/${ns}/${name}/v1/models/${name}:predict`;

/** The goal lines of this part (also listed as skipped in the summary when the part does not run). */
export function goalTexts(ctx) {
  const n = ctx.deployments.toLocaleString('en-US');
  return {
    eventToRoute: `watch event → route served p99 <= 50 ms at ${n}`,
    // Restated after issue 21 (nginx itself loses 14-18 % with the same routes): no more than nginx loses.
    throughput: `throughput with ${n} routes ÷ 1 route >= nginx's with the same routes (same rounds)`,
    memory: `RSS after full GC <= 200 MB, ${n} deployments`,
  };
}

/** Compiles test/support/fake-apiserver.ts (self-contained) to .bench-tmp/ with the TypeScript API and imports it. */
export async function loadFakeApiServer(root) {
  const { default: ts } = await import('typescript');
  const source = readFileSync(join(root, 'test', 'support', 'fake-apiserver.ts'), 'utf8');
  const out = ts.transpileModule(source, {
    fileName: 'fake-apiserver.ts',
    compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 },
  });
  const dir = join(root, '.bench-tmp');
  mkdirSync(dir, { recursive: true });
  const file = join(dir, 'fake-apiserver.mjs');
  writeFileSync(file, out.outputText);
  return (await import(file)).FakeApiServer;
}

/**
 * Fills a fake API server: `count` ServingDeployments spread over up to 100 namespaces (= projects), one backend
 * Service + EndpointSlice (→ 127.0.0.1:backendPort) per namespace, `count` key Secrets (one project each) and one
 * load key granting every project. Returns the load key and the deployments' paths.
 */
export function populate(fake, count, backendPort) {
  const namespaces = Array.from({ length: Math.min(100, count) }, (_, i) => `p-${String(i).padStart(3, '0')}`);
  for (const ns of namespaces) {
    fake.create({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns } });
    fake.create({
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: 'backend', namespace: ns },
      spec: { ports: [{ name: 'http', port: SERVICE_PORT, targetPort: SERVICE_PORT, protocol: 'TCP' }] },
    });
    fake.create(endpointSlice(ns, backendPort));
  }
  fake.create({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: KEYS_NAMESPACE } });
  const paths = [];
  for (let i = 0; i < count; i++) {
    const ns = namespaces[i % namespaces.length];
    const name = `d-${String(i).padStart(5, '0')}`;
    fake.create(deploymentObject({ namespace: ns, name, backend: { service: 'backend', port: SERVICE_PORT } }));
    paths.push(predictPath(ns, name));
    const k = makeKey();
    fake.create(
      keySecretObject({
        name: `key-${String(i).padStart(5, '0')}`,
        namespace: KEYS_NAMESPACE,
        prefix: k.prefix,
        sha256: k.sha256,
        projects: ns,
      }),
    );
  }
  const load = makeKey();
  fake.create(
    keySecretObject({
      name: 'bench-load',
      namespace: KEYS_NAMESPACE,
      prefix: load.prefix,
      sha256: load.sha256,
      projects: '*',
    }),
  );
  fake.create(otherLeaderLease());
  return { key: load.key, paths, namespaces };
}

/**
 * The controller Lease, held for an hour by another replica: the gateway under test is a follower and writes no
 * status, as every replica but one in a steady cluster (the statuses were written by the leader long ago).
 */
export function otherLeaderLease() {
  const now = new Date().toISOString().replace('Z', '000Z');
  return {
    apiVersion: 'coordination.k8s.io/v1',
    kind: 'Lease',
    metadata: { name: LEASE_NAME, namespace: KEYS_NAMESPACE },
    spec: {
      holderIdentity: 'bench-other-replica',
      leaseDurationSeconds: 3600,
      acquireTime: now,
      renewTime: now,
      leaseTransitions: 0,
    },
  };
}

function endpointSlice(ns, port) {
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: { name: 'backend-bench', namespace: ns, labels: { 'kubernetes.io/service-name': 'backend' } },
    addressType: 'IPv4',
    ports: [{ name: 'http', port, protocol: 'TCP' }],
    endpoints: [{ addresses: ['127.0.0.1'], conditions: { ready: true, serving: true, terminating: false } }],
  };
}

function writeKubeconfig(dir, name, url) {
  const file = join(dir, `kubeconfig-${name}.yaml`);
  writeFileSync(
    file,
    stringify({
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [{ name: 'fake', cluster: { server: url, 'insecure-skip-tls-verify': true } }],
      users: [{ name: 'fake', user: { token: 'fake-token' } }],
      contexts: [{ name: 'fake', context: { cluster: 'fake', user: 'fake', namespace: KEYS_NAMESPACE } }],
      'current-context': 'fake',
    }),
  );
  return file;
}

/** CPU time (user + system, ms) a process has used so far; NaN when /proc cannot tell. */
export function cpuMsOf(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return ((Number(f[11]) + Number(f[12])) * 1000) / 100; // utime, stime in clock ticks (USER_HZ = 100)
  } catch {
    return Number.NaN;
  }
}

/** CPU time (ms) all CPUs of the machine spent busy so far (/proc/stat: everything but idle and iowait). */
function machineCpuMs() {
  try {
    const line = readFileSync('/proc/stat', 'utf8').split('\n')[0];
    const v = line.trim().split(/\s+/).slice(1, 9).map(Number);
    return ((v.reduce((a, b) => a + b, 0) - v[3] - v[4]) * 1000) / 100;
  } catch {
    return Number.NaN;
  }
}

/** CPU time (ms) of a run's server: the gateway process, or nginx's process group (master and worker). */
function serverCpuMs(run) {
  return run.group ? (groupCpuSeconds(run.pid) ?? Number.NaN) * 1000 : cpuMsOf(run.pid);
}

/**
 * nginx with the big run's routes and with the one route: the reference for the throughput ratio, the same routes
 * (a prefix location per ServingDeployment, an upstream per namespace), each checked to answer 401 without the key.
 */
async function startRouteProxies(ctx, dir, backendPort, sets) {
  const out = {};
  try {
    for (const [name, { paths, headers }] of Object.entries(sets)) {
      out[name] = await startRouteProxy(ctx, dir, backendPort, name, paths, headers);
    }
  } catch (err) {
    // None left running when one of them fails.
    for (const p of Object.values(out)) await stopProcess(p.child);
    throw err;
  }
  return out;
}

/** One nginx of startRouteProxies: started, then checked to answer 401 without the key (stopped if not). */
async function startRouteProxy(ctx, dir, backendPort, name, paths, headers) {
  const routes = paths.map((p) => {
    const [, ns, deployment] = /^\/v1\/([^/]+)\/([^/]+)\//.exec(p);
    return { prefix: `/v1/${ns}/${deployment}/`, upstream: `ns_${ns.replace(/-/g, '_')}` };
  });
  const port = await freePort();
  const conf = routesConfig(dir, port, backendPort, {
    routes,
    key: headers.authorization.slice('ApiKey '.length),
    name: `routes-${name}`,
  });
  const child = await startNginx(ctx.tools.nginx, dir, `routes-${name}`, conf, port, {
    path: paths[0],
    method: 'POST',
    headers,
    body: BODY,
  });
  const base = `http://127.0.0.1:${port}`;
  try {
    const res = await request(`${base}${paths[paths.length - 1]}`, { method: 'POST', body: BODY });
    await res.body.dump();
    if (res.statusCode !== 401) throw new Error(`nginx routes-${name} answered ${res.statusCode} without the key`);
  } catch (err) {
    await stopProcess(child);
    throw err;
  }
  return { child, base };
}

/** Route-table builds so far (servegate_reloads_total, changed + unchanged), from the admin /metrics. */
async function buildsOf(adminPort) {
  try {
    const res = await fetch(`http://127.0.0.1:${adminPort}/metrics`, { signal: AbortSignal.timeout(5000) });
    const text = await res.text();
    let n;
    for (const m of text.matchAll(/^servegate_reloads_total(?:\{[^}]*\})? ([0-9.e+]+)$/gm)) n = (n ?? 0) + Number(m[1]);
    return n;
  } catch {
    return undefined;
  }
}

/** Status writes the controller has made so far (PUT/PATCH on /status answered 2xx). */
function statusWrites(fake) {
  let n = 0;
  for (const r of fake.requests)
    if (r.path.endsWith('/status') && (r.method === 'PATCH' || r.method === 'PUT') && r.status < 300) n++;
  return n;
}

async function post(pool, path, headers) {
  const res = await pool.request({ path, method: 'POST', headers, body: BODY });
  await res.body.dump();
  return res.statusCode;
}

/**
 * Starts `serve --kubernetes` against a fake, access log off (bench/lib/servegate.mjs startGateway), and waits until
 * `probePath` is served. Resolves with `readyMs`, from the spawn of the process that served to the first 200.
 */
export async function startKubeGateway(dir, name, fake, probePath, headers, profileDir) {
  const { env: allocator } = imageAllocator();
  const kubeconfig = writeKubeconfig(dir, name, fake.url);
  mkdirSync(join(dir, name), { recursive: true });
  const gw = await startGateway(join(dir, name), ['--kubernetes'], {
    accessLog: false,
    env: {
      KUBECONFIG: kubeconfig,
      POD_NAMESPACE: KEYS_NAMESPACE,
      POD_NAME: `bench-${name}`,
      ...allocator,
    },
    profileDir: profileDir && join(profileDir, `kubernetes-${name}`),
    ready: async (g) => {
      const pool = new Pool(`http://127.0.0.1:${g.port}`, { connections: 1 });
      try {
        await waitFor(
          `servegate (${name}) serving ${probePath}`,
          async () => (await post(pool, probePath, headers)) === 200,
          {
            child: g.child,
            timeoutMs: 90_000,
            intervalMs: 100,
          },
        );
      } finally {
        await pool.close();
      }
      g.readyMs = performance.now() - g.spawnedAt;
    },
  });
  return gw;
}

/** Closed-loop run cycling through `paths`; `script` is the wrk Lua file for those paths. */
async function closedLoop(ctx, base, script, paths, seconds) {
  const opts = { connections: ctx.connections, threads: ctx.threads, seconds };
  if (ctx.tools.wrk) return runWrk(ctx.tools.wrk, script, base + paths[0], opts);
  return runAutocannon(base + paths[0], { method: 'POST', body: BODY, headers: ctx.headers, paths }, opts);
}

export async function runKubernetesBench(ctx) {
  const needed = ['test/support/fake-apiserver.ts', 'src/sources/kubernetes/index.ts', 'dist/cli/serve-kubernetes.js'];
  const missing = needed.filter((f) => !existsSync(join(ctx.root, f)));
  if (!existsSync(CLI)) missing.push('dist/cli/main.js');
  if (missing.length) {
    log(`  SKIPPED: not there yet: ${missing.join(', ')}`);
    return { skipped: missing };
  }
  const count = ctx.deployments;
  const dir = join(ctx.dir, 'kubernetes');
  mkdirSync(join(dir, 'big'), { recursive: true });
  mkdirSync(join(dir, 'one'), { recursive: true });
  const results = { deployments: count, keySecrets: count + 1, goals: {} };
  const started = [];
  const fakes = [];
  try {
    const FakeApiServer = await loadFakeApiServer(ctx.root);
    const backend = await startBackend(ctx, dir);
    started.push(backend.child);
    log(
      `  backend: ${backend.kind} on 127.0.0.1:${backend.port} (behind a Service + EndpointSlice in every namespace)`,
    );

    const t0 = performance.now();
    const bigFake = await FakeApiServer.start();
    fakes.push(bigFake);
    const big = populate(bigFake, count, backend.port);
    const oneFake = await FakeApiServer.start();
    fakes.push(oneFake);
    const one = populate(oneFake, 1, backend.port);
    log(
      `  fake API server: ${count.toLocaleString('en-US')} ServingDeployments in ${big.namespaces.length} namespaces, ${(count + 1).toLocaleString('en-US')} key Secrets (${Math.round(performance.now() - t0)} ms to fill); a second one with 1 of each`,
    );

    const bigHeaders = { 'content-type': 'application/json', authorization: `ApiKey ${big.key}` };
    const oneHeaders = { 'content-type': 'application/json', authorization: `ApiKey ${one.key}` };

    // Start-up with 10k, as a follower (another replica holds the controller Lease).
    const gwBig = await startKubeGateway(
      dir,
      'big',
      bigFake,
      big.paths[big.paths.length - 1],
      bigHeaders,
      ctx.profileDir,
    );
    started.push(gwBig.child);
    results.startupMs = gwBig.readyMs;
    log(
      `  servegate (${count.toLocaleString('en-US')} deployments, follower): all routes served ${ms(results.startupMs)} after the process started`,
    );
    log(`  servegate access log off: ${gwBig.logMode}`);
    log(`  ${imageAllocator().note}`);
    const gwOne = await startKubeGateway(dir, 'one', oneFake, one.paths[0], oneHeaders, ctx.profileDir);
    started.push(gwOne.child);
    // The reference: nginx with the same routes (none without nginx).
    let refs;
    if (ctx.tools.nginx) {
      refs = await startRouteProxies(ctx, dir, backend.port, {
        big: { paths: big.paths, headers: bigHeaders },
        one: { paths: one.paths, headers: oneHeaders },
      }).catch((err) => {
        log(`  nginx with ${count.toLocaleString('en-US')} routes: not run (${err.message})`);
        return undefined;
      });
      if (refs) started.push(refs.big.child, refs.one.child);
    }
    await sleep(500);

    // 1. Watch event → route served.
    const eventPool = new Pool(`http://127.0.0.1:${gwBig.port}`, { connections: 1, pipelining: 1 });
    const latencies = [];
    let timeouts = 0;
    for (let i = 0; i < ctx.events; i++) {
      const ns = big.namespaces[i % big.namespaces.length];
      const name = `new-${String(i).padStart(4, '0')}`;
      const path = predictPath(ns, name);
      const start = performance.now();
      bigFake.create(deploymentObject({ namespace: ns, name, backend: { service: 'backend', port: SERVICE_PORT } }));
      let served = false;
      while (performance.now() - start < 5000) {
        if ((await post(eventPool, path, bigHeaders)) === 200) {
          served = true;
          break;
        }
      }
      if (served) latencies.push(performance.now() - start);
      else timeouts++;
      await sleep(10);
    }
    await eventPool.close();
    latencies.sort((a, b) => a - b);
    const pct = (p) => latencies[Math.min(latencies.length - 1, Math.ceil((p / 100) * latencies.length) - 1)];
    results.eventToRoute = {
      events: ctx.events,
      served: latencies.length,
      timeouts,
      p50Ms: pct(50),
      p99Ms: pct(99),
      maxMs: latencies[latencies.length - 1],
    };
    log('');
    log(
      `  watch event → route served (create a ServingDeployment in the API server, poll the gateway until 200), ${ctx.events} events:`,
    );
    log(
      `    p50 ${ms(results.eventToRoute.p50Ms)}, p99 ${ms(results.eventToRoute.p99Ms)}, max ${ms(results.eventToRoute.maxMs)}${timeouts ? `, ${timeouts} not served within 5 s` : ''}`,
    );

    // 2. Throughput with 10k routes vs 1 route, alternating rounds.
    const bigPaths = [...big.paths];
    const scripts = ctx.tools.wrk
      ? {
          big: writeWrkScript(dir, {
            method: 'POST',
            body: BODY,
            headers: bigHeaders,
            paths: bigPaths,
            name: 'wrk-10k',
          }),
          one: writeWrkScript(dir, {
            method: 'POST',
            body: BODY,
            headers: oneHeaders,
            paths: one.paths,
            name: 'wrk-1',
          }),
        }
      : {};
    const runs = {
      one: {
        base: `http://127.0.0.1:${gwOne.port}`,
        pid: gwOne.child.pid,
        paths: one.paths,
        script: scripts.one,
        headers: oneHeaders,
        rounds: [],
      },
      big: {
        base: `http://127.0.0.1:${gwBig.port}`,
        pid: gwBig.child.pid,
        paths: bigPaths,
        script: scripts.big,
        headers: bigHeaders,
        rounds: [],
      },
    };
    if (refs) {
      runs.nginxOne = { ...runs.one, base: refs.one.base, pid: refs.one.child.pid, group: true, rounds: [] };
      runs.nginxBig = { ...runs.big, base: refs.big.base, pid: refs.big.child.pid, group: true, rounds: [] };
    }
    // Diagnostic (BENCH_K8S_HOT_PATH=1): the 10,000-route gateway with every request on one path — the same table,
    // the working set of one route. Tells the size of the table from the spread of the requests over it.
    if (process.env.BENCH_K8S_HOT_PATH === '1') {
      runs.bigHot = {
        base: `http://127.0.0.1:${gwBig.port}`,
        pid: gwBig.child.pid,
        paths: [bigPaths[0]],
        script: ctx.tools.wrk
          ? writeWrkScript(dir, {
              method: 'POST',
              body: BODY,
              headers: bigHeaders,
              paths: [bigPaths[0]],
              name: 'wrk-10k-hot',
            })
          : undefined,
        headers: bigHeaders,
        rounds: [],
      };
    }
    for (const r of Object.values(runs)) {
      ctx.headers = r.headers;
      if (ctx.warmupSeconds > 0) await closedLoop(ctx, r.base, r.script, r.paths, ctx.warmupSeconds);
    }
    const roundSeconds = Math.max(1, Math.round(ctx.seconds / 2));
    // Route-table builds while the closed loop measures: a steady cluster should cause none.
    const buildsBefore = { one: await buildsOf(gwOne.adminPort), big: await buildsOf(gwBig.adminPort) };
    const loopStartUs = process.hrtime.bigint() / 1000n; // CLOCK_MONOTONIC, the clock of the .cpuprofile timestamps
    for (let round = 0; round < 2; round++) {
      for (const r of Object.values(runs)) {
        ctx.headers = r.headers;
        const cpu0 = { gw: serverCpuMs(r), all: machineCpuMs() };
        const startUs = process.hrtime.bigint() / 1000n;
        const round = await closedLoop(ctx, r.base, r.script, r.paths, roundSeconds);
        round.windowUs = `${startUs}..${process.hrtime.bigint() / 1000n}`;
        const cpu1 = { gw: serverCpuMs(r), all: machineCpuMs() };
        // CPU per request (µs): the gateway's own (utime + stime), and the machine's (gateway + wrk + backend + …).
        round.gatewayCpuUs = ((cpu1.gw - cpu0.gw) * 1000) / round.requests;
        round.machineCpuUs = ((cpu1.all - cpu0.all) * 1000) / round.requests;
        r.rounds.push(round);
        await sleep(300);
      }
    }
    const summary = (r) => {
      const requests = r.rounds.reduce((s, x) => s + x.requests, 0);
      const seconds = r.rounds.reduce((s, x) => s + x.requests / x.rps, 0);
      return {
        rps: requests / seconds,
        p50Ms: r.rounds.reduce((s, x) => s + x.p50Ms, 0) / r.rounds.length,
        p99Ms: r.rounds.reduce((s, x) => s + x.p99Ms, 0) / r.rounds.length,
        errors: r.rounds.reduce((s, x) => s + x.errors + x.non2xx, 0),
        roundsRps: r.rounds.map((x) => x.rps),
        gatewayCpuUs: r.rounds.map((x) => x.gatewayCpuUs),
        machineCpuUs: r.rounds.map((x) => x.machineCpuUs),
      };
    };
    results.throughput = { oneRoute: summary(runs.one), tenK: summary(runs.big) };
    if (refs) {
      const n = { oneRoute: summary(runs.nginxOne), tenK: summary(runs.nginxBig) };
      n.ratio = n.oneRoute.errors || n.tenK.errors ? undefined : n.tenK.rps / n.oneRoute.rps;
      results.throughput.nginx = n;
    }
    const loopEndUs = process.hrtime.bigint() / 1000n;
    const buildsAfter = { one: await buildsOf(gwOne.adminPort), big: await buildsOf(gwBig.adminPort) };
    if (ctx.profileDir) {
      log(`  closed loop in the profiles' clock: ${loopStartUs} .. ${loopEndUs} µs; rounds:`);
      for (const [name, r] of Object.entries(runs)) log(`    ${name}: ${r.rounds.map((x) => x.windowUs).join(', ')}`);
    }
    const during = (k) =>
      buildsBefore[k] === undefined || buildsAfter[k] === undefined ? undefined : buildsAfter[k] - buildsBefore[k];
    results.throughput.buildsDuring = { oneRoute: during('one'), tenK: during('big') };
    log('');
    log(
      `  closed loop: ${ctx.tools.wrk ? `wrk -t${ctx.threads}` : 'autocannon'} -c${ctx.connections}, 2 alternating rounds of ${roundSeconds} s each; the big run cycles through all ${count.toLocaleString('en-US')} routes`,
    );
    const counted = count.toLocaleString('en-US');
    const rows = [
      ['1', results.throughput.oneRoute],
      [counted, results.throughput.tenK],
      ...(results.throughput.nginx
        ? [
            ['nginx, 1', results.throughput.nginx.oneRoute],
            [`nginx, ${counted}`, results.throughput.nginx.tenK],
          ]
        : []),
    ];
    table([
      ['routes', 'requests/s', 'p50 (mean)', 'p99 (mean)', 'errors', 'rounds'],
      ...rows.map(([label, x]) => [
        label,
        rps(x.rps),
        ms(x.p50Ms),
        ms(x.p99Ms),
        String(x.errors),
        x.roundsRps.map((v) => Math.round(v)).join(' / '),
      ]),
    ]);
    const us = (a) => a.map((x) => (Number.isFinite(x) ? x.toFixed(1) : 'n/a')).join(' / ');
    log(
      `  CPU per request by round (µs), gateway process: 1 route ${us(results.throughput.oneRoute.gatewayCpuUs)}, ${count.toLocaleString('en-US')} routes ${us(results.throughput.tenK.gatewayCpuUs)}`,
    );
    log(
      `  CPU per request by round (µs), whole machine:   1 route ${us(results.throughput.oneRoute.machineCpuUs)}, ${count.toLocaleString('en-US')} routes ${us(results.throughput.tenK.machineCpuUs)}`,
    );
    log(
      `  route-table builds during the closed loop (servegate_reloads_total): ${count.toLocaleString('en-US')} routes ${results.throughput.buildsDuring.tenK ?? 'n/a'}, 1 route ${results.throughput.buildsDuring.oneRoute ?? 'n/a'}`,
    );
    const ng = results.throughput.nginx;
    if (ng) {
      log(
        `  CPU per request by round (µs), nginx (master + worker): 1 route ${us(ng.oneRoute.gatewayCpuUs)}, ${count.toLocaleString('en-US')} routes ${us(ng.tenK.gatewayCpuUs)}`,
      );
    }
    if (runs.bigHot) {
      results.throughput.tenKOnePath = summary(runs.bigHot);
      const h = results.throughput.tenKOnePath;
      log(
        `  diagnostic: ${count.toLocaleString('en-US')} routes, every request on one path: ${rps(h.rps)} (rounds ${h.roundsRps.map((x) => Math.round(x)).join(' / ')}), gateway CPU per request ${us(h.gatewayCpuUs)} µs`,
      );
    }
    const ok = !results.throughput.oneRoute.errors && !results.throughput.tenK.errors;
    results.throughput.ratio = ok ? results.throughput.tenK.rps / results.throughput.oneRoute.rps : undefined;
    const tenKOverOne = results.throughput.ratio;
    log(
      `  ${count.toLocaleString('en-US')} routes ÷ 1 route = ${ratio(tenKOverOne)}${tenKOverOne > 1.05 ? ' (the big run faster by more than 5 %: noise, not a figure; counted as a miss)' : ''}${ng ? `; nginx with the same routes, same rounds: ${ratio(ng.ratio)}` : ''}`,
    );

    // 3. Memory.
    results.memory = {
      tenK: { ...memoryOf(gwBig.child.pid), ...(await heapOf(gwBig.adminPort)) },
      oneRoute: { ...memoryOf(gwOne.child.pid), ...(await heapOf(gwOne.adminPort)) },
    };
    Object.assign(results.memory.tenK, await liveHeap(gwBig.child));
    Object.assign(results.memory.oneRoute, await liveHeap(gwOne.child));
    const mem = (m) =>
      `RSS ${mb(m?.rss)} (peak ${mb(m?.peak)}, heap used ${mb(m?.heapUsed)}); after a full GC: RSS ${mb(m?.rssAfterGc)}, live heap ${mb(m?.liveHeap)}`;
    log('');
    log(`  memory after the run, ${count.toLocaleString('en-US')} routes: ${mem(results.memory.tenK)}`);
    log(
      `  memory after the run, 1 route: ${' '.repeat(Math.max(0, count.toLocaleString('en-US').length - 1))}${mem(results.memory.oneRoute)}`,
    );

    // 4. Becoming leader with every status to write (a fresh install): the other replica's Lease goes away.
    if (ctx.stormSeconds > 0) {
      const before = statusWrites(bigFake);
      bigFake.delete('coordination.k8s.io/v1', 'Lease', KEYS_NAMESPACE, LEASE_NAME);
      const tStorm = performance.now();
      let firstWriteMs;
      while (performance.now() - tStorm < ctx.stormSeconds * 1000) {
        const n = statusWrites(bigFake) - before;
        if (n > 0 && firstWriteMs === undefined) firstWriteMs = performance.now() - tStorm;
        if (n >= count) break;
        await sleep(100);
      }
      const written = statusWrites(bigFake) - before;
      const seconds = (performance.now() - tStorm) / 1000;
      const rate = firstWriteMs === undefined ? 0 : written / (seconds - firstWriteMs / 1000);
      results.leaderStatusWrites = {
        seconds,
        written,
        firstWriteMs,
        perSecond: rate,
        memory: memoryOf(gwBig.child.pid),
      };
      log('');
      log(
        `  becoming leader (Lease released) with ${count.toLocaleString('en-US')} statuses to write: ${written.toLocaleString('en-US')} written in ${seconds.toFixed(1)} s`,
      );
      log(
        `    (first after ${ms(firstWriteMs)}; ${rate.toFixed(0)}/s${written < count && rate > 0 ? `, all ${count.toLocaleString('en-US')} would take ~${Math.round(count / rate)} s` : ''}); RSS then ${mb(results.leaderStatusWrites.memory?.rss)}, peak ${mb(results.leaderStatusWrites.memory?.peak)}`,
      );
    }

    log('');
    const texts = goalTexts(ctx);
    const e = results.eventToRoute.p99Ms;
    results.goals.eventToRoute = goal(
      texts.eventToRoute,
      `${ms(e)} (p50 ${ms(results.eventToRoute.p50Ms)})`,
      timeouts ? false : e <= 50,
      'B',
    );
    const r = results.throughput.ratio;
    const figure =
      r === undefined
        ? 'n/a'
        : `${ratio(r)} (${r >= 1 ? '+' : '−'}${Math.abs((r - 1) * 100).toFixed(1)} %)${r > 1.05 ? ' faster: noise' : ''}${ng ? `; nginx ${ratio(ng.ratio)}` : ''}`;
    results.goals.throughput = goal(
      texts.throughput,
      ng ? figure : `${figure} [no verdict: no nginx run with the same routes]`,
      r === undefined || !ng ? undefined : r >= ng.ratio,
      'B',
    );
    const m = results.memory.tenK?.rssAfterGc;
    results.goals.memory = goal(texts.memory, mb(m), m === undefined ? undefined : m <= 200 * 1024 * 1024, 'B');
    results.summary = [
      `${count.toLocaleString('en-US')} routes vs 1 route: ${rps(results.throughput.tenK.rps)} vs ${rps(results.throughput.oneRoute.rps)} = ${ratio(r)}${ng ? ` (nginx with the same routes ${ratio(ng.ratio)})` : ''}; watch event → route served p99 ${ms(e)}`,
    ];
    return results;
  } finally {
    for (const child of started.reverse()) await stopProcess(child);
    for (const fake of fakes) await fake.stop().catch(() => undefined);
  }
}
