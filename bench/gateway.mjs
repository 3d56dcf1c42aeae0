// Part A: the gateway data plane against direct-to-backend and nginx, same machine, same backend, same run.
// 1. closed-loop throughput (wrk, else autocannon), 64 connections; 2. added latency at a fixed rate (open loop).
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { request } from 'undici';
import { stringify } from 'yaml';
import { deploymentObject, keySecretObject, makeKey } from './lib/manifests.mjs';
import { BACKEND_BODY, backendConfig, proxyConfig, startNginx } from './lib/nginx.mjs';
import { freePort, groupCpuSeconds, memoryOf, startProcess, stopProcess, waitFor } from './lib/procs.mjs';
import { runAutocannon, runOpenLoop, runWrk, writeWrkScript } from './lib/load.mjs';
import { goal, log, mb, ms, pct, ratio, rps, signedMs, table, us } from './lib/report.mjs';
import { CLI, cliBuilt, heapOf, liveHeap, startGatewayProcess } from './lib/servegate.mjs';

const PROJECT = 'bench';
const DEPLOYMENT = 'iris';
const MODEL_PATH = `/v1/models/${DEPLOYMENT}:predict`;
const BODY = '{"instances":[[6.8,2.8,4.8,1.4]]}';

/** One POST that must answer `status`; used to check each target before load is put on it. */
export async function probe(url, headers, status = 200) {
  const res = await request(url, { method: 'POST', headers, body: BODY });
  const text = await res.body.text();
  if (res.statusCode !== status) throw new Error(`${url}: expected ${status}, got ${res.statusCode}: ${text.slice(0, 200)}`);
  return text;
}

/**
 * Closed-loop throughput: warm-up, then the measured run. With `child`, also the CPU time that process group
 * (the server the client talks to) used during the measured run: share of one core and µs per request.
 */
export async function throughput(ctx, url, child) {
  const load = { method: 'POST', body: BODY, headers: ctx.headers };
  const warm = { connections: ctx.connections, threads: ctx.threads, seconds: ctx.warmupSeconds };
  const run = { ...warm, seconds: ctx.seconds };
  const measure = async (fn) => {
    const cpu0 = child ? groupCpuSeconds(child.pid) : undefined;
    const r = await fn();
    const cpu = child ? groupCpuSeconds(child.pid) - cpu0 : NaN;
    return { ...r, serverCpuShare: cpu / (r.requests / r.rps), serverCpuUsPerRequest: (cpu * 1e6) / r.requests };
  };
  if (ctx.tools.wrk) {
    if (ctx.warmupSeconds > 0) await runWrk(ctx.tools.wrk, ctx.wrkScript, url, warm);
    return measure(() => runWrk(ctx.tools.wrk, ctx.wrkScript, url, run));
  }
  if (ctx.warmupSeconds > 0) await runAutocannon(url, load, warm);
  return measure(() => runAutocannon(url, load, run));
}

/** Fixed-rate load on every target in alternating 1 s slices, after a 1 s warm-up of each on the same connections. */
export async function openLoop(ctx, targets) {
  const load = { targets: targets.map(({ name, url }) => ({ name, url })), method: 'POST', body: BODY, headers: ctx.headers, rate: ctx.rate };
  return runOpenLoop({ ...load, seconds: ctx.rateSeconds, sliceSeconds: 1, warmupSeconds: 1, slowMs: 2 });
}

/** Starts the fixed-JSON backend: nginx with its own workers, else a Node cluster. */
export async function startBackend(ctx, dir) {
  const port = await freePort();
  let child;
  if (ctx.tools.nginx) {
    child = await startNginx(ctx.tools.nginx, dir, 'backend', backendConfig(dir, port, ctx.backendWorkers), port, {
      path: MODEL_PATH,
      method: 'POST',
      body: BODY,
    });
  } else {
    const script = fileURLToPath(new URL('./backend.mjs', import.meta.url));
    child = startProcess('node backend', process.execPath, [script, String(port), String(ctx.backendWorkers)]);
    await waitFor(`node backend on port ${port}`, async () => (await probe(`http://127.0.0.1:${port}${MODEL_PATH}`, {})) === BACKEND_BODY, {
      child,
    });
  }
  return { child, port, kind: ctx.tools.nginx ? `nginx return 200, ${ctx.backendWorkers} workers` : `Node cluster, ${ctx.backendWorkers} workers` };
}

/** A measurement with failed requests is not a figure: no ratio or goal is computed from it. */
function usable(r) {
  return r && !r.errors && !r.non2xx ? r : undefined;
}

