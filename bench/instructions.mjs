// Instructions per request through the gateway, this build against other builds: the count a CPU runs does not move
// with the machine's load the way CPU time does, so a change of 1 % shows in one run where Part A's CPU per request
// needs many quiet rounds (issue 32 item 9). Each gateway runs under valgrind's callgrind (Part A's manifests: one
// sklearn deployment, one key; a keep-alive node:http backend in this process): `--warmup` POSTs, then the counters
// are zeroed and `--requests` POSTs are counted, `--concurrency` at a time. JIT-compiled functions are named from
// node's --perf-basic-prof map. Printed per build: instructions per request in all and split into the gateway's own
// JS (dist/), undici's, Node's, native code (V8 builtins and runtime, libc, llhttp), the JIT compiler and GC; then the
// gateway's functions by their own instructions per request. The JIT's choices differ from process to process (about
// ±2 % of the total between two processes of one build); the gateway's own JS repeats to within a few instructions.
//   node bench/instructions.mjs [--warmup 30000] [--requests 10000] [--concurrency 8] [--log off|on] [--top 25]
//                               [<other built dist/> ...]
// Needs valgrind (apt-get install -y valgrind); about a minute per build and 10,000 requests.
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { parseArgs } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import { Pool } from 'undici';
import { stringify } from 'yaml';
import { deploymentObject, keySecretObject, makeKey } from './lib/manifests.mjs';
import {
  findExecutable,
  freePort,
  installCleanup,
  runToEnd,
  startProcess,
  stopProcess,
  waitFor,
} from './lib/procs.mjs';
import { log, table } from './lib/report.mjs';
import { CLI, ROOT, prepareBaseline } from './lib/servegate.mjs';

const { values: flags, positionals: others } = parseArgs({
  allowPositionals: true,
  options: {
    warmup: { type: 'string', default: '30000' },
    requests: { type: 'string', default: '10000' },
    concurrency: { type: 'string', default: '8' },
    log: { type: 'string', default: 'off' },
    top: { type: 'string', default: '25' },
  },
});
const WARMUP = Number(flags.warmup);
const REQUESTS = Number(flags.requests);
const CONCURRENCY = Number(flags.concurrency);
const TOP = Number(flags.top);
if (
  ![WARMUP, REQUESTS, CONCURRENCY, TOP].every((n) => Number.isInteger(n) && n >= 0) ||
  REQUESTS === 0 ||
  CONCURRENCY === 0 ||
  !['off', 'on'].includes(flags.log)
) {
  process.stderr.write(
    'usage: node bench/instructions.mjs [--warmup N] [--requests N] [--concurrency N] [--log off|on] [--top N] [<dist> ...]\n',
  );
  process.exit(2);
}
const valgrind = findExecutable('valgrind');
const control = findExecutable('callgrind_control');
if (!valgrind || !control) {
  process.stderr.write('bench/instructions.mjs needs valgrind and callgrind_control (apt-get install -y valgrind)\n');
  process.exit(2);
}
const BODY = '{"instances":[[6.8,2.8,4.8,1.4]]}';
const PATH = '/v1/bench/iris/v1/models/iris:predict';

const builds = [
  { name: 'this build', cli: CLI },
  ...others.map((d, i) => {
    const b = prepareBaseline(d);
    return { name: others.length > 1 ? `other ${i + 1}` : 'other', label: relative(ROOT, b.dir) || b.dir, cli: b.cli };
  }),
];
installCleanup((300 + (builds.length * (WARMUP + REQUESTS)) / 20) * 1000);
const dir = mkdtempSync(join(tmpdir(), 'servegate-instructions-'));
const backend = createServer((req, res) => {
  req.resume();
  req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end('{"predictions":[1]}'));
});
backend.keepAliveTimeout = 600_000;
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
const config = join(dir, 'config.json');
writeFileSync(
  config,
  JSON.stringify({ shutdown: { drainSeconds: 1 }, ...(flags.log === 'off' ? { accessLog: false } : {}) }),
);

/** `count` POSTs, CONCURRENCY at a time, each checked to answer 200. */
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

/** Self instructions per function name of a callgrind dump (file and object lines ignored, calls' costs skipped). */
function selfCosts(file) {
  const names = new Map();
  const self = new Map();
  let fn;
  let callCost = false;
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    const named = /^c?fn=\((\d+)\)(?: (.*))?$/.exec(line);
    if (named) {
      if (named[2] !== undefined) names.set(named[1], named[2]);
      if (line[0] === 'f') fn = named[1];
      continue;
    }
    if (line.startsWith('calls=')) {
      callCost = true;
      continue;
    }
    if (!/^[0-9+*-]/.test(line)) continue;
    if (callCost) {
      callCost = false;
      continue;
    }
    const cost = Number(line.split(' ')[1]);
    if (fn !== undefined && Number.isFinite(cost)) self.set(fn, (self.get(fn) ?? 0) + cost);
  }
  return [...self].map(([id, ir]) => ({ name: names.get(id) ?? id, ir }));
}

/** Node's perf map (`start size name`, hex), sorted by start, for naming JIT code by address. */
function perfMap(file) {
  if (!existsSync(file)) return [];
  return readFileSync(file, 'utf8')
    .split('\n')
    .map((l) => /^([0-9a-f]+) ([0-9a-f]+) (.*)$/.exec(l))
    .filter(Boolean)
    .map((m) => ({ start: parseInt(m[1], 16), end: parseInt(m[1], 16) + parseInt(m[2], 16), name: m[3] }))
    .sort((a, b) => a.start - b.start);
}

