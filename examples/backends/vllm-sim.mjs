// A simulated vLLM fleet for endpoint-picking tests and the llm-routing benchmark (SPEC §12): every replica is its own
// loopback HTTP server that behaves like one vLLM pod, in fast simulated time (milliseconds). Node core only.
//
//   node examples/backends/vllm-sim.mjs [PORT] [--replicas 4] [--json] [--model chat] [--kv-blocks 2048] ...
//     PORT (default 8001; 0 = ephemeral ports): replica i listens on PORT + i. --json prints {"urls":[...]} on one
//     line once every replica listens (for scripts); --help lists every option.
//   import { startReplica, startFleet } from './vllm-sim.mjs'
//
// One replica, as vLLM schedules (simplified):
// - A request is tokenised as ≈ `bytesPerToken` (4) bytes of its prompt: the body's `model`, `tools` and `messages`
//   (chat) or `prompt` (completions), serialised canonically (fixed top-level order, sorted keys inside). The prompt
//   is cut into blocks of `blockSize` (16) tokens; each full block's hash covers the previous block's hash and the
//   block's bytes (chained, as vLLM's automatic prefix caching does), so a block only matches after the same prefix.
// - FIFO waiting queue → running: prefill, then decode. The oldest waiting request is scheduled (no overtaking) when
//   fewer than `maxRunning` sequences run (vLLM's --max-num-seqs), a prefill slot is free (`prefillConcurrency`,
//   default 1: prefill is compute-bound, a step's token budget holds about one long prompt) and the KV cache has
//   room for its uncached blocks plus its private ones. So `vllm:num_requests_waiting` counts the requests queued
//   behind a long prefill too, as in vLLM, where a request is not running before it is scheduled.
// - KV cache of `kvBlocks` blocks: blocks of running sequences are pinned (shared prefixes once); freed blocks stay
//   cached, in LRU order (a sequence's tail blocks evicted first, as vLLM frees them), until room is needed.
// - Prefill costs `prefillMsPerBlock` per uncached block (at least one token is always computed): a miss delays
//   every request queued behind it. Its end is the first token (TTFT = queue wait + prefill wait + prefill). Then one token per `decodeMsPerToken`
//   until `max_tokens` (default `maxTokens`, 16) tokens: the answer always stops on length.
// - `slowdown` multiplies every duration (a slow pod); `metricsFailure: 'error' | 'hang'` makes /metrics answer 500
//   or never answer. Both can be changed while running with `set()`.
//
// HTTP (every answer carries `x-vllm-replica: <index>`):
//   POST /v1/chat/completions, POST /v1/completions   OpenAI shapes; "stream": true → SSE, one token per event, a usage
//                                                     event when stream_options.include_usage, then [DONE]
//   GET  /v1/models, GET /health, GET /version, POST /reset_prefix_cache (drops the cached blocks not in use)
//   GET  /metrics   Prometheus text in vLLM's names: vllm:num_requests_running, vllm:num_requests_waiting,
//                   vllm:kv_cache_usage_perc (or, with kvMetric 'gpu_cache_usage_perc', the older
//                   vllm:gpu_cache_usage_perc), vllm:cache_config_info{block_size="16",...}, and the counters
//                   vllm:prefix_cache_queries_total / vllm:prefix_cache_hits_total (in tokens, as vLLM counts),
//                   vllm:prompt_tokens_total, vllm:generation_tokens_total, vllm:request_success_total (one series
//                   per finished_reason: stop, length, abort).
// Memory is bounded: at most `kvBlocks` cached block hashes and `maxWaiting` waiting requests (more: 503).
// A client that hangs up frees its place at once (queue slot, running slot, pinned blocks).
import { createHash } from 'node:crypto';
import http from 'node:http';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { closeServer, listen, readBody, send } from './lib.mjs';

