// Part A: the gateway data plane against direct-to-backend and nginx, same machine, same backend, same run.
// 1. closed-loop throughput and CPU per request (wrk, else autocannon), 64 connections, access log off and on;
// 2. added latency at a fixed rate (open loop); 3. SSE chunks pass unbuffered; 4. RSS over 1,000,000 requests.
// With --baseline-dist <dir> (ctx.baseline), a second gateway from that other build of dist/ ('servegate-old') is an
// extra target of 1-3: its closed loops alternate with the current build's in rounds, and it takes its turn in the
// open-loop slices and the SSE streams, so that the figures of the old and the new build come from the same run.
// Beside them, in the closed loop of the access-log-off mode only: `net` (a raw TCP forwarder, the ceiling of Node's
// socket layer), `bare` (node:http + undici, no checks: the platform's floor) and `fastify` (fastify +
// @fastify/http-proxy with an API-key hook), bench/lib/forwarders.mjs; and an SSE cost measurement (CPU per stream
// and per event, bench/lib/sse-cost.mjs) through every target.
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { request } from 'undici';
import { stringify } from 'yaml';
import { fastifyInstalled, startForwarder } from './lib/forwarders.mjs';
import { deploymentObject, keySecretObject, makeKey } from './lib/manifests.mjs';
import { BACKEND_BODY, backendConfig, proxyConfig, startNginx } from './lib/nginx.mjs';
import {
  countLines,
  cpuSnapshot,
  freePort,
  groupCpuSeconds,
  memoryOf,
  otherCores,
  outputOf,
  schedSampler,
  startProcess,
  stopProcess,
  sumInWindows,
  waitFor,
} from './lib/procs.mjs';
import { runAutocannon, runOpenLoop, runWrk, writeWrkScript } from './lib/load.mjs';
import { cores, goal, log, mb, ms, pct, ratio, rps, signedMs, table, us } from './lib/report.mjs';
import { CLI, cliBuilt, heapOf, imageAllocator, liveHeap, startGateway } from './lib/servegate.mjs';
import { LONG, SHORT, sseCostOf } from './lib/sse-cost.mjs';
import { median, startSseBackend, timeStream } from './lib/sse.mjs';

const PROJECT = 'bench';
const DEPLOYMENT = 'iris';
const MODEL_PATH = `/v1/models/${DEPLOYMENT}:predict`;
const BODY = '{"instances":[[6.8,2.8,4.8,1.4]]}';
const STREAM_DEPLOYMENT = 'chat';
/** The llm deployment behind the sse-burst backend (the SSE cost measurement). */
const BURST_DEPLOYMENT = 'burst';
const STREAM_PATH = '/v1/chat/completions';
const STREAM_BODY = JSON.stringify({
  model: 'bench',
  stream: true,
  messages: [{ role: 'user', content: 'count to 40' }],
});

/** The name of the baseline gateway (--baseline-dist) in the tables and in bench-results.json. */
const OLD = 'servegate-old';

/** The extra closed-loop rows of the access-log-off mode (bench/lib/forwarders.mjs); only `bare` joins the open loop. */
const FORWARDERS = ['net', 'bare', 'fastify'];

/** The two access-log modes, run in this order; the goals are judged on 'off'. */
const MODES = {
  off: { title: 'access log OFF', nginx: 'access_log off' },
  on: { title: 'access log ON', nginx: 'JSON access_log to a file, 64 KB buffer, flush 1 s' },
};

/** The goal lines of this part (also listed as skipped in the summary when the part does not run). */
export function goalTexts(ctx) {
  return {
    cpu: 'CPU per request <= 55 µs (logs off)',
    throughput: 'throughput >= 0.35x nginx (logs off)',
    stretch: 'throughput >= 0.48x nginx (logs off, stretch)',
    addedLatency: `p99 added latency <= 1 ms at ${ctx.rate} req/s`,
    addedVsNginx: `p99 added latency <= 3x nginx's at ${ctx.rate} req/s`,
    addedVsBare: `p99 added latency <= 1.5x the bare forwarder's at ${ctx.rate} req/s`,
    rss: `RSS flat (±10 %) over ${ctx.rssRequests.toLocaleString('en-US')} requests`,
    sse: 'SSE chunks pass unbuffered',
    // Restated after issue 21 (the bare forwarder itself met fastify's ÷ 1.5 in 1 of 8 runs).
    sseCost: "SSE per-event CPU <= the bare node:http + undici forwarder's (same run)",
  };
}

/** One POST that must answer `status`; used to check each target before load is put on it. */
export async function probe(url, headers, status = 200) {
  const res = await request(url, { method: 'POST', headers, body: BODY });
  const text = await res.body.text();
  if (res.statusCode !== status)
    throw new Error(`${url}: expected ${status}, got ${res.statusCode}: ${text.slice(0, 200)}`);
  return text;
}

/** One closed-loop run of `seconds` (wrk, else autocannon) on the POST of the benchmark. */
function closedRun(ctx, url, seconds) {
  const opts = { connections: ctx.connections, threads: ctx.threads, seconds };
  if (ctx.tools.wrk) return runWrk(ctx.tools.wrk, ctx.wrkScript, url, opts);
  return runAutocannon(url, { method: 'POST', body: BODY, headers: ctx.headers }, opts);
}

/**
 * Closed-loop throughput: warm-up, then the measured run. With `child`, also the CPU time that process group
 * (the server the client talks to) used during the measured run: share of one core and µs per request; and
 * always the cores the rest of the machine (not this benchmark) used meanwhile.
 */
export async function throughput(ctx, url, child) {
  const warm = ctx.warmupSeconds > 0 ? await closedRun(ctx, url, ctx.warmupSeconds) : { requests: 0 };
  const snap = cpuSnapshot();
  const cpu0 = child ? groupCpuSeconds(child.pid) : undefined;
  const r = await closedRun(ctx, url, ctx.seconds);
  const cpu = child ? groupCpuSeconds(child.pid) - cpu0 : NaN;
  return {
    ...r,
    warmupRequests: warm.requests,
    serverCpuShare: cpu / (r.requests / r.rps),
    serverCpuUsPerRequest: (cpu * 1e6) / r.requests,
    otherCores: otherCores(snap, cpuSnapshot()),
  };
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
    await waitFor(
      `node backend on port ${port}`,
      async () => (await probe(`http://127.0.0.1:${port}${MODEL_PATH}`, {})) === BACKEND_BODY,
      {
        child,
      },
    );
  }
  return {
    child,
    port,
    kind: ctx.tools.nginx
      ? `nginx return 200, ${ctx.backendWorkers} workers`
      : `Node cluster, ${ctx.backendWorkers} workers`,
  };
}

/** nginx as the comparison proxy in one access-log mode, checked to answer 401 without the key. */
async function startProxy(ctx, dir, backendPort, burstPort, key, mode) {
  const port = await freePort();
  const name = `proxy-log-${mode}`;
  const accessLog = mode === 'on' ? join(dir, `${name}-access.log`) : undefined;
  const conf = proxyConfig(dir, port, backendPort, {
    project: PROJECT,
    deployment: DEPLOYMENT,
    key,
    name,
    accessLog,
    stream: { deployment: BURST_DEPLOYMENT, port: burstPort },
  });
  const url = `http://127.0.0.1:${port}/v1/${PROJECT}/${DEPLOYMENT}${MODEL_PATH}`;
  const child = await startNginx(ctx.tools.nginx, dir, name, conf, port, {
    path: url.slice(url.indexOf('/v1/')),
    method: 'POST',
    headers: ctx.headers,
    body: BODY,
  });
  await probe(url, { 'content-type': 'application/json' }, 401);
  const burstUrl = `http://127.0.0.1:${port}/v1/${PROJECT}/${BURST_DEPLOYMENT}${STREAM_PATH}`;
  return { name: 'nginx', url, burstUrl, child, logFile: accessLog };
}

/**
 * The manifests the gateway serves: the model behind the nginx backend, the chat deployment behind the SSE backend,
 * the burst deployment (llm too) behind the sse-burst backend.
 */
function writeManifests(dir, backendPort, ssePort, burstPort, { prefix, sha256 }) {
  const manifests = join(dir, 'manifests');
  mkdirSync(manifests, { recursive: true });
  const docs = [
    deploymentObject({ namespace: PROJECT, name: DEPLOYMENT, backend: { url: `http://127.0.0.1:${backendPort}` } }),
    deploymentObject({
      namespace: PROJECT,
      name: STREAM_DEPLOYMENT,
      modelServer: 'llm',
      backend: { url: `http://127.0.0.1:${ssePort}` },
    }),
    deploymentObject({
      namespace: PROJECT,
      name: BURST_DEPLOYMENT,
      modelServer: 'llm',
      backend: { url: `http://127.0.0.1:${burstPort}` },
    }),
    keySecretObject({ name: 'bench-key', prefix, sha256, projects: PROJECT }),
  ];
  writeFileSync(join(manifests, 'bench.yaml'), docs.map((d) => stringify(d)).join('---\n'));
  return manifests;
}

