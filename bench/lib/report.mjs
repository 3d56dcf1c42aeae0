// Printing helpers: aligned tables and goal lines.

export const log = (line = '') => process.stdout.write(`${line}\n`);

export const ms = (v) => (Number.isFinite(v) ? `${v.toFixed(2)} ms` : 'n/a');
export const signedMs = (v) => (Number.isFinite(v) ? `${v >= 0 ? '+' : '−'}${Math.abs(v).toFixed(2)} ms` : 'n/a');
export const rps = (v) => (Number.isFinite(v) ? `${Math.round(v).toLocaleString('en-US')}/s` : 'n/a');
export const mb = (bytes) => (Number.isFinite(bytes) ? `${(bytes / 1024 / 1024).toFixed(1)} MB` : 'n/a');
export const pct = (v) => (Number.isFinite(v) ? `${(v * 100).toFixed(0)}%` : 'n/a');
export const us = (v) => (Number.isFinite(v) ? `${v.toFixed(0)} µs` : 'n/a');
export const cores = (v) => (Number.isFinite(v) ? v.toFixed(2) : 'n/a');
export const ratio = (v) => (Number.isFinite(v) ? `${v.toFixed(2)}×` : 'n/a');

/** Prints rows (arrays of strings) with columns padded (right-aligned but the `left` ones); the first row is the header. */
export function table(rows, { left = [0] } = {}) {
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => String(r[i] ?? '').length)));
  rows.forEach((row, n) => {
    log(
      '  ' +
        row
          .map((cell, i) => (left.includes(i) ? String(cell).padEnd(widths[i]) : String(cell).padStart(widths[i])))
          .join('   '),
    );
    if (n === 0) log('  ' + widths.map((w) => '-'.repeat(w)).join('   '));
  });
}

/** Every goal line printed in this run, in order: { part, text, measured, verdict } (for the closing summary). */
export const goalLog = [];

/**
 * "goal: <text> ... met|MISSED|skipped" (skipped when `pass` is undefined: no usable figure). Returns the verdict
 * and records the line in goalLog under `part`.
 */
export function goal(text, measured, pass, part = '') {
  const verdict = pass === undefined ? 'skipped' : pass ? 'met' : 'MISSED';
  log(`  goal: ${text.padEnd(58)} ${String(measured).padEnd(26)} ${verdict}`);
  goalLog.push({ part, text, measured: String(measured), verdict });
  return verdict;
}

/** Records, without printing, the goals of `texts` not judged yet under `part` (a part not run, or one that failed). */
export function skipGoals(part, texts, why) {
  for (const text of texts) {
    if (!goalLog.some((g) => g.part === part && g.text === text))
      goalLog.push({ part, text, measured: why, verdict: 'skipped' });
  }
}