/** Every option of a replica and its default. */
export const DEFAULTS = Object.freeze({
  host: '127.0.0.1',
  /** The served model name (GET /v1/models, metric labels); requests may name any model. */
  model: 'chat',
  /** Tokens per KV block (vLLM's --block-size). */
  blockSize: 16,
  /** Bytes of the canonical prompt per token. */
  bytesPerToken: 4,
  /** KV-cache capacity in blocks (vLLM's num_gpu_blocks). */
  kvBlocks: 2048,
  /** Running sequences at most (vLLM's --max-num-seqs); the rest wait. */
  maxRunning: 16,
  /** Waiting requests at most; more are answered 503 (keeps memory bounded). */
  maxWaiting: 1000,
  /** Sequences prefilled at the same time. */
  prefillConcurrency: 1,
  /** Prefill time of one uncached block, ms. */
  prefillMsPerBlock: 1,
  /** Time between two output tokens, ms. */
  decodeMsPerToken: 5,
  /** Output tokens when the request gives no max_tokens / max_completion_tokens. */
  maxTokens: 16,
  /** Largest max_tokens accepted (bounds a request's time). */
  maxTokensLimit: 4096,
  /** Multiplies every duration: 3 = a replica three times slower. */
  slowdown: 1,
  /** 'kv_cache_usage_perc' (vLLM ≥ 0.10) or 'gpu_cache_usage_perc' (older vLLM). */
  kvMetric: 'kv_cache_usage_perc',
  /** undefined, 'error' (/metrics answers 500) or 'hang' (/metrics never answers). */
  metricsFailure: undefined,
});

const MUTABLE = ['slowdown', 'metricsFailure', 'kvMetric', 'prefillMsPerBlock', 'decodeMsPerToken'];

/**
 * The prompt as the simulated tokenizer reads it: `model`, then `tools`, then `messages` (or `prompt`), as JSON with
 * the keys of every nested object sorted. Requests that share a system prompt share a leading run of bytes.
 */
export function canonicalPrompt(body) {
  const head = { model: typeof body.model === 'string' ? body.model : '' };
  if (Array.isArray(body.tools) && body.tools.length) head.tools = canonical(body.tools);
  if (Array.isArray(body.messages)) head.messages = canonical(body.messages);
  else head.prompt = canonical(body.prompt ?? '');
  return JSON.stringify(head);
}

function canonical(v) {
  if (Array.isArray(v)) return v.map(canonical);
  if (v && typeof v === 'object') {
    const out = {};
    for (const k of Object.keys(v).sort()) out[k] = canonical(v[k]);
    return out;
  }
  return v;
}

/** Tokens, and the chained hashes of the full blocks, of a canonical prompt. */
export function promptBlocks(text, { blockSize = DEFAULTS.blockSize, bytesPerToken = DEFAULTS.bytesPerToken } = {}) {
  const bytes = Buffer.from(text, 'utf8');
  const tokens = Math.max(1, Math.ceil(bytes.length / bytesPerToken));
  const blockBytes = blockSize * bytesPerToken;
  const full = Math.floor(bytes.length / blockBytes);
  const hashes = new Array(full);
  let prev = '';
  for (let i = 0; i < full; i++) {
    prev = createHash('sha256')
      .update(prev)
      .update(bytes.subarray(i * blockBytes, (i + 1) * blockBytes))
      .digest('base64');
    hashes[i] = prev;
  }
  return { tokens, hashes };
}

/** Prometheus text value as vLLM's prometheus_client writes it (floats: "0.0", "3.0", "0.25"). */
function num(v) {
  return Number.isInteger(v) ? v.toFixed(1) : String(v);
}

/**
 * The scheduler and KV cache of one replica, without HTTP. `submit(seq)` with seq = { tokens, hashes, maxTokens,
 * onFirstToken(), onToken(i), onDone() }; `abort(seq)` when the client leaves.
 */
class Engine {
  constructor(o) {
    this.o = o;
    this.waiting = new Set(); // FIFO (insertion order), O(1) removal
    this.running = new Set();
    this.prefilling = 0;
    this.pinned = new Map(); // hash → sequences using the block
    this.free = new Map(); // cached blocks not in use, least recently used first
    this.privateBlocks = 0; // partial prompt block + output blocks of running sequences
    this.c = {
      served: 0,
      aborted: 0,
      rejected: 0,
      hitBlocks: 0,
      queriedBlocks: 0,
      hitTokens: 0,
      queryTokens: 0,
      promptTokens: 0,
      generationTokens: 0,
    };
  }