/** Says once, loudly, that the gateway process died, with the tail of its output. */
function reportDeath(child, results) {
  if (results.gatewayDied || (child.exitCode === null && child.signalCode === null)) return;
  results.gatewayDied = { exit: child.exitCode ?? child.signalCode, output: child.output.slice(-3000) };
  log(`  ERROR: the servegate process died (exit ${child.exitCode ?? child.signalCode}); its last output:`);
  for (const line of child.output.trim().split('\n').slice(-30)) log(`    ${line}`);
}

export async function runGatewayBench(ctx) {
  const dir = join(ctx.dir, 'gateway');
  mkdirSync(dir, { recursive: true });
  const { key, prefix, sha256 } = makeKey();
  ctx.headers = { 'content-type': 'application/json', authorization: `ApiKey ${key}` };
  ctx.wrkScript = ctx.tools.wrk ? writeWrkScript(dir, { method: 'POST', body: BODY, headers: ctx.headers }) : undefined;
  const results = { targets: {}, openLoop: {}, goals: {} };
  const started = [];
  try {
    // Backend.
    const backend = await startBackend(ctx, dir);
    started.push(backend.child);
    results.backend = backend.kind;
    log(`  backend: ${backend.kind} on 127.0.0.1:${backend.port}`);
    const targets = [{ name: 'direct', url: `http://127.0.0.1:${backend.port}${MODEL_PATH}`, child: backend.child }];

    // nginx reverse proxy.
    if (ctx.tools.nginx) {
      const port = await freePort();
      const conf = proxyConfig(dir, port, backend.port, { project: PROJECT, deployment: DEPLOYMENT, key });
      const url = `http://127.0.0.1:${port}/v1/${PROJECT}/${DEPLOYMENT}${MODEL_PATH}`;
      const child = await startNginx(ctx.tools.nginx, dir, 'proxy', conf, port, { path: url.slice(url.indexOf('/v1/')), method: 'POST', headers: ctx.headers, body: BODY });
      started.push(child);
      await probe(url, { 'content-type': 'application/json' }, 401);
      targets.push({ name: 'nginx', url, child });
      log(`  nginx: worker_processes 1, path strip + API-key map, on 127.0.0.1:${port}`);
    } else {
      log('  nginx: SKIPPED (not installed; apt-get install -y nginx-light)');
    }

    // The gateway.
    let gateway;
    if (cliBuilt()) {
      const manifests = join(dir, 'manifests');
      mkdirSync(manifests, { recursive: true });
      const docs = [
        deploymentObject({ namespace: PROJECT, name: DEPLOYMENT, backend: { url: `http://127.0.0.1:${backend.port}` } }),
        keySecretObject({ name: 'bench-key', prefix, sha256, projects: PROJECT }),
      ];
      writeFileSync(join(manifests, 'bench.yaml'), docs.map((d) => stringify(d)).join('---\n'));
      try {
        gateway = await startGatewayProcess(dir, ['--manifests', manifests], { profileDir: ctx.profileDir && join(ctx.profileDir, 'gateway') });
        started.push(gateway.child);
        const url = `http://127.0.0.1:${gateway.port}/v1/${PROJECT}/${DEPLOYMENT}${MODEL_PATH}`;
        await waitFor('servegate route', async () => (await probe(url, ctx.headers)) !== undefined, { child: gateway.child, timeoutMs: 20_000 });
        await probe(url, { 'content-type': 'application/json' }, 401);
        gateway.url = url;
        targets.push({ name: 'servegate', url, child: gateway.child });
        log(`  servegate: node ${CLI.replace(ctx.root, '')} serve --manifests (1 process) on 127.0.0.1:${gateway.port}`);
      } catch (err) {
        log(`  servegate: FAILED to start or to route: ${err.message}`);
        if (gateway) await stopProcess(gateway.child);
        gateway = undefined;
      }
    } else {
      log(`  servegate: SKIPPED (${CLI} not built; run npx tsc -p .)`);
    }

    // 1. Throughput.
    log('');
    log(`  closed loop: ${ctx.tools.wrk ? `wrk -t${ctx.threads}` : 'autocannon'} -c${ctx.connections}, ${ctx.warmupSeconds} s warm-up + ${ctx.seconds} s, POST ${MODEL_PATH} (${BODY.length} B JSON, valid key)`);
    for (const t of targets) {
      const r = await throughput(ctx, t.url, t.child);
      results.targets[t.name] = r;
      if (r.errors || r.non2xx) log(`  WARNING ${t.name}: ${r.errors} socket errors, ${r.non2xx} non-2xx responses`);
      if (t.name === 'servegate') reportDeath(t.child, results);
      await sleep(500);
    }
    const rows = [['target', 'requests/s', 'p50', 'p99', 'errors', 'server CPU', 'CPU/request']];
    for (const [name, r] of Object.entries(results.targets)) {
      rows.push([name, rps(r.rps), ms(r.p50Ms), ms(r.p99Ms), String(r.errors + r.non2xx), pct(r.serverCpuShare), us(r.serverCpuUsPerRequest)]);
    }
    log('');
    table(rows);
    const gw = usable(results.targets.servegate);
    const ng = usable(results.targets.nginx);
    const di = usable(results.targets.direct);
    results.ratios = {
      gatewayOverNginx: gw && ng ? gw.rps / ng.rps : undefined,
      gatewayOverDirect: gw && di ? gw.rps / di.rps : undefined,
      nginxOverDirect: ng && di ? ng.rps / di.rps : undefined,
    };
    log('');
    log(`  servegate / nginx  = ${ratio(results.ratios.gatewayOverNginx)}`);
    log(`  servegate / direct = ${ratio(results.ratios.gatewayOverDirect)}`);
    log(`  nginx / direct     = ${ratio(results.ratios.nginxOverDirect)}`);
    if (gw && ng) {
      results.ratios.cpuPerRequestNginxOverGateway = ng.serverCpuUsPerRequest / gw.serverCpuUsPerRequest;
      log(`  per core (nginx CPU/request ÷ servegate CPU/request) = ${ratio(results.ratios.cpuPerRequestNginxOverGateway)}`);
      log('  (server CPU: CPU time of the process group the client talks to, in cores; direct = the backend itself)');
    }

    // 2. Added latency at a fixed rate.
    log('');
    log(`  open loop: ${ctx.rate} req/s, ${ctx.rateSeconds} s per target in alternating 1 s slices (after a warm-up), latency from the scheduled send time`);
    results.openLoop = await openLoop(ctx, targets);
    for (const [name, r] of Object.entries(results.openLoop)) {
      if (r.errors || r.non2xx) log(`  WARNING ${name}: ${r.errors} errors (${r.firstError ?? ''}), ${r.non2xx} non-2xx`);
    }
    if (gateway) reportDeath(gateway.child, results);
    const lrows = [['target', 'achieved', 'p50', 'p90', 'p99', 'max', 'p50 service', 'p99 service']];
    for (const [name, r] of Object.entries(results.openLoop)) {
      lrows.push([name, rps(r.achievedRate), ms(r.fromSchedule.p50), ms(r.fromSchedule.p90), ms(r.fromSchedule.p99), ms(r.fromSchedule.max), ms(r.service.p50), ms(r.service.p99)]);
    }
    log('');
    table(lrows);
    const gl = usable(results.openLoop.servegate);
    const dl = usable(results.openLoop.direct);
    results.added = gl && dl ? { p50Ms: gl.fromSchedule.p50 - dl.fromSchedule.p50, p99Ms: gl.fromSchedule.p99 - dl.fromSchedule.p99 } : undefined;
    if (results.added) {
      log('');
      log(`  servegate added latency at ${ctx.rate} req/s: p50 ${signedMs(results.added.p50Ms)}, p99 ${signedMs(results.added.p99Ms)}`);
    }

    // Memory.
    if (gateway && !results.gatewayDied) {
      results.memory = { ...memoryOf(gateway.child.pid), ...(await heapOf(gateway.adminPort)) };
      Object.assign(results.memory, await liveHeap(gateway.child));
      const m = results.memory;
      log(`  servegate memory after the run: RSS ${mb(m.rss)} (peak ${mb(m.peak)}, heap used ${mb(m.heapUsed)}); after a full GC: RSS ${mb(m.rssAfterGc)}, live heap ${mb(m.liveHeap)}`);
    }

    log('');
    const g1 = results.ratios.gatewayOverNginx;
    results.goals.throughput = goal('servegate throughput >= 0.35x nginx', ratio(g1), g1 === undefined ? undefined : g1 >= 0.35);
    const g2 = results.added?.p99Ms;
    results.goals.addedLatency = goal(`p99 added latency <= 1 ms at ${ctx.rate} req/s`, signedMs(g2), g2 === undefined ? undefined : g2 <= 1);
    return results;
  } finally {
    for (const child of started.reverse()) await stopProcess(child);
  }
}
