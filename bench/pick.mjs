// Micro-benchmark of one LLM endpoint pick (SPEC §12 "Cost"): the picking key of a chat body the gateway has already
// scanned (llmMembers: where the prompt's members are), read from the body's bytes, then the pick among 16 ready
// endpoints with in-flight counts and scraped figures, as the data plane does it. The bodies are conversations of
// about 100,000 characters (a 4,000-character system prompt, then turns of tool output and answers; 64 of them, so
// that the keys differ) and single-turn requests of 64 tenants. Runs a built copy of dist/ (default this checkout's).
// Prints CPU µs per pick and the goal (≤ 5 µs at 16 endpoints) met or MISSED.
//   node bench/pick.mjs [--endpoints 16] [--picks 200000] [--chars 100000] [--dist <dir>]
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

const { values } = parseArgs({
  options: {
    endpoints: { type: 'string', default: '16' },
    picks: { type: 'string', default: '200000' },
    chars: { type: 'string', default: '100000' },
    dist: { type: 'string' },
  },
});
const n = Number(values.endpoints);
const picks = Number(values.picks);
const chars = Number(values.chars);
const root = values.dist ? pathToFileURL(`${resolve(values.dist)}/`) : new URL('../dist/', import.meta.url);
const { TargetPicker } = await import(new URL('gateway/forward/targets.js', root).href);
const { promptKey } = await import(new URL('gateway/openai/prefix.js', root).href);
const { llmMembers } = await import(new URL('gateway/openai/llm-body.js', root).href);

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

const MODEL = 'meta-llama/Llama-3.1-8B-Instruct';
const system = 'You are the assistant of one application. Answer briefly and cite the policy. '.repeat(50);
/** A body, scanned as the gateway scans it before picking: { raw, members }. */
function scanned(doc) {
  const raw = Buffer.from(JSON.stringify(doc));
  const members = llmMembers(raw);
  if (members instanceof Error) throw members;
  return { raw, members };
}
const bodies = [];
for (let c = 0; c < 64; c++) {
  const messages = [{ role: 'system', content: system }];
  let size = system.length;
  for (let t = 0; size < chars; t++) {
    const turn = [
      { role: 'user', content: `Conversation ${c}, step ${t}: what does the log say about the failing job? ` },
      { role: 'assistant', content: `Calling the log tool for step ${t}. `.repeat(12) },
      { role: 'tool', content: `line ${t}: job ${c} exited with status 1 after retrying the upload. `.repeat(20) },
    ];
    messages.push(...turn);
    size += turn.reduce((k, m) => k + m.content.length, 0);
  }
  messages.push({ role: 'user', content: 'And now?' });
  bodies.push(scanned({ model: MODEL, stream: true, messages }));
  bodies.push(
    scanned({
      model: MODEL,
      messages: [
        {
          role: 'system',
          content: `You are the assistant of tenant ${c}. Answer briefly and cite the policy. `.repeat(50),
        },
        { role: 'user', content: 'What is the refund policy for damaged goods?' },
      ],
    }),
  );
}
const promptChars = Math.round(bodies.filter((_, i) => i % 2 === 0).reduce((k, b) => k + b.raw.length, 0) / 64);

function run(count) {
  let sink = 0;
  for (let i = 0; i < count; i++) {
    const b = bodies[i & 127];
    const key = promptKey(b.raw, b.members, MODEL);
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
  `pick at ${n} endpoints: ${us.toFixed(2)} µs CPU per pick (picking key read from the bytes + choice), ${((wall * 1000) / picks).toFixed(2)} µs wall, ${picks} picks; half of them conversations of ${promptChars} bytes, half single-turn`,
);
console.log(
  `goal: a pick costs ≤ 5 µs CPU at 16 endpoints: ${n !== 16 ? 'skipped (not 16 endpoints)' : us <= 5 ? 'met' : 'MISSED'}`,
);