/** A callgrind name as a JS function ("name file", tier and line dropped) when the perf map knows its address. */
function jsName(name, map) {
  const hex = /^0x([0-9a-f]+)/.exec(name);
  if (!hex) return name;
  const at = parseInt(hex[1], 16);
  let lo = 0;
  let hi = map.length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if (map[mid].start <= at) lo = mid + 1;
    else hi = mid - 1;
  }
  const m = map[hi];
  if (!m || at >= m.end) return 'unnamed code';
  return `JS ${m.name
    .replace(/^JS:[*~^+]?/, '')
    .replace(/file:\/\/\S*?\/dist\//, 'dist/')
    .replace(/:\d+:\d+$/, '')}`;
}

const GROUPS = ['servegate JS', 'undici JS', 'node JS', 'native', 'JIT compiler', 'GC'];
function groupOf(name) {
  if (name.startsWith('JS ')) {
    if (/ dist\//.test(name)) return 'servegate JS';
    if (/node_modules\/undici\//.test(name)) return 'undici JS';
    return 'node JS';
  }
  if (/compiler::|maglev|Compil|turboshaft/i.test(name)) return 'JIT compiler';
  if (/Heap|Scaveng|Sweep|Mark|Evacuat|ConcurrentMarking|Worklist|RememberedSet|ObjectCache/.test(name)) return 'GC';
  return 'native';
}

for (const b of builds) {
  const port = await freePort();
  const adminPort = await freePort();
  const out = join(dir, `callgrind-${builds.indexOf(b)}`);
  const child = startProcess(
    b.name,
    valgrind,
    [
      '--tool=callgrind',
      `--callgrind-out-file=${out}.%p`,
      '--dump-line=no',
      process.execPath,
      '--perf-basic-prof-only-functions',
      b.cli,
      'serve',
      '--manifests',
      manifests,
      '--config',
      config,
      '--port',
      String(port),
      '--admin-port',
      String(adminPort),
    ],
    { cwd: ROOT, stdoutFile: join(dir, `gateway-${builds.indexOf(b)}-stdout.log`) },
  );
  const pool = new Pool(`http://127.0.0.1:${port}`, { connections: CONCURRENCY, pipelining: 1 });
  try {
    await waitFor(
      `${b.name} under callgrind`,
      async () => {
        const res = await pool.request({ path: PATH, method: 'POST', headers, body: BODY });
        await res.body.dump();
        return res.statusCode === 200;
      },
      { child, timeoutMs: 300_000, intervalMs: 500 },
    );
    await send(pool, WARMUP);
    await sleep(500);
    await runToEnd(control, ['--zero', String(child.pid)]);
    const t0 = Date.now();
    await send(pool, REQUESTS);
    await runToEnd(control, ['--dump=measured', String(child.pid)]);
    b.seconds = (Date.now() - t0) / 1000;
    const dump = readdirSync(dir)
      .filter((f) => f.startsWith(`callgrind-${builds.indexOf(b)}.${child.pid}.`))
      .sort()
      .at(-1);
    const map = perfMap(`/tmp/perf-${child.pid}.map`);
    b.costs = new Map();
    for (const { name, ir } of selfCosts(join(dir, dump))) {
      const n = jsName(name, map);
      b.costs.set(n, (b.costs.get(n) ?? 0) + ir / REQUESTS);
    }
    rmSync(`/tmp/perf-${child.pid}.map`, { force: true });
  } finally {
    await pool.close();
    await stopProcess(child, 30_000);
  }
}
backend.close();

const k = (v) => (Number.isFinite(v) ? Math.round(v).toLocaleString('en-US') : 'n/a');
const ratio = (v, base) => (base > 0 ? `${(v / base).toFixed(3)}×` : 'n/a');
log(
  `instructions per request (callgrind Ir), access log ${flags.log}: ${WARMUP.toLocaleString('en-US')} POSTs of warm-up, then ${REQUESTS.toLocaleString('en-US')} counted, ${CONCURRENCY} at a time`,
);
for (const b of builds.slice(1)) log(`  ${b.name}: ${b.label}`);
const sums = builds.map((b) => {
  const s = Object.fromEntries(GROUPS.map((g) => [g, 0]));
  for (const [name, ir] of b.costs) s[groupOf(name)] += ir;
  s.total = GROUPS.reduce((t, g) => t + s[g], 0);
  return s;
});
const base = sums[0];
const head = ['build', 'total', ...GROUPS, 'seconds'];
const rows = [head];
builds.forEach((b, i) => {
  rows.push([b.name, k(sums[i].total), ...GROUPS.map((g) => k(sums[i][g])), b.seconds.toFixed(0)]);
  if (i > 0)
    rows.push([
      `  ${b.name} ÷ this build`,
      ratio(sums[i].total, base.total),
      ...GROUPS.map((g) => ratio(sums[i][g], base[g])),
      '',
    ]);
});
log('');
table(rows);
log('');
log(`the gateway's own functions (dist/), instructions per request, self only (callees not included):`);
const own = new Set();
for (const b of builds) for (const name of b.costs.keys()) if (groupOf(name) === 'servegate JS') own.add(name);
const top = [...own]
  .map((name) => ({ name, irs: builds.map((b) => b.costs.get(name) ?? 0) }))
  .sort((a, b) => Math.max(...b.irs) - Math.max(...a.irs))
  .slice(0, TOP);
table([['function', ...builds.map((b) => b.name)], ...top.map((f) => [f.name.slice(3), ...f.irs.map(k)])]);
rmSync(dir, { recursive: true, force: true });
process.exit(0);