/**
 * servegate in one access-log mode (bench/lib/servegate.mjs startGateway), checked to answer 200 with the key, 401
 * without. With `baseline` (bench/lib/servegate.mjs baselineCli), the gateway of that other build instead.
 */
async function startServegate(ctx, dir, manifests, mode, baseline) {
  const base = (gw) => `http://127.0.0.1:${gw.port}/v1/${PROJECT}`;
  const name = `${baseline ? OLD : 'servegate'}-log-${mode}`;
  const gw = await startGateway(dir, ['--manifests', manifests], {
    accessLog: mode === 'on',
    // Both builds run as the container image runs them (jemalloc and its MALLOC_CONF), as in Parts B and E.
    env: imageAllocator().env,
    name,
    cli: baseline?.cli,
    gcLog: join(dir, `${name}-gc.txt`),
    profileDir: ctx.profileDir && join(ctx.profileDir, `gateway${baseline ? '-old' : ''}-log-${mode}`),
    ready: (g) =>
      waitFor(
        'servegate route',
        async () => (await probe(`${base(g)}/${DEPLOYMENT}${MODEL_PATH}`, ctx.headers)) !== undefined,
        { child: g.child, timeoutMs: 20_000 },
      ),
  });
  gw.url = `${base(gw)}/${DEPLOYMENT}${MODEL_PATH}`;
  gw.streamUrl = `${base(gw)}/${STREAM_DEPLOYMENT}${STREAM_PATH}`;
  gw.burstUrl = `${base(gw)}/${BURST_DEPLOYMENT}${STREAM_PATH}`;
  gw.gcLog = join(dir, `${name}-gc.txt`);
  gw.logFile = gw.stdoutFile;
  await probe(gw.url, { 'content-type': 'application/json' }, 401);
  return gw;
}

/**
 * The extra rows of the access-log-off closed loop (bench/lib/forwarders.mjs), each its own child process: `net` to
 * the backend (and `net-sse`, a second one to the sse-burst backend, for the SSE cost), `bare` and `fastify` with a
 * route to each backend. Each is checked to answer 200 with the key, fastify 401 without it. fastify is skipped when
 * not installed, and a row that fails to start is left out; both are said. Resolves [{ name, url, burstUrl, child,
 * burstChild }]; the children are added to `started`.
 */
async function startForwarders(ctx, backendPort, burstPort, sha256, started) {
  const base = `/v1/${PROJECT}`;
  const routes = [
    { prefix: `${base}/${DEPLOYMENT}`, origin: `http://127.0.0.1:${backendPort}` },
    { prefix: `${base}/${BURST_DEPLOYMENT}`, origin: `http://127.0.0.1:${burstPort}` },
  ];
  const specs = {
    net: { mode: 'net', target: backendPort },
    bare: { mode: 'bare', routes },
    fastify: { mode: 'fastify', routes, keys: [sha256] },
  };
  // With servegate's allocator (the image's), so that "servegate − bare" compares code, not allocators.
  const allocator = imageAllocator().env;
  const out = [];
  for (const name of FORWARDERS) {
    if (name === 'fastify' && !fastifyInstalled()) {
      log('  fastify: SKIPPED (not installed; npm install -D fastify @fastify/http-proxy)');
      continue;
    }
    try {
      const port = await freePort();
      const url = `http://127.0.0.1:${port}${base}/${DEPLOYMENT}${MODEL_PATH}`;
      // bare joins the open loop: its garbage per request is counted like servegate's (bench/lib/gc-probe.mjs).
      const gcLog = name === 'bare' ? join(ctx.dir, 'gateway', `${name}-gc.txt`) : undefined;
      const child = await startForwarder(
        name,
        { ...specs[name], port },
        async () => (await probe(url, ctx.headers)) === BACKEND_BODY,
        allocator,
        { gcLog },
      );
      started.push(child);
      if (name === 'fastify') await probe(url, { 'content-type': 'application/json' }, 401);
      const t = {
        name,
        url,
        child,
        gcLog,
        burstUrl: `http://127.0.0.1:${port}${base}/${BURST_DEPLOYMENT}${STREAM_PATH}`,
      };
      if (name === 'net') {
        const ssePort = await freePort();
        t.burstUrl = `http://127.0.0.1:${ssePort}${base}/${BURST_DEPLOYMENT}${STREAM_PATH}`;
        t.burstChild = await startForwarder(
          'net-sse',
          { mode: 'net', target: burstPort, port: ssePort },
          async () => (await probe(t.burstUrl, ctx.headers)) !== undefined,
          allocator,
        );
        started.push(t.burstChild);
      }
      out.push(t);
    } catch (err) {
      log(`  ${name}: FAILED to start: ${err.message}`);
    }
  }
  return out;
}

/** µs with one decimal (per-event figures are a few µs). */
const us1 = (v) => (Number.isFinite(v) ? `${v.toFixed(1)} µs` : 'n/a');

/**
 * SSE cost (bench/lib/sse-cost.mjs) through each target in turn: CPU of its processes per stream of 50 events and of
 * 1 event, and the marginal CPU per event; prints the table. `targets`: [{ name, url, child }] (direct: the sse-burst
 * backend itself). Resolves { [name]: result, settings }.
 */
async function sseCost(ctx, targets, results) {
  const settings = {
    streams: ctx.quick ? 300 : 2000,
    warmup: ctx.quick ? 50 : 300,
    concurrency: 8,
    timeoutMs: (ctx.quick ? 20 : 60) * 1000,
  };
  log('');
  log(
    `  SSE cost: POST ${STREAM_PATH} (stream: true; servegate: an llm deployment) to a backend (bench/lib/forwarders.mjs`,
  );
  log('  sse-burst) that sends K events of 80 B back to back, each its own write, then [DONE]. Per target:');
  log(
    `  ${settings.warmup} streams of warm-up, then ${settings.streams} of K = ${LONG} and ${2 * settings.streams} of K = ${SHORT} (order ${LONG}, ${SHORT}, ${SHORT}, ${LONG}, half each time), ${settings.concurrency} at a time,`,
  );
  log(
    "  keep-alive; CPU of the target's processes, every thread (schedstat, ns; direct: the backend's own); CPU/event",
  );
  log(`  = (CPU per ${LONG}-event stream − per ${SHORT}-event stream) ÷ ${LONG - SHORT}`);
  const out = { settings };
  for (const t of targets) {
    try {
      out[t.name] = await sseCostOf(t, ctx.headers, settings);
    } catch (err) {
      log(`  WARNING ${t.name}: SSE cost failed: ${err.message}`);
    }
    if (t.name === 'servegate') reportDeath(t.child, results);
  }
  const rows = [
    [
      'target',
      `streams/s (K=${LONG})`,
      `CPU/stream K=${LONG}`,
      `CPU/stream K=${SHORT}`,
      'CPU/event',
      'streams lost',
      'other CPU',
    ],
  ];
  for (const t of targets) {
    const r = out[t.name];
    if (!r) continue;
    rows.push([
      t.name,
      rps(r.long.rate),
      us(r.long.cpuUsPerStream),
      us(r.short.cpuUsPerStream),
      us1(r.usPerEvent),
      `${r.lost + r.errors} of ${settings.warmup + r.long.streams + r.short.streams}`,
      cores(r.otherCores),
    ]);
  }
  log('');
  table(rows);
  for (const t of targets) {
    const r = out[t.name];
    if (r?.firstProblem)
      log(`  WARNING ${t.name}: ${r.lost} incomplete streams, ${r.errors} errors; first: ${r.firstProblem}`);
    if (r && r.cpuSource !== 'schedstat')
      log(`  NOTE ${t.name}: schedstat unreadable, CPU from /proc/<pid>/stat in 10 ms ticks (coarse)`);
  }
  if (targets.some((t) => out[t.name]?.otherCores > 0.2))
    log('  WARNING: other processes used the CPU during these runs ("other CPU", in cores): the figures are noisy');
  return out;
}

/** Servegate's CPU per request (logs off) split into the platform's (the bare forwarder's) and its own; undefined without both. */
function platformSplit(results) {
  const off = results.modes.off ?? {};
  const cpu = (name) => usable(off[name])?.serverCpuUsPerRequest;
  const servegate = cpu('servegate');
  const bare = cpu('bare');
  if (servegate === undefined || bare === undefined) return undefined;
  return { servegate, bare, own: servegate - bare, net: cpu('net'), fastify: cpu('fastify'), nginx: cpu('nginx') };
}

/**
 * A measurement with failed requests, or one that served nothing (a ratio against 0 requests/s is Infinity, and would
 * meet any goal), is not a figure: no ratio or goal is computed from it.
 */