  /** Blocks a sequence holds besides its full prompt blocks: its partial last block and its output. */
  privateOf(seq) {
    const bs = this.o.blockSize;
    return Math.ceil((seq.tokens - seq.hashes.length * bs + seq.maxTokens) / bs);
  }

  /** 'ok', 'full' (waiting queue at its bound) or 'too-long' (could never fit in the KV cache). */
  submit(seq) {
    seq.private = this.privateOf(seq);
    if (seq.hashes.length + seq.private > this.o.kvBlocks) return 'too-long';
    if (this.waiting.size >= this.o.maxWaiting) {
      this.c.rejected++;
      return 'full';
    }
    seq.state = 'waiting';
    this.waiting.add(seq);
    this.schedule();
    return 'ok';
  }

  has(h) {
    return this.pinned.has(h) || this.free.has(h);
  }

  /** Schedules waiting sequences, oldest first, while a running slot, a prefill slot and KV room are free. */
  schedule() {
    while (this.waiting.size && this.running.size < this.o.maxRunning && this.prefilling < this.o.prefillConcurrency) {
      const seq = this.waiting.values().next().value;
      let hit = 0;
      while (hit < seq.hashes.length && this.has(seq.hashes[hit])) hit++;
      let fresh = 0;
      let fromFree = 0;
      for (const h of seq.hashes) {
        if (this.free.has(h)) fromFree++;
        else if (!this.pinned.has(h)) fresh++;
      }
      if (this.pinned.size + fromFree + fresh + this.privateBlocks + seq.private > this.o.kvBlocks) break;
      this.waiting.delete(seq);
      this.running.add(seq);
      for (const h of seq.hashes) {
        const refs = this.pinned.get(h);
        if (refs !== undefined) this.pinned.set(h, refs + 1);
        else {
          this.free.delete(h);
          this.pinned.set(h, 1);
        }
      }
      this.privateBlocks += seq.private;
      this.evict();
      const bs = this.o.blockSize;
      seq.hitBlocks = hit;
      this.c.hitBlocks += hit;
      this.c.queriedBlocks += seq.hashes.length;
      this.c.hitTokens += hit * bs;
      this.c.queryTokens += seq.tokens;
      this.c.promptTokens += seq.tokens;
      this.prefill(seq);
    }
  }

  evict() {
    while (this.pinned.size + this.free.size + this.privateBlocks > this.o.kvBlocks && this.free.size)
      this.free.delete(this.free.keys().next().value);
  }

  prefill(seq) {
    this.prefilling++;
    seq.state = 'prefill';
    const uncached = Math.max(1, seq.tokens - seq.hitBlocks * this.o.blockSize);
    const ms = (uncached / this.o.blockSize) * this.o.prefillMsPerBlock * this.o.slowdown;
    seq.timer = setTimeout(() => {
      this.prefilling--;
      seq.state = 'decode';
      seq.generated = 1;
      this.c.generationTokens++;
      seq.onFirstToken();
      this.decode(seq);
      this.schedule();
    }, ms);
  }

  decode(seq) {
    if (seq.generated >= seq.maxTokens) return this.finish(seq);
    seq.timer = setTimeout(() => {
      seq.onToken(seq.generated++);
      this.c.generationTokens++;
      this.decode(seq);
    }, this.o.decodeMsPerToken * this.o.slowdown);
  }

  finish(seq) {
    this.release(seq);
    this.c.served++;
    seq.state = 'done';
    seq.onDone();
    this.schedule();
  }

  /** The client left: the sequence gives back its place at once. */
  abort(seq) {
    if (seq.state === 'done' || seq.state === 'aborted' || seq.state === undefined) return;
    clearTimeout(seq.timer);
    if (seq.state === 'waiting') this.waiting.delete(seq);
    else {
      if (seq.state === 'prefill') this.prefilling--;
      this.release(seq);
    }
    seq.state = 'aborted';
    this.c.aborted++;
    this.schedule();
  }

