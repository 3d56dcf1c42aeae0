// Reads one sample out of a Prometheus text exposition, exactly: the metric name and every label must match (no
// regex over lines), so a renamed metric or a changed label set fails the test that relies on it.

/** Every sample of `name` with its labels; `name` is the full sample name (e.g. `x_bucket`, `x_total`). */
export function samples(exposition: string, name: string): Array<{ labels: Record<string, string>; value: number }> {
  const out: Array<{ labels: Record<string, string>; value: number }> = [];
  for (const line of exposition.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const brace = line.indexOf('{');
    const space = line.lastIndexOf(' ');
    const sampleName = brace >= 0 && brace < space ? line.slice(0, brace) : line.slice(0, space);
    if (sampleName !== name) continue;
    const labels: Record<string, string> = {};
    if (brace >= 0 && brace < space) {
      const body = line.slice(brace + 1, line.lastIndexOf('}'));
      for (const m of body.matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g))
        labels[m[1]] = m[2].replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c));
    }
    out.push({ labels, value: Number(line.slice(space + 1)) });
  }
  return out;
}

/** The value of the one sample of `name` whose labels are exactly `labels`; undefined when there is none. */
export function metricValue(exposition: string, name: string, labels: Record<string, string> = {}): number | undefined {
  const want = JSON.stringify(Object.entries(labels).sort());
  const hit = samples(exposition, name).filter((s) => JSON.stringify(Object.entries(s.labels).sort()) === want);
  if (hit.length > 1) throw new Error(`${name}${want} appears ${hit.length} times`);
  return hit[0]?.value;
}
