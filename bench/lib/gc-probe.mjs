// Preloaded into the gateway (node --import) by the benchmark: appends one line per garbage collection,
// "<epoch ms> <kind> <pause ms> <flags>", to the file in BENCH_GC_LOG, so that slow requests can be matched with GC
// pauses. kind: minor (scavenge), major (mark-compact), incremental (marking step), weakcb. Every 100 ms it also
// appends "<epoch ms> alloc <bytes>": the bytes of JS heap the process allocated since the line before (what its GCs
// freed, from v8.GCProfiler's heap sizes before and after each, plus the heap's growth), so that the bench can count
// the garbage per request. Observes only; nothing of it runs unless the benchmark preloads it.
import { appendFileSync } from 'node:fs';
import { constants, PerformanceObserver, performance } from 'node:perf_hooks';
import { allocated } from './heap-allocated.mjs';

const file = process.env.BENCH_GC_LOG;
const KINDS = {
  [constants.NODE_PERFORMANCE_GC_MINOR]: 'minor',
  [constants.NODE_PERFORMANCE_GC_MAJOR]: 'major',
  [constants.NODE_PERFORMANCE_GC_INCREMENTAL]: 'incremental',
  [constants.NODE_PERFORMANCE_GC_WEAKCB]: 'weakcb',
};
let lines = [];

function flush() {
  if (!lines.length) return;
  const text = lines.join('');
  lines = [];
  try {
    appendFileSync(file, text);
  } catch {
    /* the benchmark's temporary directory is gone: nothing to report to */
  }
}

if (file) {
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) {
      lines.push(
        `${(performance.timeOrigin + e.startTime).toFixed(1)} ${KINDS[e.detail?.kind] ?? 'other'} ${e.duration.toFixed(3)} ${e.detail?.flags ?? 0}\n`,
      );
    }
    if (lines.length > 5000) flush();
  }).observe({ entryTypes: ['gc'] });
  allocated();
  setInterval(() => lines.push(`${Date.now()} alloc ${allocated()}\n`), 100).unref();
  setInterval(flush, 500).unref();
  process.on('exit', flush);
}