function usable(r) {
  return r && !r.errors && !r.non2xx && r.rps > 0 && Number.isFinite(r.rps) ? r : undefined;
}

/**
 * An open-loop run (bench/openloop.mjs) whose latencies mean something: no failed request, the rate reached and a
 * p99 read. Its results carry achievedRate, not rps: usable() would refuse every one, and the tail goals would never
 * be judged.
 */
function usableOpen(r) {
  return r && !r.errors && !r.non2xx && r.achievedRate > 0 && Number.isFinite(r.fromSchedule?.p99) ? r : undefined;
}

/** Why `r` (the run of `name`) is not usable, for the line of a skipped goal. */
function unusable(name, r) {
  if (!r) return `${name} not run`;
  if (r.errors || r.non2xx) return `${name}: ${(r.errors ?? 0) + (r.non2xx ?? 0)} failed requests`;
  return `${name}: ${rps(r.rps)}`;
}

/** Says once, loudly, that the gateway process (or with `key` 'baselineDied', the baseline's) died, with the tail of its output. */
function reportDeath(child, results, key = 'gatewayDied') {
  if (!child || results[key] || (child.exitCode === null && child.signalCode === null)) return;
  results[key] = { exit: child.exitCode ?? child.signalCode, output: outputOf(child, 3000) };
  log(
    `  ERROR: the ${key === 'gatewayDied' ? 'servegate' : OLD} process died (exit ${child.exitCode ?? child.signalCode}); its last output:`,
  );
  for (const line of outputOf(child).trim().split('\n').slice(-30)) log(`    ${line}`);
}

/**
 * Closed loop on the current build and the baseline build in alternating rounds: after a warm-up of each, `rounds`
 * rounds of `roundSeconds` per build (about --seconds in all), in the order new old, old new, new old, ... so that a
 * drift of the machine falls on both alike. Each build's figure sums its rounds (requests, duration, CPU of its
 * process group); p50/p99 are the medians of its rounds (wrk reports percentiles per run). Also returns each
 * round's figures. Resolves { [name]: result } in the shape of throughput().
 */
async function alternatingThroughput(ctx, pair) {
  const roundSeconds = ctx.seconds >= 4 ? 2 : 1;
  const rounds = Math.max(2, Math.round(ctx.seconds / roundSeconds));
  const acc = {};
  for (const t of pair) {
    const warm = ctx.warmupSeconds > 0 ? await closedRun(ctx, t.url, ctx.warmupSeconds) : { requests: 0 };
    acc[t.name] = { warmupRequests: warm.requests, rounds: [] };
  }
  for (let i = 0; i < rounds; i++) {
    for (const t of i % 2 ? [...pair].reverse() : pair) {
      await sleep(300);
      const snap = cpuSnapshot();
      const cpu0 = groupCpuSeconds(t.child.pid);
      const r = await closedRun(ctx, t.url, roundSeconds);
      const cpu = groupCpuSeconds(t.child.pid) - cpu0;
      acc[t.name].rounds.push({ ...r, seconds: r.requests / r.rps, cpu, otherCores: otherCores(snap, cpuSnapshot()) });
    }
  }
  const out = {};
  for (const [name, a] of Object.entries(acc)) {
    const sum = (k) => a.rounds.reduce((s, x) => s + (Number.isFinite(x[k]) ? x[k] : 0), 0);
    const requests = sum('requests');
    const seconds = sum('seconds');
    const cpu = sum('cpu');
    out[name] = {
      rps: requests / seconds,
      p50Ms: median(a.rounds.map((x) => x.p50Ms)),
      p99Ms: median(a.rounds.map((x) => x.p99Ms)),
      requests,
      errors: sum('errors'),
      non2xx: sum('non2xx'),
      warmupRequests: a.warmupRequests,
      serverCpuShare: cpu / seconds,
      serverCpuUsPerRequest: (cpu * 1e6) / requests,
      otherCores: a.rounds.reduce((s, x) => s + x.otherCores * x.seconds, 0) / seconds,
      rounds: a.rounds.map((x) => ({
        rps: x.rps,
        p99Ms: x.p99Ms,
        requests: x.requests,
        cpuUsPerRequest: (x.cpu * 1e6) / x.requests,
        otherCores: x.otherCores,
      })),
      roundSeconds,
    };
  }
  return out;
}

/**
 * The closed-loop runs of one access-log mode, one target after the other (with a baseline build, the two
 * servegate builds last, in alternating rounds: alternatingThroughput); prints their table.
 */
async function closedLoopMode(ctx, mode, targets, results) {
  const out = {};
  const pair = ['servegate', OLD].map((n) => targets.find((t) => t.name === n));
  const alternate = pair.every(Boolean);
  for (const t of alternate ? targets.filter((x) => !pair.includes(x)) : targets) {
    const r = await throughput(ctx, t.url, t.child);
    out[t.name] = r;
    if (t.name === 'servegate') reportDeath(t.child, results);
    if (t.name === OLD) reportDeath(t.child, results, 'baselineDied');
    await sleep(500);
  }
  if (alternate) {
    Object.assign(out, await alternatingThroughput(ctx, pair));
    reportDeath(pair[0].child, results);
    reportDeath(pair[1].child, results, 'baselineDied');
  }
  for (const [name, r] of Object.entries(out))
    if (r.errors || r.non2xx) log(`  WARNING ${name}: ${r.errors} socket errors, ${r.non2xx} non-2xx responses`);
  log('');
  const old = targets.find((t) => t.name === OLD);
  log(
    `  (${mode === 'off' ? 'a' : 'b'}) ${MODES[mode].title}: nginx ${MODES[mode].nginx}; servegate ${targets.find((t) => t.name === 'servegate')?.logMode ?? 'not running'}${old ? `; ${OLD} ${old.logMode}` : ''}`,
  );
  if (alternate) {
    const r = out.servegate;
    log(
      `  (servegate and ${OLD}: ${ctx.warmupSeconds} s warm-up each, then ${r.rounds.length} rounds of ${r.roundSeconds} s each in alternating order; p50/p99 = median of the rounds)`,
    );
  }
  const rows = [['target', 'requests/s', 'p50', 'p99', 'errors', 'server CPU', 'CPU/request', 'other CPU']];
  for (const [name, r] of Object.entries(out)) {
    rows.push([
      name,
      rps(r.rps),
      ms(r.p50Ms),
      ms(r.p99Ms),
      String(r.errors + r.non2xx),
      pct(r.serverCpuShare),
      us(r.serverCpuUsPerRequest),
      cores(r.otherCores),
    ]);
  }
  table(rows);
  const noisy = Object.values(out).filter((r) => r.otherCores > 0.2);
  if (noisy.length)
    log('  WARNING: other processes used the CPU during these runs ("other CPU", in cores): the figures are noisy');
  return out;
}

/** Access-log lines written per request (servegate: its stdout file; nginx: its access log), to show the mode is what it says. */
function logLinesPerRequest(target, r) {
  if (!target?.logFile || !r) return undefined;
  const lines = countLines(target.logFile);
  return lines === undefined ? undefined : lines / (r.requests + r.warmupRequests);
}

/** Throughput and CPU per request of servegate against nginx in one mode. */
function versusNginx(mode) {
  const gw = usable(mode?.servegate);
  const ng = usable(mode?.nginx);
  if (!gw || !ng) return undefined;
  return {
    throughput: gw.rps / ng.rps,
    cpuNginxOverGateway: ng.serverCpuUsPerRequest / gw.serverCpuUsPerRequest,
    gw,
    ng,
  };
}

function printComparison(results) {
  log('');
  const rows = [
    [
      'servegate vs nginx',
      'servegate/s',
      'nginx/s',
      'throughput',
      'servegate CPU/req',
      'nginx CPU/req',
      'nginx÷servegate CPU',
    ],
  ];
  for (const mode of Object.keys(MODES)) {
    const v = results.ratios[mode];
    if (!v) continue;
    rows.push([
      MODES[mode].title,
      rps(v.gw.rps),
      rps(v.ng.rps),
      ratio(v.throughput),
      us(v.gw.serverCpuUsPerRequest),
      us(v.ng.serverCpuUsPerRequest),
      ratio(v.cpuNginxOverGateway),
    ]);
  }
  if (rows.length > 1) table(rows);
  else log('  servegate vs nginx: n/a (no usable run of both)');
  const off = results.modes.off ?? {};
  const di = usable(off.direct);
  if (di)
    log(
      `  logs off, against direct: servegate ${ratio(usable(off.servegate)?.rps / di.rps)}, nginx ${ratio(usable(off.nginx)?.rps / di.rps)}`,
    );
  log('  (server CPU: CPU time of the process group the client talks to, in cores; direct = the backend itself;');
  log("   other CPU: cores used meanwhile by processes that are not this benchmark's)");
  const split = platformSplit(results);
  if (split) {
    log(
      `  servegate CPU/request (logs off) ${us(split.servegate)} = platform (bare forwarder: node:http + undici) ${us(split.bare)} + servegate's own (servegate − bare) ${us(split.own)}`,
    );
    log(
      `  ceiling of Node's socket layer (net: raw TCP forwarder) ${us(split.net)}; fastify + @fastify/http-proxy ${us(split.fastify)}; nginx ${us(split.nginx)}`,
    );
  }
  for (const mode of Object.keys(MODES)) {
    const lines = results.logLines?.[mode];
    if (!lines) continue;
    const f = (v) => (v === undefined ? 'n/a' : v.toFixed(2));
    log(
      `  ${MODES[mode].title}: access-log lines per request: servegate ${f(lines.servegate)}, nginx ${f(lines.nginx)}${OLD in lines ? `, ${OLD} ${f(lines[OLD])}` : ''}`,
    );
  }
}

