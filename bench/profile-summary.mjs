// Prints the functions with the most self time in a V8 .cpuprofile (from `npm run bench -- --profile`).
//   node bench/profile-summary.mjs .bench-tmp/profiles/<file>.cpuprofile [top=30]
import { readFileSync } from 'node:fs';

const [file, topArg] = process.argv.slice(2);
if (!file) {
  process.stderr.write('usage: node bench/profile-summary.mjs <file.cpuprofile> [top]\n');
  process.exit(2);
}
const profile = JSON.parse(readFileSync(file, 'utf8'));
const top = Number(topArg ?? 30);
const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const self = new Map();
const dt = profile.timeDeltas;
for (let i = 0; i < profile.samples.length; i++) {
  const node = byId.get(profile.samples[i]);
  const f = node.callFrame;
  const where = f.url ? `${f.url.replace(/^file:\/\/.*?\/(node_modules|dist)\//, '$1/')}:${f.lineNumber + 1}` : '';
  const key = `${f.functionName || '(anonymous)'} ${where}`.trim();
  self.set(key, (self.get(key) ?? 0) + (dt[i] ?? 0));
}
const total = [...self.values()].reduce((a, b) => a + b, 0);
const idle = [...self.entries()].filter(([k]) => k.startsWith('(idle)')).reduce((a, [, v]) => a + v, 0);
console.log(`total ${(total / 1000).toFixed(0)} ms sampled, ${(((total - idle) / total) * 100).toFixed(0)}% busy`);
for (const [k, v] of [...self.entries()]
  .filter(([k]) => !k.startsWith('(idle)'))
  .sort((a, b) => b[1] - a[1])
  .slice(0, top)) {
  console.log(`${((v / (total - idle)) * 100).toFixed(1).padStart(5)}%  ${k}`);
}
