// The admin page's live figures per deployment — requests/s, share of 5xx answers, p99 duration — over about the last
// minute. Nothing runs in the background: each read takes a sample of the metrics' running totals and compares it with
// the oldest sample still inside the window, so a gateway nobody watches pays nothing.
import type { Metrics } from '../observe/metrics.js';

type Totals = ReturnType<Metrics['routeTotals']>[number];

interface Sample {
  at: number;
  byRoute: Map<string, Totals>;
}

export interface LiveFigures {
  project: string;
  deployment: string;
  /** null until two samples at least a second apart exist. */
  requestsPerSecond: number | null;
  /** 5xx answers / answers in the window; null without answers. */
  errorRatio: number | null;
  /** Seconds; null without answers. Beyond the largest bucket: that bucket's bound (as Prometheus answers). */
  p99Seconds: number | null;
}

const WINDOW_MS = 60_000;
const MAX_SAMPLES = 30;

export class LiveStats {
  private samples: Sample[] = [];

  constructor(
    private readonly metrics: Metrics,
    private readonly now: () => number = Date.now,
  ) {}

  /** Figures per deployment, keyed `<project>/<deployment>`. */
  read(): Map<string, LiveFigures> {
    const at = this.now();
    const current: Sample = {
      at,
      byRoute: new Map(this.metrics.routeTotals().map((t) => [`${t.project}/${t.deployment}`, t])),
    };
    this.samples = this.samples.filter((s) => at - s.at <= WINDOW_MS);
    const base = this.samples.find((s) => at - s.at >= 1000);
    this.samples.push(current);
    // Many readers (several open pages) must not grow the list: keep the oldest and thin out the rest.
    if (this.samples.length > MAX_SAMPLES) this.samples.splice(1, this.samples.length - MAX_SAMPLES);

    const out = new Map<string, LiveFigures>();
    const bounds = this.metrics.durationBounds;
    for (const [id, t] of current.byRoute) {
      const before = base?.byRoute.get(id);
      const seconds = base ? (at - base.at) / 1000 : 0;
      const answers = t.total - (before?.total ?? 0);
      const errors = t.errors - (before?.errors ?? 0);
      const counts = before ? t.counts.map((c, i) => c - before.counts[i]) : t.counts;
      const count = t.count - (before?.count ?? 0);
      out.set(id, {
        project: t.project,
        deployment: t.deployment,
        requestsPerSecond: base ? answers / seconds : null,
        errorRatio: answers > 0 ? errors / answers : null,
        p99Seconds: count > 0 ? quantile(0.99, bounds, counts, count) : null,
      });
    }
    return out;
  }
}

/** Prometheus' histogram_quantile over per-bucket (not cumulative) counts: linear within the bucket. */
export function quantile(q: number, bounds: readonly number[], counts: ArrayLike<number>, count: number): number {
  const rank = q * count;
  let acc = 0;
  for (let i = 0; i < bounds.length; i++) {
    const next = acc + counts[i];
    if (next >= rank && counts[i] > 0) {
      const lower = i === 0 ? 0 : bounds[i - 1];
      return lower + (bounds[i] - lower) * ((rank - acc) / counts[i]);
    }
    acc = next;
  }
  return bounds[bounds.length - 1];
}
