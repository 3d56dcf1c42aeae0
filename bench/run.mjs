// `npm run bench`: builds, detects the tools, runs Part A (gateway data plane), Part B (Kubernetes source), Part C
// (the cost of per-minute limits) and Part D (LLM-aware endpoint picking against round robin, on a simulated vLLM
// fleet), and ends with a summary of every goal (met / MISSED / skipped) and the command line.
//   node bench/run.mjs [--only gateway|kubernetes|limits|llm-routing|streams|scrape|fairness] [--seconds 10] [--warmup 2] [--rate 1000] [--rate-seconds 10]
//                      [--settle 3] [--openloop-warmup 6] [--cold-openloop] [--requests-for-rss 1000000]
//                      [--connections 64] [--threads 2] [--backend-workers 2] [--deployments 10000] [--events 200]
//                      [--leader-seconds 15] [--llm-seconds 6] [--llm-warmup 2] [--llm-rate 40] [--llm-draws 10]
//                      [--no-build] [--quick] [--profile] [--no-nginx] [--no-wrk] [--baseline-dist <dir>]
//   --quick: 2 s runs, 1,000 deployments, 20 events, 100,000 requests for RSS, Part D runs of 1 + 3 s (checks the
//   harness); --profile:
//   gateway CPU profiles in .bench-tmp/profiles (summarise with node bench/profile-summary.mjs <file>).
//   --baseline-dist <dir>: another built copy of dist/ (e.g. .bench-tmp/dist-before, an older commit's build) runs as
//   a second gateway in Part A, alternating with this build, and the new÷old ratios are printed (docs/performance.md).
// Loopback only; every process it starts is killed at the end, on Ctrl-C, on error and at the time limit.
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, platform, release, tmpdir, totalmem } from 'node:os';
import { join, relative } from 'node:path';
import { parseArgs } from 'node:util';
import { findExecutable, installCleanup, killAllSync, runToEnd } from './lib/procs.mjs';
import { goalLog, log, mb, skipGoals, table } from './lib/report.mjs';
import { goalTexts as gatewayGoals } from './gateway.mjs';
import { goalTexts as kubernetesGoals } from './kubernetes.mjs';
import { realGoalTexts as realKubernetesGoals } from './kubernetes-real.mjs';
import { goalTexts as llmRoutingGoals, timeBudgetSeconds as llmRoutingSeconds } from './llm-routing.mjs';
import { prepareBaseline, ROOT } from './lib/servegate.mjs';
import { goalTexts as streamsGoals, timeBudgetSeconds as streamsSeconds } from './streams.mjs';
import { timeBudgetSeconds as scrapeSeconds } from './scrape.mjs';
import { goalTexts as fairnessGoals, timeBudgetSeconds as fairnessSeconds } from './fairness.mjs';

const { values: flags } = parseArgs({
  options: {
    only: { type: 'string' },
    seconds: { type: 'string', default: '10' },
    warmup: { type: 'string', default: '2' },
    rate: { type: 'string', default: '1000' },
    'rate-seconds': { type: 'string', default: '10' },
    settle: { type: 'string', default: '3' },
    'openloop-warmup': { type: 'string', default: '6' },
    'cold-openloop': { type: 'boolean', default: false },
    'requests-for-rss': { type: 'string' },
    connections: { type: 'string', default: '64' },
    threads: { type: 'string', default: '2' },
    'backend-workers': { type: 'string', default: '2' },
    deployments: { type: 'string', default: '10000' },
    events: { type: 'string', default: '200' },
    'leader-seconds': { type: 'string', default: '15' },
    'llm-seconds': { type: 'string', default: '6' },
    'llm-warmup': { type: 'string', default: '2' },
    'llm-draws': { type: 'string', default: '10' },
    'llm-rate': { type: 'string', default: '40' },
    streams: { type: 'string', default: '10000' }, // Part E (bench/streams.mjs)
    'streams-seconds': { type: 'string', default: '20' },
    'stream-prompt-kb': { type: 'string', default: '0' },
    'scrape-seconds': { type: 'string', default: '10' }, // Part F (bench/scrape.mjs)
    'fair-seconds': { type: 'string', default: '10' }, // Part G (bench/fairness.mjs)
    'fair-warmup': { type: 'string', default: '2' },
    'no-build': { type: 'boolean', default: false },
    profile: { type: 'boolean', default: false },
    'no-nginx': { type: 'boolean', default: false },
    'no-wrk': { type: 'boolean', default: false },
    quick: { type: 'boolean', default: false },
    'baseline-dist': { type: 'string' },
    help: { type: 'boolean', default: false },
  },
});

