// Part E: many concurrent SSE streams through one gateway process (docs/performance.md, Part E).
// A backend (its own process, node:http) answers every POST with an SSE stream of one small event per second, each
// carrying its send time (process.hrtime, the machine's monotonic clock, shared by every process), for
// `x-bench-seconds` seconds, then `data: [DONE]`. A client process opens N streams (one connection each, no
// keep-alive), reads every event and takes delay = receive time − send time. Targets, in turn, in the same run:
// direct to the backend (the floor), nginx (proxy_buffering off) and servegate (node dist/cli/main.js serve
// --manifests, an llm deployment). Per target: streams opened, events expected/received, delay p50/p99, the
// proxy's CPU per event and RSS over the plateau (every stream open), RSS before (baseline) and after (servegate:
// both after a forced full GC through its inspector, as Part A does).
// Also run as a child: `node bench/streams.mjs backend <port>` / `node bench/streams.mjs client <json options>`.
import { spawnSync } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { Agent, createServer, request as httpRequest } from 'node:http';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { stringify } from 'yaml';

const SELF = fileURLToPath(import.meta.url);
const PROJECT = 'bench';
const DEPLOYMENT = 'chat';
const STREAM_PATH = '/v1/chat/completions';
/** The request of every stream: a chat completion whose prompt is `kb` KB of text (--stream-prompt-kb; 0: one word). */
const bodyOf = (kb) =>
  JSON.stringify({
    model: 'bench',
    stream: true,
    messages: [{ role: 'user', content: kb > 0 ? 'tick '.repeat(Math.ceil((kb * 1024) / 5)) : 'tick' }],
  });
/** Descriptors a proxy needs besides two per stream (listeners, inspector, logs, files). */
const SPARE_FDS = 200;

const nowUs = () => Number(process.hrtime.bigint() / 1000n);

/** The goal lines of this part (also listed as skipped in the summary when the part does not run). */
export function goalTexts() {
  return {
    rss: 'RSS per open stream <= 20 KB',
    delay: 'p99 added delay per event <= 5 ms',
    lost: 'nothing lost (every event of every stream)',
    back: 'RSS back to its baseline (±10 %) after the streams end',
  };
}

/** Upper bound of this part's run time in seconds (for run.mjs's time limit): 3 targets, each ramp + run + GC. */
export function timeBudgetSeconds(ctx) {
  return 3 * (ctx.streamsSeconds + 2 * 60 + (2 * (SETTLE_FIRST_MS + SETTLE_MAX_MS + 4000)) / 1000) + 60;
}

/** The wait for the RSS to settle, before the streams and after them (see `settled` in runTarget). */
const SETTLE_FIRST_MS = 15_000;
const SETTLE_MAX_MS = 30_000;

// ---------------------------------------------------------------------------------------------------------------
// Child: the SSE backend.

function runBackend(port) {
  const stats = { opened: 0, events: 0, done: 0, aborted: 0 };
  const server = createServer((req, res) => {
    if (req.method === 'GET') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(stats));
      return;
    }
    const seconds = Math.max(1, Math.min(3600, Number(req.headers['x-bench-seconds']) || 20));
    req.resume();
    req.on('end', () => {
      stats.opened++;
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      res.flushHeaders(); // the client counts a stream as open on its headers, before the first event (1 s later)
      let n = 0;
      let timer;
      const tick = () => {
        n++;
        stats.events++;
        res.write(`data: {"n":${n},"t":${nowUs()},"choices":[{"index":0,"delta":{"content":"x"}}]}\n\n`);
        if (n >= seconds) {
          clearInterval(timer);
          stats.done++;
          res.end('data: [DONE]\n\n');
        }
      };
      // A random phase: the streams' events spread evenly over each second (as streams opened at random times
      // would), instead of coming in bursts as fast as the client opened them.
      const phase = setTimeout(() => {
        tick();
        if (n < seconds) timer = setInterval(tick, 1000);
      }, Math.random() * 1000);
      res.on('close', () => {
        if (n < seconds) stats.aborted++;
        clearTimeout(phase);
        clearInterval(timer);
      });
    });
  });
  server.keepAliveTimeout = 1000;
  server.listen(port, '127.0.0.1', 4096, () => process.stdout.write('ready\n'));
  process.on('SIGTERM', () => process.exit(0));
}

