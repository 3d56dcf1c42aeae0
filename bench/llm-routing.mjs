// Part D of `npm run bench`: LLM-aware endpoint picking (SPEC §12) against round robin, in the same run.
// A simulated vLLM fleet (examples/backends/vllm-sim.mjs, its own process: replicas with a KV prefix cache, a batch
// limit, a FIFO queue and vLLM's /metrics) behind the built gateway (dist/), which serves two deployments of that
// same fleet (`backend.urls`): chat-llm (`balancing: {policy: llm}`) and chat-rr (`balancing: {policy: round-robin}`).
// Two loads, open loop (Poisson arrivals, streamed chat completions):
//   prefix-heavy: `tenants` tenants, each with a long system prompt (many KV blocks), short varying user messages;
//   uniform:      prompts of the same length with no shared prefix.
// Each load runs through one gateway and through two gateway processes (requests alternate between them), once per
// policy, with the same arrivals and prompts (same seed) and the replicas' prefix caches emptied before each run.
// Measured at the client: TTFT (scheduled send → first streamed token) p50/p90 and output tokens/s; from the replicas'
// counters (vllm:prefix_cache_hits_total / _queries_total): the fleet's prefix hit rate; from each answer's
// x-vllm-replica header: the share of requests per replica. Every process started here is stopped at the end.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { Pool, request } from 'undici';
import { stringify } from 'yaml';
import { keySecretObject, makeKey } from './lib/manifests.mjs';
import { startProcess, stopProcess, waitFor } from './lib/procs.mjs';
import { goal, log, ms, pct, ratio, table } from './lib/report.mjs';
import { CLI, cliBuilt, startGateway } from './lib/servegate.mjs';

const SIM = fileURLToPath(new URL('../examples/backends/vllm-sim.mjs', import.meta.url));
const PROJECT = 'bench';
const POLICIES = [
  { name: 'round-robin', deployment: 'chat-rr' },
  { name: 'llm', deployment: 'chat-llm' },
];
const MODEL = 'chat';

/**
 * The fleet and the loads. One replica's KV cache holds the system prompts of about 6 of the 16 tenants, the
 * fleet's holds them all: with requests spread evenly each replica sees every tenant and keeps losing prefixes to the
 * others; with each tenant kept on one replica (4 each) its prefix stays cached. The sequences running at once use a
 * small part of the cache (2-3 prompts: KV use about 0.3-0.5), as on a real server, so KV saturation is not what
 * decides. A cache miss costs a full prefill (about 55 ms), a hit about 4 ms; prefill is one sequence at a time per
 * replica, so misses also delay the requests queued behind them.
 */
export const FLEET = {
  replicas: 4,
  blockSize: 16,
  kvBlocks: 320,
  maxRunning: 16,
  prefillMsPerBlock: 1,
  decodeMsPerToken: 8,
  maxTokens: 16,
};
const LOAD = { tenants: 16, systemBlocks: 48, userBytes: [96, 256] };

/** The goal lines of this part (also listed as skipped in the summary when the part does not run). */
export function goalTexts() {
  return {
    ttft1: 'prefix-heavy, 1 gateway: TTFT p90 llm <= 0.5x round robin',
    ttft2: 'prefix-heavy, 2 gateways: TTFT p90 llm <= 0.5x round robin',
    hit1: 'prefix-heavy, 1 gateway: hit rate llm >= 2x round robin',
    hit2: 'prefix-heavy, 2 gateways: hit rate llm >= 2x round robin',
    hitReplicas: 'prefix-heavy, llm: hit rate 2 gateways >= 0.9x 1 gateway',
    uniform1: 'uniform, 1 gateway: TTFT p50 llm <= 1.1x round robin',
    uniform2: 'uniform, 2 gateways: TTFT p50 llm <= 1.1x round robin',
  };
}

/**
 * Seconds this part may take at most (run.mjs adds it to the global time limit): eight runs, each bounded by its
 * arrivals plus the 30 s a stalled request may take before it times out, and the start of the processes.
 */
export function timeBudgetSeconds(ctx) {
  return 8 * (ctx.llmWarmup + ctx.llmSeconds + 35) + 90;
}

// --- prompts and arrivals -------------------------------------------------------------------------------------------