if (flags.help) {
  log(
    'usage: npm run bench -- [--only gateway|kubernetes|limits|llm-routing|streams|scrape|fairness] [--seconds 10] [--warmup 2] [--rate 1000]',
  );
  log('                        [--rate-seconds 10]');
  log('                        [--settle 3] [--openloop-warmup 6] [--cold-openloop] [--requests-for-rss 1000000]');
  log(
    '                        [--connections 64] [--threads 2] [--backend-workers 2] [--deployments 10000] [--events 200]',
  );
  log(
    '                        [--leader-seconds 15] [--llm-seconds 6] [--llm-warmup 2] [--llm-rate 40] [--llm-draws 10]',
  );
  log('                        [--no-build] [--quick] [--profile] [--no-nginx] [--no-wrk] [--baseline-dist <dir>]');
  log(
    '                        [--streams 10000] [--streams-seconds 20] [--stream-prompt-kb 0]   (Part E, --only streams; --quick: 1000 × 5 s)',
  );
  log('                        [--scrape-seconds 10]   (Part F, --only scrape: gateway CPU per case; --quick: 3 s)');
  log(
    '                        [--fair-seconds 10] [--fair-warmup 2]   (Part G, --only fairness: per run; --quick: 4 s + 1 s)',
  );
  log(
    '  --settle: idle seconds before the open loop (then a forced GC in the gateway and --openloop-warmup s per target)',
  );
  log(
    '  --cold-openloop: the open loop right after a closed loop on the gateway, 1 s warm-up, no settle/GC (the old way)',
  );
  log('  --requests-for-rss: requests driven through the gateway while its RSS is sampled (--quick: 100000)');
  log('  Part A also runs, access log off only, three more closed-loop rows: net (raw TCP forwarder, the ceiling');
  log(
    '    of the socket layer), bare (node:http + undici, no checks: the platform) and fastify (+ @fastify/http-proxy,',
  );
  log('    API-key hook; skipped if not installed); and an SSE cost per target: CPU per 50-event and 1-event stream');
  log('    and per event (2,000 + 4,000 streams per target; --quick: 300 + 600)');
  log('  --llm-seconds / --llm-warmup / --llm-rate / --llm-draws: Part D (llm-routing), per run: measured seconds');
  log("    (--quick: 3), warm-up seconds (--quick: 1), a scale of the loads' arrivals (40: as written) and the fleets");
  log('    on other ports for load (a) (--quick: 2); 3 loads × 1|2 gateways × 3 pickers, then llm alone on the other');
  log('    fleets: about 6 minutes at the defaults');
  log(
    '  --profile: the gateway runs with --cpu-prof into .bench-tmp/profiles (read with node bench/profile-summary.mjs)',
  );
  log('  --baseline-dist <dir>: Part A also runs the gateway of another built copy of dist/ (<dir>/cli/main.js), its');
  log("    closed loops alternating with this build's, and prints CPU/request new÷old; <dir> must sit inside this");
  log('    repository (e.g. .bench-tmp/dist-before) or another checkout with node_modules (docs/performance.md)');
  process.exit(0);
}
if (
  flags.only &&
  !['gateway', 'kubernetes', 'limits', 'llm-routing', 'streams', 'scrape', 'fairness'].includes(flags.only)
) {
  process.stderr.write(
    `bench: --only must be "gateway", "kubernetes", "limits", "llm-routing", "streams", "scrape" or "fairness", not "${flags.only}"\n`,
  );
  process.exit(2);
}

// --baseline-dist: checked (and staged if need be) before anything starts: a wrong path should not cost a whole run.
let baseline;
if (flags['baseline-dist'] !== undefined) {
  try {
    baseline = prepareBaseline(flags['baseline-dist']);
  } catch (err) {
    process.stderr.write(`bench: ${err.message}\n`);
    process.exit(2);
  }
}

const num = (name) => {
  const v = Number(flags[name]);
  if (!Number.isFinite(v) || v < 0) {
    process.stderr.write(`bench: --${name} must be a number\n`);
    process.exit(2);
  }
  return v;
};

const version = (bin, args, re) => {
  const res = spawnSync(bin, args, { encoding: 'utf8', timeout: 5000 });
  return re.exec(`${res.stdout ?? ''}${res.stderr ?? ''}`)?.[0] ?? 'unknown version';
};

