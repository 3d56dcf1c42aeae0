// Prints one plain closing line "vitest: N passed, N failed, N skipped" that CI log readers understand.
// A test that never ran because a hook of its suite failed (beforeAll, afterAll: the suite carries the error) counts
// as failed, not skipped: vitest marks such tests "skip", which used to let a red run read "0 failed".
import type { Reporter } from 'vitest/reporters';

type Task = { type: string; mode?: string; result?: { state?: string; errors?: unknown[] }; tasks?: Task[] };

export default class SummaryReporter implements Reporter {
  onFinished(files: Task[] = []): void {
    const c = { passed: 0, failed: 0, skipped: 0 };
    const walk = (t: Task, hookFailed: boolean): void => {
      const failedHere = hookFailed || (t.type !== 'test' && (t.result?.errors?.length ?? 0) > 0);
      if (t.tasks) for (const s of t.tasks) walk(s, failedHere);
      if (t.type !== 'test') return;
      const s = t.result?.state;
      if (s === 'pass') c.passed++;
      else if (s === 'fail' || failedHere) c.failed++;
      else c.skipped++;
    };
    for (const f of files) {
      walk(f, false);
      if (f.result?.state === 'fail' && !f.tasks?.length) c.failed++; // a file that failed to load
    }
    process.stdout.write(`\nvitest: ${c.passed} passed, ${c.failed} failed, ${c.skipped} skipped\n`);
  }
}