/** mulberry32: a small seeded PRNG, so that both policies get the very same arrivals and prompts. */
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const LETTERS = 'abcdefghijklmnopqrstuvwxyz';
/** `bytes` bytes of random lowercase words. */
function words(rand, bytes, start = '') {
  let s = start;
  while (s.length < bytes) {
    const n = 2 + Math.floor(rand() * 8);
    let w = '';
    for (let i = 0; i < n; i++) w += LETTERS[Math.floor(rand() * 26)];
    s += `${w} `;
  }
  return s.slice(0, bytes);
}

/**
 * The requests of one run: { at (ms after start), body, measured } with Poisson arrivals at `rate`, `warmup` seconds
 * not measured, then `seconds` measured.
 */
function makeRequests(load, { rate, warmup, seconds, seed }) {
  const rand = rng(seed);
  const systemBytes = LOAD.systemBlocks * FLEET.blockSize * 4;
  const tenants = Array.from({ length: LOAD.tenants }, (_, k) =>
    words(rng(1000 + k), systemBytes, `Tenant ${k} assistant. Follow the policy of tenant ${k}: `),
  );
  const out = [];
  const end = (warmup + seconds) * 1000;
  for (let at = 0, i = 0; ; i++) {
    at += (-Math.log(1 - rand()) / rate) * 1000;
    if (at >= end) break;
    const [lo, hi] = LOAD.userBytes;
    const user = words(rand, lo + Math.floor(rand() * (hi - lo)), `Question ${i}: `);
    const system =
      load === 'prefix-heavy' ? tenants[Math.floor(rand() * tenants.length)] : words(rand, systemBytes, `${i} `);
    out.push({
      at,
      measured: at >= warmup * 1000,
      body: JSON.stringify({
        model: MODEL,
        stream: true,
        stream_options: { include_usage: true },
        max_tokens: FLEET.maxTokens,
        messages: [
          { role: 'system', content: system },
          { role: 'user', content: user },
        ],
      }),
    });
  }
  return out;
}

// --- the load generator ---------------------------------------------------------------------------------------------

/**
 * One streamed request: TTFT from the scheduled time, tokens (events with content), the replica that answered
 * (x-vllm-replica through the gateway), the usage event's cached tokens.
 */
async function streamOne(pool, path, headers, req, scheduledAt) {
  const r = { measured: req.measured, tokens: 0 };
  try {
    const res = await pool.request({
      path,
      method: 'POST',
      headers,
      body: req.body,
      headersTimeout: 30_000,
      bodyTimeout: 30_000,
    });
    r.status = res.statusCode;
    r.replica = res.headers['x-vllm-replica'];
    let pending = '';
    for await (const chunk of res.body) {
      const now = performance.now();
      pending += chunk.toString('utf8');
      let end;
      while ((end = pending.indexOf('\n\n')) !== -1) {
        const ev = pending.slice(0, end);
        pending = pending.slice(end + 2);
        if (!ev.startsWith('data: {')) continue;
        const data = JSON.parse(ev.slice(6));
        if (data.choices?.[0]?.delta?.content) {
          r.tokens++;
          r.ttftMs ??= now - scheduledAt;
        }
        if (data.usage) r.usage = data.usage;
        if (data.error) r.error = `stream error: ${data.error.message}`;
      }
    }
    if (r.status !== 200) r.error ??= `HTTP ${r.status}: ${pending.slice(0, 200)}`;
    else if (r.ttftMs === undefined) r.error ??= 'no token in the stream';
  } catch (err) {
    r.error = err.message;
  }
  r.endAt = performance.now();
  return r;
}

/** Sends `requests` at their times, alternating over `targets` ({ pool, path }); resolves every result. */
async function drive(targets, headers, requests) {
  const start = performance.now() + 20;
  const pending = [];
  let next = 0;
  await new Promise((resolve) => {
    if (!requests.length) return resolve();
    const tick = () => {
      const now = performance.now();
      while (next < requests.length && start + requests[next].at <= now) {
        const req = requests[next];
        const t = targets[next % targets.length];
        pending.push(streamOne(t.pool, t.path, headers, req, start + req.at));
        next++;
      }
      if (next < requests.length) setTimeout(tick, Math.max(0, start + requests[next].at - performance.now()));
      else resolve();
    };
    setTimeout(tick, 20);
  });
  const measuredStartAt = start + (requests.find((r) => r.measured)?.at ?? requests[requests.length - 1]?.at ?? 0);
  return { results: await Promise.all(pending), measuredStartAt };
}