// --no-nginx / --no-wrk act as if the tool were missing (to check the fallbacks).
const tools = {
  nginx: flags['no-nginx'] ? undefined : findExecutable('nginx'),
  wrk: flags['no-wrk'] ? undefined : findExecutable('wrk'),
};
const ctx = {
  root: ROOT,
  tools,
  seconds: flags.quick ? 2 : num('seconds'),
  warmupSeconds: flags.quick ? 1 : num('warmup'),
  rate: num('rate'),
  rateSeconds: flags.quick ? 2 : num('rate-seconds'),
  settleSeconds: flags.quick ? 1 : num('settle'),
  openLoopWarmup: flags.quick ? 1 : num('openloop-warmup'),
  coldOpenLoop: flags['cold-openloop'],
  rssRequests: flags['requests-for-rss'] !== undefined ? num('requests-for-rss') : flags.quick ? 100_000 : 1_000_000,
  connections: num('connections'),
  threads: num('threads'),
  backendWorkers: num('backend-workers'),
  deployments: flags.quick ? 1000 : num('deployments'),
  events: flags.quick ? 20 : num('events'),
  stormSeconds: flags.quick ? 3 : num('leader-seconds'),
  llmSeconds: flags.quick ? 3 : num('llm-seconds'),
  llmWarmup: flags.quick ? 1 : num('llm-warmup'),
  llmRate: num('llm-rate'),
  llmDraws: flags.quick ? 2 : Math.max(1, num('llm-draws')),
  streams: flags.quick ? 1000 : Math.max(1, num('streams')), // Part E
  streamsSeconds: flags.quick ? 5 : Math.max(1, num('streams-seconds')),
  streamPromptKb: Math.max(0, num('stream-prompt-kb')),
  scrapeSeconds: flags.quick ? 3 : Math.max(1, num('scrape-seconds')), // Part F
  fairSeconds: flags.quick ? 4 : Math.max(1, num('fair-seconds')), // Part G
  fairWarmup: flags.quick ? 1 : num('fair-warmup'),
  quick: flags.quick,
  profileDir: flags.profile ? join(ROOT, '.bench-tmp', 'profiles') : undefined,
  baseline,
};

if (ctx.llmRate <= 0 || ctx.llmSeconds <= 0) {
  process.stderr.write('bench: --llm-rate and --llm-seconds must be above 0\n');
  process.exit(2);
}

// Time limit: 6 minutes for the build and the fixed parts (3 for the build alone with --only llm-routing), plus the
// RSS run at 3,000 requests/s at worst, plus Part D's runs (llm-routing.mjs timeBudgetSeconds), plus 3 minutes
// for Part A's extra rows (net, bare, fastify closed loops, bare in the open loop, the SSE cost of 6 targets), plus
// the open loop's warm-up of up to 6 targets.
// The baseline gateway (--baseline-dist) adds its closed loops in both log modes, its open-loop slices and SSE streams.
const partA = !flags.only || flags.only === 'gateway';
const partD = !flags.only || flags.only === 'llm-routing';
const baselineSeconds = baseline && partA ? 2 * (ctx.warmupSeconds + ctx.seconds + 10) + ctx.rateSeconds + 30 : 0;
const limitMs =
  ((flags.only === 'llm-routing' ? 3 * 60 : 6 * 60) +
    baselineSeconds +
    (partA ? 3 * 60 : 0) +
    (partA ? 6 * ctx.openLoopWarmup : 0) +
    (partA ? ctx.rssRequests / 3000 : 0) +
    (partD ? llmRoutingSeconds(ctx) : 0) +
    (!flags.only || flags.only === 'streams' ? streamsSeconds(ctx) : 0) +
    (!flags.only || flags.only === 'scrape' ? scrapeSeconds(ctx) : 0) +
    (!flags.only || flags.only === 'fairness' ? fairnessSeconds(ctx) : 0)) *
  1000;
installCleanup(limitMs);

const started = Date.now();
log(`servegate benchmark — ${new Date().toISOString()}`);
log(
  `machine: ${cpus().length} × ${cpus()[0]?.model?.trim() ?? 'cpu'}, ${mb(totalmem())} RAM, ${platform()} ${release()}, node ${process.version}`,
);
log(
  `nginx: ${tools.nginx ? `${tools.nginx} (${version(tools.nginx, ['-v'], /nginx\/[\d.]+/)})` : 'NOT FOUND — the nginx comparison is skipped and the backend is a Node cluster (apt-get install -y nginx-light)'}`,
);
if (baseline)
  log(
    `baseline: ${baseline.label} (--baseline-dist)${baseline.staged ? `, run from a copy in ${relative(ROOT, baseline.runDir)}` : ', run in place'} with the modules in ${baseline.nodeModules}${partA ? '' : ` — ignored: only Part A uses it (--only ${flags.only})`}`,
  );
