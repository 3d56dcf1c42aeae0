// Part G of `npm run bench`: fair queueing and budgets on a shared fleet (SPEC §14). A simulated vLLM fleet
// (examples/backends/vllm-sim.mjs, its own process) behind the built gateway (dist/), one deployment of it. The load:
// one noisy tenant at 10× the rate of each of three quiet tenants, and one `critical` tenant at a quiet one's rate,
// Poisson arrivals of streamed chat completions, together more than the fleet serves. Measured at the client: TTFT
// (scheduled send → first streamed token) p90 per tenant class and the fleet's output tokens/s over the arrival window.
// Runs, each through one and through two gateway processes (requests alternating between them): the quiet and
// critical tenants alone; everyone with queueing.enabled false; everyone with fair queueing. Then budgets: two gateway
// processes sharing a redis-server, 16 clients spending one key's token budget through both until refused; the
// overspend against the bound docs/llm.md states (the requests admitted before the charge that ran it out landed).
// Alone: node bench/fairness.mjs [--dist <dir>] [--fair-seconds 10] [--fair-warmup 2]
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Pool, request } from 'undici';
import { stringify } from 'yaml';
import { startSimFleet } from './lib/fleet.mjs';
import { keySecretObject, makeKey } from './lib/manifests.mjs';
import {
  findExecutable,
  freePort,
  installCleanup,
  killAllSync,
  startProcess,
  stopProcess,
  waitFor,
} from './lib/procs.mjs';
import { goal, log, ms, table } from './lib/report.mjs';
import { chatStreamEvents } from './lib/sse.mjs';
import { CLI, ROOT, startGateway } from './lib/servegate.mjs';

const SELF = fileURLToPath(import.meta.url);
const G = 'G';
/**
 * Two replicas of 16 sequences; an answer takes a prefill of ~0.5 ms per 16 prompt tokens (~125 ms for the prompts
 * below), then 16 tokens at 8 ms: about 2 × 16 / 0.25 s = 125 answers a second in all.
 */
const FLEET = {
  replicas: 2,
  maxRunning: 16,
  prefillConcurrency: 16,
  decodeMsPerToken: 8,
  prefillMsPerBlock: 0.5,
  kvBlocks: 8192,
};
const MAX_TOKENS = 16;
/** Requests per second: each quiet tenant and the critical one at QUIET, the noisy one at 10 × QUIET. */
const QUIET = 11;
const TENANTS = [
  { name: 'noisy', rate: 10 * QUIET, cls: 'noisy' },
  { name: 'quiet-1', rate: QUIET, cls: 'quiet' },
  { name: 'quiet-2', rate: QUIET, cls: 'quiet' },
  { name: 'quiet-3', rate: QUIET, cls: 'quiet' },
  { name: 'critical', rate: QUIET, cls: 'critical', priority: 'critical' },
];
/** Prompt bytes of each request (its own words: no prefix shared): ~4,000 tokens, ~250 blocks of prefill. */
const PROMPT_BYTES = 16000;
/** What "saturated" means here (docs/llm.md: a low maxWaiting keeps the backlog in the gateway, in fair order). */
const BALANCING = { maxWaiting: 0, scrapeIntervalMs: 50 };
const BUDGET_TOKENS = 200_000;
/** BENCH_FAIR_GATEWAYS=1 (or 2): only the runs through that many gateways (a quicker look while tuning). */
const ONLY_GATEWAYS = Number(process.env.BENCH_FAIR_GATEWAYS) || 0;
const BUDGET_CLIENTS = 16;

export function goalTexts() {
  return {
    quiet1: 'fairness: quiet TTFT p90 with fair queueing <= 1.5x alone (1 gw)',
    critical1: 'fairness: critical TTFT p90 within 20 % of alone (1 gw)',
    throughput1: 'fairness: output tokens/s >= 95 % of no queueing (1 gw)',
    quiet2: 'fairness: quiet TTFT p90 with fair queueing <= 1.5x alone (2 gw)',
    critical2: 'fairness: critical TTFT p90 within 20 % of alone (2 gw)',
    throughput2: 'fairness: output tokens/s >= 95 % of no queueing (2 gw)',
    budget: 'budgets: 2 replicas overspend <= stated bound (docs/llm.md)',
  };
}

