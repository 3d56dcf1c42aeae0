// Bytes of JS heap a process allocated between two calls: what the GCs in between freed (v8.GCProfiler's heap sizes
// before and after each) plus the growth of the used heap. Used by the GC probe (inside a gateway) and bench/admit.mjs.
import { GCProfiler, getHeapStatistics } from 'node:v8';

let profiler;
let usedBefore = 0;

/** Bytes allocated since the call before (the first call starts the count and returns what the heap holds). */
export function allocated() {
  const stats = profiler?.stop()?.statistics ?? [];
  profiler = new GCProfiler();
  profiler.start();
  let freed = 0;
  for (const s of stats) freed += s.beforeGC.heapStatistics.usedHeapSize - s.afterGC.heapStatistics.usedHeapSize;
  const used = getHeapStatistics().used_heap_size;
  const bytes = freed + used - usedBefore;
  usedBefore = used;
  return bytes;
}
