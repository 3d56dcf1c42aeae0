// Starts the BUILT gateway (dist/cli/main.js) as its own process: one process = one worker.
import { cpSync, createWriteStream, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, isAbsolute, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { performance } from 'node:perf_hooks';
import { freePort, outputOf, startProcess, stopProcess } from './procs.mjs';

export const ROOT = fileURLToPath(new URL('../../', import.meta.url));
export const CLI = join(ROOT, 'dist', 'cli', 'main.js');

export function cliBuilt() {
  return existsSync(CLI);
}

const GC_PROBE = fileURLToPath(new URL('./gc-probe.mjs', import.meta.url));

/**
 * Another built copy of dist/ for --baseline-dist, ready to run: resolves { cli, dir, label, runDir, staged,
 * nodeModules } or throws with what is wrong. The entry is `<dir>/cli/main.js`, which every layout has. A build
 * expects to sit at `<checkout>/dist`: its `.js` files are ES modules (Node needs "type": "module" in the nearest
 * package.json), they import their dependencies by bare name (from a node_modules folder above them; NODE_PATH does
 * not apply to ES modules), and cli/main.js reads `<dir>/../package.json` for its version. When `<dir>` is such a
 * dist/ (e.g. that of a git worktree after `npm ci`), it runs in place, with that checkout's node_modules. Otherwise
 * (e.g. .bench-tmp/dist-before, or any folder anywhere) it is copied to .bench-tmp/baseline/dist next to a copy of
 * this repository's package.json, and runs with this repository's node_modules.
 */
export function prepareBaseline(dirArg) {
  const dir = resolve(ROOT, dirArg);
  const rel = relative(ROOT, dir);
  const label = rel && !rel.startsWith('..') && !isAbsolute(rel) ? rel : dir;
  if (!existsSync(join(dir, 'cli', 'main.js')))
    throw new Error(
      `--baseline-dist ${dirArg}: ${join(dir, 'cli', 'main.js')} not found (expected a built copy of dist/)`,
    );
  if (resolve(dir) === resolve(ROOT, 'dist'))
    throw new Error(`--baseline-dist ${dirArg}: that is this build's dist/; give a copy of an older build`);
  const modulesAbove = (from) => {
    for (let at = from; ; at = dirname(at)) {
      if (existsSync(join(at, 'node_modules', 'undici', 'package.json'))) return join(at, 'node_modules');
      if (dirname(at) === at) return undefined;
    }
  };
  const isModulePackage = (file) => {
    try {
      return JSON.parse(readFileSync(file, 'utf8')).type === 'module';
    } catch {
      return false;
    }
  };
  const inPlaceModules = modulesAbove(dirname(dir));
  if (isModulePackage(join(dirname(dir), 'package.json')) && inPlaceModules)
    return { cli: join(dir, 'cli', 'main.js'), dir, label, runDir: dir, staged: false, nodeModules: inPlaceModules };
  const stage = join(ROOT, '.bench-tmp', 'baseline');
  const runDir = join(stage, 'dist');
  rmSync(stage, { recursive: true, force: true });
  mkdirSync(stage, { recursive: true });
  cpSync(dir, runDir, { recursive: true });
  writeFileSync(join(stage, 'package.json'), readFileSync(join(ROOT, 'package.json')));
  return {
    cli: join(runDir, 'cli', 'main.js'),
    dir,
    label,
    runDir,
    staged: true,
    nodeModules: modulesAbove(stage),
  };
}

/**
 * `node dist/cli/main.js serve <sourceArgs> --config <tmp> --port P --admin-port A`, stdout to <dir>/<name>-stdout.log
 * (the access log, when on, costs the benchmark process nothing). With `gcLog`, the GC pauses go to that file
 * (bench/lib/gc-probe.mjs). `cli`: another build's entry (prepareBaseline). Resolves { child, port, adminPort } once
 * started (readiness is for the caller to probe).
 */
/**
 * The allocator the container image runs the gateway with: jemalloc preloaded as malloc (Dockerfile), when this
 * machine has Debian's library (apt-get install -y libjemalloc2). BENCH_GATEWAY_PRELOAD=<library> preloads another
 * one, =none nothing (glibc's malloc). `env`: the gateway's environment for it (with jemalloc, MALLOC_CONF as the image
 * sets it; BENCH_GATEWAY_MALLOC_CONF another, '' none). `note`: the line the report prints.
 */
export function imageAllocator() {
  const asked = process.env.BENCH_GATEWAY_PRELOAD;
  let preload = asked === 'none' ? undefined : asked;
  if (asked === undefined) {
    for (const dir of ['/usr/lib/x86_64-linux-gnu', '/usr/lib/aarch64-linux-gnu', '/usr/lib']) {
      const f = join(dir, 'libjemalloc.so.2');
      if (existsSync(f)) {
        preload = f;
        break;
      }
    }
  }
  const note = preload
    ? `servegate runs with LD_PRELOAD=${preload}${asked ? ' (BENCH_GATEWAY_PRELOAD)' : ' (jemalloc, as the container image runs it)'}`
    : `servegate runs with glibc's malloc${asked === 'none' ? ' (BENCH_GATEWAY_PRELOAD=none)' : '; the container image preloads jemalloc (apt-get install -y libjemalloc2 to measure it so)'}`;
  // As the image sets it (read from the Dockerfile, so the two cannot drift apart): jemalloc's background threads give
  // freed pages back on a clock.
  const mallocConf = /jemalloc/.test(preload ?? '') ? (process.env.BENCH_GATEWAY_MALLOC_CONF ?? imageMallocConf()) : '';
  const env = preload ? { LD_PRELOAD: preload, ...(mallocConf ? { MALLOC_CONF: mallocConf } : {}) } : {};
  return { env, note: preload && mallocConf ? `${note}, MALLOC_CONF=${mallocConf}` : note };
}

/** The container image's MALLOC_CONF (its Dockerfile's `ENV MALLOC_CONF=...`), '' when it sets none. */
function imageMallocConf() {
  const line = readFileSync(join(ROOT, 'Dockerfile'), 'utf8').match(/^ENV MALLOC_CONF=(\S+)\s*$/m);
  return line?.[1] ?? '';
}

export async function startGatewayProcess(
  dir,
  sourceArgs,
  { env, config = {}, profileDir, name = 'servegate', gcLog, cli = CLI } = {},
) {
  const port = await freePort();
  const adminPort = await freePort();
  const configFile = join(dir, `${name}-config.json`);
  writeFileSync(configFile, JSON.stringify({ shutdown: { drainSeconds: 1 }, ...config }, null, 2));
  const args = [
    cli,
    'serve',
    ...sourceArgs,
    '--config',
    configFile,
    '--port',
    String(port),
    '--admin-port',
    String(adminPort),
  ];
  // --cpu-prof writes the profile when the process exits normally (servegate exits 0 after SIGTERM).
  // --inspect on an ephemeral loopback port lets liveHeap() force a full GC (no cost while no client is attached).
  const nodeArgs = [
    '--inspect=127.0.0.1:0',
    ...(gcLog ? ['--import', GC_PROBE] : []),
    ...(profileDir ? ['--cpu-prof', '--cpu-prof-dir', profileDir] : []),
  ];
  // BENCH_GATEWAY_NODE_FLAGS: node/V8 flags for this build's gateway only (not a --baseline-dist build's), so that
  // one run compares the same code with and without them (e.g. --max-semi-space-size=16).
  const extra = cli === CLI ? gatewayNodeFlags() : [];
  const child = startProcess(name, process.execPath, [...extra, ...nodeArgs, ...args], {
    env: { ...process.env, ...env, ...(gcLog ? { BENCH_GC_LOG: gcLog } : {}) },
    cwd: ROOT,
    stdoutFile: join(dir, `${name}-stdout.log`),
  });
  return { child, port, adminPort, stdoutFile: child.stdoutFile, spawnedAt: performance.now() };
}

/** BENCH_GATEWAY_NODE_FLAGS as node arguments (this build's gateways only; stray spaces give no empty argument). */
export function gatewayNodeFlags() {
  return (process.env.BENCH_GATEWAY_NODE_FLAGS ?? '').split(/\s+/).filter(Boolean);
}

/** Access log off as the configuration will say it: `accessLog: false` (a top-level key being added). */
const ACCESS_LOG_OFF = { accessLog: false };
/** Access log off for a build whose configuration has no `accessLog` key yet: requests are logged at info. */
const ACCESS_LOG_OFF_FALLBACK = { logLevel: 'warn' };

/**
 * Starts the gateway with its access log off (`accessLog: false`) or on (the defaults: one JSON line per request
 * to stdout) and waits for `ready(gw)` (which must throw when the process exits: waitFor with `child`). A build
 * that refuses `accessLog` (exits with an error naming it) is started again with `logLevel: warn`.
 * Resolves gw with `logMode` (what was used) and `fallback` (true when the old way had to be used).
 */
export async function startGateway(dir, sourceArgs, { accessLog, ready, config = {}, ...opts }) {
  if (accessLog) {
    const gw = await startGatewayProcess(dir, sourceArgs, { config, ...opts });
    await readyOrStop(gw, ready);
    return Object.assign(gw, { logMode: 'defaults: one JSON line per request to stdout (to a file)', fallback: false });
  }
  const gw = await startGatewayProcess(dir, sourceArgs, { config: { ...ACCESS_LOG_OFF, ...config }, ...opts });
  try {
    await ready(gw);
    return Object.assign(gw, { logMode: 'accessLog: false', fallback: false });
  } catch (err) {
    const refused = gw.child.exitCode !== null && /accessLog/.test(outputOf(gw.child));
    await stopProcess(gw.child);
    if (!refused) throw err;
  }
  const old = await startGatewayProcess(dir, sourceArgs, {
    config: { ...ACCESS_LOG_OFF_FALLBACK, ...config },
    ...opts,
  });
  await readyOrStop(old, ready);
  return Object.assign(old, {
    logMode: 'logLevel: warn (FALLBACK: this build refuses `accessLog: false`)',
    fallback: true,
  });
}

async function readyOrStop(gw, ready) {
  try {
    await ready(gw);
  } catch (err) {
    await stopProcess(gw.child);
    throw err;
  }
}

/**
 * JS heap figures from the admin listener's /metrics (prom-client default metrics), in bytes; {} if unavailable.
 * `spaces`: each V8 space's size and used bytes ({ new: { total, used }, old: ... }).
 */
export async function heapOf(adminPort) {
  try {
    const res = await fetch(`http://127.0.0.1:${adminPort}/metrics`, { signal: AbortSignal.timeout(5000) });
    const text = await res.text();
    const get = (name) => {
      const m = new RegExp(`^\\w*${name}(?:\\{[^}]*\\})? ([0-9.e+]+)`, 'm').exec(text);
      return m ? Number(m[1]) : undefined;
    };
    const spaces = {};
    for (const [kind, name] of [
      ['total', 'nodejs_heap_space_size_total_bytes'],
      ['used', 'nodejs_heap_space_size_used_bytes'],
    ])
      for (const m of text.matchAll(new RegExp(`^${name}\\{space="(\\w+)"\\} ([0-9.e+]+)`, 'gm')))
        (spaces[m[1]] ??= {})[kind] = Number(m[2]);
    return {
      heapUsed: get('nodejs_heap_size_used_bytes'),
      heapTotal: get('nodejs_heap_size_total_bytes'),
      external: get('nodejs_external_memory_bytes'),
      spaces,
    };
  } catch {
    return {};
  }
}

/** The gateway's inspector address, from the line Node prints at start (startGatewayProcess runs it with --inspect). */
function inspectorUrl(child) {
  return /Debugger listening on (ws:\/\/\S+)/.exec(child.output)?.[1];
}

/**
 * Writes a heap snapshot of the gateway (through its inspector port) to `file`; resolves true when written. A
 * diagnostic (BENCH_HEAP_SNAPSHOT): the snapshot stops the gateway for seconds, so figures of that run are not kept.
 */
export async function heapSnapshot(child, file) {
  const url = inspectorUrl(child);
  if (!url) return false;
  const { default: WebSocket } = await import('ws');
  const out = createWriteStream(file);
  return new Promise((resolve) => {
    const ws = new WebSocket(url, { maxPayload: 1 << 30 });
    const timer = setTimeout(() => {
      ws.terminate();
      out.end();
      resolve(false);
    }, 120_000);
    // A file that cannot be written (a bad BENCH_HEAP_SNAPSHOT path): no snapshot, the run goes on.
    out.on('error', () => {
      clearTimeout(timer);
      ws.terminate();
      resolve(false);
    });
    ws.on('message', (data) => {
      const msg = JSON.parse(String(data));
      if (msg.method === 'HeapProfiler.addHeapSnapshotChunk') out.write(msg.params.chunk);
      else if (msg.id === 1) {
        clearTimeout(timer);
        ws.close();
        out.end(() => resolve(true));
      }
    });
    ws.on('error', () => {
      clearTimeout(timer);
      out.end();
      resolve(false);
    });
    ws.on('open', () => ws.send(JSON.stringify({ id: 1, method: 'HeapProfiler.takeHeapSnapshot', params: {} })));
  });
}

/**
 * Forces a full garbage collection in the gateway through its inspector port and returns the live JS heap
 * (bytes) and the RSS right after; undefined when the inspector is not reachable.
 */
export async function liveHeap(child) {
  const url = inspectorUrl(child);
  if (!url) return undefined;
  const { default: WebSocket } = await import('ws');
  return new Promise((resolve) => {
    const ws = new WebSocket(url);
    const timer = setTimeout(() => {
      ws.terminate();
      resolve(undefined);
    }, 15_000);
    let id = 0;
    const pending = new Map();
    const call = (method) =>
      new Promise((res) => {
        pending.set(++id, res);
        ws.send(JSON.stringify({ id, method }));
      });
    ws.on('message', (data) => {
      const msg = JSON.parse(String(data));
      pending.get(msg.id)?.(msg.result);
      pending.delete(msg.id);
    });
    ws.on('error', () => {
      clearTimeout(timer);
      resolve(undefined);
    });
    ws.on('open', async () => {
      await call('HeapProfiler.collectGarbage');
      await call('HeapProfiler.collectGarbage');
      const usage = await call('Runtime.getHeapUsage');
      clearTimeout(timer);
      ws.close();
      let rss;
      try {
        rss = Number(/^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${child.pid}/status`, 'utf8'))?.[1]) * 1024;
      } catch {
        rss = undefined;
      }
      resolve({ liveHeap: usage?.usedSize, rssAfterGc: rss });
    });
  });
}