/** Six runs of warm-up + measured seconds plus the drain of each, the budget run, starting processes. */
export function timeBudgetSeconds(ctx) {
  return 6 * (ctx.fairWarmup + ctx.fairSeconds + 15) + 120;
}

function rng(seed) {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const WORDS = 'alpha beta gamma delta kappa lambda sigma omega river stone cloud field light north quiet storm'.split(
  ' ',
);

/** Every tenant's Poisson arrivals over warm-up + measured seconds (the same for every run: one seed). */
function makeRequests(tenants, { warmup, seconds }) {
  const rand = rng(7);
  const out = [];
  for (const t of tenants) {
    let at = rand() * 50;
    while (at < (warmup + seconds) * 1000) {
      let text = `${t.name} `;
      while (text.length < PROMPT_BYTES) text += `${WORDS[Math.floor(rand() * WORDS.length)]} `;
      out.push({
        tenant: t.name,
        cls: t.cls,
        at,
        measured: at >= warmup * 1000,
        body: JSON.stringify({
          model: 'chat',
          stream: true,
          max_tokens: MAX_TOKENS,
          messages: [{ role: 'user', content: text }],
        }),
      });
      at += (-Math.log(1 - rand()) * 1000) / t.rate;
    }
  }
  return out.sort((a, b) => a.at - b.at);
}

/** One streamed request: TTFT from its scheduled time, output tokens and when each arrived. */
async function streamOne(pool, path, headers, req, scheduledAt) {
  const r = { req, tokens: [], status: 0 };
  try {
    const res = await pool.request({ path, method: 'POST', headers, body: req.body, headersTimeout: 120_000 });
    r.status = res.statusCode;
    for await (const { now, data } of chatStreamEvents(res.body)) {
      if (data.choices?.[0]?.delta?.content) {
        r.tokens.push(now);
        r.ttftMs ??= now - scheduledAt;
      }
    }
  } catch (err) {
    r.error = err.message;
  }
  return r;
}

/** Sends every request at its time, alternating over `targets`; resolves the results and when the first was due. */
async function drive(targets, requests, headersOf) {
  const start = performance.now() + 50;
  let sent = 0;
  const all = requests.map(
    (req) =>
      new Promise((done) => {
        setTimeout(
          () => {
            const t = targets[sent++ % targets.length];
            streamOne(t.pool, t.path, headersOf(req), req, start + req.at).then(done);
          },
          Math.max(0, start + req.at - performance.now()),
        );
      }),
  );
  return { results: await Promise.all(all), start };
}

function p90(values) {
  const s = values.filter((v) => Number.isFinite(v)).sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.ceil(0.9 * s.length) - 1)] : NaN;
}

function startFleet() {
  return startSimFleet(FLEET, { model: 'chat', maxTokens: MAX_TOKENS });
}

/** The manifests: one deployment of the fleet, a key per tenant (the critical one with priority: critical). */
function writeManifests(folder, urls, keys, extraKey) {
  mkdirSync(folder, { recursive: true });
  const docs = [
    {
      apiVersion: 'serving.servegate.dev/v1alpha1',
      kind: 'ServingDeployment',
      metadata: { name: 'chat', namespace: 'fleet' },
      spec: { type: 'model', modelServer: 'llm', backend: { urls } },
    },
    ...TENANTS.map((t) => {
      const doc = keySecretObject({ name: `key-${t.name}`, ...keys[t.name], projects: 'fleet' });
      if (t.priority) doc.stringData.priority = t.priority;
      return doc;
    }),
  ];
  if (extraKey) docs.push(extraKey);
  writeFileSync(join(folder, 'fleet.yaml'), docs.map((d) => stringify(d)).join('---\n'));
}

async function startGateways(n, dir, manifests, config, cli, tag) {
  const ready = (g) =>
    waitFor(
      `${tag}: the deployment served`,
      async () => {
        const res = await fetch(`http://127.0.0.1:${g.adminPort}/deployments`, { signal: AbortSignal.timeout(3000) });
        const d = (await res.json()).deployments?.find((x) => x.name === 'chat');
        return d?.ready === true;
      },
      { child: g.child, timeoutMs: 20_000, intervalMs: 100 },
    );
  const gws = [];
  for (let i = 0; i < n; i++)
    gws.push(
      await startGateway(dir, ['--manifests', manifests], {
        accessLog: false,
        name: `${tag}-${i}`,
        config,
        ready,
        cli,
      }),
    );
  return gws;
}