  /** Unpins the sequence's blocks, tail first, so that the tail is the first evicted (as vLLM frees them). */
  release(seq) {
    this.running.delete(seq);
    this.privateBlocks -= seq.private;
    for (let i = seq.hashes.length - 1; i >= 0; i--) {
      const h = seq.hashes[i];
      const refs = this.pinned.get(h);
      if (refs === undefined) continue;
      if (refs > 1) this.pinned.set(h, refs - 1);
      else {
        this.pinned.delete(h);
        this.free.set(h, true);
      }
    }
    this.evict();
  }

  resetPrefixCache() {
    this.free.clear();
  }

  kvUsage() {
    return Math.min(1, (this.pinned.size + this.privateBlocks) / this.o.kvBlocks);
  }
}

/**
 * Starts one simulated vLLM replica.
 * @param {number} port 0 for an ephemeral port
 * @param {Partial<typeof DEFAULTS> & { index?: number }} [options]
 * @returns {Promise<{ index: number, port: number, url: string, stats(): object, set(o: object): void,
 *   resetPrefixCache(): void, close(): Promise<void> }>}
 */
export async function startReplica(port = 8001, options = {}) {
  const o = { ...DEFAULTS, ...options };
  const ints = [
    'blockSize',
    'bytesPerToken',
    'kvBlocks',
    'maxRunning',
    'maxWaiting',
    'prefillConcurrency',
    'maxTokens',
  ];
  for (const k of [...ints, 'maxTokensLimit'])
    if (!Number.isInteger(o[k]) || o[k] < 1) throw new Error(`vllm-sim: ${k} must be a positive integer`);
  for (const k of ['prefillMsPerBlock', 'decodeMsPerToken', 'slowdown'])
    if (!Number.isFinite(o[k]) || o[k] < 0) throw new Error(`vllm-sim: ${k} must be a number >= 0`);
  if (!['kv_cache_usage_perc', 'gpu_cache_usage_perc'].includes(o.kvMetric))
    throw new Error('vllm-sim: kvMetric must be kv_cache_usage_perc or gpu_cache_usage_perc');
  if (![undefined, 'error', 'hang'].includes(o.metricsFailure))
    throw new Error('vllm-sim: metricsFailure must be error, hang or unset');
  const index = options.index ?? 0;
  const engine = new Engine(o);
  const ctx = { o, engine, index, created: Math.floor(Date.now() / 1000), hanging: new Set() };
  const server = http.createServer((req, res) => {
    res.setHeader('x-vllm-replica', String(index));
    handle(req, res, ctx).catch((err) => sendError(res, 500, String(err?.message ?? err), 'InternalServerError'));
  });
  // Proxies keep connections open for a while; a server that closes idle ones first races their next request.
  server.keepAliveTimeout = 65_000;
  server.headersTimeout = 66_000;
  await listen(server, port, o.host);
  const actual = server.address().port;
  return {
    index,
    port: actual,
    url: `http://${o.host}:${actual}`,
    stats: () => ({
      index,
      port: actual,
      served: engine.c.served,
      aborted: engine.c.aborted,
      rejected: engine.c.rejected,
      hitBlocks: engine.c.hitBlocks,
      queriedBlocks: engine.c.queriedBlocks,
      hitTokens: engine.c.hitTokens,
      queryTokens: engine.c.queryTokens,
      waiting: engine.waiting.size,
      running: engine.running.size,
      cachedBlocks: engine.pinned.size + engine.free.size,
      kvCacheUsage: engine.kvUsage(),
    }),
    set(changes) {
      for (const [k, v] of Object.entries(changes)) {
        if (!MUTABLE.includes(k)) throw new Error(`vllm-sim: ${k} cannot be changed while running`);
        o[k] = v;
      }
    },
    resetPrefixCache: () => engine.resetPrefixCache(),
    close: async () => {
      for (const seq of [...engine.waiting, ...engine.running]) engine.abort(seq);
      for (const res of ctx.hanging) res.destroy();
      await closeServer(server);
    },
  };
}

