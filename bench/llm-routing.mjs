// Part D of `npm run bench`: LLM-aware endpoint picking (SPEC §12 and its 2026-11-26 amendment) against round robin
// and against a reference learned prefix index, in the same run. A simulated vLLM fleet (examples/backends/vllm-sim.mjs,
// its own process: replicas with an LRU KV prefix cache, a batch limit, a FIFO queue and vLLM's /metrics) behind the
// built gateway (dist/), which serves two deployments of that same fleet (`backend.urls`): chat-llm (`balancing:
// {policy: llm}`) and chat-rr (`balancing: {policy: round-robin}`); the reference is bench/lib/reference-router.mjs
// (chained block hashes, an LRU per endpoint of the blocks it sent there, longest match wins, bounded load), a proxy
// process of its own in front of the same fleet; and, where it installs (pip into a venv under .bench-tmp, once),
// SGLang's own router (sglang-router, cache_aware policy), which then is the reference the goals name. Three loads
// (streamed chat completions):
//   (a) tenants:       32 tenants, each a ~6,000-character system prompt, single-turn questions (Poisson arrivals);
//                      run again over 10 fleets on other ports (other endpoint addresses, other hashes);
//   (b) conversations: one application (a ~4,000-character system prompt), 64 conversations of 8 turns, each turn
//                      adding ~2,000 characters of history (tool output and answer) and sent when the previous answer
//                      ended plus a think time; the replicas' KV caches hold a fraction of the working set;
//   (c) uniform:       prompts of one length with no shared prefix (the no-harm check).
// Each load runs through one and through two gateway (or reference) processes, requests alternating between them,
// with the same arrivals and prompts (same seed) and the replicas' prefix caches emptied before each run. Measured at
// the client: TTFT (scheduled send → first streamed token) p50/p90 and output tokens/s; from the replicas' counters
// (vllm:prefix_cache_hits_total / _queries_total): the fleet's prefix hit rate; from each answer's x-vllm-replica
// header: the share of requests per replica. Then bench/pick.mjs: the CPU of one pick. Every process started here is
// stopped at the end. Alone: node bench/llm-routing.mjs [--dist <dir>] [--llm-seconds 6] [--llm-warmup 2] [--draws 10]
// [--loads tenants,conversations,uniform].
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Pool, request } from 'undici';
import { stringify } from 'yaml';
import { startSimFleet } from './lib/fleet.mjs';
import { keySecretObject, makeKey } from './lib/manifests.mjs';
import { existsSync } from 'node:fs';
import { freePort, installCleanup, killAllSync, runToEnd, startProcess, stopProcess, waitFor } from './lib/procs.mjs';
import { goal, log, ms, pct, ratio, table } from './lib/report.mjs';
import { chatStreamEvents } from './lib/sse.mjs';
import { CLI, ROOT, startGateway } from './lib/servegate.mjs';

const SELF = fileURLToPath(import.meta.url);
const REFERENCE = fileURLToPath(new URL('./lib/reference-router.mjs', import.meta.url));
const PICK = fileURLToPath(new URL('./pick.mjs', import.meta.url));
const PROJECT = 'bench';
const DEPLOYMENTS = { 'round-robin': 'chat-rr', llm: 'chat-llm' };
const POLICIES = ['round-robin', 'llm', 'reference', 'sglang-router'];
/** SGLang's router, installed once (pip, in a venv) when it can be: the frontier's own learned index. */
const SGLANG_VENV = join(ROOT, '.bench-tmp', 'sglang-router');
const MODEL = 'chat';

/**
 * The fleets and loads. (a): one replica's KV cache holds the system prompts of about 12 of the 32 tenants (94
 * blocks each), the fleet's all of them: spread evenly, each replica sees every tenant and keeps losing prefixes; kept
 * apart (8 each), every prefix stays cached; a miss costs ~94 ms of prefill, one at a time per replica. (b): a
 * conversation's turn t holds 66 + 31 (t - 1) blocks; about 30 conversations are active at once (~5,000 blocks), the
 * fleet holds 4,800 and one replica 1,200: a turn sent where its history is not pays it all again (~45 ms at 0.25 ms
 * a block) and pushes others' histories out. (c): the uniform load of before (48-block prompts, none shared).
 */
