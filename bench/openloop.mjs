// Open-loop load generator: sends requests at a fixed rate whatever the responses do, over keep-alive
// undici Pools, and prints latency percentiles per target as JSON. Run as a child process by bench/lib/load.mjs:
//   node bench/openloop.mjs '{"targets":[{"name":"direct","url":"http://127.0.0.1:8080/x"}],"method":"POST",
//                             "body":"{}","headers":{},"rate":1000,"seconds":10,"sliceSeconds":1,"warmupSeconds":1}'
// With several targets, the load goes to one target at a time, switching every `sliceSeconds`, so that
// background noise on a shared machine falls on every target alike; each gets `seconds` at `rate` in total.
// Latency is measured from the time a request was SCHEDULED (no coordinated omission), and separately
// from the time it was handed to the pool ("service"), so the generator's own timer lag is visible.
// For diagnosis it also reports, per target: p99 and slow requests for each of its slices in turn, the wall-clock
// windows of its slices (to match with the server's GC pauses), and the connections opened while measuring.
import { performance } from 'node:perf_hooks';
import { Pool } from 'undici';

const spec = JSON.parse(process.argv[2]);
const {
  targets,
  method = 'GET',
  body,
  headers = {},
  rate,
  seconds,
  sliceSeconds = 1,
  warmupSeconds = 0,
  connections = 32,
  slowMs,
} = spec;

const perTarget = Math.round(rate * seconds);
const perSlice = Math.max(1, Math.round(rate * sliceSeconds));
// Warm-up first, on the same pools (so the measured phase starts with open connections and a warm JIT on both
// sides), in slices of half the warm-up per target; not recorded.
const warmPerTarget = Math.round(rate * warmupSeconds);
const warmPerSlice = Math.max(1, Math.round(warmPerTarget / 2));
const warmTotal = warmPerTarget * targets.length;
const total = warmTotal + perTarget * targets.length;
const intervalMs = 1000 / rate;

let measuring = false;
const state = targets.map((target) => {
  const url = new URL(target.url);
  const t = {
    name: target.name,
    path: url.pathname + url.search,
    pool: new Pool(url.origin, { connections, pipelining: 1, keepAliveTimeout: 60_000 }),
    fromSchedule: new Float64Array(perTarget),
    service: new Float64Array(perTarget),
    /** Which of this target's slices (0 = its first) each measured request belongs to. */
    sliceOf: new Uint16Array(perTarget),
    sent: 0,
    ok: 0,
    non2xx: 0,
    errors: 0,
    firstError: undefined,
    /** With spec.slowMs: [ms since start of the measured run, service latency] of up to 500 slow requests, drawn evenly from all. */
    slow: [],
    slowCount: 0,
    connectsWarm: 0,
    connectsMeasured: 0,
  };
  t.pool.on('connect', () => (measuring ? t.connectsMeasured++ : t.connectsWarm++));
  return t;
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
  measuring = true;
  const slice = Math.floor((i - warmTotal) / perSlice);
  const t = state[slice % state.length];
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
      t.sliceOf[m] = Math.floor(slice / state.length);
      if (slowMs !== undefined && end - sent > slowMs)
        keepSlow(t, [+(sent - measuredStart).toFixed(1), +(end - sent).toFixed(2)]);
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

/** Reservoir sampling: every slow request has the same chance to be kept, whenever it came. */
function keepSlow(t, entry) {
  t.slowCount++;
  if (t.slow.length < 500) t.slow.push(entry);
  else {
    const j = Math.floor(Math.random() * t.slowCount);
    if (j < 500) t.slow[j] = entry;
  }
}

function tick() {
  const now = performance.now();
  while (next < total && start + next * intervalMs <= now) send(next++);
  if (next < total) setTimeout(tick, Math.max(0, start + next * intervalMs - performance.now()));
}

function percentiles(values, n) {
  return percentilesOf(Array.from(values.subarray(0, n)));
}

function percentilesOf(values) {
  const sorted = values.sort((a, b) => a - b);
  const at = (p) =>
    sorted.length ? sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] : NaN;
  return { p50: at(50), p90: at(90), p99: at(99), p999: at(99.9), max: sorted[sorted.length - 1] ?? NaN };
}

/** p99 (from the scheduled time) and requests slower than slowMs (service) in each of a target's slices in turn. */
function bySlice(t, measured) {
  const slices = Math.ceil(perTarget / perSlice);
  const lat = Array.from({ length: slices }, () => []);
  const slow = new Array(slices).fill(0);
  for (let m = 0; m < measured; m++) {
    lat[t.sliceOf[m]].push(t.fromSchedule[m]);
    if (slowMs !== undefined && t.service[m] > slowMs) slow[t.sliceOf[m]]++;
  }
  return { p99: lat.map((l) => +percentilesOf(l).p99.toFixed(2)), slow };
}

/** Wall-clock (epoch ms) windows of a target's slices, as scheduled. */
function windows(k) {
  const out = [];
  for (let slice = k; slice * perSlice < perTarget * state.length; slice += state.length) {
    const from = measuredStart + slice * perSlice * intervalMs;
    out.push([
      Math.round(performance.timeOrigin + from),
      Math.round(performance.timeOrigin + from + perSlice * intervalMs),
    ]);
  }
  return out;
}

let finished = false;
function finish() {
  if (finished) return;
  finished = true;
  const elapsedS = (performance.now() - measuredStart) / 1000;
  const out = {};
  for (const [k, t] of state.entries()) {
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
      bySlice: bySlice(t, measured),
      measuredStartEpochMs: performance.timeOrigin + measuredStart,
      windows: windows(k),
      connections: { warmUp: t.connectsWarm, measured: t.connectsMeasured },
      ...(slowMs !== undefined ? { slowCount: t.slowCount, slow: t.slow } : {}),
    };
  }
  process.stdout.write(JSON.stringify(out) + '\n');
  Promise.allSettled(state.map((t) => t.pool.destroy())).finally(() => process.exit(0));
}

// Hard stop: never outlive the run by much, whatever the targets do.
setTimeout(
  () => {
    for (const t of state) t.firstError ??= 'requests unanswered at the time limit';
    finish();
  },
  ((seconds + warmupSeconds) * targets.length + 15) * 1000,
).unref();

setTimeout(tick, Math.max(0, start - performance.now()));
