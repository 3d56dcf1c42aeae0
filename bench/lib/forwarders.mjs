// Small servers for Part A's extra rows, each run as its own child process (so that its CPU is measured per process
// group, as for nginx and servegate): `node bench/lib/forwarders.mjs '<json spec>'` with spec.mode one of
//   bare      node:http + an undici Pool per route: the prefix stripped, the request forwarded, the answer streamed
//             back; no checks at all (the platform's floor: what any Node forwarder pays);
//   net       a raw `net` forwarder: each client connection piped to its own backend connection (no HTTP parsing:
//             the ceiling of Node's socket layer);
//   fastify   fastify + @fastify/http-proxy per route (prefix stripped) and an onRequest hook that checks
//             `authorization: ApiKey|Bearer <key>` by its SHA-256 against a set, 401 otherwise (the nginx key map's job);
//   sse-burst a backend answering every request with an OpenAI-style SSE stream of `x-bench-events` events (80 bytes
//             each, each its own write, sent back to back) then `data: [DONE]`.
// The bench imports startForwarder() and fastifyInstalled() from here; only loopback addresses are used.
import { createHash } from 'node:crypto';
import { createServer } from 'node:http';
import { createRequire } from 'node:module';
import { connect, createServer as createNetServer } from 'node:net';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startProcess, stopProcess, waitFor } from './procs.mjs';

const SELF = fileURLToPath(import.meta.url);
const GC_PROBE = fileURLToPath(new URL('./gc-probe.mjs', import.meta.url));

/** Request headers not passed on by the bare forwarder (hop-by-hop; host and length are set by undici). */
const REQUEST_SKIP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'transfer-encoding',
  'te',
  'trailer',
  'upgrade',
  'host',
  'content-length',
]);
/** Response headers not passed on (hop-by-hop; Node's server does its own framing and keep-alive). */
const RESPONSE_SKIP = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'te', 'trailer']);

/** Most events one sse-burst stream sends (a bound on x-bench-events). */
export const MAX_BURST_EVENTS = 1000;

/** The sse-burst events: `data: {...}\n\n`, 80 bytes each, the n-th with a different token. */
export function burstEvent(n) {
  const head = `data: {"id":"chatcmpl-b","choices":[{"index":0,"delta":{"content":" t${n}`;
  const tail = '"}}]}\n\n';
  return head + ' '.repeat(Math.max(0, 80 - head.length - tail.length)) + tail;
}

/** True when fastify and @fastify/http-proxy can be loaded (devDependencies; the fastify row is skipped otherwise). */
export function fastifyInstalled() {
  const require = createRequire(import.meta.url);
  try {
    require.resolve('fastify');
    require.resolve('@fastify/http-proxy');
    return true;
  } catch {
    return false;
  }
}

/**
 * Starts one of the servers above as a child process (bench/lib/procs.mjs startProcess: its own process group) on
 * `spec.port` and waits for `ready()` (an async check, e.g. a probe request); stops it again if it never gets ready.
 * `env`: added to its environment (the forwarders compared with servegate get the allocator it runs with). With
 * `gcLog`, its GC pauses and allocation go to that file (bench/lib/gc-probe.mjs, as servegate's).
 */
export async function startForwarder(name, spec, ready, env = {}, { gcLog } = {}) {
  const args = [...(gcLog ? ['--import', GC_PROBE] : []), SELF, JSON.stringify(spec)];
  const child = startProcess(name, process.execPath, args, {
    env: { ...process.env, ...env, ...(gcLog ? { BENCH_GC_LOG: gcLog } : {}) },
  });
  try {
    await waitFor(`${name} on port ${spec.port}`, ready, { child, timeoutMs: 15_000 });
  } catch (err) {
    await stopProcess(child);
    throw err;
  }
  return child;
}

function bare({ port, routes }) {
  // Dynamic import: the bench process imports this file too and does not need undici's Pool for that.
  return import('undici').then(({ Pool }) => {
    const table = routes.map((r) => ({
      prefix: `${r.prefix}/`,
      cut: r.prefix.length,
      pool: new Pool(r.origin, { keepAliveTimeout: 60_000 }),
    }));
    const server = createServer((req, res) => {
      const route = table.find((r) => req.url.startsWith(r.prefix));
      if (!route) {
        req.resume();
        res.writeHead(404, { 'content-type': 'application/json' }).end('{"error":"no route"}');
        return;
      }
      const chunks = [];
      req.on('data', (c) => chunks.push(c));
      req.on('end', () => forward(route, req, res, chunks));
    });
    server.keepAliveTimeout = 120_000;
    return listen(server, port);
  });
}

