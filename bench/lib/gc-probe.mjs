// Preloaded into the gateway (node --import) by the benchmark: appends one line per garbage collection,
// "<epoch ms> <kind> <pause ms> <flags>", to the file in BENCH_GC_LOG, so that slow requests can be matched with GC
// pauses. kind: minor (scavenge), major (mark-compact), incremental (marking step), weakcb. Observes only.
import { appendFileSync } from 'node:fs';
import { constants, PerformanceObserver, performance } from 'node:perf_hooks';

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
  setInterval(flush, 500).unref();
  process.on('exit', flush);
}
