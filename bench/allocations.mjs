// The garbage of one request through the gateway: bytes of JS heap allocated and GCs per 1,000 requests, this build
// against other builds in alternating rounds of the same run (issue 32 item 8). Bytes allocated per request move far
// less with a shared machine than latency or CPU do, so a change that cuts garbage shows here in one short run.
//   node bench/allocations.mjs [--requests 20000] [--rounds 3] [--concurrency 8] [--log off|on|both] [--sample]
//                              [<other built dist/> ...]
// Each gateway (`node <dist>/cli/main.js serve --manifests`, as Part A's: one sklearn deployment, one key) runs with
// the GC probe (bench/lib/gc-probe.mjs) in front of a keep-alive node:http backend in this process; a warm-up of
// 5,000 requests, then in each round `--requests` POSTs of Part A's body, `--concurrency` at a time, between two idle
// pauses so that the probe's 100 ms allocation samples fall cleanly on the measured requests. --sample also takes a
// sampling heap profile of this build (through its inspector, objects collected by GC included) over one more run
// and lists the functions that allocated most.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { parseArgs } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import { Pool } from 'undici';
import { stringify } from 'yaml';
import { deploymentObject, keySecretObject, makeKey } from './lib/manifests.mjs';
import { installCleanup, killAllSync, stopProcess, waitFor } from './lib/procs.mjs';
import { log, ratio, table } from './lib/report.mjs';
import { CLI, ROOT, prepareBaseline, startGateway } from './lib/servegate.mjs';

const { values: flags, positionals: others } = parseArgs({
  allowPositionals: true,
  options: {
    requests: { type: 'string', default: '20000' },
    rounds: { type: 'string', default: '3' },
    concurrency: { type: 'string', default: '8' },
    log: { type: 'string', default: 'both' },
    sample: { type: 'boolean', default: false },
  },
});
const REQUESTS = Number(flags.requests);
const ROUNDS = Number(flags.rounds);
const CONCURRENCY = Number(flags.concurrency);
const MODES = flags.log === 'both' ? ['off', 'on'] : [flags.log];
if (
  ![REQUESTS, ROUNDS, CONCURRENCY].every((n) => Number.isInteger(n) && n > 0) ||
  MODES.some((m) => !['off', 'on'].includes(m))
) {
  process.stderr.write(
    'usage: node bench/allocations.mjs [--requests N] [--rounds N] [--concurrency N] [--log off|on|both] [--sample] [<dist> ...]\n',
  );
  process.exit(2);
}
const WARMUP = 5000;
const BODY = '{"instances":[[6.8,2.8,4.8,1.4]]}';
const PATH = '/v1/bench/iris/v1/models/iris:predict';

installCleanup((10 + (ROUNDS * (1 + others.length) * MODES.length * REQUESTS) / 500) * 1000);
const dir = mkdtempSync(join(tmpdir(), 'servegate-alloc-'));
const backend = createServer((req, res) => {
  req.resume();
  req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end('{"predictions":[1]}'));
});
backend.keepAliveTimeout = 60_000;
await new Promise((r) => backend.listen(0, '127.0.0.1', r));
const { key, prefix, sha256 } = makeKey();
const headers = { 'content-type': 'application/json', authorization: `ApiKey ${key}` };
const manifests = join(dir, 'manifests');
mkdirSync(manifests);
writeFileSync(
  join(manifests, 'bench.yaml'),
  [
    deploymentObject({
      namespace: 'bench',
      name: 'iris',
      backend: { url: `http://127.0.0.1:${backend.address().port}` },
    }),
    keySecretObject({ name: 'bench-key', prefix, sha256, projects: 'bench' }),
  ]
    .map((d) => stringify(d))
    .join('---\n'),
);

const builds = [
  { name: 'this build', cli: CLI },
  ...others.map((d, i) => {
    const b = prepareBaseline(d);
    return {
      name: others.length > 1 ? `other ${i + 1} (${b.label})` : `other (${relative(ROOT, b.dir) || b.dir})`,
      cli: b.cli,
    };
  }),
];

/** `count` POSTs, `CONCURRENCY` at a time, each checked to answer 200. */
async function send(pool, count) {
  let left = count;
  const one = async () => {
    while (left-- > 0) {
      const res = await pool.request({ path: PATH, method: 'POST', headers, body: BODY });
      await res.body.dump();
      if (res.statusCode !== 200) throw new Error(`status ${res.statusCode}`);
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, one));
}

/** The probe's lines of `file` between `from` and `to` (epoch ms): allocation samples overlapping it, GCs inside it. */
async function probed(file, from, to) {
  const { readFileSync } = await import('node:fs');
  const lines = readFileSync(file, 'utf8')
    .trim()
    .split('\n')
    .map((l) => l.split(' '));
  const alloc = lines.filter((l) => l[1] === 'alloc').map(([at, , b]) => ({ at: Number(at), bytes: Number(b) }));
  let bytes = 0;
  for (let i = 1; i < alloc.length; i++) if (alloc[i - 1].at < to && alloc[i].at > from) bytes += alloc[i].bytes;
  const gcs = lines.filter((l) => l[1] !== 'alloc' && Number(l[0]) >= from && Number(l[0]) <= to);
  const count = (kind) => gcs.filter((l) => l[1] === kind).length;
  const pause = gcs.reduce((s, l) => s + Number(l[2]), 0);
  return { bytes, minor: count('minor'), major: count('major'), pauseMs: pause };
}