/**
 * Starts `n` replicas (index 0..n-1), each its own server. `options.basePort` (default 0: ephemeral) puts replica i
 * on basePort + i; `options.replicaOptions[i]` overrides options for replica i (e.g. { slowdown: 3 }).
 */
export async function startFleet(n = 4, options = {}) {
  const { basePort = 0, replicaOptions = [], ...common } = options;
  const replicas = [];
  try {
    for (let i = 0; i < n; i++)
      replicas.push(
        await startReplica(basePort ? basePort + i : 0, { ...common, ...(replicaOptions[i] ?? {}), index: i }),
      );
  } catch (err) {
    await Promise.all(replicas.map((r) => r.close()));
    throw err;
  }
  return {
    replicas,
    ports: replicas.map((r) => r.port),
    urls: replicas.map((r) => r.url),
    stats: () => replicas.map((r) => r.stats()),
    resetPrefixCache: () => replicas.forEach((r) => r.resetPrefixCache()),
    close: () => Promise.all(replicas.map((r) => r.close())).then(() => undefined),
  };
}

async function handle(req, res, ctx) {
  const path = new URL(req.url ?? '/', 'http://localhost').pathname.replace(/\/+$/, '') || '/';
  const get = req.method === 'GET' || req.method === 'HEAD';
  if (get && path === '/metrics') return metrics(req, res, ctx);
  if (get && path === '/health') {
    res.writeHead(200, { 'content-length': 0 });
    return res.end();
  }
  if (get && path === '/version') return send(res, 200, { version: '0.0.0-vllm-sim' });
  if (get && path === '/v1/models') return send(res, 200, { object: 'list', data: [modelObject(ctx)] });
  if (req.method === 'POST' && path === '/reset_prefix_cache') {
    req.resume();
    ctx.engine.resetPrefixCache();
    res.writeHead(200, { 'content-length': 0 });
    return res.end();
  }
  const kind = { '/v1/chat/completions': 'chat', '/v1/completions': 'completions' }[path];
  if (!kind) return send(res, 404, { detail: 'Not Found' });
  if (req.method !== 'POST') return send(res, 405, { detail: 'Method Not Allowed' });
  const raw = await readBody(req);
  if (raw === undefined) return sendError(res, 413, 'Request body too large', 'BadRequestError');
  let body;
  try {
    body = JSON.parse(raw.toString('utf8'));
  } catch {
    return sendError(res, 400, 'The body is not valid JSON', 'BadRequestError');
  }
  if (!body || typeof body !== 'object' || Array.isArray(body))
    return sendError(res, 400, 'The body must be a JSON object', 'BadRequestError');
  if (kind === 'chat' && (!Array.isArray(body.messages) || body.messages.length === 0))
    return sendError(res, 400, "'messages' must be a non-empty array", 'BadRequestError', 'messages');
  if (kind === 'completions' && typeof body.prompt !== 'string' && !Array.isArray(body.prompt))
    return sendError(res, 400, "'prompt' must be a string or an array", 'BadRequestError', 'prompt');
  const maxTokens = body.max_completion_tokens ?? body.max_tokens ?? ctx.o.maxTokens;
  if (!Number.isInteger(maxTokens) || maxTokens < 1 || maxTokens > ctx.o.maxTokensLimit)
    return sendError(
      res,
      400,
      `max_tokens must be an integer from 1 to ${ctx.o.maxTokensLimit}`,
      'BadRequestError',
      'max_tokens',
    );
  return generate(req, res, ctx, kind, body, maxTokens);
}

function modelObject(ctx) {
  return { id: ctx.o.model, object: 'model', created: ctx.created, owned_by: 'vllm', root: ctx.o.model, parent: null };
}

/** The token text of output token i (deterministic; joined they read as one line). */
const tokenText = (i) => ` tok${i}`;