/** The current build against the baseline build (--baseline-dist) in one mode, from the alternating rounds. */
function versusBaseline(mode) {
  const n = usable(mode?.servegate);
  const o = usable(mode?.[OLD]);
  if (!n || !o) return undefined;
  const perRound = n.rounds?.map((r, i) => r.cpuUsPerRequest / o.rounds[i]?.cpuUsPerRequest) ?? [];
  return {
    cpuNewOverOld: n.serverCpuUsPerRequest / o.serverCpuUsPerRequest,
    throughputNewOverOld: n.rps / o.rps,
    cpuNewOverOldByRound: perRound,
    newCpuUs: n.serverCpuUsPerRequest,
    oldCpuUs: o.serverCpuUsPerRequest,
    newRps: n.rps,
    oldRps: o.rps,
  };
}

/** Prints the table "new build vs old build" (closed loop, both log modes) with the per-round spread. */
function printBaselineComparison(ctx, results) {
  log('');
  log(
    `  servegate (this build, dist/) vs ${OLD} (--baseline-dist ${ctx.baseline.label}), same run, alternating rounds:`,
  );
  const rows = [
    [
      'closed loop',
      'new CPU/req',
      'old CPU/req',
      'new÷old CPU',
      'rounds new÷old CPU',
      'new/s',
      'old/s',
      'new÷old req/s',
    ],
  ];
  for (const mode of Object.keys(MODES)) {
    const v = results.baseline.closedLoop[mode];
    if (!v) continue;
    const spread = v.cpuNewOverOldByRound.filter(Number.isFinite);
    rows.push([
      MODES[mode].title,
      us(v.newCpuUs),
      us(v.oldCpuUs),
      ratio(v.cpuNewOverOld),
      spread.length ? `${ratio(Math.min(...spread))}–${ratio(Math.max(...spread))}` : 'n/a',
      rps(v.newRps),
      rps(v.oldRps),
      ratio(v.throughputNewOverOld),
    ]);
  }
  if (rows.length > 1) table(rows);
  else log(`  servegate vs ${OLD}: n/a (no usable run of both)`);
  log('  (new÷old CPU below 1.00× = the new build uses less CPU per request; the rounds column is the spread of the');
  log('   same ratio round by round: a difference inside it is noise)');
}

/** GC events of the gateway (bench/lib/gc-probe.mjs lines): [{ at (epoch ms), kind, ms, flags }]. */
function readGcLog(file) {
  return readProbeLines(file)
    ?.filter((l) => l[1] !== 'alloc')
    .map(([at, kind, pause, flags]) => ({ at: Number(at), kind, ms: Number(pause), flags: Number(flags) }));
}

/** The probe's allocation samples: [{ at (epoch ms), bytes allocated since the sample before }]. */
function readAllocLog(file) {
  return readProbeLines(file)
    ?.filter((l) => l[1] === 'alloc')
    .map(([at, , bytes]) => ({ at: Number(at), bytes: Number(bytes) }));
}

function readProbeLines(file) {
  let text = '';
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    return undefined;
  }
  return text
    .trim()
    .split('\n')
    .filter(Boolean)
    .map((l) => l.split(' '));
}

/** GC pauses of the gateway inside the given [from, to] epoch windows: count, total and max pause per kind. */
function gcInWindows(events, windows) {
  const byKind = {};
  for (const e of events) {
    if (!windows.some(([a, b]) => e.at >= a && e.at < b)) continue;
    const k = (byKind[e.kind] ??= { count: 0, totalMs: 0, maxMs: 0 });
    k.count++;
    k.totalMs += e.ms;
    k.maxMs = Math.max(k.maxMs, e.ms);
  }
  return byKind;
}

/** How many of the sampled slow requests overlapped a GC pause of the gateway (1 ms clock slack). */
function slowDuringGc(events, r) {
  if (!r.slow?.length) return { slow: 0, duringGc: 0 };
  let duringGc = 0;
  for (const [offset, service] of r.slow) {
    const from = r.measuredStartEpochMs + offset - 1;
    const to = from + service + 2;
    if (events.some((e) => e.at < to && e.at + e.ms > from && e.ms >= 0.5)) duringGc++;
  }
  return { slow: r.slow.length, duringGc };
}

/**
 * Before the open loop: the old way (--cold-openloop: right after a closed loop on the gateway, 1 s warm-up), or a
 * settle period, a full GC forced in the gateway and a warm-up at the target rate. Returns the warm-up seconds.
 */
async function prepareOpenLoop(ctx, gateway, results, baselineGw) {
  if (ctx.coldOpenLoop) {
    if (baselineGw) await closedRun(ctx, baselineGw.url, ctx.seconds);
    if (gateway) await closedRun(ctx, gateway.url, ctx.seconds);
    log(
      `  (--cold-openloop: right after a ${ctx.seconds} s closed loop on ${baselineGw ? `${OLD} then ` : ''}servegate, 1 s warm-up per target, no settle, no forced GC)`,
    );
    return 1;
  }
  await sleep(ctx.settleSeconds * 1000);
  const gc = gateway && (await liveHeap(gateway.child));
  results.beforeOpenLoop = gc;
  const oldGc = baselineGw && (await liveHeap(baselineGw.child));
  if (baselineGw) results.baseline.beforeOpenLoop = oldGc;
  log(
    `  before it: ${ctx.settleSeconds} s idle, then a full GC forced in servegate (live heap ${mb(gc?.liveHeap)}, RSS ${mb(gc?.rssAfterGc)})${baselineGw ? ` and in ${OLD} (live heap ${mb(oldGc?.liveHeap)}, RSS ${mb(oldGc?.rssAfterGc)})` : ''}, then ${ctx.openLoopWarmup} s per target at the rate (not recorded)`,
  );
  return ctx.openLoopWarmup;
}

