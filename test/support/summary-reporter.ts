// Prints one plain closing line "vitest: N passed, N failed, N skipped" that CI log readers understand.
import type { Reporter } from 'vitest/reporters';

type Task = { type: string; mode?: string; result?: { state?: string }; tasks?: Task[] };

export default class SummaryReporter implements Reporter {
  onFinished(files: Task[] = []): void {
    const c = { passed: 0, failed: 0, skipped: 0 };
    const walk = (t: Task): void => {
      if (t.tasks) for (const s of t.tasks) walk(s);
      if (t.type !== 'test') return;
      const s = t.result?.state;
      if (s === 'pass') c.passed++;
      else if (s === 'fail') c.failed++;
      else c.skipped++;
    };
    for (const f of files) {
      walk(f);
      if (f.result?.state === 'fail' && !f.tasks?.length) c.failed++; // a file that failed to load
    }
    process.stdout.write(`\nvitest: ${c.passed} passed, ${c.failed} failed, ${c.skipped} skipped\n`);
  }
}
