// Self time per request of each function in two sets of time windows of one V8 .cpuprofile, side by side: which
// functions cost more per request in the first set (e.g. the 10,000-route gateway cycling through every route) than
// in the second (the same process with every request on one path). The windows and request counts are what
// `npm run bench -- --only kubernetes --profile` prints (with BENCH_K8S_HOT_PATH=1 for the one-path rounds).
//   node bench/profile-diff.mjs <file.cpuprofile> <a-windows> <a-requests> <b-windows> <b-requests> [top=40]
//   windows: "start..end[,start..end...]" in the profile's clock (µs)
import { readFileSync } from 'node:fs';

const [file, winA, reqA, winB, reqB, topArg] = process.argv.slice(2);
if (!file || !winA || !reqA || !winB || !reqB) {
  process.stderr.write(
    'usage: node bench/profile-diff.mjs <file.cpuprofile> <a-windows> <a-requests> <b-windows> <b-requests> [top]\n',
  );
  process.exit(2);
}
const profile = JSON.parse(readFileSync(file, 'utf8'));
const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const windows = (w) => w.split(',').map((x) => x.split('..').map(Number));
const sets = [windows(winA), windows(winB)];
const self = [new Map(), new Map()];
let t = profile.startTime;
for (let i = 0; i < profile.samples.length; i++) {
  t += profile.timeDeltas[i];
  const which = sets.findIndex((set) => set.some(([s, e]) => t >= s && t <= e));
  if (which === -1) continue;
  const f = byId.get(profile.samples[i]).callFrame;
  if (f.functionName === '(idle)') continue;
  const where = f.url ? `${f.url.replace(/^file:\/\/.*?\/(node_modules|dist)\//, '$1/')}:${f.lineNumber + 1}` : '';
  const key = `${f.functionName || '(anonymous)'} ${where}`.trim();
  // A sample's time is the gap to the next sample.
  const dt = profile.timeDeltas[i + 1] ?? profile.timeDeltas[i];
  self[which].set(key, (self[which].get(key) ?? 0) + dt);
}
const perReq = [Number(reqA), Number(reqB)];
const busy = self.map((m, k) => [...m.values()].reduce((a, b) => a + b, 0) / perReq[k]);
console.log(
  `busy µs per request: a ${busy[0].toFixed(1)}, b ${busy[1].toFixed(1)} (a − b ${(busy[0] - busy[1]).toFixed(1)})`,
);
const keys = new Set([...self[0].keys(), ...self[1].keys()]);
const rows = [...keys].map((k) => {
  const a = (self[0].get(k) ?? 0) / perReq[0];
  const b = (self[1].get(k) ?? 0) / perReq[1];
  return { k, a, b, d: a - b };
});
rows.sort((x, y) => y.d - x.d);
const top = Number(topArg ?? 40);
const positive = rows.filter((r) => r.d > 0);
console.log(
  `functions costing more in a: ${positive.length}; the top ${Math.min(top, positive.length)} hold ${positive
    .slice(0, top)
    .reduce((s, r) => s + r.d, 0)
    .toFixed(1)} µs of the difference`,
);
console.log('  a − b       a       b   (µs per request)');
for (const r of rows.slice(0, top))
  console.log(`${r.d.toFixed(2).padStart(7)} ${r.a.toFixed(2).padStart(7)} ${r.b.toFixed(2).padStart(7)}   ${r.k}`);