/** Fixed-rate load on every target in alternating 1 s slices, after preparing (see above); prints the tables. */
async function addedLatency(ctx, targets, gateway, results, baselineGw) {
  log('');
  log(
    `  open loop: ${ctx.rate} req/s, ${ctx.rateSeconds} s per target in alternating 1 s slices, latency from the scheduled send time`,
  );
  const warmupSeconds = await prepareOpenLoop(ctx, gateway, results, baselineGw);
  const load = {
    targets: targets.map(({ name, url }) => ({ name, url })),
    method: 'POST',
    body: BODY,
    headers: ctx.headers,
    rate: ctx.rate,
  };
  const sched = gateway && schedSampler(gateway.child.pid);
  const snap = cpuSnapshot();
  const runs = await runOpenLoop({
    ...load,
    seconds: ctx.rateSeconds,
    sliceSeconds: 1,
    warmupSeconds,
    slowMs: 2,
    gcLog: join(ctx.dir, 'gateway', 'openloop-gc.txt'),
  });
  const schedSamples = sched?.stop();
  results.openLoopOtherCores = otherCores(snap, cpuSnapshot());
  results.openLoop = runs;
  for (const [name, r] of Object.entries(runs)) {
    if (r.errors || r.non2xx) log(`  WARNING ${name}: ${r.errors} errors (${r.firstError ?? ''}), ${r.non2xx} non-2xx`);
  }
  reportDeath(gateway?.child, results);
  reportDeath(baselineGw?.child, results, 'baselineDied');
  const rows = [['target', 'achieved', 'p50', 'p90', 'p99', 'max', 'p50 service', 'p99 service', 'new conns']];
  for (const [name, r] of Object.entries(runs)) {
    rows.push([
      name,
      rps(r.achievedRate),
      ms(r.fromSchedule.p50),
      ms(r.fromSchedule.p90),
      ms(r.fromSchedule.p99),
      ms(r.fromSchedule.max),
      ms(r.service.p50),
      ms(r.service.p99),
      String(r.connections?.measured ?? 'n/a'),
    ]);
  }
  log('');
  table(rows);
  log('  (new conns: connections the generator opened while measuring, after those of the warm-up)');
  const other = results.openLoopOtherCores;
  log(
    `  other processes (not this benchmark's) used ${cores(other)} cores during the open loop${other > 0.2 ? ' (WARNING: noisy)' : ''}`,
  );
  for (const [name, r] of Object.entries(runs)) {
    log(
      `  ${name.padEnd(baselineGw ? OLD.length : 9)} by slice, p99: ${r.bySlice.p99.map((v) => v.toFixed(1)).join(' ')} ms; slower than 2 ms: ${r.bySlice.slow.join(' ')}`,
    );
  }
  await sleep(600); // the gateway writes its GC lines every 500 ms
  explainTail(ctx, gateway, runs, schedSamples, results);
  const gcLogs = {
    servegate: gateway?.gcLog,
    [OLD]: baselineGw?.gcLog,
    bare: targets.find((t) => t.name === 'bare')?.gcLog,
  };
  results.garbage = garbagePerRequest(runs, gcLogs);
  printGarbage(results.garbage);
  const gl = usableOpen(runs.servegate);
  const dl = usableOpen(runs.direct);
  results.added =
    gl && dl
      ? { p50Ms: gl.fromSchedule.p50 - dl.fromSchedule.p50, p99Ms: gl.fromSchedule.p99 - dl.fromSchedule.p99 }
      : undefined;
  const nl = usableOpen(runs.nginx);
  if (results.added && nl) results.added.nginxP99Ms = nl.fromSchedule.p99 - dl.fromSchedule.p99;
  // The bare forwarder (node:http + undici, no checks) in the same slices: the platform's share of the tail.
  const bl = usableOpen(runs.bare);
  if (results.added && bl) results.added.bareP99Ms = bl.fromSchedule.p99 - dl.fromSchedule.p99;
  if (results.added) {
    const others = [
      results.added.nginxP99Ms === undefined ? '' : `nginx p99 ${signedMs(results.added.nginxP99Ms)}`,
      results.added.bareP99Ms === undefined ? '' : `bare forwarder p99 ${signedMs(results.added.bareP99Ms)}`,
    ].filter(Boolean);
    log('');
    log(
      `  servegate added latency at ${ctx.rate} req/s: p50 ${signedMs(results.added.p50Ms)}, p99 ${signedMs(results.added.p99Ms)}${others.length ? ` (${others.join(', ')})` : ''}`,
    );
  }
  const ol = usableOpen(runs[OLD]);
  if (baselineGw) {
    results.baseline.added =
      ol && dl
        ? { p50Ms: ol.fromSchedule.p50 - dl.fromSchedule.p50, p99Ms: ol.fromSchedule.p99 - dl.fromSchedule.p99 }
        : undefined;
    const a = results.baseline.added;
    log(
      `  ${OLD} added latency at ${ctx.rate} req/s: p50 ${signedMs(a?.p50Ms)}, p99 ${signedMs(a?.p99Ms)} (servegate p99 ${ms(gl?.fromSchedule.p99)} vs ${OLD} ${ms(ol?.fromSchedule.p99)}, same slices)`,
    );
  }
}

/**
 * The garbage of a request in each Node target of the open loop (servegate, the old build, the bare forwarder), from
 * its GC probe (bench/lib/gc-probe.mjs) while its slices were measured: GCs and GC pause time per 1,000 requests,
 * bytes of JS heap allocated per request, and how many of the sampled slow requests overlapped a GC pause. At a fixed
 * rate these move far less with the rest of the machine than the p99 does. A process serves requests only in its
 * own slices, so an allocation sample (100 ms) counts when it overlaps one of them. Resolves { [name]: figures }.
 */
function garbagePerRequest(runs, gcLogs) {
  const out = {};
  for (const [name, file] of Object.entries(gcLogs)) {
    const r = runs[name];
    const events = file && r && readGcLog(file);
    if (!events) continue;
    const requests = r.ok + r.non2xx;
    const windows = r.windows.map(([a, b]) => [a, b + 20]);
    const byKind = gcInWindows(events, windows);
    const samples = readAllocLog(file) ?? [];
    let bytes = 0;
    let sampled = 0;
    for (let i = 1; i < samples.length; i++) {
      const [from, to] = [samples[i - 1].at, samples[i].at];
      if (!windows.some(([a, b]) => from < b && to > a)) continue;
      bytes += samples[i].bytes;
      sampled++;
    }
    const count = (k) => byKind[k]?.count ?? 0;
    const pauseMs = Object.values(byKind).reduce((sum, k) => sum + k.totalMs, 0);
    const maxMs = Math.max(0, ...Object.values(byKind).map((k) => k.maxMs));
    out[name] = {
      requests,
      minorPer1k: (1000 * count('minor')) / requests,
      majorPer1k: (1000 * count('major')) / requests,
      pauseMsPer1k: (1000 * pauseMs) / requests,
      maxPauseMs: maxMs,
      bytesPerRequest: sampled ? bytes / requests : NaN,
      slow: slowDuringGc(events, r),
      slowCount: r.slowCount,
    };
  }
  return out;
}

function printGarbage(garbage) {
  const names = Object.keys(garbage);
  if (!names.length) return;
  log('');
  log("  garbage per request while each Node target's slices were measured (its GC probe; JS heap only):");
  const rows = [
    [
      'target',
      'requests',
      'scavenges/1k',
      'major GCs/1k',
      'GC pause/1k',
      'max pause',
      'KB alloc/request',
      'MB per scavenge',
      'slow (>2 ms) during a GC',
    ],
  ];
  for (const name of names) {
    const g = garbage[name];
    rows.push([
      name,
      g.requests.toLocaleString('en-US'),
      g.minorPer1k.toFixed(2),
      g.majorPer1k.toFixed(2),
      ms(g.pauseMsPer1k),
      ms(g.maxPauseMs),
      Number.isFinite(g.bytesPerRequest) ? (g.bytesPerRequest / 1024).toFixed(1) : 'n/a',
      // What the young generation held between two scavenges: V8 sizes it from the allocation rate and what
      // survives, so the scavenges per request move with it even when the bytes per request do not.
      g.minorPer1k > 0 ? ((g.bytesPerRequest * 1000) / g.minorPer1k / 1024 / 1024).toFixed(1) : 'n/a',
      `${g.slow.duringGc} of ${g.slow.slow} drawn (of ${g.slowCount})`,
    ]);
  }
  table(rows);
  const n = garbage.servegate;
  const o = garbage[OLD];
  if (n && o)
    log(
      `  servegate ÷ ${OLD}: KB allocated per request ${ratio(n.bytesPerRequest / o.bytesPerRequest)}, scavenges per 1,000 requests ${ratio(n.minorPer1k / o.minorPer1k)}, GC pause per 1,000 requests ${ratio(n.pauseMsPer1k / o.pauseMsPer1k)}`,
    );
}

/**
 * Where the servegate tail comes from, while its slices were measured: GC pauses of the gateway, time its main
 * thread was runnable but waiting for a CPU (other processes on the cores), GC pauses of the load generator.
 */
function explainTail(ctx, gateway, runs, schedSamples, results) {
  const r = runs.servegate;
  const events = gateway && r && readGcLog(gateway.gcLog);
  if (!events) return;
  const windows = r.windows.map(([a, b]) => [a, b + 20]);
  const inside = gcInWindows(events, windows);
  const slow = slowDuringGc(events, r);
  const waitMs = schedSamples?.length > 1 ? sumInWindows(schedSamples, 'waitNs', r.windows) / 1e6 : NaN;
  const runMs = schedSamples?.length > 1 ? sumInWindows(schedSamples, 'runNs', r.windows) / 1e6 : NaN;
  const generator = readGcLog(join(ctx.dir, 'gateway', 'openloop-gc.txt'));
  const genInside = generator ? gcInWindows(generator, windows) : {};
  results.openLoopTail = { gc: inside, slow, mainThread: { runMs, waitMs }, generatorGc: genInside };
  const kinds = (byKind) =>
    Object.entries(byKind)
      .map(([k, v]) => `${v.count} ${k} (max ${v.maxMs.toFixed(1)} ms, total ${v.totalMs.toFixed(0)} ms)`)
      .join(', ') || 'none';
  log(`  during servegate's ${r.windows.length} measured slices:`);
  log(`    servegate GC pauses: ${kinds(inside)}`);
  const perRequest = (runMs * 1000) / (r.ok + r.non2xx);
  results.openLoopTail.mainThread.usPerRequest = perRequest;
  log(
    `    servegate main thread: ${runMs.toFixed(0)} ms on a CPU (${us(perRequest)} per request), ${waitMs.toFixed(0)} ms runnable but waiting for a CPU (busy cores)`,
  );
  const fds = (schedSamples ?? []).filter((x) => r.windows.some(([a, b]) => x.at >= a && x.at <= b)).map((x) => x.fds);
  if (fds.length)
    log(
      `    servegate open file descriptors (client + backend sockets): ${Math.min(...fds)}–${Math.max(...fds)} (${schedSamples[0].fds} before the open loop)`,
    );
  log(`    load generator GC pauses: ${kinds(genInside)}`);
  log(
    `    requests slower than 2 ms (service): ${r.slowCount}; of ${slow.slow} drawn at random among them, ${slow.duringGc} overlapped a GC pause of servegate`,
  );
}

