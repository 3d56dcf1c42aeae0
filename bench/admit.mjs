// Micro-benchmark of admit() (src/gateway/admit/pipeline.ts), the decision every request passes before its body is
// read: CPU ns and JS heap bytes allocated per call for each kind of request below, for each built copy of dist/ given
// (default this checkout's), in alternating rounds of one process (a build's figure moves with the machine; the ratio
// of two builds run in turn moves far less). Limits are off (the per-second and per-minute checks are Part C's).
//   node bench/admit.mjs [--calls 200000] [--rounds 5] [<dist> [<older dist> ...]]
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { allocated } from './lib/heap-allocated.mjs';
import { deploymentObject, keySecretObject, makeKey } from './lib/manifests.mjs';
import { table } from './lib/report.mjs';

const { values: flags, positionals: dists } = parseArgs({
  allowPositionals: true,
  options: { calls: { type: 'string', default: '200000' }, rounds: { type: 'string', default: '5' } },
});
const CALLS = Number(flags.calls);
const ROUNDS = Number(flags.rounds);
if (![CALLS, ROUNDS].every((n) => Number.isInteger(n) && n > 0)) {
  process.stderr.write('usage: node bench/admit.mjs [--calls N] [--rounds N] [<dist> ...]\n');
  process.exit(2);
}

const demo = makeKey();
const other = makeKey();
/** A key Secret as the files source hands it to the builder (stringData read as data). */
function keySecret(name, { prefix, sha256 }) {
  const s = keySecretObject({ name, namespace: 'servegate', prefix, sha256, projects: name });
  return { metadata: s.metadata, data: s.stringData };
}
const snapshot = {
  source: 'files',
  deployments: [
    deploymentObject({ namespace: 'demo', name: 'iris', backend: { url: 'http://127.0.0.1:9' } }),
    deploymentObject({ namespace: 'demo', name: 'chat', backend: { url: 'http://127.0.0.1:9' }, modelServer: 'llm' }),
  ],
  inferenceServices: [],
  keySecrets: [keySecret('demo', demo), keySecret('other', other)],
};
const options = {
  publicUrl: 'https://models.example.com',
  serverlessDomain: 'serving.example.com',
  keysNamespace: 'servegate',
  defaultTimeoutMs: 60_000,
};
const facts = (url, key, o = {}) => ({
  method: 'POST',
  url,
  host: 'models.example.com',
  authorization: key === undefined ? undefined : `ApiKey ${key}`,
  contentType: 'application/json',
  now: Date.now(),
  client: '192.0.2.1',
  ...o,
});
const CASES = [
  ['predict, accepted', facts('/v1/demo/iris/v1/models/iris:predict', demo.key), 'route'],
  ['chat, accepted', facts('/v1/demo/chat/v1/chat/completions', demo.key), 'route'],
  ['OpenAI base URL', facts('/openai/v1/chat/completions', demo.key), 'by-model'],
  ['no key: 401', facts('/v1/demo/iris/v1/models/iris:predict', undefined), 'refused'],
  ["another project's key: 403", facts('/v1/demo/iris/v1/models/iris:predict', other.key), 'refused'],
];

async function load(dist) {
  const root = pathToFileURL(`${resolve(dist)}/`);
  const at = (p) => import(new URL(p, root).href);
  const { admit } = await at('gateway/admit/pipeline.js');
  const { buildRouteTable } = await at('routing/build.js');
  const { corsPolicy } = await at('gateway/admit/cors.js');
  const { PerSecondLimiter } = await at('limits/per-second.js');
  const { PerMinuteLimits } = await at('limits/per-minute.js');
  const { MemoryLimitStore } = await at('limits/memory.js');
  const { AuthFailureLimiter } = await at('limits/auth-failures.js');
  const ctx = {
    table: buildRouteTable(structuredClone(snapshot), options).table,
    cors: corsPolicy({ allowedOrigins: [], allowedHeaders: [], exposedHeaders: [], maxAgeSeconds: 600 }),
    perSecond: new PerSecondLimiter(0, 0),
    perMinute: new PerMinuteLimits(new MemoryLimitStore(), { requestsPerMinute: 0, tokensPerMinute: 0 }),
    authFailures: new AuthFailureLimiter({ maxFailures: 0, windowSeconds: 60 }),
    counters: { authFailure() {}, rateLimited() {} },
  };
  for (const [name, f, kind] of CASES) {
    const a = admit(f, ctx);
    if (a instanceof Promise || a.kind !== kind) throw new Error(`${dist}: ${name} gave ${a.kind ?? 'a promise'}`);
  }
  return { dist, admit, ctx };
}

let sink;
function run(build, f) {
  const { admit, ctx } = build;
  allocated();
  const cpu = process.cpuUsage();
  for (let i = 0; i < CALLS; i++) sink = admit(f, ctx);
  const d = process.cpuUsage(cpu);
  return { ns: ((d.user + d.system) * 1000) / CALLS, bytes: allocated() / CALLS };
}

const builds = [];
for (const d of dists.length ? dists : [new URL('../dist/', import.meta.url).pathname]) builds.push(await load(d));
const best = builds.map(() => CASES.map(() => ({ ns: Infinity, bytes: Infinity })));
// A warm-up round first (optimised code for every build and case), then the rounds measured, builds in turn.
for (let round = 0; round <= ROUNDS; round++) {
  for (let c = 0; c < CASES.length; c++) {
    for (let b = 0; b < builds.length; b++) {
      const r = run(builds[b], CASES[c][1]);
      if (round === 0) continue;
      best[b][c].ns = Math.min(best[b][c].ns, r.ns);
      best[b][c].bytes = Math.min(best[b][c].bytes, r.bytes);
    }
  }
}
if (sink === undefined) throw new Error('no decision');
const rows = CASES.map(([name], c) => [
  name,
  ...builds.flatMap((_, b) => [best[b][c].ns.toFixed(0), best[b][c].bytes.toFixed(0)]),
  ...builds.slice(1).map((_, b) => (best[0][c].ns / best[b + 1][c].ns).toFixed(2)),
]);
console.log(`admit(): best of ${ROUNDS} rounds of ${CALLS} calls per build and case (CPU ns and heap bytes per call)`);
builds.forEach((b, i) => console.log(`  [${i}] ${b.dist}`));
table([
  [
    'request',
    ...builds.flatMap((_, i) => [`[${i}] ns`, `[${i}] bytes`]),
    ...builds.slice(1).map((_, i) => `ns [0] ÷ [${i + 1}]`),
  ],
  ...rows,
]);
