// Micro-benchmark of one LLM endpoint pick (SPEC §12 "Cost"): the prefix key of a chat body the gateway has already
// parsed, then the pick among 16 ready endpoints with in-flight counts and scraped figures, as the data plane does it.
// Runs the built code (dist/). Prints CPU µs per pick and the goal (≤ 5 µs at 16 endpoints) met or MISSED.
//   node bench/pick.mjs [--endpoints 16] [--picks 200000]
import { parseArgs } from 'node:util';

const { values } = parseArgs({
  options: { endpoints: { type: 'string', default: '16' }, picks: { type: 'string', default: '200000' } },
});
const n = Number(values.endpoints);
const picks = Number(values.picks);
const root = new URL('../dist/', import.meta.url);
const { TargetPicker } = await import(new URL('gateway/forward/targets.js', root).href);
const { prefixKey } = await import(new URL('gateway/openai/prefix.js', root).href);

const urls = Array.from({ length: n }, (_, i) => `http://10.0.${i >> 8}.${i & 255}:8000`);
const route = {
  id: 'demo/chat',
  project: 'demo',
  deployment: 'chat',
  kind: 'llm',
  backend: { kind: 'urls', urls },
  balancing: { policy: 'llm', metricsPath: '/metrics', metricsPort: 0 },
};
// Scraped figures for every endpoint, a few of them saturated.
const figures = new Map(urls.map((u, i) => [u, { waiting: i % 7, running: 4, kv: (i % 10) / 10, at: Date.now() }]));
const stats = { fresh: (origin) => figures.get(origin) };
const picker = new TargetPicker(undefined, stats, {
  maxWaiting: 5,
  maxKvCache: 0.8,
  maxLoadFactor: 1.25,
  maxLoadSlack: 2,
});
for (const u of urls) for (let k = 0; k < 3; k++) picker.begin(new URL(u).origin);

const tenants = Array.from({ length: 64 }, (_, t) => ({
  model: 'meta-llama/Llama-3.1-8B-Instruct',
  messages: [
    {
      role: 'system',
      content: `You are the assistant of tenant ${t}. Answer briefly and cite the policy. `.repeat(50),
    },
    { role: 'user', content: 'What is the refund policy for damaged goods?' },
  ],
}));

function run(count) {
  let sink = 0;
  for (let i = 0; i < count; i++) {
    const key = prefixKey(tenants[i & 63], 'meta-llama/Llama-3.1-8B-Instruct');
    sink ^= picker.choose(route, key).target.hash;
  }
  return sink;
}

run(20_000); // warm-up
const before = process.cpuUsage();
const t0 = performance.now();
run(picks);
const cpu = process.cpuUsage(before);
const wall = performance.now() - t0;
const us = (cpu.user + cpu.system) / picks;
console.log(
  `pick at ${n} endpoints: ${us.toFixed(2)} µs CPU per pick (prefix key + choice), ${((wall * 1000) / picks).toFixed(2)} µs wall, ${picks} picks`,
);
console.log(
  `goal: a pick costs ≤ 5 µs CPU at 16 endpoints: ${n !== 16 ? 'skipped (not 16 endpoints)' : us <= 5 ? 'met' : 'MISSED'}`,
);