log(
  `wrk:   ${tools.wrk ? `${tools.wrk} (${version(tools.wrk, ['-v'], /wrk \S+/)})` : 'NOT FOUND — closed-loop load uses autocannon instead (apt-get install -y wrk)'}`,
);

if (!flags['no-build']) {
  log('build: npx tsc -p . ...');
  const res = await runToEnd(process.execPath, [join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', '.'], {
    cwd: ROOT,
    timeoutMs: 180_000,
  });
  if (res.code !== 0)
    log(
      `build: tsc reported errors (exit ${res.code}); benchmarking whatever dist/ holds:\n${res.stdout.trim().split('\n').slice(0, 10).join('\n')}`,
    );
}

/** How this run was started, as a reader would type it again. */
function commandLine() {
  const args = process.argv.slice(2).join(' ');
  if (process.env.npm_lifecycle_event === 'bench') return `npm run bench${args ? ` -- ${args}` : ''}`;
  return `node bench/run.mjs${args ? ` ${args}` : ''}`;
}

/** The closing block: every goal line with its verdict and figure, the key ratios, the command line. */
function printSummary(results) {
  const load = Object.entries(results.loadBefore ?? {})
    .map(([part, v]) => `${part} ${v.toFixed(2)}`)
    .join(', ');
  log('');
  log('== Summary ==');
  log(`  command: ${commandLine()}`);
  log(
    `  ${results.date}, ${results.machine.cpus} × ${results.machine.model?.trim() ?? 'cpu'}, node ${results.machine.node}; load average before: ${load || 'n/a'}`,
  );
  for (const line of [
    ...(results.gateway?.summary ?? []),
    ...(results.kubernetes?.summary ?? []),
    ...(results.limits?.summary ?? []),
    ...(results.llmRouting?.summary ?? []),
    ...(results.streams?.summary ?? []),
    ...(results.scrape?.summary ?? []),
    ...(results.fairness?.summary ?? []),
  ])
    log(`  ${line}`);
  const rows = [['goal', 'measured', 'verdict']];
  for (const g of goalLog) rows.push([`${g.part}  ${g.text}`, g.measured, g.verdict]);
  log('');
  table(rows, { left: [0, 1] });
  const count = (v) => goalLog.filter((g) => g.verdict === v).length;
  log(`  ${count('met')} met, ${count('MISSED')} MISSED, ${count('skipped')} skipped`);
}

/** Other work on the machine skews every figure: say so next to them. */
function busyCheck(results, part) {
  const [one] = loadavg();
  results.loadBefore ??= {};
  results.loadBefore[part] = one;
  log(
    `  load average before: ${one.toFixed(2)}${one > 0.5 ? '  (WARNING: other processes are using the CPU; figures may be noisy)' : ''}`,
  );
}

if (ctx.profileDir) {
  rmSync(ctx.profileDir, { recursive: true, force: true });
  log(
    `profiles: gateway CPU profiles go to ${ctx.profileDir}/{gateway-log-off,gateway-log-on,kubernetes-big,kubernetes-one}/`,
  );
}

