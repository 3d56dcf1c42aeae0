// Printing helpers: aligned tables and goal lines.

export const log = (line = '') => process.stdout.write(`${line}\n`);

export const ms = (v) => (Number.isFinite(v) ? `${v.toFixed(2)} ms` : 'n/a');
export const signedMs = (v) => (Number.isFinite(v) ? `${v >= 0 ? '+' : '−'}${Math.abs(v).toFixed(2)} ms` : 'n/a');
export const rps = (v) => (Number.isFinite(v) ? `${Math.round(v).toLocaleString('en-US')}/s` : 'n/a');
export const mb = (bytes) => (Number.isFinite(bytes) ? `${(bytes / 1024 / 1024).toFixed(1)} MB` : 'n/a');
export const pct = (v) => (Number.isFinite(v) ? `${(v * 100).toFixed(0)}%` : 'n/a');
export const us = (v) => (Number.isFinite(v) ? `${v.toFixed(0)} µs` : 'n/a');
export const ratio = (v) => (Number.isFinite(v) ? `${v.toFixed(2)}×` : 'n/a');

/** Prints rows (arrays of strings) with columns padded; the first row is the header. */
export function table(rows) {
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => String(r[i] ?? '').length)));
  rows.forEach((row, n) => {
    log('  ' + row.map((cell, i) => (i === 0 ? String(cell).padEnd(widths[i]) : String(cell).padStart(widths[i]))).join('   '));
    if (n === 0) log('  ' + widths.map((w) => '-'.repeat(w)).join('   '));
  });
}

/** "goal: <text> ... PASS|MISS|n/a" */
export function goal(text, measured, pass) {
  const verdict = pass === undefined ? 'n/a' : pass ? 'PASS' : 'MISS';
  log(`  goal: ${text.padEnd(52)} measured ${measured.padEnd(14)} ${verdict}`);
  return verdict;
}