function percentile(sorted, p) {
  return sorted.length ? sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] : NaN;
}

// --- the replicas' counters -----------------------------------------------------------------------------------------

/** Sum of the samples of a metric family in Prometheus text (every label set), or undefined when absent. */
function metricSum(text, name) {
  let sum;
  for (const line of text.split('\n')) {
    if (!line.startsWith(name)) continue;
    const m = /^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)/.exec(line);
    if (!m || m[1] !== name) continue;
    sum = (sum ?? 0) + Number(m[3]);
  }
  return sum;
}

async function fleetCounters(urls) {
  return Promise.all(
    urls.map(async (u) => {
      const text = await (await fetch(`${u}/metrics`, { signal: AbortSignal.timeout(5000) })).text();
      return {
        hits: metricSum(text, 'vllm:prefix_cache_hits_total') ?? NaN,
        queries: metricSum(text, 'vllm:prefix_cache_queries_total') ?? NaN,
        served: metricSum(text, 'vllm:request_success_total') ?? NaN,
      };
    }),
  );
}

/** The gateway's picks by reason for a deployment (servegate_endpoint_picks_total), {} when it has no such metric. */
async function picksByReason(adminPort, deployment) {
  try {
    const res = await fetch(`http://127.0.0.1:${adminPort}/metrics`, { signal: AbortSignal.timeout(5000) });
    const text = await res.text();
    const out = {};
    for (const line of text.split('\n')) {
      if (!line.startsWith('servegate_endpoint_picks_total{')) continue;
      if (!line.includes(`deployment="${deployment}"`)) continue;
      const reason = /reason="([^"]*)"/.exec(line)?.[1] ?? '?';
      out[reason] = (out[reason] ?? 0) + Number(line.slice(line.lastIndexOf(' ') + 1));
    }
    return out;
  } catch {
    return {};
  }
}

// --- processes ------------------------------------------------------------------------------------------------------