function generate(req, res, ctx, kind, body, maxTokens) {
  const { tokens, hashes } = promptBlocks(canonicalPrompt(body), ctx.o);
  const model = typeof body.model === 'string' && body.model ? body.model : ctx.o.model;
  const chat = kind === 'chat';
  const id = `${chat ? 'chatcmpl' : 'cmpl'}-sim${ctx.index}-${Math.random().toString(36).slice(2, 12)}`;
  const created = Math.floor(Date.now() / 1000);
  const streaming = body.stream === true;
  const seq = { tokens, hashes, maxTokens };
  const usage = () => ({
    prompt_tokens: tokens,
    completion_tokens: maxTokens,
    total_tokens: tokens + maxTokens,
    prompt_tokens_details: { cached_tokens: seq.hitBlocks * ctx.o.blockSize },
  });
  const base = { id, object: chat ? 'chat.completion.chunk' : 'text_completion', created, model };
  const chunk = (i) => {
    const finish = i === maxTokens - 1 ? 'length' : null;
    return chat
      ? { ...base, choices: [{ index: 0, delta: { content: tokenText(i) }, logprobs: null, finish_reason: finish }] }
      : { ...base, choices: [{ index: 0, text: tokenText(i), logprobs: null, finish_reason: finish }] };
  };
  const event = (obj) => res.write(`data: ${JSON.stringify(obj)}\n\n`);
  if (streaming) {
    seq.onFirstToken = () => {
      if (chat)
        event({
          ...base,
          choices: [{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }],
        });
      event(chunk(0));
    };
    seq.onToken = (i) => event(chunk(i));
    seq.onDone = () => {
      if (body.stream_options?.include_usage) event({ ...base, choices: [], usage: usage() });
      res.end('data: [DONE]\n\n');
    };
  } else {
    seq.onFirstToken = () => undefined;
    seq.onToken = () => undefined;
    seq.onDone = () => {
      const text = Array.from({ length: maxTokens }, (_, i) => tokenText(i)).join('');
      send(res, 200, {
        id,
        object: chat ? 'chat.completion' : 'text_completion',
        created,
        model,
        choices: [
          chat
            ? { index: 0, message: { role: 'assistant', content: text }, logprobs: null, finish_reason: 'length' }
            : { index: 0, text, logprobs: null, finish_reason: 'length' },
        ],
        usage: usage(),
      });
    };
  }
  if (res.destroyed) return undefined; // the client left while its body was read
  const verdict = ctx.engine.submit(seq);
  if (verdict === 'too-long')
    return sendError(
      res,
      400,
      `The prompt (${tokens} tokens) does not fit in this replica's KV cache (${ctx.o.kvBlocks} blocks of ${ctx.o.blockSize})`,
      'BadRequestError',
    );
  if (verdict === 'full') return sendError(res, 503, 'The waiting queue is full', 'ServiceUnavailableError');
  // Headers at once, as vLLM's StreamingResponse sends them: the first event is the first token.
  if (streaming) {
    res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' });
    res.flushHeaders();
  }
  res.on('close', () => ctx.engine.abort(seq));
}