const dir = mkdtempSync(join(tmpdir(), 'servegate-bench-'));
ctx.dir = dir;
const results = {
  date: new Date().toISOString(),
  machine: { cpus: cpus().length, model: cpus()[0]?.model, node: process.version },
  settings: {
    ...ctx,
    tools: undefined,
    dir: undefined,
    root: undefined,
    headers: undefined,
    baseline: baseline?.label,
  },
};
let failed = false;
try {
  if (!flags.only || flags.only === 'gateway') {
    log('');
    log('== Part A: gateway data plane (direct vs nginx vs servegate) ==');
    busyCheck(results, 'gateway');
    const { runGatewayBench } = await import('./gateway.mjs');
    try {
      results.gateway = await runGatewayBench(ctx);
    } catch (err) {
      failed = true;
      log(`Part A FAILED: ${err.stack ?? err}`);
    }
  }
  skipGoals(
    'A',
    Object.values(gatewayGoals(ctx)),
    flags.only && flags.only !== 'gateway' ? `not run (--only ${flags.only})` : 'no figure (part failed)',
  );
  if (!flags.only || flags.only === 'kubernetes') {
    log('');
    log('== Part B: Kubernetes source at 10,000 ServingDeployments ==');
    busyCheck(results, 'kubernetes');
    const { runKubernetesBench } = await import('./kubernetes.mjs');
    try {
      results.kubernetes = await runKubernetesBench(ctx);
    } catch (err) {
      failed = true;
      log(`Part B FAILED: ${err.stack ?? err}`);
    }
    log('');
    log('== Part B, real: the same 10,000 ServingDeployments through a real kube-apiserver and etcd ==');
    const { runRealKubernetesBench } = await import('./kubernetes-real.mjs');
    try {
      results.kubernetesReal = await runRealKubernetesBench(ctx);
    } catch (err) {
      failed = true;
      log(`Part B (real API server) FAILED: ${err.stack ?? err}`);
    }
  }
  skipGoals(
    'B',
    [...Object.values(kubernetesGoals(ctx)), ...Object.values(realKubernetesGoals(ctx))],
    flags.only && flags.only !== 'kubernetes' ? `not run (--only ${flags.only})` : 'no figure (part failed or skipped)',
  );
  if (!flags.only || flags.only === 'limits') {
    log('');
    log('== Part C: the cost of per-minute limits (SPEC §9): none vs in process vs Redis ==');
    busyCheck(results, 'limits');
    const { runLimitsBench } = await import('./limits.mjs');
    try {
      results.limits = await runLimitsBench(ctx);
    } catch (err) {
      failed = true;
      log(`Part C FAILED: ${err.stack ?? err}`);
    }
  }
  if (!flags.only || flags.only === 'llm-routing') {
    log('');
    log('== Part D: LLM-aware endpoint picking (SPEC §12): llm vs round robin on a simulated vLLM fleet ==');
    busyCheck(results, 'llm-routing');
    const { runLlmRoutingBench } = await import('./llm-routing.mjs');
    try {
      results.llmRouting = await runLlmRoutingBench(ctx);
    } catch (err) {
      failed = true;
      log(`Part D FAILED: ${err.stack ?? err}`);
    }
  }
  skipGoals(
    'D',
    Object.values(llmRoutingGoals()),
    flags.only && flags.only !== 'llm-routing'
      ? `not run (--only ${flags.only})`
      : 'no figure (part failed or skipped)',
  );
  // Part E: concurrent SSE streams (bench/streams.mjs, docs/performance.md).
  if (!flags.only || flags.only === 'streams') {
    log('');
    log('== Part E: concurrent SSE streams through one gateway process (direct vs nginx vs servegate) ==');
    busyCheck(results, 'streams');
    const { runStreamsBench } = await import('./streams.mjs');
    try {
      results.streams = await runStreamsBench(ctx);
    } catch (err) {
      failed = true;
      log(`Part E FAILED: ${err.stack ?? err}`);
    }
  }
  skipGoals(
    'E',
    Object.values(streamsGoals()),
    flags.only && flags.only !== 'streams' ? `not run (--only ${flags.only})` : 'no figure (part failed or skipped)',
  );
  // Part F: what scraping the LLM endpoints' metrics costs the gateway (bench/scrape.mjs, docs/llm.md).
  if (!flags.only || flags.only === 'scrape') {
    log('');
    log('== Part F: scraping LLM endpoint metrics: gateway CPU with small and with 4 MB metrics per endpoint ==');
    busyCheck(results, 'scrape');
    const { runScrapeBench } = await import('./scrape.mjs');
    try {
      results.scrape = await runScrapeBench(ctx);
    } catch (err) {
      failed = true;
      log(`Part F FAILED: ${err.stack ?? err}`);
    }
  }
  // Part G: fair queueing and budgets on a shared fleet (bench/fairness.mjs, docs/llm.md).
  if (!flags.only || flags.only === 'fairness') {
    log('');
    log('== Part G: fair queueing of a saturated fleet and budgets across replicas (SPEC §14) ==');
    busyCheck(results, 'fairness');
    const { runFairnessBench } = await import('./fairness.mjs');
    try {
      results.fairness = await runFairnessBench(ctx);
    } catch (err) {
      failed = true;
      log(`Part G FAILED: ${err.stack ?? err}`);
    }
  }
  skipGoals(
    'G',
    Object.values(fairnessGoals()),
    flags.only && flags.only !== 'fairness' ? `not run (--only ${flags.only})` : 'no figure (part failed)',
  );
} finally {
  killAllSync();
  // BENCH_KEEP_DIR=1 keeps the run's directory (the processes' logs, e.g. with BENCH_GATEWAY_NODE_FLAGS=--trace-gc).
  if (process.env.BENCH_KEEP_DIR === '1') log(`kept: ${dir}`);
  else rmSync(dir, { recursive: true, force: true });
}
const out = join(ROOT, '.bench-tmp');
mkdirSync(out, { recursive: true });
results.goals = goalLog;
writeFileSync(join(out, 'bench-results.json'), JSON.stringify(results, null, 2));
printSummary(results);
log('');
log(`done in ${Math.round((Date.now() - started) / 1000)} s; raw figures in .bench-tmp/bench-results.json`);
process.exit(failed ? 1 : 0);