// ---------------------------------------------------------------------------------------------------------------
// Child: the client. Prints a JSON progress line every 250 ms and a final line with the delay percentiles.

function runClient(opts) {
  const BODY = bodyOf(opts.promptKb ?? 0);
  const { url, streams, seconds, headers, connecting = 256 } = opts;
  const agent = new Agent({ keepAlive: false, maxSockets: Infinity });
  const target = new URL(url);
  const delays = new Float64Array(streams * (seconds + 2));
  let nDelays = 0;
  // The events received while every stream is open (the plateau: after the ramp, before the first stream ends).
  const steady = new Float64Array(streams * (seconds + 2));
  let nSteady = 0;
  const st = {
    opened: 0,
    failed: 0,
    events: 0,
    ended: 0,
    short: 0,
    firstOpenAt: 0,
    allOpenAt: 0,
    firstEndAt: 0,
    errors: [],
  };
  const statuses = {};
  let started = 0;
  let inFlight = 0;
  const reqs = new Set();
  const deadline = Date.now() + (seconds + 60 + streams / 100) * 1000;

  const finished = () => st.ended + st.failed === streams;
  const progress = (final) => {
    const line = { at: Date.now(), ...st, errors: st.errors.slice(0, 5), statuses };
    if (final) {
      const d = delays.subarray(0, nDelays).sort();
      const q = (p) => (nDelays ? d[Math.min(nDelays - 1, Math.floor(p * nDelays))] / 1000 : NaN);
      Object.assign(line, { final: true, delays: nDelays, p50: q(0.5), p90: q(0.9), p99: q(0.99), max: q(1) });
      const s = steady.subarray(0, nSteady).sort();
      const qs = (p) => (nSteady ? s[Math.min(nSteady - 1, Math.floor(p * nSteady))] / 1000 : NaN);
      Object.assign(line, { steadyEvents: nSteady, steadyP50: qs(0.5), steadyP99: qs(0.99), steadyMax: qs(1) });
    }
    process.stdout.write(`${JSON.stringify(line)}\n`);
  };

  const openOne = () => {
    started++;
    inFlight++;
    let counted = false;
    const connected = () => {
      if (counted) return;
      counted = true;
      inFlight--;
      pump();
    };
    const req = httpRequest({
      host: target.hostname,
      port: target.port,
      path: target.pathname,
      method: 'POST',
      agent,
      headers: {
        ...headers,
        connection: 'close',
        'content-length': Buffer.byteLength(BODY),
        'x-bench-seconds': String(seconds),
      },
    });
    reqs.add(req);
    let got = 0;
    let done = false;
    const fail = (msg) => {
      if (done) return;
      done = true;
      reqs.delete(req);
      if (st.errors.length < 20) st.errors.push(msg);
      if (got === 0 && !counted) st.failed++;
      else {
        st.ended++;
        st.short++;
      }
      connected();
    };
    req.on('error', (err) => fail(err.message));
    req.on('response', (res) => {
      statuses[res.statusCode] = (statuses[res.statusCode] ?? 0) + 1;
      if (res.statusCode !== 200) {
        res.resume();
        fail(`status ${res.statusCode}`);
        return;
      }
      st.opened++;
      if (st.opened === 1) st.firstOpenAt = Date.now();
      if (st.opened + st.failed === streams) st.allOpenAt = Date.now();
      connected();
      res.setEncoding('latin1');
      let pending = '';
      res.on('data', (chunk) => {
        const now = nowUs();
        pending += chunk;
        let end;
        while ((end = pending.indexOf('\n\n')) !== -1) {
          const ev = pending.slice(0, end);
          pending = pending.slice(end + 2);
          const m = /"t":(\d+)/.exec(ev);
          if (m) {
            got++;
            st.events++;
            const delay = now - Number(m[1]);
            if (nDelays < delays.length) delays[nDelays++] = delay;
            if (st.allOpenAt && !st.firstEndAt && nSteady < steady.length) steady[nSteady++] = delay;
          }
        }
      });
      res.on('end', () => {
        if (done) return;
        done = true;
        st.firstEndAt ||= Date.now();
        reqs.delete(req);
        st.ended++;
        if (got < seconds) st.short++;
      });
      res.on('error', (err) => fail(err.message));
      res.on('aborted', () => fail('aborted'));
    });
    req.end(BODY);
  };
  function pump() {
    while (started < streams && inFlight < connecting) openOne();
    if (started === streams && st.opened + st.failed === streams && !st.allOpenAt) st.allOpenAt = Date.now();
  }
  const timer = setInterval(() => {
    if (finished() || Date.now() > deadline) {
      clearInterval(timer);
      if (!finished()) st.errors.push(`deadline: ${streams - st.ended - st.failed} streams still open`);
      for (const r of reqs) r.destroy();
      progress(true);
      setTimeout(() => process.exit(0), 100);
      return;
    }
    progress(false);
  }, 250);
  pump();
}

