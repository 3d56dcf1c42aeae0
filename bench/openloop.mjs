// Open-loop load generator: sends requests at a fixed rate whatever the responses do, over keep-alive
// undici Pools, and prints latency percentiles per target as JSON. Run as a child process by bench/lib/load.mjs:
//   node bench/openloop.mjs '{"targets":[{"name":"direct","url":"http://127.0.0.1:8080/x"}],"method":"POST",
//                             "body":"{}","headers":{},"rate":1000,"seconds":10,"sliceSeconds":1,"warmupSeconds":1}'
// With several targets, the load goes to one target at a time, switching every `sliceSeconds`, so that
// background noise on a shared machine falls on every target alike; each gets `seconds` at `rate` in total.
// Latency is measured from the time a request was SCHEDULED (no coordinated omission), and separately
// from the time it was handed to the pool ("service"), so the generator's own timer lag is visible.
import { performance } from 'node:perf_hooks';
import { Pool } from 'undici';

const spec = JSON.parse(process.argv[2]);
const { targets, method = 'GET', body, headers = {}, rate, seconds, sliceSeconds = 1, warmupSeconds = 0, connections = 32, slowMs } = spec;

const perTarget = Math.round(rate * seconds);
const perSlice = Math.max(1, Math.round(rate * sliceSeconds));
// Warm-up first, on the same pools (so the measured phase starts with open connections and a warm JIT on both
// sides), in slices of half the warm-up per target; not recorded.
const warmPerTarget = Math.round(rate * warmupSeconds);
const warmPerSlice = Math.max(1, Math.round(warmPerTarget / 2));
const warmTotal = warmPerTarget * targets.length;
const total = warmTotal + perTarget * targets.length;
const intervalMs = 1000 / rate;

const state = targets.map((t) => {
  const url = new URL(t.url);
  return {
    name: t.name,
    path: url.pathname + url.search,
    pool: new Pool(url.origin, { connections, pipelining: 1, keepAliveTimeout: 60_000 }),
    fromSchedule: new Float64Array(perTarget),
    service: new Float64Array(perTarget),
    sent: 0,
    ok: 0,
    non2xx: 0,
    errors: 0,
    firstError: undefined,
    /** With spec.slowMs: [ms since start of the run, service latency] of the slow requests (diagnosis). */
    slow: [],
  };
});

let completed = 0;
let next = 0;
const start = performance.now() + 20;
const measuredStart = start + warmTotal * intervalMs;

function send(i) {
  const scheduled = start + i * intervalMs;
  if (i < warmTotal) {
    const t = state[Math.floor(i / warmPerSlice) % state.length];
    t.pool
      .request({ path: t.path, method, headers, body })
      .then((res) => res.body.dump())
      .catch(() => undefined)
      .finally(() => {
        completed++;
        if (next >= total && completed === total) finish();
      });
    return;
  }
  const t = state[Math.floor((i - warmTotal) / perSlice) % state.length];
  const sent = performance.now();
  t.sent++;
  t.pool
    .request({ path: t.path, method, headers, body })
    .then(async (res) => {
      await res.body.dump();
      const end = performance.now();
      const m = t.ok + t.non2xx;
      t.fromSchedule[m] = end - scheduled;
      t.service[m] = end - sent;
      if (slowMs !== undefined && end - sent > slowMs && t.slow.length < 500) t.slow.push([Math.round(sent - measuredStart), +(end - sent).toFixed(2)]);
      if (res.statusCode >= 200 && res.statusCode < 300) t.ok++;
      else t.non2xx++;
    })
    .catch((err) => {
      t.errors++;
      t.firstError ??= err.message;
    })
    .finally(() => {
      completed++;
      if (next >= total && completed === total) finish();
    });
}

function tick() {
  const now = performance.now();
  while (next < total && start + next * intervalMs <= now) send(next++);
  if (next < total) setTimeout(tick, Math.max(0, start + next * intervalMs - performance.now()));
}

function percentiles(values, n) {
  const sorted = Array.from(values.subarray(0, n)).sort((a, b) => a - b);
  const at = (p) => (sorted.length ? sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] : NaN);
  return { p50: at(50), p90: at(90), p99: at(99), p999: at(99.9), max: sorted[sorted.length - 1] ?? NaN };
}

let finished = false;
function finish() {
  if (finished) return;
  finished = true;
  const elapsedS = (performance.now() - measuredStart) / 1000;
  const out = {};
  for (const t of state) {
    const measured = t.ok + t.non2xx;
    out[t.name] = {
      rate,
      seconds,
      sent: t.sent,
      achievedRate: (total - warmTotal) / elapsedS,
      ok: t.ok,
      non2xx: t.non2xx,
      errors: perTarget - measured, // failed or never answered
      firstError: t.firstError,
      fromSchedule: percentiles(t.fromSchedule, measured),
      service: percentiles(t.service, measured),
      ...(slowMs !== undefined ? { slow: t.slow } : {}),
    };
  }
  process.stdout.write(JSON.stringify(out) + '\n');
  Promise.allSettled(state.map((t) => t.pool.destroy())).finally(() => process.exit(0));
}

// Hard stop: never outlive the run by much, whatever the targets do.
setTimeout(() => {
  for (const t of state) t.firstError ??= 'requests unanswered at the time limit';
  finish();
}, ((seconds + warmupSeconds) * targets.length + 15) * 1000).unref();

setTimeout(tick, Math.max(0, start - performance.now()));