/** One run: `requests` through `gateways` gateway processes with `queueing` on or off. */
async function run(name, requests, keys, { gateways, queueing, dir, manifests, cli, ctx }) {
  const config = { balancing: BALANCING, queueing: { enabled: queueing } };
  const gws = await startGateways(gateways, dir, manifests, config, cli, name.replace(/\W+/g, '-'));
  // Unbounded connections: a client-side queue would hold every tenant's requests in one FIFO (what is measured here
  // is where the gateway lets them wait).
  const targets = gws.map((g) => ({
    pool: new Pool(`http://127.0.0.1:${g.port}`, { connections: null, pipelining: 1 }),
    path: '/v1/fleet/chat/v1/chat/completions',
  }));
  try {
    const headersOf = (req) => ({
      authorization: `ApiKey ${keys[req.tenant].key}`,
      'content-type': 'application/json',
    });
    const { results, start } = await drive(targets, requests, headersOf);
    const from = start + ctx.fairWarmup * 1000;
    const to = start + (ctx.fairWarmup + ctx.fairSeconds) * 1000;
    let tokens = 0;
    for (const r of results) for (const at of r.tokens) if (at >= from && at < to) tokens++;
    const measured = results.filter((r) => r.req.measured);
    const ttft = (cls) => p90(measured.filter((r) => r.req.cls === cls).map((r) => r.ttftMs));
    const failed = results.filter((r) => r.status !== 200 || r.error).length;
    // The gateways' own account of the wait in their queues: mean milliseconds per priority.
    const waits = {};
    for (const g of gws) {
      const text = await (await fetch(`http://127.0.0.1:${g.adminPort}/metrics`)).text();
      for (const m of text.matchAll(
        /^servegate_queue_wait_seconds_(sum|count)\{[^}]*priority="(\w+)"[^}]*\} (\S+)$/gm,
      )) {
        waits[m[2]] ??= { sum: 0, count: 0 };
        waits[m[2]][m[1]] += Number(m[3]);
      }
    }
    const meanWait = (p) => (waits[p]?.count ? (1000 * waits[p].sum) / waits[p].count : NaN);
    return {
      queueWait: { critical: meanWait('critical'), standard: meanWait('standard') },
      name,
      quiet: ttft('quiet'),
      critical: ttft('critical'),
      noisy: ttft('noisy'),
      tokensPerSecond: tokens / ctx.fairSeconds,
      failed,
      total: results.length,
    };
  } finally {
    for (const t of targets) await t.pool.close();
    for (const g of gws) await stopProcess(g.child);
  }
}