// ---------------------------------------------------------------------------------------------------------------
// Parent: the part itself.

if (process.argv[1] === SELF) {
  if (process.argv[2] === 'backend') runBackend(Number(process.argv[3]));
  else if (process.argv[2] === 'client') runClient(JSON.parse(process.argv[3]));
}

/** The hard limit on open files of this process (children inherit it), a number (Infinity when unlimited). */
function hardFdLimit() {
  const out = spawnSync('sh', ['-c', 'ulimit -Hn'], { encoding: 'utf8' }).stdout.trim();
  return out === 'unlimited' ? Infinity : Number(out) || 1024;
}

/** Sum of VmRSS (bytes) over the live processes of a process group (nginx: master + worker). */
function groupRss(pgid) {
  let sum = 0;
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[2]) !== pgid) continue;
      const m = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${entry}/status`, 'utf8'));
      if (m) sum += Number(m[1]) * 1024;
    } catch {
      /* gone */
    }
  }
  return sum;
}

/** Lines of a child's stdout, as they come, to `onLine`. */
function onLines(child, onLine) {
  let buf = '';
  child.stdout.on('data', (c) => {
    buf += c;
    let i;
    while ((i = buf.indexOf('\n')) !== -1) {
      onLine(buf.slice(0, i));
      buf = buf.slice(i + 1);
    }
  });
}

function nginxConfig(dir, port, backendPort, key, fds) {
  const tmp = join(dir, 'nginx-streams-tmp');
  mkdirSync(tmp, { recursive: true });
  return `