export const LOADS = {
  tenants: {
    label: '(a) tenants',
    fleet: { replicas: 4, blockSize: 16, kvBlocks: 1280, maxRunning: 16, prefillMsPerBlock: 1, decodeMsPerToken: 8 },
    tenants: 32,
    systemChars: 6000,
    userBytes: [96, 256],
    rate: 50,
    seed: 11,
  },
  conversations: {
    label: '(b) conversations',
    fleet: { replicas: 4, blockSize: 16, kvBlocks: 2000, maxRunning: 16, prefillMsPerBlock: 0.25, decodeMsPerToken: 8 },
    conversations: 64,
    turns: 8,
    systemChars: 4000,
    turnChars: 2000,
    thinkMs: 400,
    seed: 33,
  },
  uniform: {
    label: '(c) uniform',
    fleet: { replicas: 4, blockSize: 16, kvBlocks: 320, maxRunning: 16, prefillMsPerBlock: 1, decodeMsPerToken: 8 },
    systemChars: 48 * 16 * 4,
    userBytes: [96, 256],
    rate: 40,
    seed: 22,
  },
};
const MAX_TOKENS = 16;

/** The goal lines of this part (also listed as skipped in the summary when the part does not run). */
export function goalTexts() {
  return {
    aTtft: '(a) tenants, 1 gateway: TTFT p90 llm <= 0.5x round robin, every address draw',
    aShares: '(a) tenants, 1 gateway: llm shares 0.75x-1.25x of even, every address draw',
    aTtft2: '(a) tenants, 2 gateways: TTFT p90 llm <= 0.5x round robin',
    bHit1: '(b) conversations, 1 gateway: hit rate llm >= 0.9x the reference',
    bHit2: '(b) conversations, 2 gateways: hit rate llm >= the reference',
    bTtft1: '(b) conversations, 1 gateway: TTFT p90 llm <= 0.5x round robin',
    bTtft2: '(b) conversations, 2 gateways: TTFT p90 llm <= 0.5x round robin',
    bReplicas: '(b) conversations, llm: 2 gateways within 10% of 1 (hit rate, TTFT p90)',
    c1: '(c) uniform, 1 gateway: TTFT p50 and p90 llm <= 1.1x round robin',
    c2: '(c) uniform, 2 gateways: TTFT p50 and p90 llm <= 1.1x round robin',
    pick: 'a pick (prefix keys + choice) <= 5 us CPU at 16 endpoints, 100k-char prompts',
  };
}

/**
 * Seconds this part may take at most (run.mjs adds it to the global time limit): the runs, each bounded by its
 * arrivals plus the 30 s a stalled request may take, the fleets', gateways' and routers' starts, installing
 * sglang-router the first time, and the pick measure.
 */
