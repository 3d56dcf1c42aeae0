// SSE cost: many short OpenAI-style streams (bench/lib/forwarders.mjs sse-burst: K events back to back, then [DONE])
// through one target at a time, with K = 50 and K = 1, the CPU of the target's process group read from /proc before
// and after each batch. CPU per stream at each K; the marginal CPU per event = (per 50-event stream − per 1-event
// stream) ÷ 49, which leaves out what a stream costs whatever its length (connection reuse, request head, routing).
// The CPU is read from each thread's /proc/<pid>/task/<tid>/schedstat (ns) rather than from the 10 ms ticks of
// /proc/<pid>/stat that the closed loop uses: a batch of 1-event streams through nginx is only a few ticks.
import { readdirSync, readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { Pool } from 'undici';
import { cpuSnapshot, forEachProcess, groupCpuSeconds, otherCores } from './procs.mjs';

/** Events per long stream and per short stream. */
export const LONG = 50;
export const SHORT = 1;

/** The body each stream POSTs (an OpenAI chat request with stream: true). */
export const SSE_COST_BODY = JSON.stringify({
  model: 'bench',
  stream: true,
  messages: [{ role: 'user', content: 'say something' }],
});

/**
 * CPU seconds so far of every thread of every live process in process group `pgid`, from the run time (ns) in
 * /proc/<pid>/task/<tid>/schedstat; undefined when that cannot be read (then groupCpuSeconds' ticks are used).
 */
function groupCpuPrecise(pgid) {
  let ns = 0;
  let seen = false;
  const read = forEachProcess((pid, fields) => {
    if (Number(fields[2]) !== pgid) return;
    let tasks = [];
    try {
      tasks = readdirSync(`/proc/${pid}/task`);
    } catch {
      return;
    }
    for (const tid of tasks) {
      try {
        ns += Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0]);
        seen = true;
      } catch {
        /* thread gone */
      }
    }
  });
  return read && seen ? ns / 1e9 : undefined;
}

/** `data:` events in a stream's text, the final `data: [DONE]` apart. */
function countEvents(text) {
  let events = 0;
  let done = false;
  for (let at = text.indexOf('data:'); at !== -1; at = text.indexOf('data:', at + 5)) {
    if (text.startsWith('data: [DONE]', at)) done = true;
    else events++;
  }
  return { events, done };
}

/**
 * `streams` streams of `events` events through `pool` (`concurrency` at a time; stops at `deadline` whatever is
 * left). Resolves { streams (completed), complete (every event and [DONE], status 200), lost (streams that were
 * not), errors, firstProblem, seconds }.
 */
async function batch(pool, path, headers, { streams, events, concurrency, deadline }) {
  const out = { streams: 0, complete: 0, lost: 0, errors: 0, firstProblem: undefined };
  const h = { ...headers, 'x-bench-events': String(events) };
  let started = 0;
  const t0 = performance.now();
  const worker = async () => {
    while (started < streams && Date.now() < deadline) {
      started++;
      try {
        const res = await pool.request({ path, method: 'POST', headers: h, body: SSE_COST_BODY });
        const text = await res.body.text();
        const got = countEvents(text);
        out.streams++;
        if (res.statusCode === 200 && got.events === events && got.done) out.complete++;
        else {
          out.lost++;
          out.firstProblem ??= `status ${res.statusCode}, ${got.events}/${events} events, [DONE] ${got.done ? 'seen' : 'missing'}: ${text.slice(0, 120)}`;
        }
      } catch (err) {
        out.errors++;
        out.firstProblem ??= err.message;
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  out.seconds = (performance.now() - t0) / 1000;
  return out;
}

/**
 * One target: a warm-up of `warmup` long streams, then long and short batches in the order long short short long
 * (half the count each time, so that a drift of the machine falls on both), the CPU of `pgid` around each batch.
 * Resolves { long, short, usPerEvent, lost, errors, otherCores } (long/short: { streams, cpuUsPerStream, rate }).
 */
export async function sseCostOf(target, headers, { streams, warmup, concurrency, timeoutMs }) {
  const url = new URL(target.url);
  const pool = new Pool(url.origin, { connections: concurrency, keepAliveTimeout: 60_000 });
  const deadline = Date.now() + timeoutMs;
  const pgid = target.child.pid;
  const precise = groupCpuPrecise(pgid) !== undefined;
  const cpuNow = () => (precise ? groupCpuPrecise(pgid) : groupCpuSeconds(pgid));
  const acc = {
    [LONG]: { streams: 0, cpu: 0, seconds: 0 },
    [SHORT]: { streams: 0, cpu: 0, seconds: 0 },
  };
  let lost = 0;
  let errors = 0;
  let firstProblem;
  let busy = 0;
  let elapsed = 0;
  try {
    const w = await batch(pool, url.pathname, headers, { streams: warmup, events: LONG, concurrency, deadline });
    lost += w.lost;
    errors += w.errors;
    firstProblem ??= w.firstProblem;
    for (const events of [LONG, SHORT, SHORT, LONG]) {
      await sleep(200);
      const snap = cpuSnapshot();
      const cpu0 = cpuNow();
      const r = await batch(pool, url.pathname, headers, {
        streams: Math.ceil((events === SHORT ? 2 * streams : streams) / 2),
        events,
        concurrency,
        deadline,
      });
      const cpu = cpuNow() - cpu0;
      const other = otherCores(snap, cpuSnapshot());
      acc[events].streams += r.streams;
      acc[events].cpu += cpu;
      acc[events].seconds += r.seconds;
      if (Number.isFinite(other)) {
        busy += other * r.seconds;
        elapsed += r.seconds;
      }
      lost += r.lost;
      errors += r.errors;
      firstProblem ??= r.firstProblem;
    }
  } finally {
    await pool.close();
  }
  const per = (a) => ({
    streams: a.streams,
    cpuUsPerStream: (a.cpu * 1e6) / a.streams,
    rate: a.streams / a.seconds,
  });
  const long = per(acc[LONG]);
  const short = per(acc[SHORT]);
  return {
    long,
    short,
    usPerEvent: (long.cpuUsPerStream - short.cpuUsPerStream) / (LONG - SHORT),
    lost,
    errors,
    firstProblem,
    otherCores: elapsed ? busy / elapsed : NaN,
    cpuSource: precise ? 'schedstat' : 'stat ticks',
  };
}