async function startFleetProcess() {
  const args = [
    SIM,
    '0',
    '--json',
    '--replicas',
    String(FLEET.replicas),
    '--model',
    MODEL,
    '--block-size',
    String(FLEET.blockSize),
    '--kv-blocks',
    String(FLEET.kvBlocks),
    '--max-running',
    String(FLEET.maxRunning),
    '--prefill-ms-per-block',
    String(FLEET.prefillMsPerBlock),
    '--decode-ms-per-token',
    String(FLEET.decodeMsPerToken),
    '--max-tokens',
    String(FLEET.maxTokens),
  ];
  const child = startProcess('vllm-sim fleet', process.execPath, args);
  let urls;
  await waitFor(
    'simulated vLLM fleet',
    () => {
      const line = /^\{"urls".*$/m.exec(child.output)?.[0];
      if (line) urls = JSON.parse(line).urls;
      return urls;
    },
    { child, timeoutMs: 10_000 },
  );
  return { child, urls };
}

function writeManifests(dir, urls, { prefix, sha256 }) {
  const folder = join(dir, 'manifests');
  mkdirSync(folder, { recursive: true });
  const docs = [
    ...POLICIES.map((p) => ({
      apiVersion: 'serving.servegate.dev/v1alpha1',
      kind: 'ServingDeployment',
      metadata: { name: p.deployment, namespace: PROJECT },
      spec: { type: 'model', modelServer: 'llm', backend: { urls }, balancing: { policy: p.name } },
    })),
    keySecretObject({ name: 'bench-key', prefix, sha256, projects: PROJECT }),
  ];
  writeFileSync(join(folder, 'llm-routing.yaml'), docs.map((d) => stringify(d)).join('---\n'));
  return folder;
}

/** Thrown when the build cannot run this part (e.g. it refuses backend.urls): the part is skipped, not failed. */
class Unsupported extends Error {}

/** A deployment's status in the admin listener's /deployments: { ready, reason, message }, undefined if not listed. */
async function statusOf(adminPort, name) {
  const res = await fetch(`http://127.0.0.1:${adminPort}/deployments`, { signal: AbortSignal.timeout(3000) });
  return (await res.json()).deployments?.find((x) => x.name === name && x.namespace === PROJECT);
}

/**
 * The gateway, started from dist/ with the manifests, once it serves both deployments. A deployment the build
 * refuses (InvalidSpec: e.g. a build without backend.urls or spec.balancing) ends the wait with Unsupported.
 */
async function startServegate(dir, manifests, headers, name) {
  const ready = async (g) => {
    let unsupported;
    await waitFor(
      `${name}: both deployments served`,
      async () => {
        for (const p of POLICIES) {
          const res = await request(`http://127.0.0.1:${g.port}/v1/${PROJECT}/${p.deployment}/v1/models`, { headers });
          const text = await res.body.text();
          if (res.statusCode === 200) continue;
          const st = res.statusCode === 404 ? await statusOf(g.adminPort, p.deployment) : undefined;
          if (st && !st.ready && st.reason === 'InvalidSpec') {
            unsupported = new Unsupported(`${p.deployment}: ${st.reason}: ${st.message ?? ''}`);
            return true;
          }
          throw new Error(`${p.deployment}: HTTP ${res.statusCode}: ${text.slice(0, 200)}`);
        }
        return true;
      },
      { child: g.child, timeoutMs: 20_000, intervalMs: 100 },
    );
    if (unsupported) throw unsupported;
  };
  const config = { balancing: { scrapeIntervalMs: 100 } };
  try {
    return await startGateway(dir, ['--manifests', manifests], { accessLog: false, name, config, ready });
  } catch (err) {
    // A build whose configuration has no `balancing` key yet refuses the file: run it with its defaults.
    if (!(err instanceof Unsupported) && /balancing/.test(err.message)) {
      log(`  ${name}: this build refuses the config key balancing.scrapeIntervalMs; started with its defaults`);
      return await startGateway(dir, ['--manifests', manifests], { accessLog: false, name, ready });
    }
    throw err;
  }
}

// --- the part -------------------------------------------------------------------------------------------------------

export async function runLlmRoutingBench(ctx) {
  const dir = join(ctx.dir, 'llm-routing');
  mkdirSync(dir, { recursive: true });
  const texts = goalTexts();
  if (!cliBuilt()) {
    log(`  SKIPPED: ${CLI} not built`);
    return { summary: ['llm-routing: skipped (not built)'] };
  }
  const { key, prefix, sha256 } = makeKey();
  const headers = { 'content-type': 'application/json', authorization: `ApiKey ${key}` };
  const started = [];
  const pools = [];
  const runs = [];
  const results = { settings: { fleet: FLEET, load: LOAD, rate: ctx.llmRate, seconds: ctx.llmSeconds }, runs };
  try {
    const fleet = await startFleetProcess();
    started.push(fleet.child);
    log(
      `  fleet: ${FLEET.replicas} simulated vLLM replicas (examples/backends/vllm-sim.mjs, one process): KV cache ${FLEET.kvBlocks} blocks of ${FLEET.blockSize} tokens, ` +
        `at most ${FLEET.maxRunning} running, prefill ${FLEET.prefillMsPerBlock} ms/block (one at a time), decode ${FLEET.decodeMsPerToken} ms/token, ${FLEET.maxTokens} output tokens`,
    );
    log(
      `  load: Poisson arrivals at ${ctx.llmRate} req/s, ${ctx.llmWarmup} s warm-up + ${ctx.llmSeconds} s measured per run; streamed chat completions; ` +
        `prefix-heavy = ${LOAD.tenants} tenants × a ${LOAD.systemBlocks}-block system prompt + a ${LOAD.userBytes.join('-')} B user message; uniform = the same lengths, no shared prefix`,
    );
    const manifests = writeManifests(dir, fleet.urls, { prefix, sha256 });
    const gateways = [];
    for (const name of ['llm-gateway-1', 'llm-gateway-2']) {
      const gw = await startServegate(dir, manifests, headers, name);
      started.push(gw.child);
      gateways.push(gw);
    }
    log(
      `  gateways: 2 × node dist/cli/main.js serve --manifests (access log off, balancing.scrapeIntervalMs 100), each serving ` +
        `chat-llm (policy llm) and chat-rr (policy round-robin) over the same ${FLEET.replicas} backend.urls`,
    );
    for (const gw of gateways) pools.push(new Pool(`http://127.0.0.1:${gw.port}`, { connections: 256 }));

    for (const load of ['prefix-heavy', 'uniform']) {
      for (const nGw of [1, 2]) {
        const requests = makeRequests(load, {
          rate: ctx.llmRate,
          warmup: ctx.llmWarmup,
          seconds: ctx.llmSeconds,
          seed: load === 'prefix-heavy' ? 11 : 22,
        });
        for (const policy of POLICIES) {
          await Promise.all(
            fleet.urls.map((u) => fetch(`${u}/reset_prefix_cache`, { method: 'POST' }).then((r) => r.body?.cancel())),
          );
          const targets = gateways.slice(0, nGw).map((gw, i) => ({
            pool: pools[i],
            path: `/v1/${PROJECT}/${policy.deployment}/v1/chat/completions`,
            adminPort: gw.adminPort,
          }));
          const picks0 = await Promise.all(targets.map((t) => picksByReason(t.adminPort, policy.deployment)));
          // Counters are read when the warm-up ends (those of the requests admitted until then are left out).
          let before;
          const snap = sleep(ctx.llmWarmup * 1000 + 20).then(async () => (before = await fleetCounters(fleet.urls)));
          const { results: all, measuredStartAt } = await drive(targets, headers, requests);
          await snap;
          const after = await fleetCounters(fleet.urls);
          const picks1 = await Promise.all(targets.map((t) => picksByReason(t.adminPort, policy.deployment)));
          const run = summarise(load, nGw, policy.name, all, measuredStartAt, before, after, picks0, picks1);
          runs.push(run);
          log(
            `  ${load}, ${nGw} gateway${nGw > 1 ? 's' : ''}, ${policy.name}: TTFT p50 ${ms(run.ttftP50)} p90 ${ms(run.ttftP90)}, ` +
              `hit rate ${pct(run.hitRate)}, ${run.errors} errors${run.firstError ? ` (first: ${run.firstError})` : ''}`,
          );
        }
      }
    }
  } catch (err) {
    if (err instanceof Unsupported) {
      log(`  SKIPPED: this build does not serve the deployments of this part (${err.message})`);
      log('  (it needs spec.backend.urls and spec.balancing of SPEC §12 in the files source)');
      return { ...results, summary: [`llm-routing: skipped (${err.message})`] };
    }
    throw err;
  } finally {
    await Promise.allSettled(pools.map((p) => p.destroy()));
    for (const child of started.reverse()) await stopProcess(child);
  }

  printTable(runs);
  results.goals = judge(runs, texts);
  const get = (load, g, p) => runs.find((r) => r.load === load && r.gateways === g && r.policy === p);
  const [rr1, llm1] = [get('prefix-heavy', 1, 'round-robin'), get('prefix-heavy', 1, 'llm')];
  results.summary = [
    `llm-routing (prefix-heavy, 1 gateway): TTFT p90 llm ${ms(llm1?.ttftP90)} vs round robin ${ms(rr1?.ttftP90)}; ` +
      `hit rate ${pct(llm1?.hitRate)} vs ${pct(rr1?.hitRate)}`,
  ];
  for (const line of results.summary) log(`  ${line}`);
  return results;
}

function summarise(load, gateways, policy, all, measuredStartAt, before, after, picks0, picks1) {
  const measured = all.filter((r) => r.measured);
  const ok = measured.filter((r) => !r.error);
  const ttfts = ok.map((r) => r.ttftMs).sort((a, b) => a - b);
  const tokens = ok.reduce((n, r) => n + r.tokens, 0);
  const lastEnd = Math.max(...measured.map((r) => r.endAt));
  const sum = (list, k) => list.reduce((n, c) => n + c[k], 0);
  const hits = sum(after, 'hits') - sum(before, 'hits');
  const queries = sum(after, 'queries') - sum(before, 'queries');
  const perReplica = new Array(after.length).fill(0);
  let unknownReplica = 0;
  for (const r of ok) {
    const i = Number(r.replica);
    if (Number.isInteger(i) && i >= 0 && i < perReplica.length) perReplica[i]++;
    else unknownReplica++;
  }
  // Without the header (a gateway that drops it), the replicas' own request counters give the shares.
  const share =
    unknownReplica === 0
      ? perReplica.map((n) => n / (ok.length || 1))
      : after.map((c, i) => (c.served - before[i].served) / (sum(after, 'served') - sum(before, 'served') || 1));
  const usageHits = ok.reduce((n, r) => n + (r.usage?.prompt_tokens_details?.cached_tokens ?? 0), 0);
  const usagePrompt = ok.reduce((n, r) => n + (r.usage?.prompt_tokens ?? 0), 0);
  const picks = {};
  for (const [i, p1] of picks1.entries())
    for (const [reason, n] of Object.entries(p1)) picks[reason] = (picks[reason] ?? 0) + n - (picks0[i][reason] ?? 0);
  const errors = measured.length - ok.length;
  return {
    load,
    gateways,
    policy,
    requests: measured.length,
    errors,
    firstError: measured.find((r) => r.error)?.error,
    ttftP50: percentile(ttfts, 50),
    ttftP90: percentile(ttfts, 90),
    ttftP99: percentile(ttfts, 99),
    tokensPerSecond: tokens / ((lastEnd - measuredStartAt) / 1000),
    hitRate: queries > 0 ? hits / queries : NaN,
    hitRateFromUsage: usagePrompt > 0 ? usageHits / usagePrompt : NaN,
    share,
    shareSource: unknownReplica === 0 ? 'x-vllm-replica' : 'vllm:request_success_total',
    picks,
  };
}

function printTable(runs) {
  const rows = [['load', 'gateways', 'policy', 'TTFT p50', 'TTFT p90', 'tokens/s', 'hit rate', 'share per replica']];
  for (const r of runs)
    rows.push([
      r.load,
      String(r.gateways),
      r.policy,
      ms(r.ttftP50),
      ms(r.ttftP90),
      Number.isFinite(r.tokensPerSecond) ? r.tokensPerSecond.toFixed(0) : 'n/a',
      pct(r.hitRate),
      r.share.map((s) => pct(s)).join(' / ') + (r.errors ? `  (${r.errors} errors)` : ''),
    ]);
  log('');
  table(rows, { left: [0, 2, 7] });
  const picks = runs.filter((r) => Object.keys(r.picks).length);
  if (picks.length) {
    log('  picks by reason (servegate_endpoint_picks_total, measured run and warm-up):');
    for (const r of picks)
      log(
        `    ${r.load}, ${r.gateways} gateway${r.gateways > 1 ? 's' : ''}, ${r.policy}: ${Object.entries(r.picks)
          .map(([k, v]) => `${k} ${v}`)
          .join(', ')}`,
      );
  }
  log('');
}

function judge(runs, texts) {
  const get = (load, g, p) => runs.find((r) => r.load === load && r.gateways === g && r.policy === p);
  /** A run with failed requests gives no figure. */
  const usable = (r) => (r && r.errors === 0 ? r : undefined);
  const goals = {};
  const vs = (a, b, key) => {
    const x = usable(a)?.[key];
    const y = usable(b)?.[key];
    return Number.isFinite(x) && Number.isFinite(y) && y > 0 ? x / y : undefined;
  };
  const figure = (v, a, b, key, fmt) =>
    v === undefined
      ? `n/a${a?.errors || b?.errors ? ` (${(a?.errors ?? 0) + (b?.errors ?? 0)} errors)` : ''}`
      : `${ratio(v)} (${fmt(a[key])} vs ${fmt(b[key])})`;
  for (const g of [1, 2]) {
    const [llm, rr] = [get('prefix-heavy', g, 'llm'), get('prefix-heavy', g, 'round-robin')];
    const t = vs(llm, rr, 'ttftP90');
    goals[`ttft${g}`] = goal(texts[`ttft${g}`], figure(t, llm, rr, 'ttftP90', ms), t === undefined ? t : t <= 0.5, 'D');
    const h = vs(llm, rr, 'hitRate');
    goals[`hit${g}`] = goal(texts[`hit${g}`], figure(h, llm, rr, 'hitRate', pct), h === undefined ? h : h >= 2, 'D');
  }
  const [two, one] = [get('prefix-heavy', 2, 'llm'), get('prefix-heavy', 1, 'llm')];
  const h = vs(two, one, 'hitRate');
  goals.hitReplicas = goal(texts.hitReplicas, figure(h, two, one, 'hitRate', pct), h === undefined ? h : h >= 0.9, 'D');
  for (const g of [1, 2]) {
    const [llm, rr] = [get('uniform', g, 'llm'), get('uniform', g, 'round-robin')];
    const t = vs(llm, rr, 'ttftP50');
    goals[`uniform${g}`] = goal(
      texts[`uniform${g}`],
      figure(t, llm, rr, 'ttftP50', ms),
      t === undefined ? t : t <= 1.1,
      'D',
    );
  }
  return goals;
}