/** Two gateways on one redis-server spend one key's budget with BUDGET_CLIENTS clients until every one is refused. */
async function budgetRun(dir, urls, cli) {
  const redisBin = findExecutable('redis-server');
  if (!redisBin) return { skipped: 'redis-server not found (apt-get install -y redis-server)' };
  const port = await freePort();
  const redis = startProcess('redis-server', redisBin, ['--port', String(port), '--bind', '127.0.0.1', '--save', '']);
  try {
    await waitFor('redis-server', () => /Ready to accept connections/.test(redis.output), {
      child: redis,
      timeoutMs: 10_000,
    });
    const k = makeKey();
    const manifests = join(dir, 'budget-manifests');
    const keyDoc = keySecretObject({ name: 'key-budget', prefix: k.prefix, sha256: k.sha256, projects: 'fleet' });
    keyDoc.stringData.budgetTokens = String(BUDGET_TOKENS);
    keyDoc.stringData.budgetPeriod = '1h';
    const tenantKeys = Object.fromEntries(TENANTS.map((t) => [t.name, makeKey()]));
    writeManifests(manifests, urls, tenantKeys, keyDoc);
    const config = { balancing: BALANCING, limits: { redis: { url: `redis://127.0.0.1:${port}/0`, failOpen: false } } };
    const gws = await startGateways(2, dir, manifests, config, cli, 'budget');
    try {
      const rand = rng(3);
      let most = 0;
      let served = 0;
      let refused = 0;
      const client = async (c) => {
        for (let n = 0; n < 10_000; n++) {
          let text = '';
          while (text.length < PROMPT_BYTES) text += `${WORDS[Math.floor(rand() * WORDS.length)]} `;
          const g = gws[(c + n) % 2];
          const res = await request(`http://127.0.0.1:${g.port}/v1/fleet/chat/v1/chat/completions`, {
            method: 'POST',
            headers: { authorization: `ApiKey ${k.key}`, 'content-type': 'application/json' },
            body: JSON.stringify({
              model: 'chat',
              max_tokens: MAX_TOKENS,
              messages: [{ role: 'user', content: text }],
            }),
          });
          const body = await res.body.json();
          if (res.statusCode !== 200) {
            refused++;
            return;
          }
          served++;
          most = Math.max(most, (body.usage?.prompt_tokens ?? 0) + (body.usage?.completion_tokens ?? 0));
        }
      };
      await Promise.all(Array.from({ length: BUDGET_CLIENTS }, (_, c) => client(c)));
      // Both replicas read the same spend once the last charges are in.
      let spent;
      await waitFor(
        'the last charges',
        async () => {
          const a = await (await fetch(`http://127.0.0.1:${gws[0].adminPort}/budgets?key=key-budget`)).json();
          const b = await (await fetch(`http://127.0.0.1:${gws[1].adminPort}/budgets?key=key-budget`)).json();
          const s0 = a.budgets?.[0]?.spentTokens;
          if (s0 !== undefined && s0 === b.budgets?.[0]?.spentTokens && s0 === spent) return true;
          spent = s0;
          return false;
        },
        { timeoutMs: 10_000, intervalMs: 300 },
      );
      // docs/llm.md: the requests in flight when it ran out, and a client's next one admitted while its last charge
      // was still on its way: below 2 × clients × the largest request.
      return { spent, served, refused, most, bound: 2 * BUDGET_CLIENTS * most };
    } finally {
      for (const g of gws) await stopProcess(g.child);
    }
  } finally {
    await stopProcess(redis);
  }
}