/** Streams from the SSE backend, direct and through the gateway in turn: median gap between events, first event. */
async function sseCheck(ctx, sse, gateway, baselineGw) {
  const rounds = ctx.quick ? 1 : 3;
  const runs = { direct: [], servegate: [], ...(baselineGw ? { [OLD]: [] } : {}) };
  const url = {
    direct: `http://127.0.0.1:${sse.port}${STREAM_PATH}`,
    servegate: gateway.streamUrl,
    [OLD]: baselineGw?.streamUrl,
  };
  for (let i = 0; i < rounds; i++) {
    for (const name of Object.keys(runs)) runs[name].push(await timeStream(url[name], ctx.headers, STREAM_BODY));
  }
  const sum = (list) => ({
    statuses: [...new Set(list.map((x) => x.status))],
    events: Math.min(...list.map((x) => x.arrivals.length)),
    medianGapMs: median(list.flatMap((x) => x.gaps)),
    firstMs: median(list.map((x) => x.firstMs)),
    lastMs: median(list.map((x) => x.arrivals.at(-1))),
  });
  const out = { direct: sum(runs.direct), servegate: sum(runs.servegate), gapMs: sse.gapMs, chunks: sse.chunks + 1 };
  if (baselineGw) out[OLD] = sum(runs[OLD]);
  const gw = out.servegate;
  const d = out.direct;
  out.unbuffered =
    gw.statuses.length === 1 &&
    gw.statuses[0] === 200 &&
    gw.events === out.chunks &&
    Math.abs(gw.medianGapMs - d.medianGapMs) <= 0.25 * sse.gapMs &&
    gw.firstMs <= d.firstMs + 2 * sse.gapMs;
  log('');
  log(
    `  SSE: POST ${STREAM_PATH} (stream: true) to an llm deployment whose backend sends ${sse.chunks} events ${sse.gapMs} ms apart, then [DONE]; ${rounds} stream(s) each`,
  );
  table([
    ['path', 'status', 'events', 'median gap', 'first event', 'last event'],
    ['direct', d.statuses.join(','), String(d.events), ms(d.medianGapMs), ms(d.firstMs), ms(d.lastMs)],
    ...[
      ['servegate', gw],
      [OLD, out[OLD]],
    ]
      .filter(([, x]) => x)
      .map(([name, x]) => [
        name,
        x.statuses.join(','),
        String(x.events),
        ms(x.medianGapMs),
        ms(x.firstMs),
        ms(x.lastMs),
      ]),
  ]);
  return out;
}

/** Chunks after the warm-up below which the RSS goal is skipped, not judged. */
const RSS_MIN_CHUNKS = 3;

/**
 * RSS of the gateway over `ctx.rssRequests` requests: closed loop in chunks of about a tenth each (exact counts from
 * the load tool), RSS sampled every 250 ms. The first chunk is the warm-up. Each later chunk gives its mean RSS (the
 * GC sawtooth mostly averaged out): flat when the last is within ±10 % of the first (no growth; the highest single
 * sample, GC slack included, is shown next to them).
 */
async function rssOverRequests(ctx, gateway, startRps) {
  const total = ctx.rssRequests;
  const step = Math.max(1, Math.round(total / 10));
  const pid = gateway.child.pid;
  let samples = [];
  const timer = setInterval(() => {
    const m = memoryOf(pid);
    if (m) samples.push(m.rss);
  }, 250);
  const chunks = [];
  let done = 0;
  let rate = startRps || 5000;
  const deadline = Date.now() + Math.max(60, (3 * total) / rate) * 1000;
  try {
    while (done < total && Date.now() < deadline) {
      const seconds = Math.max(1, Math.round(Math.min(step, total - done) / rate));
      const r = await closedRun(ctx, gateway.url, seconds);
      done += r.requests;
      rate = r.rps || rate;
      const rss = samples.length ? samples : [memoryOf(pid)?.rss];
      chunks.push({
        requests: done,
        meanRss: rss.reduce((a, b) => a + b, 0) / rss.length,
        maxRss: Math.max(...rss),
        rps: r.rps,
        errors: r.errors + r.non2xx,
      });
      samples = [];
      if (r.errors + r.non2xx || gateway.child.exitCode !== null) break;
    }
  } finally {
    clearInterval(timer);
  }
  const after = chunks.slice(1);
  const first = after[0]?.meanRss;
  const last = after.at(-1)?.meanRss;
  const max = Math.max(...after.map((c) => c.maxRss));
  const complete = done >= total && chunks.every((c) => !c.errors) && after.length > 0;
  // A trend needs chunks to compare: with fewer than three after the warm-up, "last within 10 % of first" is the same
  // chunk or two neighbours, and says nothing about growth over the run.
  const enough = after.length >= RSS_MIN_CHUNKS;
  const flat = complete && enough ? Math.abs(last / first - 1) <= 0.1 : undefined;
  return {
    requests: done,
    step,
    chunks,
    first,
    last,
    max,
    flat,
    why: !complete
      ? 'failed requests or too few made'
      : enough
        ? undefined
        : `${after.length} chunk${after.length === 1 ? '' : 's'} after the warm-up, ${RSS_MIN_CHUNKS} needed`,
    lastOverFirst: last / first - 1,
    maxOverFirst: max / first - 1,
  };
}

function printRss(ctx, rss) {
  log('');
  log(
    `  RSS over ${rss.requests.toLocaleString('en-US')} requests: closed loop in chunks of ~${rss.step.toLocaleString('en-US')} (the first is the warm-up), RSS every 250 ms; mean RSS of each chunk:`,
  );
  log(
    `    ${rss.chunks.map((c) => `${Math.round(c.requests / 1000)}k ${(c.meanRss / 1024 / 1024).toFixed(1)}`).join(' · ')} MB`,
  );
  const f = (v) => `${v >= 0 ? '+' : '−'}${Math.abs(v * 100).toFixed(1)} %`;
  log(
    `    first (after the warm-up) ${mb(rss.first)}, last ${mb(rss.last)} (${f(rss.lastOverFirst)}), max sample ${mb(rss.max)} (${f(rss.maxOverFirst)})`,
  );
  const errors = rss.chunks.reduce((s, c) => s + c.errors, 0);
  if (errors) log(`    WARNING: ${errors} failed requests; stopped there`);
  if (rss.requests < ctx.rssRequests)
    log(
      `    WARNING: only ${rss.requests.toLocaleString('en-US')} of ${ctx.rssRequests.toLocaleString('en-US')} requests were made`,
    );
}

