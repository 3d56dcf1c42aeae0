// The reference picker of bench Part D (llm-routing.mjs): a learned prefix index, as the frontier's routers keep one
// (llm-d's approximate prefix scorer, SGLang's cache-aware router, vLLM production-stack's and AIBrix's), written
// here as a proxy process in front of the simulated fleet. Not servegate's design — what it is measured against:
// - the prompt's canonical text (the model, then each message as "role:content") is cut into blocks of BLOCK
//   characters, each hashed with the one before it (a chain, so a block matches only after the same prefix);
// - each endpoint has an LRU of the block hashes it was sent, `capacity` blocks (the endpoint's KV cache, in blocks);
// - the longest run of leading blocks an endpoint holds wins (ties: the fewest in flight), among the endpoints within
//   the bounded load (in flight at most max(1.25 × mean, mean + 2), as servegate's own bound); the blocks sent are
//   then remembered for that endpoint.
// It knows only what passed through it: two instances learn apart (no shared state), as llm-d's scorer does.
//
//   node bench/lib/reference-router.mjs --upstreams http://127.0.0.1:8001,http://127.0.0.1:8002 [--capacity 1200]
//   prints {"port":N} once it listens on 127.0.0.1 (ephemeral port); POST /v1/chat/completions and /v1/completions.
import http from 'node:http';
import { parseArgs } from 'node:util';
import { Pool } from 'undici';

const BLOCK = 64;

const { values } = parseArgs({
  options: { upstreams: { type: 'string' }, capacity: { type: 'string', default: '1200' } },
});
const upstreams = values.upstreams.split(',').map((url) => ({
  url,
  pool: new Pool(url, { connections: 256 }),
  lru: new Map(),
  inflight: 0,
}));
const capacity = Number(values.capacity);

/** FNV-1a over s[from, to), carried on from h. */
function fnv(s, from, to, h) {
  for (let i = from; i < to; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

function canonical(body) {
  let text = `${typeof body.model === 'string' ? body.model : ''}\n`;
  if (Array.isArray(body.messages))
    for (const m of body.messages)
      text += `${m?.role ?? ''}:${typeof m?.content === 'string' ? m.content : JSON.stringify(m?.content ?? '')}\n`;
  else text += typeof body.prompt === 'string' ? body.prompt : JSON.stringify(body.prompt ?? '');
  return text;
}

function chain(text) {
  const out = [];
  let h = 0x811c9dc5;
  for (let at = 0; at + BLOCK <= text.length; at += BLOCK) out.push((h = fnv(text, at, at + BLOCK, h)));
  return out;
}

function pick(blocks) {
  let total = 1;
  for (const u of upstreams) total += u.inflight;
  const mean = total / upstreams.length;
  const bound = Math.max(1.25 * mean, mean + 2);
  let best;
  let bestMatch = -1;
  for (const u of upstreams) {
    if (u.inflight + 1 > bound) continue;
    let match = 0;
    while (match < blocks.length && u.lru.has(blocks[match])) match++;
    if (match > bestMatch || (match === bestMatch && u.inflight < best.inflight)) {
      best = u;
      bestMatch = match;
    }
  }
  if (!best) best = upstreams.reduce((a, b) => (b.inflight < a.inflight ? b : a));
  return best;
}

function remember(u, blocks) {
  for (const h of blocks) {
    u.lru.delete(h);
    u.lru.set(h, true);
  }
  while (u.lru.size > capacity) u.lru.delete(u.lru.keys().next().value);
}

const server = http.createServer(async (req, res) => {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  const raw = Buffer.concat(chunks);
  let blocks = [];
  try {
    blocks = chain(canonical(JSON.parse(raw.toString('utf8'))));
  } catch {
    // not JSON: no affinity
  }
  const u = pick(blocks);
  remember(u, blocks);
  u.inflight++;
  let done = false;
  const finish = () => {
    if (!done) {
      done = true;
      u.inflight--;
    }
  };
  res.on('close', finish);
  try {
    const up = await u.pool.request({
      path: req.url,
      method: req.method,
      headers: { 'content-type': req.headers['content-type'] ?? 'application/json' },
      body: raw,
      headersTimeout: 30_000,
      bodyTimeout: 30_000,
    });
    const headers = {};
    for (const k of ['content-type', 'x-vllm-replica']) if (up.headers[k]) headers[k] = up.headers[k];
    res.writeHead(up.statusCode, headers);
    for await (const c of up.body) res.write(c);
    res.end();
  } catch (err) {
    if (!res.headersSent) res.writeHead(502, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ error: { message: String(err?.message ?? err) } }));
  } finally {
    finish();
  }
});
server.keepAliveTimeout = 65_000;
server.listen(0, '127.0.0.1', () => console.log(JSON.stringify({ port: server.address().port })));
const stop = () => server.close(() => process.exit(0));
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