const results = {};
for (const mode of MODES) {
  const gws = [];
  for (const [i, b] of builds.entries()) {
    const name = `gw-${i}-log-${mode}`;
    const gcLog = join(dir, `${name}-gc.txt`);
    const gw = await startGateway(dir, ['--manifests', manifests], {
      accessLog: mode === 'on',
      name,
      cli: b.cli,
      gcLog,
      ready: (g) =>
        waitFor(
          `${name} route`,
          async () => {
            const res = await fetch(`http://127.0.0.1:${g.port}${PATH}`, { method: 'POST', headers, body: BODY });
            await res.arrayBuffer();
            return res.status === 200;
          },
          { child: g.child, timeoutMs: 20_000 },
        ),
    });
    const pool = new Pool(`http://127.0.0.1:${gw.port}`, { connections: CONCURRENCY, pipelining: 1 });
    await send(pool, WARMUP);
    gws.push({ build: b, gw, pool, gcLog, rounds: [] });
  }
  for (let round = 0; round < ROUNDS; round++) {
    const order = round % 2 ? [...gws].reverse() : gws;
    for (const g of order) {
      await sleep(300);
      const from = Date.now();
      await send(g.pool, REQUESTS);
      const to = Date.now();
      await sleep(300);
      g.rounds.push({ from, to });
    }
  }
  await sleep(700); // the probe writes its lines every 500 ms
  for (const g of gws) {
    const rounds = [];
    for (const { from, to } of g.rounds) rounds.push(await probed(g.gcLog, from, to));
    (results[mode] ??= {})[g.build.name] = rounds;
  }
  if (flags.sample && gws[0]) results[mode].sample = await sample(gws[0]);
  for (const g of gws) {
    await g.pool.close();
    await stopProcess(g.gw.child);
  }
}

/** A sampling heap profile of one more run on `g` (inspector, collected objects included): top functions by bytes. */
async function sample(g) {
  const url = /Debugger listening on (ws:\/\/\S+)/.exec(g.gw.child.output)?.[1];
  if (!url) return undefined;
  const { default: WebSocket } = await import('ws');
  const ws = new WebSocket(url, { maxPayload: 1 << 30 });
  await new Promise((r, j) => ws.once('open', r).once('error', j));
  let id = 0;
  const pending = new Map();
  ws.on('message', (data) => {
    const msg = JSON.parse(String(data));
    pending.get(msg.id)?.(msg.result);
    pending.delete(msg.id);
  });
  const call = (method, params = {}) =>
    new Promise((r) => {
      pending.set(++id, r);
      ws.send(JSON.stringify({ id, method, params }));
    });
  await call('HeapProfiler.enable');
  await call('HeapProfiler.startSampling', {
    samplingInterval: 256,
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: true,
  });
  await send(g.pool, REQUESTS);
  const { profile } = await call('HeapProfiler.stopSampling');
  ws.close();
  // Each site: the allocating function, and for one outside the gateway's code (Node, undici, V8 builtins) the
  // nearest caller in dist/ that led there.
  const bySite = new Map();
  let total = 0;
  const name = (f) =>
    `${f.functionName || '(anonymous)'} ${f.url.replace(/^file:\/\/.*?\/(dist|node_modules)\//, '$1/')}:${f.lineNumber + 1}`;
  const walk = (node, caller) => {
    const self = node.selfSize;
    total += self;
    const mine = node.callFrame.url.includes('/dist/');
    const where = mine || !caller ? name(node.callFrame) : `${name(node.callFrame)} ← ${caller}`;
    if (self) bySite.set(where, (bySite.get(where) ?? 0) + self);
    for (const c of node.children) walk(c, mine ? name(node.callFrame) : caller);
  };
  walk(profile.head);
  return { perRequest: total / REQUESTS, top: [...bySite].sort((a, b) => b[1] - a[1]).slice(0, 40) };
}

const kb = (v) => (v / 1024).toFixed(2);
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
for (const mode of MODES) {
  log('');
  log(
    `access log ${mode.toUpperCase()}: ${REQUESTS.toLocaleString('en-US')} requests per round, ${CONCURRENCY} at a time, ${ROUNDS} rounds`,
  );
  const rows = [['build', 'KB alloc/request (rounds)', 'median', 'scavenges/1k', 'major/1k', 'GC pause/1k']];
  const medians = {};
  for (const b of builds) {
    const rounds = results[mode][b.name];
    const per = rounds.map((r) => r.bytes / REQUESTS);
    medians[b.name] = median(per);
    const sum = (k) => rounds.reduce((s, r) => s + r[k], 0);
    const n = (REQUESTS * rounds.length) / 1000;
    rows.push([
      b.name,
      per.map(kb).join(' '),
      kb(medians[b.name]),
      (sum('minor') / n).toFixed(2),
      (sum('major') / n).toFixed(2),
      `${(sum('pauseMs') / n).toFixed(2)} ms`,
    ]);
  }
  table(rows);
  for (const b of builds.slice(1))
    log(`  this build ÷ ${b.name}: ${ratio(medians['this build'] / medians[b.name])} bytes allocated per request`);
  const s = results[mode].sample;
  if (s) {
    log(`  sampling heap profile of this build (one more run): ${kb(s.perRequest)} KB per request sampled; top sites:`);
    for (const [where, bytes] of s.top) log(`    ${(bytes / REQUESTS).toFixed(0).padStart(6)} B/request  ${where}`);
  }
}
backend.close();
rmSync(dir, { recursive: true, force: true });
killAllSync();
process.exit(0);