/** The goal lines of the part, judged on the access-log-off runs. */
function judge(ctx, results) {
  const texts = goalTexts(ctx);
  const v = results.ratios.off;
  const fallback = results.logModeOff?.fallback ? ' [logLevel warn]' : '';
  const cpu = usable(results.modes.off?.servegate)?.serverCpuUsPerRequest;
  const nginxCpu = usable(results.modes.off?.nginx)?.serverCpuUsPerRequest;
  const cpuFigure =
    cpu === undefined ? 'n/a' : `${us(cpu)}${nginxCpu === undefined ? '' : ` (nginx ${us(nginxCpu)})`}${fallback}`;
  // A CPU reading of 0 or less (the process group's ticks not read) measures nothing: no verdict.
  results.goals.cpu = goal(
    texts.cpu,
    cpu !== undefined && !(cpu > 0) ? `${cpuFigure} [no verdict: no CPU read]` : cpuFigure,
    cpu === undefined || !(cpu > 0) ? undefined : cpu <= 55,
    'A',
  );
  const t = v?.throughput;
  const figure = v
    ? `${ratio(t)} (${rps(v.gw.rps)} vs ${rps(v.ng.rps)})${fallback}`
    : `n/a (${[
        usable(results.modes.off?.servegate) ? undefined : unusable('servegate', results.modes.off?.servegate),
        usable(results.modes.off?.nginx) ? undefined : unusable('nginx', results.modes.off?.nginx),
      ]
        .filter(Boolean)
        .join('; ')})`;
  results.goals.throughput = goal(texts.throughput, figure, t === undefined ? undefined : t >= 0.35, 'A');
  results.goals.stretch = goal(texts.stretch, ratio(t), t === undefined ? undefined : t >= 0.48, 'A');
  const a = results.added?.p99Ms;
  results.goals.addedLatency = goal(
    texts.addedLatency,
    `${signedMs(a)} (p50 ${signedMs(results.added?.p50Ms)})`,
    a === undefined ? undefined : a <= 1,
    'A',
  );
  const n = results.added?.nginxP99Ms;
  const b = results.added?.bareP99Ms;
  // Where the bare node:http + undici forwarder itself adds more than 3x nginx's p99, the goal sits below the platform.
  const platform =
    b === undefined || n === undefined || !(n > 0)
      ? ''
      : `; bare forwarder ${ratio(b / n)} nginx's${b > 3 * n ? ': below what node:http + undici reaches in this run' : ''}`;
  results.goals.addedVsNginx = goal(
    texts.addedVsNginx,
    n === undefined
      ? 'n/a (no usable nginx run)'
      : `${signedMs(a)} vs nginx ${signedMs(n)}${b === undefined ? '' : ` (bare ${signedMs(b)}${platform})`}`,
    a === undefined || n === undefined ? undefined : a <= 3 * Math.max(n, 0),
    'A',
  );
  // A bare forwarder's added p99 at or below 0 (noise: its slices beat direct's) leaves nothing to be within.
  const bare = results.added?.bareP99Ms;
  results.goals.addedVsBare = goal(
    texts.addedVsBare,
    bare === undefined ? 'n/a (no usable bare forwarder run)' : `${signedMs(a)} vs bare ${signedMs(bare)}`,
    a === undefined || bare === undefined ? undefined : a <= 1.5 * Math.max(bare, 0),
    'A',
  );
  const r = results.rss;
  const pm = (v) => `${v >= 0 ? '+' : '−'}${Math.abs(v * 100).toFixed(1)} %`;
  const rssFigure = r?.first
    ? `${mb(r.first)} → ${mb(r.last)} (${pm(r.lastOverFirst)}), max ${mb(r.max)}${r.why ? ` [no verdict: ${r.why}]` : ''}`
    : 'n/a';
  results.goals.rss = goal(texts.rss, rssFigure, r?.flat, 'A');
  const s = results.sse;
  const sseFigure = s ? `gap ${ms(s.servegate.medianGapMs)} (direct ${ms(s.direct.medianGapMs)})` : 'n/a';
  results.goals.sse = goal(texts.sse, sseFigure, s?.unbuffered, 'A');
  const sc = results.sseCost;
  // A per-event CPU at or below 0 (the 50-event streams read cheaper than the 1-event ones: noise) measures nothing.
  const clean = (r) => (r && !r.lost && !r.errors && Number.isFinite(r.usPerEvent) && r.usPerEvent > 0 ? r : undefined);
  const sg = clean(sc?.servegate);
  const bf = clean(sc?.bare);
  const fa = clean(sc?.fastify);
  const costFigure =
    sg && bf
      ? `${us1(sg.usPerEvent)} vs bare ${us1(bf.usPerEvent)} (servegate÷bare ${ratio(sg.usPerEvent / bf.usPerEvent)}${fa ? `; fastify ${us1(fa.usPerEvent)}` : ''})`
      : `n/a (${!sc?.bare ? 'no bare forwarder row' : 'no clean run of both: streams lost, errors or a per-event CPU <= 0'})`;
  results.goals.sseCost = goal(texts.sseCost, costFigure, sg && bf ? sg.usPerEvent <= bf.usPerEvent : undefined, 'A');
}

/**
 * Lines for the closing summary: the ratios against nginx, in both modes (logs off: with the main thread's CPU per
 * request at the open loop's rate), the platform split, the SSE cost.
 */
function summaryLines(ctx, results) {
  const lines = [];
  const atRate = results.openLoopTail?.mainThread?.usPerRequest;
  for (const mode of Object.keys(MODES)) {
    const v = results.ratios[mode];
    if (v) {
      lines.push(
        `${MODES[mode].title}: servegate ${rps(v.gw.rps)} vs nginx ${rps(v.ng.rps)} = ${ratio(v.throughput)}; CPU/request ${us(v.gw.serverCpuUsPerRequest)} vs ${us(v.ng.serverCpuUsPerRequest)} (nginx÷servegate ${ratio(v.cpuNginxOverGateway)})${mode === 'off' ? `; servegate at ${ctx.rate.toLocaleString('en-US')} req/s: main thread ${us(atRate)}/request (saturated: ${us(v.gw.serverCpuUsPerRequest)}, all threads)` : ''}`,
      );
    }
  }
  if (!results.ratios.off && Number.isFinite(atRate))
    lines.push(
      `servegate at ${ctx.rate.toLocaleString('en-US')} req/s: main thread ${us(atRate)}/request (saturated, logs off: ${us(usable(results.modes.off?.servegate)?.serverCpuUsPerRequest)}, all threads)`,
    );
  const split = platformSplit(results);
  if (split)
    lines.push(
      `logs off, CPU/request: servegate ${us(split.servegate)} = platform (bare forwarder) ${us(split.bare)} + servegate's own ${us(split.own)}; net ceiling ${us(split.net)}; fastify ${us(split.fastify)}; nginx ${us(split.nginx)}`,
    );
  const sc = results.sseCost;
  if (sc) {
    const names = Object.keys(sc).filter((n) => n !== 'settings');
    lines.push(
      `SSE cost, CPU per event (${LONG} vs ${SHORT} event streams): ${names.map((n) => `${n} ${us1(sc[n].usPerEvent)}`).join(', ')}`,
    );
    lines.push(
      `SSE cost, CPU per ${LONG}-event stream: ${names.map((n) => `${n} ${us(sc[n].long.cpuUsPerStream)}`).join(', ')}; streams lost: ${names.reduce((a, n) => a + sc[n].lost + sc[n].errors, 0)}`,
    );
  }
  if (results.logModeOff) lines.push(`servegate with access log off ran with: ${results.logModeOff.logMode}`);
  const g = results.garbage ?? {};
  const kb = (v) => (Number.isFinite(v) ? `${(v / 1024).toFixed(1)} KB` : 'n/a');
  if (Object.keys(g).length)
    lines.push(
      `garbage at ${ctx.rate.toLocaleString('en-US')} req/s, per request / per 1,000 requests: ${Object.entries(g)
        .map(
          ([n, x]) =>
            `${n} ${kb(x.bytesPerRequest)} / ${x.minorPer1k.toFixed(2)} scavenges + ${x.majorPer1k.toFixed(2)} major, ${ms(x.pauseMsPer1k)} of GC pause`,
        )
        .join('; ')}`,
    );
  const b = results.baseline;
  if (b) {
    for (const mode of Object.keys(MODES)) {
      const v = b.closedLoop?.[mode];
      if (!v) continue;
      const spread = v.cpuNewOverOldByRound.filter(Number.isFinite);
      lines.push(
        `new vs old build (--baseline-dist ${b.dir}), ${MODES[mode].title}: CPU/request ${us(v.newCpuUs)} vs ${us(v.oldCpuUs)} = ${ratio(v.cpuNewOverOld)} new÷old (rounds ${spread.length ? `${ratio(Math.min(...spread))}–${ratio(Math.max(...spread))}` : 'n/a'}); ${rps(v.newRps)} vs ${rps(v.oldRps)} = ${ratio(v.throughputNewOverOld)}`,
      );
    }
    if (b.openLoop)
      lines.push(
        `new vs old build, open loop at ${b.rate} req/s: p99 ${ms(b.openLoop.newP99Ms)} vs ${ms(b.openLoop.oldP99Ms)}; added p99 ${signedMs(results.added?.p99Ms)} vs ${signedMs(b.added?.p99Ms)}`,
      );
    if (b.sse)
      lines.push(
        `new vs old build, SSE median gap ${ms(b.sse.newGapMs)} vs ${ms(b.sse.oldGapMs)} (direct ${ms(b.sse.directGapMs)}); old ${b.sse.oldEvents} events, status ${b.sse.oldStatuses}`,
      );
    if (b.closedLoop?.off === undefined) lines.push(`new vs old build: n/a (${b.problem ?? 'no usable run of both'})`);
  }
  return lines;
}