export function timeBudgetSeconds(ctx) {
  const run = ctx.llmWarmup + ctx.llmSeconds + 35;
  return (3 * 8 + (ctx.llmDraws ?? 10) - 1) * run + 3 * 6 * 20 + 180 + 600; // + 600: installing sglang-router
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

const chatBody = (messages) =>
  JSON.stringify({
    model: MODEL,
    stream: true,
    stream_options: { include_usage: true },
    max_tokens: MAX_TOKENS,
    messages,
  });

/**
 * The requests of one run: { at (ms after start) or after (index of the request whose end it waits for) + gapMs,
 * body, measured }. (a) and (c): Poisson arrivals, `warmup` seconds not measured then `seconds` measured. (b): the
 * conversations start over `warmup + seconds`, each turn sent `thinkMs` (exponential) after the previous one ended;
 * every turn is measured.
 */
function makeRequests(name, { warmup, seconds, rateScale, run = 0 }) {
  const load = LOADS[name];
  const rand = rng(load.seed + 1000 * run);
  const out = [];
  if (name === 'conversations') {
    const system = words(rng(500), load.systemChars, 'You are the assistant of one application. Its policy: ');
    const span = (warmup + seconds) * 1000;
    for (let c = 0; c < load.conversations; c++) {
      const r = rng(7000 + c);
      const messages = [{ role: 'system', content: system }];
      let previous = -1;
      for (let t = 0; t < load.turns; t++) {
        messages.push({
          role: 'user',
          content: words(r, 120 + Math.floor(r() * 160), `Conversation ${c}, step ${t}: `),
        });
        const req = { body: chatBody(messages), measured: true };
        if (previous === -1) req.at = rand() * span;
        else Object.assign(req, { after: previous, gapMs: -Math.log(1 - rand()) * load.thinkMs });
        previous = out.push(req) - 1;
        // What the next turn repeats: the answer (with a tool call) and the tool's output, ~2,000 characters.
        // (A tool message answers the assistant's tool call by its id, as the OpenAI API and sglang-router require.)
        const id = `call_${c}_${t}`;
        const call = { id, type: 'function', function: { name: 'lookup', arguments: `{"step":${t}}` } };
        messages.push({
          role: 'assistant',
          content: words(r, 500, `Calling the tool for step ${t}: `),
          tool_calls: [call],
        });
        messages.push({
          role: 'tool',
          tool_call_id: id,
          content: words(r, load.turnChars - 760, `Tool output ${c}.${t}: `),
        });
      }
    }
    return out;
  }
  const tenants =
    name === 'tenants'
      ? Array.from({ length: load.tenants }, (_, k) =>
          words(rng(1000 + k), load.systemChars, `Tenant ${k} assistant. Follow the policy of tenant ${k}: `),
        )
      : undefined;
  const end = (warmup + seconds) * 1000;
  const rate = load.rate * rateScale;
  for (let at = 0, i = 0; ; i++) {
    at += (-Math.log(1 - rand()) / rate) * 1000;
    if (at >= end) break;
    const [lo, hi] = load.userBytes;
    const user = words(rand, lo + Math.floor(rand() * (hi - lo)), `Question ${i}: `);
    const system = tenants
      ? tenants[Math.floor(rand() * tenants.length)]
      : words(rand, load.systemChars, `${run}.${i} `);
    out.push({
      at,
      measured: at >= warmup * 1000,
      body: chatBody([
        { role: 'system', content: system },
        { role: 'user', content: user },
      ]),
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
    const stream = { rest: '' };
    for await (const { now, data } of chatStreamEvents(res.body, stream)) {
      if (data.choices?.[0]?.delta?.content) {
        r.tokens++;
        r.ttftMs ??= now - scheduledAt;
      }
      if (data.usage) r.usage = data.usage;
      if (data.error) r.error = `stream error: ${data.error.message}`;
    }
    if (r.status !== 200) r.error ??= `HTTP ${r.status}: ${stream.rest.slice(0, 200)}`;
    else if (r.ttftMs === undefined) r.error ??= 'no token in the stream';
  } catch (err) {
    r.error = err.message;
  }
  r.endAt = performance.now();
  return r;
}

/**
 * Sends `requests` at their times (or `gapMs` after the end of the request they follow), alternating over `targets`
 * ({ pool, path, headers }) in the order they are sent; resolves every result.
 */
async function drive(targets, requests) {
  const start = performance.now() + 20;
  const results = new Array(requests.length);
  const followers = new Map();
  requests.forEach((r, i) => {
    if (r.after === undefined) return;
    if (!followers.has(r.after)) followers.set(r.after, []);
    followers.get(r.after).push(i);
  });
  let sent = 0;
  let left = requests.length;
  let finished;
  const allDone = new Promise((resolve) => (finished = resolve));
  if (!left) finished();
  const send = (i, scheduledAt) => {
    const t = targets[sent++ % targets.length];
    streamOne(t.pool, t.path, t.headers, requests[i], scheduledAt).then((r) => {
      results[i] = r;
      for (const j of followers.get(i) ?? []) {
        const at = r.endAt + requests[j].gapMs;
        setTimeout(() => send(j, at), Math.max(0, at - performance.now()));
      }
      if (--left === 0) finished();
    });
  };
  const timed = requests.map((r, i) => i).filter((i) => requests[i].at !== undefined);
  timed.sort((a, b) => requests[a].at - requests[b].at);
  let next = 0;
  const tick = () => {
    const now = performance.now();
    while (next < timed.length && start + requests[timed[next]].at <= now) {
      const i = timed[next++];
      send(i, start + requests[i].at);
    }
    if (next < timed.length) setTimeout(tick, Math.max(0, start + requests[timed[next]].at - performance.now()));
  };
  setTimeout(tick, 20);
  await allDone;
  const firstMeasured = timed.find((i) => requests[i].measured);
  const measuredStartAt = start + (firstMeasured !== undefined ? requests[firstMeasured].at : 0);
  return { results, measuredStartAt };
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

function startFleetProcess(fleet) {
  return startSimFleet(fleet, { model: MODEL, maxTokens: MAX_TOKENS });
}

/**
 * sglang-router's command when it is installed or installs now (a venv under .bench-tmp, pip from the package index;
 * a binary wheel, no GPU); undefined (and why, logged) when it does not: the bench's own reference then stands alone.
 */
async function sglangRouter() {
  const bin = join(SGLANG_VENV, 'bin', 'sglang-router');
  if (!existsSync(bin)) {
    log(`  sglang-router: installing into ${SGLANG_VENV} (python3 -m venv, pip install sglang-router) ...`);
    const venv = await runToEnd('python3', ['-m', 'venv', SGLANG_VENV], { timeoutMs: 120_000 });
    const pip =
      venv.code === 0
        ? await runToEnd(join(SGLANG_VENV, 'bin', 'pip'), ['install', '--quiet', 'sglang-router'], {
            timeoutMs: 600_000,
          })
        : venv;
    if (pip.code !== 0 || !existsSync(bin)) {
      log(`  sglang-router: not installed (${(pip.stderr || pip.stdout || '').trim().split('\n').pop()}); skipped`);
      return undefined;
    }
  }
  return bin;
}

/** One sglang-router (cache_aware policy) in front of `urls`: { child, port }. */
async function startSglang(bin, urls, name) {
  const port = await freePort();
  const metricsPort = await freePort();
  const child = startProcess(name, bin, [
    'launch',
    '--host',
    '127.0.0.1',
    '--port',
    String(port),
    '--worker-urls',
    ...urls,
    '--policy',
    'cache_aware',
    // Its load guard at the scale of this fleet (a handful of requests per replica; its defaults, 64 and 1.5x, are
    // for hundreds, and sent every request to one replica here), as the bench's reference and servegate's bound.
    '--balance-abs-threshold',
    '2',
    '--balance-rel-threshold',
    '1.25',
    '--prometheus-port',
    String(metricsPort),
    '--log-level',
    'warn',
  ]);
  await waitFor(
    name,
    async () => {
      const res = await fetch(`http://127.0.0.1:${port}/health`, { signal: AbortSignal.timeout(1000) });
      await res.body?.cancel();
      return res.status === 200;
    },
    { child, timeoutMs: 30_000, intervalMs: 200 },
  );
  return { child, port };
}

/** The reference picker (bench/lib/reference-router.mjs) in front of `urls`: { child, port }. */
async function startReference(urls, capacity, name) {
  const child = startProcess(name, process.execPath, [
    REFERENCE,
    '--upstreams',
    urls.join(','),
    '--capacity',
    String(capacity),
  ]);
  let port;
  await waitFor(
    name,
    () => {
      const line = /^\{"port".*$/m.exec(child.output)?.[0];
      if (line) port = JSON.parse(line).port;
      return port;
    },
    { child, timeoutMs: 10_000 },
  );
  return { child, port };
}

function writeManifests(folder, urls, { prefix, sha256 }) {
  mkdirSync(folder, { recursive: true });
  const docs = [
    ...Object.entries(DEPLOYMENTS).map(([policy, name]) => ({
      apiVersion: 'serving.servegate.dev/v1alpha1',
      kind: 'ServingDeployment',
      metadata: { name, namespace: PROJECT },
      spec: { type: 'model', modelServer: 'llm', backend: { urls }, balancing: { policy } },
    })),
    keySecretObject({ name: 'bench-key', prefix, sha256, projects: PROJECT }),
  ];
  writeFileSync(join(folder, 'llm-routing.yaml'), docs.map((d) => stringify(d)).join('---\n'));
}

/** Waits until the gateway's deployments list exactly `urls` (the files source re-reads the manifests). */
async function servesFleet(gw, name, urls) {
  const want = urls.map((u) => u.slice('http://'.length)).join(',');
  await waitFor(
    `${name}: the new fleet's endpoints`,
    async () => {
      for (const name of Object.values(DEPLOYMENTS)) {
        const st = await statusOf(gw.adminPort, name);
        if (st?.endpoints?.map((e) => e.address).join(',') !== want) return false;
      }
      return true;
    },
    { child: gw.child, timeoutMs: 20_000, intervalMs: 100 },
  );
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
async function startServegate(dir, manifests, headers, name, cli) {
  const ready = async (g) => {
    let unsupported;
    await waitFor(
      `${name}: both deployments served`,
      async () => {
        for (const deployment of Object.values(DEPLOYMENTS)) {
          const res = await request(`http://127.0.0.1:${g.port}/v1/${PROJECT}/${deployment}/v1/models`, { headers });
          const text = await res.body.text();
          if (res.statusCode === 200) continue;
          const st = res.statusCode === 404 ? await statusOf(g.adminPort, deployment) : undefined;
          if (st && !st.ready && st.reason === 'InvalidSpec') {
            unsupported = new Unsupported(`${deployment}: ${st.reason}: ${st.message ?? ''}`);
            return true;
          }
          throw new Error(`${deployment}: HTTP ${res.statusCode}: ${text.slice(0, 200)}`);
        }
        return true;
      },
      { child: g.child, timeoutMs: 20_000, intervalMs: 100 },
    );
    if (unsupported) throw unsupported;
  };
  const config = { balancing: { scrapeIntervalMs: 100 } };
  try {
    return await startGateway(dir, ['--manifests', manifests], { accessLog: false, name, config, ready, cli });
  } catch (err) {
    // A build whose configuration has no `balancing` key yet refuses the file: run it with its defaults.
    if (!(err instanceof Unsupported) && /balancing/.test(err.message)) {
      log(`  ${name}: this build refuses the config key balancing.scrapeIntervalMs; started with its defaults`);
      return await startGateway(dir, ['--manifests', manifests], { accessLog: false, name, ready, cli });
    }
    throw err;
  }
}

// --- the part -------------------------------------------------------------------------------------------------------

/**
 * `ctx`: { dir, llmSeconds, llmWarmup, llmRate (scales every load's rate, 40 = as written), llmDraws }; `cli`: the
 * gateway's dist/cli/main.js.
 */
export async function runLlmRoutingBench(ctx, cli = CLI) {
  const dir = join(ctx.dir, 'llm-routing');
  mkdirSync(dir, { recursive: true });
  const texts = goalTexts();
  const draws = Math.max(1, ctx.llmDraws ?? 10);
  const rateScale = (ctx.llmRate ?? 40) / 40;
  const { key, prefix, sha256 } = makeKey();
  const headers = { 'content-type': 'application/json', authorization: `ApiKey ${key}` };
  const manifests = join(dir, 'manifests');
  const gateways = [];
  const pools = [];
  const runs = [];
  const results = { settings: { loads: LOADS, seconds: ctx.llmSeconds, warmup: ctx.llmWarmup, draws }, runs };
  log(
    `  fleets: 4 simulated vLLM replicas (examples/backends/vllm-sim.mjs, one process per fleet): LRU KV prefix cache, ` +
      `at most 16 running, prefill one at a time, decode 8 ms/token, ${MAX_TOKENS} output tokens; per load: ` +
      Object.values(LOADS)
        .map(
          (l) => `${l.label}: ${l.fleet.kvBlocks} blocks of 16 tokens, prefill ${l.fleet.prefillMsPerBlock} ms/block`,
        )
        .join('; '),
  );
  log(
    `  loads: (a) ${LOADS.tenants.tenants} tenants × a ${LOADS.tenants.systemChars}-character system prompt, ${LOADS.tenants.rate * rateScale} req/s Poisson, ` +
      `${draws} fleets on other ports; (b) ${LOADS.conversations.conversations} conversations × ${LOADS.conversations.turns} turns under one ` +
      `${LOADS.conversations.systemChars}-character system prompt, +${LOADS.conversations.turnChars} characters a turn, think time ${LOADS.conversations.thinkMs} ms; ` +
      `(c) ${LOADS.uniform.rate * rateScale} req/s, ${LOADS.uniform.systemChars}-character prompts, none shared; ${ctx.llmWarmup} s warm-up + ${ctx.llmSeconds} s per run`,
  );
  let fleet;
  let references = [];
  let sglangs = [];
  const sglang = await sglangRouter();
  const policies = POLICIES.filter((p) => p !== 'sglang-router' || sglang);
  const stopFleet = async () => {
    for (const r of [...references, ...sglangs]) await stopProcess(r.child);
    references = [];
    sglangs = [];
    if (fleet) await stopProcess(fleet.child);
    fleet = undefined;
  };
  try {
    for (const name of ctx.llmLoads ?? Object.keys(LOADS)) {
      const load = LOADS[name];
      for (let draw = 0; draw < (name === 'tenants' ? draws : 1); draw++) {
        // A fleet of its own per load and per draw of (a): other ports, other addresses, other hashes.
        await stopFleet();
        fleet = await startFleetProcess(load.fleet);
        writeManifests(manifests, fleet.urls, { prefix, sha256 });
        if (!gateways.length) {
          for (const gwName of ['llm-gateway-1', 'llm-gateway-2']) {
            const gw = await startServegate(dir, manifests, headers, gwName, cli);
            gateways.push(gw);
            pools.push(new Pool(`http://127.0.0.1:${gw.port}`, { connections: 256 }));
          }
          log(
            `  gateways: 2 × node ${cli} serve --manifests (access log off, balancing.scrapeIntervalMs 100), each serving ` +
              `chat-llm (policy llm) and chat-rr (policy round-robin) over the same backend.urls`,
          );
        }
        for (const [i, gw] of gateways.entries()) await servesFleet(gw, `llm-gateway-${i + 1}`, fleet.urls);
        const full = draw === 0;
        if (full)
          for (const i of [1, 2]) {
            references.push(await startReference(fleet.urls, load.fleet.kvBlocks, `reference-router-${i}`));
            if (sglang) sglangs.push(await startSglang(sglang, fleet.urls, `sglang-router-${i}`));
          }
        for (const nGw of full ? [1, 2] : [1]) {
          // The same arrivals and prompts for every policy; (c)'s prompts are new for each gateway count (a gateway
          // would remember the 1-gateway run's as seen before: the uniform load shares nothing, not even across runs).
          const run = name === 'uniform' ? nGw : 0;
          const requests = makeRequests(name, { warmup: ctx.llmWarmup, seconds: ctx.llmSeconds, rateScale, run });
          for (const policy of full ? policies : ['llm']) {
            await Promise.all(
              fleet.urls.map((u) => fetch(`${u}/reset_prefix_cache`, { method: 'POST' }).then((r) => r.body?.cancel())),
            );
            const targets =
              policy === 'reference' || policy === 'sglang-router'
                ? (policy === 'reference' ? references : sglangs).slice(0, nGw).map((r) => ({
                    pool: new Pool(`http://127.0.0.1:${r.port}`, { connections: 256 }),
                    path: '/v1/chat/completions',
                    headers: { 'content-type': 'application/json' },
                  }))
                : gateways.slice(0, nGw).map((gw, i) => ({
                    pool: pools[i],
                    path: `/v1/${PROJECT}/${DEPLOYMENTS[policy]}/v1/chat/completions`,
                    headers,
                    adminPort: gw.adminPort,
                  }));
            const deployment = DEPLOYMENTS[policy];
            const picksOf = () =>
              Promise.all(targets.map((t) => (t.adminPort ? picksByReason(t.adminPort, deployment) : {})));
            const picks0 = await picksOf();
            // Counters are read when the warm-up ends ((b): at the start; every turn is measured).
            let before;
            const warm = name === 'conversations' ? 0 : ctx.llmWarmup * 1000 + 20;
            const snap = sleep(warm).then(async () => (before = await fleetCounters(fleet.urls)));
            const { results: all, measuredStartAt } = await drive(targets, requests);
            await snap;
            const after = await fleetCounters(fleet.urls);
            const picks1 = await picksOf();
            if (!DEPLOYMENTS[policy]) await Promise.all(targets.map((t) => t.pool.destroy()));
            const run = summarise(name, draw, nGw, policy, all, measuredStartAt, before, after, picks0, picks1);
            runs.push(run);
            log(
              `  ${load.label}${name === 'tenants' ? ` draw ${draw + 1}` : ''}, ${nGw} gateway${nGw > 1 ? 's' : ''}, ${policy}: ` +
                `TTFT p50 ${ms(run.ttftP50)} p90 ${ms(run.ttftP90)}, hit rate ${pct(run.hitRate)}, shares ` +
                `${run.share.map((x) => pct(x)).join('/')}, ${run.errors} errors${run.firstError ? ` (first: ${run.firstError})` : ''}`,
            );
          }
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
    await stopFleet();
    for (const gw of gateways.reverse()) await stopProcess(gw.child);
  }

  printTable(runs);
  const pick = await pickCost(cli);
  results.pick = pick;
  results.goals = judge(runs, texts, pick);
  const get = (load, g, p) => runs.find((r) => r.load === load && r.draw === 0 && r.gateways === g && r.policy === p);
  const a = runs.filter((r) => r.load === 'tenants' && r.gateways === 1 && r.policy === 'llm');
  const aRr = get('tenants', 1, 'round-robin');
  const ref = (g) => get('conversations', g, 'sglang-router') ?? get('conversations', g, 'reference');
  const [b1, bRef1, b2, bRef2] = [get('conversations', 1, 'llm'), ref(1), get('conversations', 2, 'llm'), ref(2)];
  results.summary = [
    `llm-routing (a) tenants: TTFT p90 llm ÷ round robin ${a.map((r) => ratio(r.ttftP90 / aRr?.ttftP90)).join(' ')} over ${a.length} address draws`,
    `llm-routing (b) conversations: hit rate llm ${pct(b1?.hitRate)} / ${pct(b2?.hitRate)} (1 / 2 gateways) vs ${bRef1?.policy ?? 'reference'} ${pct(bRef1?.hitRate)} / ${pct(bRef2?.hitRate)}`,
    `llm-routing pick: ${Number.isFinite(pick) ? pick.toFixed(2) : 'n/a'} µs CPU at 16 endpoints, 100k-character prompts`,
  ];
  for (const line of results.summary) log(`  ${line}`);
  return results;
}

/** bench/pick.mjs on the same build: µs of CPU per pick at 16 endpoints (NaN when it cannot run). */
async function pickCost(cli) {
  const dist = resolve(cli, '..', '..');
  const res = await runToEnd(process.execPath, [PICK, '--dist', dist, '--endpoints', '16', '--picks', '100000'], {
    timeoutMs: 120_000,
  });
  const line = /pick at 16 endpoints: ([\d.]+) µs CPU/.exec(res.stdout ?? '');
  for (const l of (res.stdout ?? '').trim().split('\n')) if (l && !l.startsWith('goal')) log(`  ${l}`);
  return line ? Number(line[1]) : NaN;
}

function summarise(load, draw, gateways, policy, all, measuredStartAt, before, after, picks0, picks1) {
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
  const picks = {};
  for (const [i, p1] of picks1.entries())
    for (const [reason, n] of Object.entries(p1)) picks[reason] = (picks[reason] ?? 0) + n - (picks0[i][reason] ?? 0);
  const errors = measured.length - ok.length;
  return {
    load,
    draw,
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
    share,
    shareSource: unknownReplica === 0 ? 'x-vllm-replica' : 'vllm:request_success_total',
    picks,
  };
}

function printTable(runs) {
  const rows = [
    ['load', 'draw', 'gateways', 'policy', 'TTFT p50', 'TTFT p90', 'tokens/s', 'hit rate', 'share per replica'],
  ];
  for (const r of runs)
    rows.push([
      LOADS[r.load].label,
      r.load === 'tenants' ? String(r.draw + 1) : '',
      String(r.gateways),
      r.policy,
      ms(r.ttftP50),
      ms(r.ttftP90),
      Number.isFinite(r.tokensPerSecond) ? r.tokensPerSecond.toFixed(0) : 'n/a',
      pct(r.hitRate),
      r.share.map((s) => pct(s)).join(' / ') + (r.errors ? `  (${r.errors} errors)` : ''),
    ]);
  log('');
  table(rows, { left: [0, 3, 8] });
  const picks = runs.filter((r) => Object.keys(r.picks).length);
  if (picks.length) {
    log('  picks by reason (servegate_endpoint_picks_total; (a) and (c) include the warm-up):');
    for (const r of picks)
      log(
        `    ${LOADS[r.load].label}${r.load === 'tenants' ? ` draw ${r.draw + 1}` : ''}, ${r.gateways} gateway${r.gateways > 1 ? 's' : ''}, ${r.policy}: ${Object.entries(
          r.picks,
        )
          .map(([k, v]) => `${k} ${v}`)
          .join(', ')}`,
      );
  }
  log('');
}

function judge(runs, texts, pick) {
  const get = (load, g, p, draw = 0) =>
    runs.find((r) => r.load === load && r.draw === draw && r.gateways === g && r.policy === p);
  /** A run with failed requests gives no figure. */
  const usable = (r) => (r && r.errors === 0 ? r : undefined);
  const vs = (a, b, key) => {
    const x = usable(a)?.[key];
    const y = usable(b)?.[key];
    return Number.isFinite(x) && Number.isFinite(y) && y > 0 ? x / y : undefined;
  };
  const goals = {};
  const D = 'D';
  // (a): every draw of llm through one gateway against round robin's run on the first fleet (round robin does not
  // read the addresses).
  const rr = get('tenants', 1, 'round-robin');
  const draws = runs.filter((r) => r.load === 'tenants' && r.gateways === 1 && r.policy === 'llm');
  const ttft = draws.map((r) => vs(r, rr, 'ttftP90'));
  const metT = ttft.filter((t) => t !== undefined && t <= 0.5).length;
  goals.aTtft = goal(
    texts.aTtft,
    `${metT}/${draws.length} draws (worst ${ratio(Math.max(...ttft.map((t) => t ?? NaN)))})`,
    !draws.length || ttft.some((t) => t === undefined) ? undefined : metT === draws.length,
    D,
  );
  const even = (r) => r.share.every((s) => s * r.share.length >= 0.75 && s * r.share.length <= 1.25);
  const worst = (r) => Math.max(...r.share.map((s) => Math.abs(s * r.share.length - 1)));
  const metS = draws.filter(even).length;
  goals.aShares = goal(
    texts.aShares,
    `${metS}/${draws.length} draws (worst ±${Math.max(...draws.map(worst)).toFixed(2)})`,
    draws.length ? metS === draws.length : undefined,
    D,
  );
  const t2 = vs(get('tenants', 2, 'llm'), get('tenants', 2, 'round-robin'), 'ttftP90');
  goals.aTtft2 = goal(texts.aTtft2, ratio(t2), t2 === undefined ? t2 : t2 <= 0.5, D);
  // (b)
  const [b1, b2] = [get('conversations', 1, 'llm'), get('conversations', 2, 'llm')];
  // The reference: the frontier's own (sglang-router) where it ran, else the bench's.
  const reference = (g) => get('conversations', g, 'sglang-router') ?? get('conversations', g, 'reference');
  const h1 = vs(b1, reference(1), 'hitRate');
  goals.bHit1 = goal(texts.bHit1, `${ratio(h1)} (${reference(1)?.policy})`, h1 === undefined ? h1 : h1 >= 0.9, D);
  const h2 = vs(b2, reference(2), 'hitRate');
  goals.bHit2 = goal(texts.bHit2, `${ratio(h2)} (${reference(2)?.policy})`, h2 === undefined ? h2 : h2 >= 1, D);
  for (const g of [1, 2]) {
    const t = vs(get('conversations', g, 'llm'), get('conversations', g, 'round-robin'), 'ttftP90');
    goals[`bTtft${g}`] = goal(texts[`bTtft${g}`], ratio(t), t === undefined ? t : t <= 0.5, D);
  }
  const hr = vs(b2, b1, 'hitRate');
  const tr = vs(b2, b1, 'ttftP90');
  goals.bReplicas = goal(
    texts.bReplicas,
    `hit ${ratio(hr)}, p90 ${ratio(tr)}`,
    hr === undefined || tr === undefined ? undefined : hr >= 0.9 && tr <= 1.1,
    D,
  );
  // (c)
  for (const g of [1, 2]) {
    const [llm, rrc] = [get('uniform', g, 'llm'), get('uniform', g, 'round-robin')];
    const p50 = vs(llm, rrc, 'ttftP50');
    const p90 = vs(llm, rrc, 'ttftP90');
    goals[`c${g}`] = goal(
      texts[`c${g}`],
      `p50 ${ratio(p50)}, p90 ${ratio(p90)}`,
      p50 === undefined || p90 === undefined ? undefined : p50 <= 1.1 && p90 <= 1.1,
      D,
    );
  }
  goals.pick = goal(
    texts.pick,
    Number.isFinite(pick) ? `${pick.toFixed(2)} µs` : 'n/a',
    Number.isFinite(pick) ? pick <= 5 : undefined,
    D,
  );
  return goals;
}

// --- alone -----------------------------------------------------------------------------------------------------------

if (process.argv[1] === SELF) {
  const { values } = parseArgs({
    options: {
      dist: { type: 'string' },
      'llm-seconds': { type: 'string', default: '6' },
      'llm-warmup': { type: 'string', default: '2' },
      'llm-rate': { type: 'string', default: '40' },
      draws: { type: 'string', default: '10' },
      loads: { type: 'string', default: Object.keys(LOADS).join(',') },
    },
  });
  const ctx = {
    llmSeconds: Number(values['llm-seconds']),
    llmWarmup: Number(values['llm-warmup']),
    llmRate: Number(values['llm-rate']),
    llmDraws: Number(values.draws),
    llmLoads: values.loads.split(','),
  };
  installCleanup(timeBudgetSeconds(ctx) * 1000);
  const dir = mkdtempSync(join(tmpdir(), 'servegate-llm-routing-'));
  const cli = values.dist ? join(resolve(ROOT, values.dist), 'cli', 'main.js') : CLI;
  log(`llm-routing: gateway ${cli}`);
  try {
    await runLlmRoutingBench({ ...ctx, dir }, cli);
  } finally {
    killAllSync();
    rmSync(dir, { recursive: true, force: true });
  }
}