function metrics(req, res, ctx) {
  const failure = ctx.o.metricsFailure;
  if (failure === 'error') return send(res, 500, { detail: 'metrics failure (simulated)' });
  if (failure === 'hang') {
    req.resume();
    ctx.hanging.add(res);
    res.on('close', () => ctx.hanging.delete(res));
    return;
  }
  const { engine, o } = ctx;
  const labels = `engine="0",model_name="${o.model}"`;
  const lines = [];
  const metric = (name, type, help, value, extra = '') => {
    lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`);
    lines.push(`${name}{${extra}${labels}} ${num(value)}`);
  };
  const kvName = o.kvMetric === 'gpu_cache_usage_perc' ? 'vllm:gpu_cache_usage_perc' : 'vllm:kv_cache_usage_perc';
  metric(
    'vllm:cache_config_info',
    'gauge',
    'Information of the LLMEngine CacheConfig',
    1,
    `block_size="${o.blockSize}",cache_dtype="auto",enable_prefix_caching="True",num_gpu_blocks="${o.kvBlocks}",`,
  );
  metric('vllm:num_requests_running', 'gauge', 'Number of requests in model execution batches.', engine.running.size);
  metric('vllm:num_requests_waiting', 'gauge', 'Number of requests waiting to be processed.', engine.waiting.size);
  metric(kvName, 'gauge', 'KV-cache usage. 1 means 100 percent usage.', engine.kvUsage());
  metric(
    'vllm:prefix_cache_queries_total',
    'counter',
    'Prefix cache queries, in terms of number of queried tokens.',
    engine.c.queryTokens,
  );
  metric(
    'vllm:prefix_cache_hits_total',
    'counter',
    'Prefix cache hits, in terms of number of cached tokens.',
    engine.c.hitTokens,
  );
  metric('vllm:prompt_tokens_total', 'counter', 'Number of prefill tokens processed.', engine.c.promptTokens);
  metric(
    'vllm:generation_tokens_total',
    'counter',
    'Number of generation tokens processed.',
    engine.c.generationTokens,
  );
  // One series per finished_reason, as vLLM prints them (an aborted request is counted under abort); the sim's answers
  // all end at max_tokens (length).
  lines.push(
    '# HELP vllm:request_success_total Count of successfully processed requests.',
    '# TYPE vllm:request_success_total counter',
  );
  for (const [reason, n] of [
    ['stop', 0],
    ['length', engine.c.served],
    ['abort', engine.c.aborted],
  ])
    lines.push(`vllm:request_success_total{engine="0",finished_reason="${reason}",model_name="${o.model}"} ${num(n)}`);
  const text = lines.join('\n') + '\n';
  res.writeHead(200, {
    'content-type': 'text/plain; version=0.0.4; charset=utf-8',
    'content-length': Buffer.byteLength(text),
  });
  res.end(req.method === 'HEAD' ? undefined : text);
}

function sendError(res, status, message, type, param = null) {
  send(res, status, { error: { message, type, param, code: status } });
}

const OPTION_FLAGS = {
  replicas: 'replicas (default 4)',
  model: 'served model name',
  'block-size': 'tokens per KV block',
  'kv-blocks': 'KV-cache capacity in blocks',
  'max-running': 'running sequences at most',
  'max-waiting': 'waiting requests at most (more: 503)',
  'prefill-concurrency': 'sequences prefilled at once',
  'prefill-ms-per-block': 'prefill ms per uncached block',
  'decode-ms-per-token': 'ms per output token',
  'max-tokens': 'default max_tokens',
  slowdown: 'multiplies every duration',
  'kv-metric': 'kv_cache_usage_perc | gpu_cache_usage_perc',
  'metrics-failure': 'error | hang',
};

async function main() {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      ...Object.fromEntries(Object.keys(OPTION_FLAGS).map((k) => [k, { type: 'string' }])),
      json: { type: 'boolean', default: false },
      help: { type: 'boolean', default: false },
    },
  });
  if (values.help) {
    console.log('usage: node examples/backends/vllm-sim.mjs [PORT] [--json] [options]');
    console.log('  PORT: first replica port (default 8001; 0 = ephemeral); replica i listens on PORT + i');
    console.log('  --json: print {"urls":[...],"ports":[...]} on one line when listening');
    for (const [k, v] of Object.entries(OPTION_FLAGS)) console.log(`  --${k.padEnd(22)} ${v}`);
    return;
  }
  const camel = (k) => k.replace(/-(\w)/g, (_, c) => c.toUpperCase());
  const options = { host: process.env.HOST ?? '127.0.0.1' };
  for (const k of Object.keys(OPTION_FLAGS)) {
    if (k === 'replicas' || values[k] === undefined) continue;
    const v = values[k];
    options[camel(k)] = ['model', 'kv-metric', 'metrics-failure'].includes(k) ? v : Number(v);
  }
  const n = Number(values.replicas ?? 4);
  const fleet = await startFleet(n, { ...options, basePort: Number(positionals[0] ?? 8001) });
  if (values.json) console.log(JSON.stringify({ urls: fleet.urls, ports: fleet.ports }));
  else for (const u of fleet.urls) console.log(`simulated vLLM replica listening on ${u}/v1 (metrics: ${u}/metrics)`);
  const stop = () => fleet.close().then(() => process.exit(0));
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  await main().catch((err) => {
    console.error(err.message);
    process.exit(2);
  });
}