/** `ctx`: { dir, fairSeconds, fairWarmup }; `cli`: the gateway's dist/cli/main.js. */
export async function runFairnessBench(ctx, cli = CLI) {
  const dir = join(ctx.dir, 'fairness');
  mkdirSync(dir, { recursive: true });
  const texts = goalTexts();
  const goals = {};
  const fleet = await startFleet();
  const summary = [];
  try {
    const keys = Object.fromEntries(TENANTS.map((t) => [t.name, makeKey()]));
    const manifests = join(dir, 'manifests');
    writeManifests(manifests, fleet.urls, keys);
    const opts = { warmup: ctx.fairWarmup, seconds: ctx.fairSeconds };
    const everyone = makeRequests(TENANTS, opts);
    const alone = makeRequests(
      TENANTS.filter((t) => t.cls !== 'noisy'),
      opts,
    );
    log(
      `  fleet: ${FLEET.replicas} replicas × ${FLEET.maxRunning} sequences, ${MAX_TOKENS} tokens an answer at ${FLEET.decodeMsPerToken} ms a token; load: noisy ${10 * QUIET}/s, 3 quiet and 1 critical at ${QUIET}/s each (${everyone.length} requests over ${ctx.fairWarmup + ctx.fairSeconds} s); balancing.maxWaiting ${BALANCING.maxWaiting}`,
    );
    const rows = [
      ['run', 'gateways', 'quiet TTFT p90', 'critical p90', 'noisy p90', 'output tok/s', 'failed', 'queue wait (mean)'],
    ];
    const runs = {};
    const counts = ONLY_GATEWAYS ? [ONLY_GATEWAYS] : [1, 2];
    for (const gateways of counts) {
      const base = { gateways, dir, manifests, cli, ctx };
      for (const [label, reqs, queueing] of [
        ['quiet + critical alone', alone, true],
        ['everyone, no queueing', everyone, false],
        ['everyone, fair queueing', everyone, true],
      ]) {
        const r = await run(`${label} (${gateways} gw)`, reqs, keys, { ...base, queueing });
        runs[`${label}/${gateways}`] = r;
        rows.push([
          label,
          String(gateways),
          ms(r.quiet),
          ms(r.critical),
          ms(r.noisy),
          r.tokensPerSecond.toFixed(0),
          `${r.failed}/${r.total}`,
          queueing && Number.isFinite(r.queueWait.standard)
            ? `${ms(r.queueWait.critical)} / ${ms(r.queueWait.standard)}`
            : '-',
        ]);
      }
    }
    table(rows, { left: [0] });
    for (const gateways of counts) {
      const a = runs[`quiet + critical alone/${gateways}`];
      const off = runs[`everyone, no queueing/${gateways}`];
      const on = runs[`everyone, fair queueing/${gateways}`];
      const qr = on.quiet / a.quiet;
      const cr = on.critical / a.critical;
      const tr = on.tokensPerSecond / off.tokensPerSecond;
      goals[`quiet${gateways}`] = goal(
        texts[`quiet${gateways}`],
        `${qr.toFixed(2)}x (no queueing ${(off.quiet / a.quiet).toFixed(2)}x)`,
        Number.isFinite(qr) ? qr <= 1.5 : undefined,
        G,
      );
      goals[`critical${gateways}`] = goal(
        texts[`critical${gateways}`],
        `${((cr - 1) * 100).toFixed(0)} % (no queueing ${((off.critical / a.critical - 1) * 100).toFixed(0)} %)`,
        Number.isFinite(cr) ? cr <= 1.2 : undefined,
        G,
      );
      goals[`throughput${gateways}`] = goal(
        texts[`throughput${gateways}`],
        `${((tr - 1) * 100).toFixed(1)} %`,
        // More than without queueing is no loss: only a drop of more than 5 % misses.
        Number.isFinite(tr) ? tr >= 0.95 : undefined,
        G,
      );
      summary.push(
        `fairness (${gateways} gw): quiet TTFT p90 ${ms(a.quiet)} alone, ${ms(off.quiet)} without and ${ms(on.quiet)} with fair queueing; critical ${ms(a.critical)} / ${ms(off.critical)} / ${ms(on.critical)}; output ${off.tokensPerSecond.toFixed(0)} vs ${on.tokensPerSecond.toFixed(0)} tokens/s`,
      );
    }
    const b = await budgetRun(dir, fleet.urls, cli);
    if (b.skipped) goals.budget = goal(texts.budget, b.skipped, undefined, G);
    else {
      const over = b.spent - BUDGET_TOKENS;
      log(
        `  budget ${BUDGET_TOKENS} tokens, ${BUDGET_CLIENTS} clients over 2 gateways: ${b.served} answers, ${b.refused} refused, ${b.spent} spent; bound 2 × ${BUDGET_CLIENTS} clients × ${b.most} tokens = ${b.bound} (in flight alone: ${b.bound / 2})`,
      );
      goals.budget = goal(texts.budget, `+${over} tokens (bound ${b.bound})`, over >= 0 && over <= b.bound, G);
      summary.push(
        `budgets: ${BUDGET_TOKENS} tokens overspent by ${over} with ${BUDGET_CLIENTS} clients on 2 replicas (bound ${b.bound})`,
      );
    }
  } finally {
    await stopProcess(fleet.child);
  }
  return { goals, summary };
}

if (process.argv[1] === SELF) {
  const { values } = parseArgs({
    options: {
      dist: { type: 'string' },
      'fair-seconds': { type: 'string', default: '10' },
      'fair-warmup': { type: 'string', default: '2' },
    },
  });
  const ctx = { fairSeconds: Number(values['fair-seconds']), fairWarmup: Number(values['fair-warmup']) };
  installCleanup(timeBudgetSeconds(ctx) * 1000);
  const dir = mkdtempSync(join(tmpdir(), 'servegate-fairness-'));
  const cli = values.dist ? join(resolve(ROOT, values.dist), 'cli', 'main.js') : CLI;
  log(`fairness: gateway ${cli}`);
  try {
    await runFairnessBench({ ...ctx, dir }, cli);
  } finally {
    killAllSync();
    rmSync(dir, { recursive: true, force: true });
  }
}