${process.getuid?.() === 0 ? 'user root;' : ''}
worker_processes 1;
worker_rlimit_nofile ${fds};
daemon off;
master_process on;
pid ${join(dir, 'nginx-streams.pid')};
error_log ${join(dir, 'nginx-streams-error.log')} warn;
events { worker_connections ${fds}; multi_accept on; }
http {
  access_log off;
  client_body_temp_path ${tmp}/body;
  proxy_temp_path ${tmp}/proxy;
  fastcgi_temp_path ${tmp}/fastcgi;
  uwsgi_temp_path ${tmp}/uwsgi;
  scgi_temp_path ${tmp}/scgi;
  map_hash_bucket_size 256;
  map $http_authorization $sg_key_ok {
    default 0;
    "ApiKey ${key}" 1;
  }
  upstream sg_backend {
    server 127.0.0.1:${backendPort};
  }
  server {
    listen 127.0.0.1:${port} backlog=4096;
    location /v1/${PROJECT}/${DEPLOYMENT}/ {
      if ($sg_key_ok = 0) {
        return 401 '{"error":"missing or invalid API key"}';
      }
      proxy_pass http://sg_backend/;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Authorization "";
      proxy_buffering off;
      proxy_read_timeout 300s;
      proxy_set_header X-Forwarded-For $remote_addr;
    }
  }
}
`;
}

/** One short stream (1 event) through `url`: resolves the status and whether the event and [DONE] arrived. */
async function oneStream(url, headers, body) {
  const res = await fetch(url, {
    method: 'POST',
    headers: { ...headers, 'x-bench-seconds': '1' },
    body,
    signal: AbortSignal.timeout(5000),
  });
  const text = await res.text();
  return res.status === 200 && text.includes('"t":') && text.includes('[DONE]');
}

export async function runStreamsBench(ctx) {
  const procs = await import('./lib/procs.mjs');
  const { freePort, groupCpuSeconds, startProcess, stopProcess, waitFor, memoryOf } = procs;
  const { goal, log, mb, ms, table, us } = await import('./lib/report.mjs');
  const { CLI, cliBuilt, gatewayNodeFlags, heapOf, heapSnapshot, imageAllocator, liveHeap } =
    await import('./lib/servegate.mjs');
  const { deploymentObject, keySecretObject, makeKey } = await import('./lib/manifests.mjs');
  const texts = goalTexts();
  const dir = join(ctx.dir, 'streams');
  mkdirSync(dir, { recursive: true });
  const results = { targets: {} };
  if (!cliBuilt()) {
    log(`  servegate: SKIPPED (${CLI} not built; run npx tsc -p .)`);
    return { summary: ['streams: skipped (not built)'] };
  }

  // Descriptors: two per stream in a proxy (client side + upstream side), one per stream in the backend/client.
  const hard = hardFdLimit();
  const fds = Math.min(65536, hard);
  let streams = ctx.streams;
  const need = 2 * streams + SPARE_FDS;
  results.fds = { hard, set: fds, need };
  if (fds < need) {
    streams = Math.max(1, Math.floor((fds - SPARE_FDS) / 2));
    log(
      `  WARNING: ${ctx.streams.toLocaleString('en-US')} streams need ~${need.toLocaleString('en-US')} descriptors in a proxy, ` +
        `but the hard limit (ulimit -Hn) is ${hard} and cannot be raised here: running ${streams.toLocaleString('en-US')} streams instead`,
    );
  }
  results.streams = streams;
  const seconds = ctx.streamsSeconds;
  const ulimit = (cmd, args) => ['sh', ['-c', `ulimit -n ${fds} && exec "$0" "$@"`, cmd, ...args]];
  results.promptKb = ctx.streamPromptKb ?? 0;
  log(
    `  ${streams.toLocaleString('en-US')} SSE streams per target, 1 event/s each for ${seconds} s, one connection per stream (no keep-alive); ` +
      `request body ${Buffer.byteLength(bodyOf(results.promptKb)).toLocaleString('en-US')} B (--stream-prompt-kb ${results.promptKb}); ` +
      `children run with ulimit -n ${fds} (hard limit ${hard})`,
  );
  // The gateway runs as the container image runs it: jemalloc preloaded as malloc (bench/lib/servegate.mjs).
  const { env: allocator, note } = imageAllocator();
  log(`  ${note}`);
  if (gatewayNodeFlags().length)
    log(`  servegate node flags (BENCH_GATEWAY_NODE_FLAGS): ${gatewayNodeFlags().join(' ')}`);

  const started = [];
  try {
    // The backend.
    const backendPort = await freePort();
    const backend = startProcess(
      'streams backend',
      ...ulimit(process.execPath, [SELF, 'backend', String(backendPort)]),
    );
    started.push(backend);
    const backendStats = async () =>
      (await fetch(`http://127.0.0.1:${backendPort}/stats`, { signal: AbortSignal.timeout(5000) })).json();
    await waitFor('streams backend', backendStats, { child: backend, timeoutMs: 10_000 });

    // Key and manifests: one llm deployment whose backend is the SSE backend.
    const { key, prefix, sha256 } = makeKey();
    const headers = { 'content-type': 'application/json', authorization: `ApiKey ${key}` };
    const manifests = join(dir, 'manifests');
    mkdirSync(manifests, { recursive: true });
    writeFileSync(
      join(manifests, 'streams.yaml'),
      [
        deploymentObject({
          namespace: PROJECT,
          name: DEPLOYMENT,
          modelServer: 'llm',
          backend: { url: `http://127.0.0.1:${backendPort}` },
        }),
        keySecretObject({ name: 'bench-key', prefix, sha256, projects: PROJECT }),
      ]
        .map((d) => stringify(d))
        .join('---\n'),
    );

    let targets = [{ name: 'direct', url: `http://127.0.0.1:${backendPort}${STREAM_PATH}`, child: backend }];
    if (ctx.tools.nginx) targets.push({ name: 'nginx' });
    else log('  nginx: SKIPPED (not installed; apt-get install -y nginx-light)');
    targets.push({ name: 'servegate' });
    // BENCH_STREAMS_TARGETS=servegate (or a comma list of direct, nginx, servegate): a diagnostic run of some targets
    // only, a third of the time for servegate alone. The added delay needs direct's figure, so it is not judged then.
    const only = process.env.BENCH_STREAMS_TARGETS?.split(',')
      .map((s) => s.trim())
      .filter(Boolean);
    if (only?.length) {
      const unknown = only.filter((n) => !['direct', 'nginx', 'servegate'].includes(n));
      if (unknown.length)
        throw new Error(`BENCH_STREAMS_TARGETS: "${unknown.join('", "')}" is not one of direct, nginx, servegate`);
      targets = targets.filter((t) => only.includes(t.name));
      log(
        `  targets (BENCH_STREAMS_TARGETS): ${targets.map((t) => t.name).join(', ') || 'none (nginx not installed)'}`,
      );
    }

    for (const t of targets) {
      if (t.name === 'nginx') {
        const port = await freePort();
        const conf = join(dir, 'nginx-streams.conf');
        writeFileSync(conf, nginxConfig(dir, port, backendPort, key, fds));
        t.child = startProcess('nginx streams', ctx.tools.nginx, ['-p', dir, '-c', conf, '-e', join(dir, 'ngx.log')]);
        started.push(t.child);
        t.url = `http://127.0.0.1:${port}/v1/${PROJECT}/${DEPLOYMENT}${STREAM_PATH}`;
      } else if (t.name === 'servegate') {
        const port = await freePort();
        const adminPort = await freePort();
        const config = join(dir, 'servegate-config.json');
        writeFileSync(config, JSON.stringify({ shutdown: { drainSeconds: 1 }, accessLog: false }));
        const args = [
          ...gatewayNodeFlags(),
          '--inspect=127.0.0.1:0',
          CLI,
          'serve',
          '--manifests',
          manifests,
          '--config',
          config,
        ];
        args.push('--port', String(port), '--admin-port', String(adminPort));
        t.adminPort = adminPort;
        t.child = startProcess('servegate streams', ...ulimit(process.execPath, args), {
          cwd: ctx.root,
          env: { ...process.env, ...allocator },
          stdoutFile: join(dir, 'servegate-stdout.log'),
          // With BENCH_KEEP_DIR=1 its whole stderr is kept too (jemalloc's stats_print goes there).
          stderrFile: process.env.BENCH_KEEP_DIR === '1' ? join(dir, 'servegate-stderr.log') : undefined,
        });
        started.push(t.child);
        t.url = `http://127.0.0.1:${port}/v1/${PROJECT}/${DEPLOYMENT}${STREAM_PATH}`;
      }
      await waitFor(`${t.name} streams`, () => oneStream(t.url, headers, bodyOf(ctx.streamPromptKb)), {
        child: t.child,
        timeoutMs: 20_000,
      });
      results.targets[t.name] = await runTarget(t);
      if (t.name !== 'direct') await stopProcess(t.child);
    }
    const limitsFd = readFileSync(`/proc/${backend.pid}/limits`, 'utf8').match(/Max open files\s+(\d+)/)?.[1];
    results.fds.backendSoft = Number(limitsFd);
    printTable();
    judge();
    results.summary = summaryLines();
    return results;

    /** One target: warm-up, baseline RSS, N streams with the plateau sampled, RSS after. */
    async function runTarget(t) {
      const pid = t.child.pid;
      const isGateway = t.name === 'servegate';
      const rss = async () => {
        if (isGateway) {
          const h = await liveHeap(t.child);
          return { rss: h?.rssAfterGc ?? memoryOf(pid)?.rss, liveHeap: h?.liveHeap };
        }
        await sleep(1000);
        return { rss: groupRss(pid) };
      };
      // The RSS once it stopped falling (after a forced GC, for the gateway): first read SETTLE_FIRST_MS after the
      // streams ended, then every 3 s until two readings are within 1 % (at most SETTLE_MAX_MS more). Soon after a load
      // the gateway still holds memory its allocator gives back over the next seconds (jemalloc purges freed pages over
      // ~10 s, in steps): one run read 110, 93, 77, 76, 76 MB at 5 s intervals after the warm-up, all of it outside the
      // V8 heap. The baseline used to be read after 5 s: that made the per-stream figure look smaller than it is, and
      // the RSS after the streams 15-25 % below its baseline.
      const settled = async (what) => {
        await sleep(SETTLE_FIRST_MS);
        const t0 = Date.now();
        let last = await rss();
        const reads = [last.rss];
        while (Date.now() - t0 < SETTLE_MAX_MS) {
          await sleep(3000);
          const next = await rss();
          reads.push(next.rss);
          const steady = Math.abs(next.rss - last.rss) <= 0.01 * last.rss;
          last = next;
          if (steady) break;
        }
        const spaces = isGateway && t.adminPort ? (await heapOf(t.adminPort)).spaces : undefined;
        // BENCH_SMAPS=1 (with BENCH_KEEP_DIR=1): the gateway's memory map at each settled reading, to compare.
        if (isGateway && process.env.BENCH_SMAPS === '1')
          writeFileSync(
            join(dir, `smaps-${what.replace(/\W+/g, '-')}.txt`),
            readFileSync(`/proc/${pid}/smaps`, 'utf8'),
          );
        log(
          `  ${t.name} ${what}: RSS ${reads.map((b) => mb(b)).join(' → ')} (${isGateway ? '3 s apart, each after a forced GC' : 'about 4 s apart'})` +
            (spaces ? `; V8 new space ${mb(spaces.new?.total)}, old space ${mb(spaces.old?.total)}` : ''),
        );
        return last;
      };
      // Warm-up: a few streams of 2 s, then the baseline, settled as the RSS after is.
      await clientRun(t, Math.min(streams, 100), 2);
      const base = await settled('baseline');
      const baseline = base.rss;
      t.baseLiveHeap = base.liveHeap;
      const before = await backendStats();
      const r = await clientRun(t, streams, seconds, true);
      const after = await backendStats();
      const last = await settled('after the streams');
      const end = last.rss;
      const out = {
        ...r,
        baselineRss: baseline,
        afterRss: end,
        backendEvents: after.events - before.events,
        backendOpened: after.opened - before.opened,
        backendAborted: after.aborted - before.aborted,
      };
      out.expected = streams * seconds;
      out.lost = out.expected - out.events;
      out.rssPerStream = (out.plateauRss - baseline) / Math.max(1, out.opened);
      out.afterVsBaseline = end / baseline - 1;
      if (t.name === 'direct') out.rssPerStream = NaN;
      if (isGateway) [out.baselineLiveHeap, out.afterLiveHeap] = [base.liveHeap, last.liveHeap];
      if (out.plateauSpaces) {
        const { spaces: sp, heapTotal, external } = out.plateauSpaces;
        const other = heapTotal - (sp.new?.total ?? 0) - (sp.old?.total ?? 0);
        log(
          `  ${t.name} mid-plateau: V8 new space ${mb(sp.new?.total)} (used ${mb(sp.new?.used)}), old space ${mb(sp.old?.used)} used of ${mb(sp.old?.total)}, ` +
            `other V8 spaces ${mb(other)}, external ${mb(external)}; RSS outside the V8 heap ${mb(out.plateauRss - heapTotal)}`,
        );
      }
      if (t.name === 'nginx' && out.opened < streams)
        log(`  nginx error log (tail):\n${procs.fileTail(join(dir, 'nginx-streams-error.log'), 1500).trim()}`);
      log(
        `  ${t.name}: ${out.opened}/${streams} streams opened in ${((out.allOpenAt - out.startedAt) / 1000).toFixed(1)} s, ` +
          `${out.events}/${out.expected} events, plateau ${(out.plateauMs / 1000).toFixed(1)} s, RSS peak ${mb(out.plateauRssMax)}` +
          (isGateway ? `, live JS heap ${mb(base.liveHeap)} before, ${mb(last.liveHeap)} after` : '') +
          `${out.errors.length ? `; errors: ${out.errors.slice(0, 3).join(' | ')}` : ''}`,
      );
      return out;
    }

    /**
     * Runs a client process of `n` streams for `secs` seconds against target `t`; with `measure`, samples the
     * target's RSS (every 250 ms) and CPU over the plateau (all streams open, before the first one ends).
     */
    async function clientRun(t, n, secs, measure = false) {
      const opts = { url: t.url, streams: n, seconds: secs, headers, promptKb: ctx.streamPromptKb };
      const client = startProcess(
        `streams client ${t.name}`,
        ...ulimit(process.execPath, [SELF, 'client', JSON.stringify(opts)]),
      );
      started.push(client);
      const startedAt = Date.now();
      const points = [];
      let last;
      let final;
      onLines(client, (line) => {
        try {
          const p = JSON.parse(line);
          last = p;
          points.push([p.at, p.events]);
          if (p.final) final = p;
        } catch {
          /* not ours */
        }
      });
      let plateau;
      let spaces;
      let snapshot;
      const snapshotFile = process.env.BENCH_HEAP_SNAPSHOT;
      const liveHeapAsked = process.env.BENCH_LIVE_HEAP === '1';
      let liveMid;
      const samples = [];
      const deadline = Date.now() + (secs + 90 + n / 100) * 1000;
      const pid = t.child.pid;
      const sampleRss = () => (t.name === 'nginx' ? groupRss(pid) : memoryOf(pid)?.rss);
      while (!final && Date.now() < deadline && client.exitCode === null) {
        await sleep(100);
        if (!measure || !last) continue;
        const now = Date.now();
        if (!plateau && last.allOpenAt) {
          plateau = { from: now, to: last.firstOpenAt + secs * 1000 - 700, cpu0: groupCpuSeconds(pid) };
          if (plateau.to - plateau.from < 1000) plateau.to = plateau.from + 1000;
        }
        if (plateau && !plateau.cpu1 && now >= plateau.to) {
          plateau.cpu1 = groupCpuSeconds(pid);
          plateau.to = now;
        }
        if (plateau && !plateau.cpu1 && samples.length * 250 <= now - plateau.from) samples.push(sampleRss());
        // Where the gateway's memory is mid-plateau: V8's spaces and the memory outside them (prom-client's figures).
        if (plateau && t.adminPort && !spaces && now - plateau.from >= 2000) spaces = heapOf(t.adminPort);
        // BENCH_HEAP_SNAPSHOT=<file>: a heap snapshot of the gateway mid-plateau (a diagnostic: it stops the gateway
        // for seconds, so that run's delay and CPU figures are not to be kept).
        // BENCH_LIVE_HEAP=1: the gateway's live JS heap mid-plateau, after a forced full GC, per open stream over the
        // baseline's (a diagnostic, finer than RSS per stream: the GC stops the gateway, so not for the delay, CPU and
        // RSS figures).
        if (plateau && t.name === 'servegate' && liveHeapAsked && !liveMid && now - plateau.from >= 3000) {
          liveMid = liveHeap(t.child).then((h) =>
            log(
              `  servegate live JS heap mid-plateau: ${mb(h?.liveHeap)}, ` +
                `${((h?.liveHeap - t.baseLiveHeap) / 1024 / Math.max(1, last.opened ?? n)).toFixed(2)} KB per open stream over the baseline's (BENCH_LIVE_HEAP)`,
            ),
          );
        }
        if (plateau && t.name === 'servegate' && snapshotFile && !snapshot && now - plateau.from >= 3000) {
          snapshot = heapSnapshot(t.child, snapshotFile).then((ok) =>
            log(`  heap snapshot of servegate mid-plateau: ${ok ? snapshotFile : 'FAILED'}`),
          );
        }
      }
      if (!final) {
        await stopProcess(client);
        throw new Error(`streams client for ${t.name} gave no result:\n${procs.outputOf(client).trim().slice(-1500)}`);
      }
      await client.exited;
      await snapshot;
      await liveMid;
      if (!measure) return final;
      const eventsAt = (at) => {
        let prev = [startedAt, 0];
        for (const p of points) {
          if (p[0] >= at) return prev[1] + ((p[1] - prev[1]) * (at - prev[0])) / Math.max(1, p[0] - prev[0]);
          prev = p;
        }
        return prev[1];
      };
      const plateauEvents = plateau?.cpu1 ? eventsAt(plateau.to) - eventsAt(plateau.from) : NaN;
      const cpu = plateau?.cpu1 ? plateau.cpu1 - plateau.cpu0 : NaN;
      const valid = samples.filter(Number.isFinite);
      return {
        ...final,
        startedAt,
        plateauMs: plateau?.cpu1 ? plateau.to - plateau.from : NaN,
        plateauEvents,
        cpuUsPerEvent: t.name === 'direct' ? NaN : (cpu * 1e6) / plateauEvents,
        plateauRss: valid.length ? valid.reduce((a, b) => a + b, 0) / valid.length : NaN,
        plateauRssMax: valid.length ? Math.max(...valid) : NaN,
        plateauSpaces: await spaces,
      };
    }
  } finally {
    for (const child of started.reverse()) await stopProcess(child);
  }

  function printTable() {
    const kb = (b) => (Number.isFinite(b) ? `${(b / 1024).toFixed(1)} KB` : 'n/a');
    const rows = [
      [
        'target',
        'opened',
        'events recv/exp',
        'delay p50',
        'p99',
        'p99 steady',
        'max',
        'CPU/event',
        'RSS base',
        'RSS plateau',
        'RSS/stream',
        'RSS after',
      ],
    ];
    for (const [name, r] of Object.entries(results.targets)) {
      rows.push([
        name,
        `${r.opened}/${results.streams}`,
        `${r.events}/${results.streams * seconds}`,
        ms(r.p50),
        ms(r.p99),
        ms(r.steadyP99),
        ms(r.max),
        name === 'direct' ? 'n/a' : us(r.cpuUsPerEvent),
        mb(r.baselineRss),
        mb(r.plateauRss),
        name === 'direct' ? 'n/a' : kb(r.rssPerStream),
        `${mb(r.afterRss)} (${r.afterVsBaseline >= 0 ? '+' : ''}${(r.afterVsBaseline * 100).toFixed(1)} %)`,
      ]);
    }
    log('');
    table(rows);
    log(
      '  delay = receive − send per event (both on the monotonic clock), over every event; "p99 steady": the events received',
    );
    log(
      "  while every stream was open (after the ramp, before the first end); added delay (the goal) = steady p99 − direct's;",
    );
    log(
      '  RSS: direct = the backend; nginx = master + worker; servegate = after a forced full GC (inspector) for base and after',
    );
  }

  function judge() {
    const g = results.targets.servegate;
    const d = results.targets.direct;
    if (!g) return;
    const added = g.steadyP99 - (d?.steadyP99 ?? 0);
    const addedAll = g.p99 - (d?.p99 ?? 0);
    results.addedP99Ms = d ? added : NaN;
    results.addedP99AllMs = d ? addedAll : NaN;
    // A negative figure (the plateau below the baseline: the GC gave memory back meanwhile) measures nothing about the
    // streams: no verdict, not a "met".
    const perStream = g.rssPerStream;
    results.goals = {
      rss: goal(
        texts.rss,
        `${(perStream / 1024).toFixed(1)} KB${perStream < 0 ? ' [no verdict: the plateau RSS is below the baseline]' : ''}`,
        Number.isFinite(perStream) && perStream >= 0 ? perStream <= 20 * 1024 : undefined,
        'E',
      ),
      delay: goal(
        texts.delay,
        d ? `${ms(added)} (all events: ${ms(addedAll)})` : 'no figure (direct not run: BENCH_STREAMS_TARGETS)',
        d && Number.isFinite(added) ? added <= 5 : undefined,
        'E',
      ),
      lost: goal(
        texts.lost,
        `${g.events}/${results.streams * seconds} events`,
        g.lost === 0 && g.events === results.streams * seconds,
        'E',
      ),
      // Judged on RSS; the live JS heap (after the same forced GC) is printed next to it: RSS also holds what the
      // allocator keeps of freed native memory (glibc's heap does not shrink past a live block), see docs Part E.
      back: goal(
        texts.back,
        `${(g.afterVsBaseline * 100).toFixed(1)} % (live heap ${mb(g.baselineLiveHeap)} → ${mb(g.afterLiveHeap)})`,
        Number.isFinite(g.afterVsBaseline) ? Math.abs(g.afterVsBaseline) <= 0.1 : undefined,
        'E',
      ),
    };
  }

  function summaryLines() {
    const g = results.targets.servegate;
    const n = results.targets.nginx;
    if (!g) return ['streams: no servegate figure'];
    return [
      `streams (${results.streams.toLocaleString('en-US')} × ${seconds} s): servegate ${((g.rssPerStream ?? NaN) / 1024).toFixed(1)} KB/stream, ` +
        `${us(g.cpuUsPerEvent)}/event, p99 ${ms(g.p99)} (steady ${ms(g.steadyP99)})` +
        (n
          ? `; nginx ${(n.rssPerStream / 1024).toFixed(1)} KB/stream, ${us(n.cpuUsPerEvent)}/event, p99 ${ms(n.p99)} (steady ${ms(n.steadyP99)})`
          : ''),
    ];
  }
}