export async function runGatewayBench(ctx) {
  const dir = join(ctx.dir, 'gateway');
  mkdirSync(dir, { recursive: true });
  const { key, prefix, sha256 } = makeKey();
  ctx.headers = { 'content-type': 'application/json', authorization: `ApiKey ${key}` };
  ctx.wrkScript = ctx.tools.wrk ? writeWrkScript(dir, { method: 'POST', body: BODY, headers: ctx.headers }) : undefined;
  const results = { modes: {}, ratios: {}, logLines: {}, openLoop: {}, goals: {} };
  const started = [];
  let sse;
  try {
    const backend = await startBackend(ctx, dir);
    started.push(backend.child);
    results.backend = backend.kind;
    log(`  backend: ${backend.kind} on 127.0.0.1:${backend.port}; SSE backend in this process`);
    sse = await startSseBackend();
    const burstPort = await freePort();
    const burst = {
      name: 'direct',
      url: `http://127.0.0.1:${burstPort}${STREAM_PATH}`,
      child: await startForwarder('sse-burst', { mode: 'sse-burst', port: burstPort }, async () =>
        (await probe(`http://127.0.0.1:${burstPort}${STREAM_PATH}`, {})).includes('[DONE]'),
      ),
    };
    started.push(burst.child);
    log(`  SSE cost backend: bench/lib/forwarders.mjs sse-burst, its own process, on 127.0.0.1:${burstPort}`);
    const direct = { name: 'direct', url: `http://127.0.0.1:${backend.port}${MODEL_PATH}`, child: backend.child };
    const manifests = cliBuilt()
      ? writeManifests(dir, backend.port, sse.port, burstPort, { prefix, sha256 })
      : undefined;
    if (!ctx.tools.nginx) log('  nginx: SKIPPED (not installed; apt-get install -y nginx-light)');
    if (!manifests) log(`  servegate: SKIPPED (${CLI} not built; run npx tsc -p .)`);
    log(
      `  closed loop: ${ctx.tools.wrk ? `wrk -t${ctx.threads}` : 'autocannon'} -c${ctx.connections}, ${ctx.warmupSeconds} s warm-up + ${ctx.seconds} s per target, POST ${MODEL_PATH} (${BODY.length} B JSON, valid key)`,
    );
    log(
      '  nginx: worker_processes 1, path strip + API-key map; servegate: node dist/cli/main.js serve --manifests, 1 process, stdout to a file',
    );
    log(`  ${imageAllocator().note}; net, bare and fastify run with the same allocator`);
    log(
      '  access log OFF only: net (raw TCP forwarder), bare (node:http + undici Pool, prefix strip, no checks), fastify (+ @fastify/http-proxy, API-key hook)',
    );
    if (ctx.baseline) {
      results.baseline = { dir: ctx.baseline.label, cli: ctx.baseline.cli, rate: ctx.rate, closedLoop: {} };
      log(
        `  ${OLD}: the build in ${ctx.baseline.label} (--baseline-dist): node ${relative(ctx.root, ctx.baseline.cli)} serve --manifests, same manifests and settings`,
      );
      if (!manifests) results.baseline.problem = 'servegate not built';
    }

    // 1. Throughput in each access-log mode; the off-mode servers stay up for the open loop, SSE and RSS runs.
    const keep = {};
    let forwarders = [];
    for (const mode of Object.keys(MODES)) {
      const targets = mode === 'off' ? [direct] : [];
      if (ctx.tools.nginx) {
        const proxy = await startProxy(ctx, dir, backend.port, burstPort, key, mode);
        started.push(proxy.child);
        targets.push(proxy);
      }
      if (mode === 'off') {
        forwarders = await startForwarders(ctx, backend.port, burstPort, sha256, started);
        targets.push(...forwarders);
      }
      let gateway;
      if (manifests) {
        try {
          gateway = await startServegate(ctx, dir, manifests, mode);
          started.push(gateway.child);
          targets.push({
            name: 'servegate',
            url: gateway.url,
            child: gateway.child,
            logFile: gateway.logFile,
            logMode: gateway.logMode,
          });
          if (mode === 'off') {
            results.logModeOff = { logMode: gateway.logMode, fallback: gateway.fallback };
            if (gateway.fallback)
              log(
                '  NOTE: this build refuses `accessLog: false` (unknown key); access log OFF falls back to `logLevel: warn`',
              );
          }
        } catch (err) {
          log(`  servegate (${MODES[mode].title}): FAILED to start or to route: ${err.message}`);
        }
      }
      let baselineGw;
      if (manifests && ctx.baseline) {
        try {
          baselineGw = await startServegate(ctx, dir, manifests, mode, ctx.baseline);
          started.push(baselineGw.child);
          targets.push({
            name: OLD,
            url: baselineGw.url,
            child: baselineGw.child,
            logFile: baselineGw.logFile,
            logMode: baselineGw.logMode,
          });
          if (mode === 'off') results.baseline.logModeOff = baselineGw.logMode;
          if (gateway && baselineGw.fallback !== gateway.fallback)
            log(
              `  WARNING: ${MODES[mode].title}: servegate runs with ${gateway.logMode} but ${OLD} with ${baselineGw.logMode}: not the same job`,
            );
        } catch (err) {
          results.baseline.problem = `${OLD} failed to start or to route: ${err.message.split('\n')[0]}`;
          log(`  ${OLD} (${MODES[mode].title}): FAILED to start or to route: ${err.message}`);
        }
      }
      results.modes[mode] = await closedLoopMode(ctx, mode, targets, results);
      if (results.baseline) results.baseline.closedLoop[mode] = versusBaseline(results.modes[mode]);
      results.ratios[mode] = versusNginx(results.modes[mode]);
      if (mode === 'on') {
        for (const t of targets) if (t.name !== 'direct') await stopProcess(t.child); // nginx flushes its log buffer on exit
      }
      const lines = (name) =>
        logLinesPerRequest(
          targets.find((t) => t.name === name),
          results.modes[mode][name],
        );
      results.logLines[mode] = {
        servegate: lines('servegate'),
        nginx: lines('nginx'),
        ...(baselineGw ? { [OLD]: lines(OLD) } : {}),
      };
      if (mode === 'off') Object.assign(keep, { targets, gateway, baselineGw });
    }
    printComparison(results);
    if (results.baseline) printBaselineComparison(ctx, results);

    // 2. Added latency at a fixed rate (access log off); a baseline that died is left out, and of the forwarders
    // only bare takes part (the platform's floor).
    const old = results.baselineDied ? undefined : keep.baselineGw;
    const openTargets = keep.targets.filter((t) => (t.name !== OLD || old) && t.name !== 'net' && t.name !== 'fastify');
    await addedLatency(ctx, openTargets, keep.gateway, results, old);
    const nl = usableOpen(results.openLoop?.servegate);
    const ol = usableOpen(results.openLoop?.[OLD]);
    if (old && nl && ol)
      results.baseline.openLoop = {
        newP50Ms: nl.fromSchedule.p50,
        oldP50Ms: ol.fromSchedule.p50,
        newP99Ms: nl.fromSchedule.p99,
        oldP99Ms: ol.fromSchedule.p99,
      };

    // 3. SSE, 3b. SSE cost and 4. RSS, through the access-log-off gateway (SSE and SSE cost through the baseline
    // too, which then stops; SSE cost through every target, after which the forwarders stop).
    const gateway = keep.gateway;
    const gatewayUp = gateway && !results.gatewayDied;
    if (gatewayUp) {
      results.sse = await sseCheck(ctx, sse, gateway, results.baselineDied ? undefined : old);
      const so = results.sse[OLD];
      if (so)
        results.baseline.sse = {
          newGapMs: results.sse.servegate.medianGapMs,
          oldGapMs: so.medianGapMs,
          directGapMs: results.sse.direct.medianGapMs,
          oldEvents: so.events,
          oldStatuses: so.statuses.join(','),
        };
    }
    const costTargets = [
      burst,
      ...keep.targets
        .filter((t) => t.burstUrl && t.name !== 'servegate' && t.name !== OLD)
        .map((t) => ({ name: t.name, url: t.burstUrl, child: t.burstChild ?? t.child })),
      ...(gatewayUp && !results.gatewayDied
        ? [{ name: 'servegate', url: gateway.burstUrl, child: gateway.child }]
        : []),
      ...(old && !results.baselineDied ? [{ name: OLD, url: old.burstUrl, child: old.child }] : []),
    ];
    results.sseCost = await sseCost(ctx, costTargets, results);
    for (const t of forwarders) {
      await stopProcess(t.child);
      await stopProcess(t.burstChild);
    }
    if (old) await stopProcess(old.child); // not part of the RSS run

    if (gateway && !results.gatewayDied) {
      results.rss = await rssOverRequests(ctx, gateway, results.modes.off?.servegate?.rps);
      printRss(ctx, results.rss);
      reportDeath(gateway.child, results);
    }

    // Memory after everything.
    if (gateway && !results.gatewayDied) {
      results.memory = { ...memoryOf(gateway.child.pid), ...(await heapOf(gateway.adminPort)) };
      Object.assign(results.memory, await liveHeap(gateway.child));
      const m = results.memory;
      log(
        `  servegate memory after the runs: RSS ${mb(m.rss)} (peak ${mb(m.peak)}, heap used ${mb(m.heapUsed)}); after a full GC: RSS ${mb(m.rssAfterGc)}, live heap ${mb(m.liveHeap)}${results.beforeOpenLoop ? ` (${mb(results.beforeOpenLoop.liveHeap)} before the open loop)` : ''}`,
      );
    }

    log('');
    judge(ctx, results);
    results.summary = summaryLines(ctx, results);
    return results;
  } finally {
    for (const child of started.reverse()) await stopProcess(child);
    sse?.server.closeAllConnections();
    await new Promise((resolve) => (sse ? sse.server.close(resolve) : resolve()));
  }
}