/** The bare forwarder's one request: undici's documented dispatch handler, the answer written to `res` as it comes. */
function forward(route, req, res, chunks) {
  const raw = req.rawHeaders;
  const headers = [];
  for (let i = 0; i < raw.length; i += 2) if (!REQUEST_SKIP.has(raw[i].toLowerCase())) headers.push(raw[i], raw[i + 1]);
  let controller;
  let done = false;
  res.on('close', () => {
    if (!done) controller?.abort(new Error('client went away'));
  });
  route.pool.dispatch(
    {
      path: req.url.slice(route.cut),
      method: req.method,
      headers,
      body: chunks.length ? Buffer.concat(chunks) : null,
    },
    {
      onRequestStart(c) {
        controller = c;
      },
      onResponseStart(_c, status, h) {
        const out = {};
        for (const k in h) if (!RESPONSE_SKIP.has(k)) out[k] = h[k];
        res.writeHead(status, out);
      },
      onResponseData(c, chunk) {
        if (!res.write(chunk)) {
          c.pause();
          res.once('drain', () => c.resume());
        }
      },
      onResponseEnd() {
        done = true;
        res.end();
      },
      onResponseError(_c, err) {
        done = true;
        if (res.headersSent) res.destroy(err);
        else res.writeHead(502, { 'content-type': 'application/json' }).end('{"error":"bad gateway"}');
      },
    },
  );
}

function net({ port, target }) {
  const server = createNetServer({ noDelay: true }, (client) => {
    const up = connect({ port: target, host: '127.0.0.1', noDelay: true });
    const close = () => {
      client.destroy();
      up.destroy();
    };
    client.on('error', close).on('close', close);
    up.on('error', close).on('close', close);
    client.pipe(up);
    up.pipe(client);
  });
  return listen(server, port);
}

async function fastify({ port, routes, keys }) {
  const { default: Fastify } = await import('fastify');
  const { default: proxy } = await import('@fastify/http-proxy');
  const valid = new Set(keys);
  const app = Fastify({ logger: false });
  app.addHook('onRequest', (req, reply, done) => {
    const auth = req.headers.authorization ?? '';
    const space = auth.indexOf(' ');
    const scheme = space > 0 ? auth.slice(0, space) : '';
    if (
      (scheme === 'ApiKey' || scheme === 'Bearer') &&
      valid.has(
        createHash('sha256')
          .update(auth.slice(space + 1))
          .digest('hex'),
      )
    )
      done();
    else reply.code(401).send({ error: 'missing or invalid API key' });
  });
  // The key is not passed on (as nginx's `proxy_set_header Authorization ""` and servegate).
  const rewriteRequestHeaders = (_req, headers) => {
    const out = {};
    for (const k in headers) if (k !== 'authorization') out[k] = headers[k];
    return out;
  };
  for (const r of routes)
    await app.register(proxy, { upstream: r.origin, prefix: r.prefix, replyOptions: { rewriteRequestHeaders } });
  await app.listen({ port, host: '127.0.0.1' });
}

function sseBurst({ port }) {
  const events = Array.from({ length: MAX_BURST_EVENTS }, (_, n) => Buffer.from(burstEvent(n)));
  const last = Buffer.from('data: [DONE]\n\n');
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const k = Math.min(MAX_BURST_EVENTS, Math.max(0, Math.floor(Number(req.headers['x-bench-events']) || 0)));
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      // Node's http corks the socket until the next tick: one event per setImmediate makes each its own write.
      let n = 0;
      const next = () => {
        if (res.destroyed) return;
        if (n === k) {
          res.end(last);
          return;
        }
        res.write(events[n++]);
        setImmediate(next);
      };
      next();
    });
  });
  server.keepAliveTimeout = 120_000;
  return listen(server, port);
}

function listen(server, port) {
  return new Promise((ok, fail) => {
    server.on('error', fail);
    server.listen(port, '127.0.0.1', ok);
  });
}

if (process.argv[1] && resolve(process.argv[1]) === SELF) {
  const spec = JSON.parse(process.argv[2]);
  const run = { bare, net, fastify, 'sse-burst': sseBurst }[spec.mode];
  if (!run) {
    process.stderr.write(`forwarders: unknown mode ${spec.mode}\n`);
    process.exit(2);
  }
  for (const signal of ['SIGTERM', 'SIGINT']) process.on(signal, () => process.exit(0));
  run(spec).catch((err) => {
    process.stderr.write(`forwarders ${spec.mode}: ${err?.stack ?? err}\n`);
    process.exit(1);
  });
}
