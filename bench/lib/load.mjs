// Closed-loop load (wrk, else autocannon) and the open-loop fixed-rate generator (bench/openloop.mjs).
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { runToEnd } from './procs.mjs';

const luaString = (s) => `"${s.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`;

/**
 * The wrk Lua script: POST with body and headers; prints one JSON line when done. With `paths`, the requests
 * cycle through those paths (pre-formatted once per thread), otherwise they go to the URL's path.
 */
export function writeWrkScript(dir, { method, body, headers, paths, name = 'wrk-post' }) {
  const file = join(dir, `${name}.lua`);
  const cycle = paths
    ? [
        `local paths = {`,
        ...paths.map((p) => `  ${luaString(p)},`),
        `}`,
        `local reqs = {}`,
        `init = function(args)`,
        `  for n, p in ipairs(paths) do reqs[n] = wrk.format(nil, p) end`,
        `end`,
        `local i = 0`,
        `request = function()`,
        `  i = i % #reqs + 1`,
        `  return reqs[i]`,
        `end`,
      ]
    : [];
  const lines = [
    `wrk.method = ${luaString(method)}`,
    `wrk.body = ${luaString(body)}`,
    ...Object.entries(headers).map(([k, v]) => `wrk.headers[${luaString(k)}] = ${luaString(v)}`),
    ...cycle,
    `done = function(summary, latency, requests)`,
    `  local e = summary.errors`,
    `  io.write(string.format('\\nBENCH_JSON {"requests":%d,"duration_us":%d,"p50_us":%d,"p99_us":%d,"max_us":%d,` +
      `"err_connect":%d,"err_read":%d,"err_write":%d,"err_status":%d,"err_timeout":%d}\\n',`,
    `    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99), latency.max,`,
    `    e.connect, e.read, e.write, e.status, e.timeout))`,
    `end`,
  ];
  writeFileSync(file, lines.join('\n') + '\n');
  return file;
}

/**
 * Closed-loop throughput with wrk. Returns { rps, p50Ms, p99Ms, requests, errors, non2xx }.
 * `errors` counts socket errors and timeouts; `non2xx` counts responses with status >= 400 (wrk's "status" errors).
 */
export async function runWrk(wrkBin, script, url, { connections, threads, seconds }) {
  const args = [
    '-t',
    String(threads),
    '-c',
    String(connections),
    '-d',
    `${seconds}s`,
    '--timeout',
    '5s',
    '-s',
    script,
    url,
  ];
  const res = await runToEnd(wrkBin, args, { timeoutMs: (seconds + 20) * 1000 });
  const line = /BENCH_JSON (\{.*\})/.exec(res.stdout)?.[1];
  if (!line) throw new Error(`wrk gave no result (exit ${res.code}):\n${res.stdout}\n${res.stderr}`);
  const r = JSON.parse(line);
  return {
    rps: r.requests / (r.duration_us / 1e6),
    p50Ms: r.p50_us / 1000,
    p99Ms: r.p99_us / 1000,
    requests: r.requests,
    errors: r.err_connect + r.err_read + r.err_write + r.err_timeout,
    non2xx: r.err_status,
  };
}

/** Closed-loop throughput with autocannon (in this process) when wrk is not installed. Same result shape. */
export async function runAutocannon(url, { method, body, headers, paths }, { connections, seconds }) {
  const { default: autocannon } = await import('autocannon');
  let i = 0;
  const requests = paths
    ? [{ method, body, headers, setupRequest: (req) => ({ ...req, path: paths[i++ % paths.length] }) }]
    : undefined;
  const result = await autocannon({ url, method, body, headers, requests, connections, duration: seconds, timeout: 5 });
  return {
    rps: result.requests.total / (result.duration || seconds),
    p50Ms: result.latency.p50,
    p99Ms: result.latency.p99,
    requests: result.requests.total,
    errors: result.errors + result.timeouts,
    non2xx: result.non2xx,
  };
}

const OPENLOOP = fileURLToPath(new URL('../openloop.mjs', import.meta.url));
const GC_PROBE = fileURLToPath(new URL('./gc-probe.mjs', import.meta.url));

/**
 * Open-loop load at a fixed rate in a separate Node process (bench/openloop.mjs), one target at a time in
 * alternating slices. Latency counts from the time each request was scheduled, so a slow response cannot
 * hide the requests queued behind it. With `gcLog`, the generator's own GC pauses go to that file
 * (bench/lib/gc-probe.mjs). Resolves { [targetName]: result }.
 */
export async function runOpenLoop({
  targets,
  method,
  body,
  headers,
  rate,
  seconds,
  sliceSeconds = 1,
  warmupSeconds = 0,
  connections = 32,
  slowMs,
  gcLog,
}) {
  const spec = JSON.stringify({
    targets,
    method,
    body,
    headers,
    rate,
    seconds,
    sliceSeconds,
    warmupSeconds,
    connections,
    slowMs,
  });
  const args = gcLog ? ['--import', GC_PROBE, OPENLOOP, spec] : [OPENLOOP, spec];
  const env = gcLog ? { ...process.env, BENCH_GC_LOG: gcLog } : undefined;
  const res = await runToEnd(process.execPath, args, {
    env,
    timeoutMs: ((seconds + warmupSeconds) * targets.length + 30) * 1000,
  });
  if (res.code !== 0) throw new Error(`open-loop generator failed (exit ${res.code}):\n${res.stderr}`);
  return JSON.parse(res.stdout);
}
