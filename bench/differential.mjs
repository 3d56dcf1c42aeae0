// Differential check of two gateway builds: the same battery of raw-socket requests against both, answers compared
// after normalising what must differ (request ids, dates, ports, timings), with each case's access-log lines and
// /metrics deltas. Needs two built dist directories (e.g. a private worktree of an older commit built with
// `npx tsc -p tsconfig.json`); not part of `npm test` or `npm run bench`.
//   node bench/differential.mjs --old /tmp/h4-old/dist --new /tmp/h4-new/dist [--only REGEX] [--fuzz N --seed S]
//        [--json FILE] [--show-same]
// Exit code 1 when any case differs.
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { gzipSync } from 'node:zlib';
import { stringify } from 'yaml';
import { deadPort, RAW, startBackend, startRawBackend } from './differential/backend.mjs';
import { exchange, parseResponses } from './differential/wire.mjs';
import { fuzzCases } from './differential/fuzz.mjs';
import { start as startReplica } from '../examples/backends/vllm-replica.mjs';

const { values: args } = parseArgs({
  options: {
    old: { type: 'string' },
    new: { type: 'string' },
    only: { type: 'string' },
    fuzz: { type: 'string', default: '0' },
    seed: { type: 'string', default: '1' },
    json: { type: 'string' },
    'show-same': { type: 'boolean', default: false },
    profile: { type: 'string', default: 'a' },
    drain: { type: 'boolean', default: false },
  },
});
if (!args.old || !args.new) {
  console.error('usage: node bench/differential.mjs --old <dist> --new <dist> [--only RE] [--fuzz N --seed S]');
  process.exit(2);
}

// ---- backends, manifests, configuration ----
const modal = await startBackend('modal');
const plain = await startBackend('plain');
const raw = await startRawBackend();
const dead = await deadPort();
const M = `http://127.0.0.1:${modal.port}`;
const P = `http://127.0.0.1:${plain.port}`;
const D = `http://127.0.0.1:${dead}`;

function key() {
  const prefix = randomBytes(24)
    .toString('base64')
    .replace(/[^A-Za-z0-9]/g, '')
    .slice(0, 16)
    .padEnd(16, 'k');
  return `${prefix}.${randomBytes(32).toString('base64url')}`;
}
const KEYS = { k1: key(), k12: key(), kall: key(), kexp: key(), krpm: key(), ktpm: key(), kbud: key(), kws: key() };
const keyDoc = (name, k, projects, more = {}) => ({
  apiVersion: 'v1',
  kind: 'Secret',
  metadata: { name, namespace: 'servegate', labels: { 'serving.servegate.dev/api-key': 'true' } },
  type: 'Opaque',
  stringData: { prefix: k.split('.')[0], sha256: createHash('sha256').update(k).digest('hex'), projects, ...more },
});
const dep = (ns, name, spec) => ({
  apiVersion: 'serving.servegate.dev/v1alpha1',
  kind: 'ServingDeployment',
  metadata: { name, namespace: ns },
  spec,
});
const docs = [
  keyDoc('k1', KEYS.k1, 'p1'),
  keyDoc('k12', KEYS.k12, 'p1,p2'),
  keyDoc('kall', KEYS.kall, '*'),
  keyDoc('kexp', KEYS.kexp, 'p1', { expiresAt: '2001-01-01T00:00:00Z' }),
  keyDoc('krpm', KEYS.krpm, 'p1', { rpm: '2' }),
  keyDoc('ktpm', KEYS.ktpm, 'p1', { tpm: '30' }),
  keyDoc('kbud', KEYS.kbud, 'p1', { budgetTokens: '15' }),
  keyDoc('kws', KEYS.kws, 'p1'),
  dep('p1', 'canary', { type: 'python', backend: { url: M }, canary: { percent: 100, backend: { url: P } } }),
  dep('p1', 'canary0', { type: 'python', backend: { url: M }, canary: { percent: 0, backend: { url: P } } }),
  dep('p1', 'prefixed', { type: 'python', backend: { url: M + '/pre/fix' } }),
  dep('p1', 'v2', { type: 'model', modelServer: 'sklearn', protocol: 'v2', modelName: 'm2', backend: { url: M } }),
  dep('p1', 'tf', { type: 'model', modelServer: 'tensorflow', modelName: 'mn', backend: { url: M } }),
  dep('p1', 'rpm', { type: 'python', backend: { url: M }, limits: { requestsPerMinute: 2 } }),
  dep('p1', 'llmtpm', { type: 'model', modelServer: 'llm', backend: { url: M }, limits: { tokensPerMinute: 40 } }),
  dep('p1', 'echo', { type: 'python', backend: { url: M } }),
  dep('p1', 'plain', { type: 'python', backend: { url: P } }),
  dep('p1', 'raw', { type: 'python', backend: { url: `http://127.0.0.1:${raw.port}` } }),
  dep('p1', 'rawllm', { type: 'model', modelServer: 'llm', backend: { url: `http://127.0.0.1:${raw.port}/x` } }),
  dep('p1', 'rawfb', { type: 'python', backend: { url: `http://127.0.0.1:${raw.port}` }, fallbacks: ['plain'] }),
  dep('p1', 'flaky', { type: 'python', backend: { url: M }, fallbacks: ['plain'] }),
  dep('p1', 'dead', { type: 'python', backend: { url: D } }),
  dep('p1', 'deadfb', { type: 'python', backend: { url: D }, fallbacks: ['plain'] }),
  dep('p1', 'multi', { type: 'python', backend: { urls: [D, M] }, balancing: { policy: 'round-robin' } }),
  dep('p1', 'slow', { type: 'python', backend: { url: M }, timeoutSeconds: 1 }),
  dep('p1', 'slowfb', { type: 'python', backend: { url: M }, timeoutSeconds: 1, fallbacks: ['slow2'] }),
  dep('p1', 'slow2', { type: 'python', backend: { url: M }, timeoutSeconds: 3 }),
  dep('p1', 'iris', { type: 'model', modelServer: 'sklearn', modelName: 'iris', backend: { url: M } }),
  dep('p1', 'llm', { type: 'model', modelServer: 'llm', modelName: 'served-llm', backend: { url: M } }),
  dep('p1', 'llmfb', {
    type: 'model',
    modelServer: 'llm',
    modelName: 'served-fb',
    backend: { url: M + '/x' },
    fallbacks: ['llm'],
  }),
  dep('p2', 'llm', { type: 'model', modelServer: 'llm', backend: { url: M } }),
  dep('p2', 'only2', { type: 'model', modelServer: 'llm', backend: { url: M } }),
  dep('p3', 'llm3', { type: 'model', modelServer: 'llm', backend: { url: M } }),
];
const config = {
  cors: { allowedOrigins: ['http://ok.test', 'https://*.wild.test'], maxAgeSeconds: 600 },
  auth: { failureLimit: { maxFailures: 100000, windowSeconds: 60 } },
  limits: {
    maxRequestBodyBytes: 4096,
    requestTimeoutSeconds: 5,
    requestBodyIdleTimeoutSeconds: 1,
    headersTimeoutSeconds: 2,
    maxRequestHeaders: 100,
  },
  logLevel: 'info',
  shutdown: { drainSeconds: 2, acceptSeconds: 0.5 },
};
config.limits.websocketsPerKey = 1;
if (args.profile === 'c') {
  // Failed-auth throttling counted per address, the address taken from X-Forwarded-For.
  config.auth = { failureLimit: { maxFailures: 3, windowSeconds: 60 } };
  config.trustForwardedHeaders = true;
}
if (args.profile === 'b') {
  Object.assign(config, {
    cors: { allowedOrigins: ['*'], allowedHeaders: ['x-custom'], exposedHeaders: ['x-backend'], maxAgeSeconds: 5 },
    trustForwardedHeaders: true,
    forwardUnderscoreHeaders: true,
    publicUrl: 'https://models.example.test',
  });
  config.limits = { ...config.limits, streamIdleTimeoutSeconds: 1, rateLimitPerKey: 3, rateLimitBurst: 3 };
}
// A fleet of three simulated vLLM replicas behind a prompt-prefix-aware deployment. The picks hash the endpoints'
// addresses, so both gateways name the same three ports; the fleet cases run on one gateway after the other, the
// replicas restarted (emptied) in between, so that each gateway meets them in the same state.
const FLEET_PORTS = [await deadPort(), await deadPort(), await deadPort()];
const REPLICA_NAMES = new Map(FLEET_PORTS.map((p, i) => [p, `R${i}`]));
let fleet = [];
async function restartFleet() {
  for (const r of fleet) await r.close();
  fleet = [];
  for (const [i, p] of FLEET_PORTS.entries()) fleet.push(await startReplica(p, { index: i }));
}
await restartFleet();
const dir = mkdtempSync(join(tmpdir(), 'h4-diff-'));
const manifestDocs = () =>
  docs.concat([
    dep('p1', 'fleet', {
      type: 'model',
      modelServer: 'llm',
      modelName: 'sim-llama',
      backend: { urls: FLEET_PORTS.map((p) => `http://127.0.0.1:${p}`) },
      balancing: { policy: 'llm' },
    }),
  ]);
writeFileSync(
  join(dir, 'all.yaml'),
  manifestDocs()
    .map((x) => stringify(x))
    .join('---\n'),
);
const cfgFile = join(tmpdir(), `h4-diff-config-${process.pid}.yaml`);
writeFileSync(cfgFile, stringify(config));

// ---- the gateways ----
async function startGateway(label, dist) {
  const child = spawn(
    process.execPath,
    [
      join(resolve(dist), 'cli', 'main.js'),
      'serve',
      '--manifests',
      dir,
      '--config',
      cfgFile,
      '--port',
      '0',
      '--admin-port',
      '0',
      '--host',
      '127.0.0.1',
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const lines = [];
  let partial = '';
  const onData = (d) => {
    partial += d;
    const parts = partial.split('\n');
    partial = parts.pop();
    for (const l of parts) if (l.trim()) lines.push(l);
  };
  child.stdout.setEncoding('utf8').on('data', onData);
  child.stderr.setEncoding('utf8').on('data', onData);
  const until = Date.now() + 30_000;
  for (;;) {
    const l = lines.find((x) => x.includes('"servegate listening"'));
    if (l) {
      const { port, adminPort } = JSON.parse(l);
      return { label, child, port, adminPort, lines };
    }
    if (Date.now() > until || child.exitCode !== null) throw new Error(`${label} did not start:\n${lines.join('\n')}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
const gws = [await startGateway('old', args.old), await startGateway('new', args.new)];

async function metrics(gw) {
  const res = await fetch(`http://127.0.0.1:${gw.adminPort}/metrics`);
  const text = await res.text();
  const m = new Map();
  for (const l of text.split('\n')) {
    if (!l || l.startsWith('#')) continue;
    const i = l.lastIndexOf(' ');
    m.set(l.slice(0, i), Number(l.slice(i + 1)));
  }
  return m;
}
const TIMING_SERIES =
  /(_seconds|_ms|duration|latency|ttft|tpot|time)[^{]*_(bucket|sum)\b|^process_|^nodejs_|_bytes_total|heap|memory|event_loop|uptime|_timestamp|last_|_scrape_|^servegate_source_synced/;
function metricDelta(a, b, ports) {
  const out = [];
  for (const [k, v] of b) {
    if (TIMING_SERIES.test(k)) continue;
    const d = v - (a.get(k) ?? 0);
    if (d !== 0) out.push(`${normPorts(k, ports)} ${Math.round(d * 1000) / 1000}`);
  }
  return out.sort();
}

// ---- normalisation ----
const UUID = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/gi;
function normPorts(s, ports) {
  let t = s;
  for (const p of ports) t = t.split(String(p)).join('GWPORT');
  for (const [p, n] of REPLICA_NAMES) t = t.split(`127.0.0.1:${p}`).join(n);
  return t;
}
function normText(s, ctx) {
  let t = normPorts(s, ctx.ports);
  t = t.replace(UUID, (u) => {
    if (!ctx.ids.has(u)) ctx.ids.set(u, `UUID${ctx.ids.size + 1}`);
    return ctx.ids.get(u);
  });
  for (const [k, v] of Object.entries(KEYS)) t = t.split(v).join(`KEY_${k}`);
  t = t.replace(/event_[0-9a-f]{20}/g, 'event_ID');
  t = t.replace(/(chatcmpl|cmpl)-sim(\d)-[a-z0-9]+/g, '$1-sim$2-ID').replace(/"created":\d{9,}/g, '"created":T');
  t = t.replace(/(traceparent["\s:,]+"?)00-[0-9a-f]{32}-[0-9a-f]{16}-0\d/gi, '$1TRACEPARENT');
  t = t.replace(/00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]/g, 'TRACEPARENT');
  return t;
}
function normResponse(r, ctx) {
  const o = { ...r };
  if (o.headers)
    o.headers = o.headers.map(([k, v]) => {
      if (k.toLowerCase() === 'date') return `${k}: DATE`;
      if (k.toLowerCase() === 'keep-alive') return `${k}: ${String(v).replace(/\d+/g, 'N')}`;
      if (/-reset-/i.test(k)) return `${k}: RESET`; // seconds to a window's or a month's end
      return `${k}: ${normText(String(v), ctx)}`;
    });
  if (o.body !== undefined) o.body = normText(o.body, ctx);
  if (o.tunnel !== undefined) o.tunnel = normText(o.tunnel, ctx);
  if (o.incomplete !== undefined) o.incomplete = normText(o.incomplete, ctx);
  if (o.statusLine) o.statusLine = normText(o.statusLine, ctx);
  return o;
}
const LOG_DROP = new Set(['time', 'pid', 'hostname']);
const LOG_TIMING = /(ms|Ms|seconds|Seconds|duration|Duration|latency|ttft|Ttft|tpot|elapsed|At)$/;
function normLog(line, ctx) {
  let doc;
  try {
    doc = JSON.parse(line);
  } catch {
    return normText(line, ctx);
  }
  const walk = (v, k) => {
    if (Array.isArray(v)) return v.map((x) => walk(x, k));
    if (v && typeof v === 'object') {
      const o = {};
      for (const [kk, vv] of Object.entries(v)) if (!LOG_DROP.has(kk)) o[kk] = walk(vv, kk);
      return o;
    }
    if (typeof v === 'number' && k && LOG_TIMING.test(k)) return 'T';
    if (k === 'remotePort' || k === 'port' || k === 'clientPort') return 'PORT';
    if (typeof v === 'string' && /stack/i.test(k ?? '')) return 'STACK';
    return typeof v === 'string' ? normText(v, ctx) : v;
  };
  return JSON.stringify(walk(doc));
}

// ---- the battery ----
const HOST = 'gw.test';
const CRLF = '\r\n';
function sub(s) {
  return s.replace(/\{(\w+)\}/g, (m, k) => KEYS[k] ?? m);
}
/** A request as text: headers in order; content-length added when a body is given unless framing is set. */
function rq(method, path, headers = [], body, { framing = true, host = HOST } = {}) {
  const hs = [];
  if (host !== null) hs.push(`Host: ${host}`);
  hs.push(...headers.map(sub));
  const b = body === undefined ? undefined : Buffer.isBuffer(body) ? body : Buffer.from(sub(body));
  if (b && framing && !headers.some((h) => /^(content-length|transfer-encoding):/i.test(h)))
    hs.push(`Content-Length: ${b.length}`);
  const head = Buffer.from(`${method} ${path} HTTP/1.1${CRLF}${hs.join(CRLF)}${CRLF}${CRLF}`, 'latin1');
  return b ? Buffer.concat([head, b]) : head;
}
const A1 = 'Authorization: Bearer {k1}';
const A12 = 'Authorization: Bearer {k12}';
const AJ = 'Content-Type: application/json';
const chat = (model, extra = '') => `{"model":"${model}","messages":[{"role":"user","content":"hi"}]${extra}}`;
function chunked(parts, end = true) {
  return parts.map((p) => `${Buffer.byteLength(p).toString(16)}\r\n${p}\r\n`).join('') + (end ? '0\r\n\r\n' : '');
}
const wsHead = (path, auth = A1, more = []) =>
  rq('GET', path, [
    auth,
    'Connection: Upgrade',
    'Upgrade: websocket',
    'Sec-WebSocket-Version: 13',
    'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==',
    ...more,
  ]);
const maskedFrame = Buffer.from([0x81, 0x82, 1, 2, 3, 4, 0x68 ^ 1, 0x69 ^ 2]);

/** name → { steps, methods, idleMs?, maxMs? } */
const cases = [];
const add = (name, steps, methods = ['GET'], opts = {}) =>
  cases.push({ name, steps: Array.isArray(steps) ? steps : [{ write: steps }], methods, ...opts });
const one = (name, method, path, headers, body, opts = {}) =>
  add(name, rq(method, path, headers, body, opts), [method], opts);

// basics
one('get echo', 'GET', '/v1/p1/echo/a/b?x=1&y=%20', [A1]);
one('get echo keep-alive then idle', 'GET', '/v1/p1/echo/', [A1, 'Connection: keep-alive']);
one('get echo connection close', 'GET', '/v1/p1/echo/', [A1, 'Connection: close']);
one('http/1.0 get', 'GET', '/v1/p1/echo/x', [A1]);
cases[cases.length - 1].steps = [{ write: `GET /v1/p1/echo/x HTTP/1.0\r\nHost: gw.test\r\n${sub(A1)}\r\n\r\n` }];
add(
  'http/1.0 keep-alive',
  `GET /v1/p1/echo/x HTTP/1.0\r\nHost: gw.test\r\nConnection: keep-alive\r\n${sub(A1)}\r\n\r\n`,
);
one('HEAD echo', 'HEAD', '/v1/p1/echo/h', [A1]);
one('HEAD unknown deployment', 'HEAD', '/v1/p1/nope/h', [A1]);
one('HEAD no key', 'HEAD', '/v1/p1/echo/h', []);
one('post echo json', 'POST', '/v1/p1/echo/p', [A1, AJ], '{"a":1}');
one('post echo empty body cl 0', 'POST', '/v1/p1/echo/p', [A1, 'Content-Length: 0']);
one('post echo no framing', 'POST', '/v1/p1/echo/p', [A1]);
one('put echo', 'PUT', '/v1/p1/echo/p', [A1, 'Content-Type: text/plain'], 'hello');
one('delete echo', 'DELETE', '/v1/p1/echo/p', [A1]);
one('PATCH echo', 'PATCH', '/v1/p1/echo/p', [A1], 'x');
one('TRACE', 'TRACE', '/v1/p1/echo/p', [A1]);
one('CONNECT', 'CONNECT', 'gw.test:443', [A1]);
one('weird method', 'FOO', '/v1/p1/echo/p', [A1]);
one('absolute-form target', 'GET', 'http://gw.test/v1/p1/echo/abs', [A1]);
one('asterisk OPTIONS', 'OPTIONS', '*', [A1]);
one('root', 'GET', '/', []);
one('healthz on data port', 'GET', '/healthz', []);
one('favicon', 'GET', '/favicon.ico', []);
one('/v1 only', 'GET', '/v1', [A1]);
one('/v1/p1', 'GET', '/v1/p1', [A1]);
one('/v1/p1/echo no slash', 'GET', '/v1/p1/echo', [A1]);
one('path dot segments', 'GET', '/v1/p1/echo/../plain/x', [A1]);
one('path encoded slash', 'GET', '/v1/p1/echo%2Fx/y', [A1]);
one('path double slash', 'GET', '//v1/p1/echo/x', [A1]);
one('path encoded dot', 'GET', '/v1/p1/echo/%2e%2e/x', [A1]);
one('query only', 'GET', '/v1/p1/echo?q=1', [A1]);
one('fragment in target', 'GET', '/v1/p1/echo/x#frag', [A1]);
one('non-ascii target', 'GET', '/v1/p1/echo/\u00e9', [A1]);
// keys
one('no key', 'GET', '/v1/p1/echo/x', []);
one('bad key', 'GET', '/v1/p1/echo/x', ['Authorization: Bearer nope.nope']);
one('malformed auth', 'GET', '/v1/p1/echo/x', ['Authorization: Basic Zm9vOmJhcg==']);
one('ApiKey scheme', 'GET', '/v1/p1/echo/x', ['authorization: apikey {k1}']);
one('empty bearer', 'GET', '/v1/p1/echo/x', ['Authorization: Bearer ']);
one('expired key', 'GET', '/v1/p1/echo/x', ['Authorization: Bearer {kexp}']);
one('duplicate authorization same', 'GET', '/v1/p1/echo/x', [A1, A1]);
one('duplicate authorization different', 'GET', '/v1/p1/echo/x', [A1, 'Authorization: Bearer {k12}']);
one('key not granted project', 'GET', '/v1/p2/llm/v1/models', [A1]);
one('x-api-key header', 'GET', '/v1/p1/echo/x', ['x-api-key: {k1}']);
one('unknown project', 'GET', '/v1/zz/echo/x', [A1]);
one('unknown deployment', 'GET', '/v1/p1/zz/x', [A1]);
one('unknown project star key', 'GET', '/v1/zz/echo/x', ['Authorization: Bearer {kall}']);
one('bad key unknown deployment', 'GET', '/v1/p1/zz/x', ['Authorization: Bearer nope.nope']);
// headers
one('x-request-id kept', 'GET', '/v1/p1/echo/x', [A1, 'X-Request-Id: my-id-123']);
one('x-request-id invalid', 'GET', '/v1/p1/echo/x', [A1, 'X-Request-Id: bad id with spaces']);
one('x-request-id long', 'GET', '/v1/p1/echo/x', [A1, `X-Request-Id: ${'a'.repeat(300)}`]);
one('x-request-id twice', 'GET', '/v1/p1/echo/x', [A1, 'X-Request-Id: one', 'X-Request-Id: two']);
one('x-forwarded not trusted', 'GET', '/v1/p1/echo/x', [
  A1,
  'X-Forwarded-For: 1.2.3.4',
  'X-Forwarded-Proto: https',
  'X-Forwarded-Host: evil.test',
  'Forwarded: for=1.2.3.4',
  'X-Real-IP: 1.2.3.4',
]);
one('hop-by-hop named in connection', 'GET', '/v1/p1/echo/x', [
  A1,
  'Connection: x-secret, keep-alive',
  'X-Secret: 1',
  'Keep-Alive: timeout=5',
  'TE: trailers',
  'Proxy-Authorization: x',
  'Upgrade: h2c',
]);
one('servegate headers spoofed', 'GET', '/v1/p1/echo/x', [A1, 'X-Servegate-Project: p2', 'X-Servegate-Key: root']);
one('underscore header', 'GET', '/v1/p1/echo/x', [A1, 'X_Foo: 1', 'x-ok: 2']);
one('header injection obs-fold', 'GET', '/v1/p1/echo/x', [A1, 'X-A: 1\r\n  continued']);
one('header with bare LF', 'GET', '/v1/p1/echo/x', [A1, 'X-A: 1\nX-B: 2']);
one('header with bare CR', 'GET', '/v1/p1/echo/x', [A1, 'X-A: 1\rX-B: 2']);
one('header NUL', 'GET', '/v1/p1/echo/x', [A1, 'X-A: a\u0000b']);
one('header space before colon', 'GET', '/v1/p1/echo/x', [A1, 'X-A : 1']);
one('header no colon', 'GET', '/v1/p1/echo/x', [A1, 'garbage']);
one('header utf8 value', 'GET', '/v1/p1/echo/x', [A1, 'X-A: caf\u00e9']);
one('no host', 'GET', '/v1/p1/echo/x', [A1], undefined, { host: null });
one('two hosts', 'GET', '/v1/p1/echo/x', [A1, 'Host: other.test']);
one('empty host', 'GET', '/v1/p1/echo/x', [A1], undefined, { host: '' });
one('host with port', 'GET', '/v1/p1/echo/x', [A1], undefined, { host: 'gw.test:8080' });
one('many headers 99', 'GET', '/v1/p1/echo/x', [A1, ...Array.from({ length: 97 }, (_, i) => `X-H${i}: ${i}`)]);
one('many headers 101', 'GET', '/v1/p1/echo/x', [A1, ...Array.from({ length: 100 }, (_, i) => `X-H${i}: ${i}`)]);
one('many headers 2000', 'GET', '/v1/p1/echo/x', [A1, ...Array.from({ length: 2000 }, (_, i) => `X-H${i}: ${i}`)]);
one('oversized header 17k', 'GET', '/v1/p1/echo/x', [A1, `X-Big: ${'a'.repeat(17000)}`]);
one('oversized header 70k', 'GET', '/v1/p1/echo/x', [A1, `X-Big: ${'a'.repeat(70000)}`]);
one('oversized url 20k', 'GET', `/v1/p1/echo/${'u'.repeat(20000)}`, [A1]);
one('backend cookies and chunked trailer', 'GET', '/v1/p1/echo/x?cookies=1&chunked=1', [A1, 'TE: trailers']);
one('backend big header', 'GET', '/v1/p1/echo/x?bighead=20000', [A1]);
one('backend huge header', 'GET', '/v1/p1/echo/x?bighead=90000', [A1]);
// CORS
one('preflight allowed', 'OPTIONS', '/v1/p1/echo/x', [
  'Origin: http://ok.test',
  'Access-Control-Request-Method: POST',
  'Access-Control-Request-Headers: authorization, content-type, x-custom',
]);
one('preflight wildcard origin', 'OPTIONS', '/v1/p1/echo/x', [
  'Origin: https://a.wild.test',
  'Access-Control-Request-Method: GET',
]);
one('preflight denied', 'OPTIONS', '/v1/p1/echo/x', [
  'Origin: http://evil.test',
  'Access-Control-Request-Method: POST',
]);
one('preflight unknown deployment', 'OPTIONS', '/v1/p1/zz/x', [
  'Origin: http://ok.test',
  'Access-Control-Request-Method: POST',
]);
one('preflight openai', 'OPTIONS', '/openai/v1/chat/completions', [
  'Origin: http://ok.test',
  'Access-Control-Request-Method: POST',
  'Access-Control-Request-Headers: authorization,content-type,x-stainless-os',
]);
one('options without preflight headers', 'OPTIONS', '/v1/p1/echo/x', [A1, 'Origin: http://ok.test']);
one('options no origin with key', 'OPTIONS', '/v1/p1/echo/x', [A1]);
one('cors actual allowed', 'GET', '/v1/p1/echo/x', [A1, 'Origin: http://ok.test']);
one('cors actual denied', 'GET', '/v1/p1/echo/x', [A1, 'Origin: http://evil.test']);
one('cors on 401', 'GET', '/v1/p1/echo/x', ['Origin: http://ok.test']);
one('cors null origin', 'GET', '/v1/p1/echo/x', [A1, 'Origin: null']);
one('cors two origins', 'GET', '/v1/p1/echo/x', [A1, 'Origin: http://ok.test', 'Origin: http://evil.test']);
// Expect
add(
  'expect 100-continue wait',
  [
    { write: rq('POST', '/v1/p1/echo/p', [A1, 'Expect: 100-continue', 'Content-Length: 5']) },
    { waitBytes: 20, maxMs: 1500 },
    { write: 'hello' },
  ],
  ['POST'],
);
add(
  'expect 100-continue bad key',
  rq('POST', '/v1/p1/echo/p', ['Authorization: Bearer no.no', 'Expect: 100-continue', 'Content-Length: 5']),
  ['POST'],
);
add(
  'expect 100-continue too large',
  rq('POST', '/v1/p1/echo/p', [A1, 'Expect: 100-continue', 'Content-Length: 999999']),
  ['POST'],
);
add(
  'expect 100-continue llm',
  [
    {
      write: rq('POST', '/v1/p1/llm/v1/chat/completions', [
        A1,
        AJ,
        'Expect: 100-continue',
        `Content-Length: ${chat('x').length}`,
      ]),
    },
    { waitBytes: 20, maxMs: 1500 },
    { write: chat('x') },
  ],
  ['POST'],
);
add(
  'expect other',
  rq('POST', '/v1/p1/echo/p', [A1, 'Expect: 200-ok', 'Content-Length: 5'], 'hello', { framing: false }),
  ['POST'],
);
add(
  'expect 100-continue uppercase',
  [
    { write: rq('POST', '/v1/p1/echo/p', [A1, 'Expect: 100-Continue', 'Content-Length: 5']) },
    { waitBytes: 20, maxMs: 1500 },
    { write: 'hello' },
  ],
  ['POST'],
);
add('expect on GET no body', rq('GET', '/v1/p1/echo/p', [A1, 'Expect: 100-continue']));
// bodies
one('chunked body echo', 'POST', '/v1/p1/echo/p', [A1, 'Transfer-Encoding: chunked'], chunked(['ab', 'cde']));
one(
  'chunked with trailers',
  'POST',
  '/v1/p1/echo/p',
  [A1, 'Transfer-Encoding: chunked'],
  '3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n',
);
one(
  'chunked with extension',
  'POST',
  '/v1/p1/echo/p',
  [A1, 'Transfer-Encoding: chunked'],
  '3;ext=1\r\nabc\r\n0\r\n\r\n',
);
one('chunked bad size', 'POST', '/v1/p1/echo/p', [A1, 'Transfer-Encoding: chunked'], 'zz\r\nabc\r\n0\r\n\r\n');
one(
  'te and cl conflict',
  'POST',
  '/v1/p1/echo/p',
  [A1, 'Transfer-Encoding: chunked', 'Content-Length: 3'],
  chunked(['abc']),
);
one('two content-lengths differ', 'POST', '/v1/p1/echo/p', [A1, 'Content-Length: 3', 'Content-Length: 4'], 'abcd');
one('two content-lengths same', 'POST', '/v1/p1/echo/p', [A1, 'Content-Length: 3', 'Content-Length: 3'], 'abc');
one('content-length list', 'POST', '/v1/p1/echo/p', [A1, 'Content-Length: 3, 3'], 'abc');
one('content-length negative', 'POST', '/v1/p1/echo/p', [A1, 'Content-Length: -1'], 'abc');
one('content-length plus', 'POST', '/v1/p1/echo/p', [A1, 'Content-Length: +3'], 'abc');
one('te gzip,chunked', 'POST', '/v1/p1/echo/p', [A1, 'Transfer-Encoding: gzip, chunked'], chunked(['abc']));
one('te identity', 'POST', '/v1/p1/echo/p', [A1, 'Transfer-Encoding: identity', 'Content-Length: 3'], 'abc');
one(
  'te chunked twice',
  'POST',
  '/v1/p1/echo/p',
  [A1, 'Transfer-Encoding: chunked', 'Transfer-Encoding: chunked'],
  chunked(['abc']),
);
one('body too large CL', 'POST', '/v1/p1/echo/p', [A1, 'Content-Length: 5000'], 'x'.repeat(5000));
one(
  'body too large chunked',
  'POST',
  '/v1/p1/echo/p',
  [A1, 'Transfer-Encoding: chunked'],
  chunked(['x'.repeat(3000), 'y'.repeat(3000)]),
);
one(
  'body too large CL llm',
  'POST',
  '/v1/p1/llm/v1/chat/completions',
  [A1, AJ, 'Content-Length: 5000'],
  'x'.repeat(5000),
);
one('body too large no key', 'POST', '/v1/p1/echo/p', ['Content-Length: 5000'], 'x'.repeat(5000));
add(
  'truncated CL then close',
  [
    { write: rq('POST', '/v1/p1/echo/p', [A1, 'Content-Length: 100']) },
    { write: 'abc' },
    { pause: 100 },
    { half: true },
  ],
  ['POST'],
);
add(
  'truncated CL idle timeout',
  [{ write: rq('POST', '/v1/p1/echo/p', [A1, 'Content-Length: 100']) }, { write: 'abc' }],
  ['POST'],
  { idleMs: 2500 },
);
add(
  'truncated chunked then close',
  [
    { write: rq('POST', '/v1/p1/echo/p', [A1, 'Transfer-Encoding: chunked']) },
    { write: '5\r\nab' },
    { pause: 100 },
    { half: true },
  ],
  ['POST'],
);
add(
  'truncated CL llm then close',
  [
    { write: rq('POST', '/v1/p1/llm/v1/chat/completions', [A1, AJ, 'Content-Length: 100']) },
    { write: '{"model":' },
    { pause: 100 },
    { half: true },
  ],
  ['POST'],
);
add('truncated head then close', [
  { write: `GET /v1/p1/echo/x HTTP/1.1\r\nHost: gw.test\r\n` },
  { pause: 100 },
  { half: true },
]);
add('head timeout', [{ write: `GET /v1/p1/echo/x HTTP/1.1\r\nHost: gw.test\r\n` }], ['GET'], { idleMs: 3500 });
add('garbage request line', 'HELLO\r\n\r\n');
add('http/2 preface', 'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');
add('http/1.2', `GET /v1/p1/echo/x HTTP/1.2\r\nHost: gw.test\r\n${sub(A1)}\r\n\r\n`);
add('lowercase method', `get /v1/p1/echo/x HTTP/1.1\r\nHost: gw.test\r\n${sub(A1)}\r\n\r\n`);
add('LF-only lines', `GET /v1/p1/echo/x HTTP/1.1\nHost: gw.test\n${sub(A1)}\n\n`);
add('leading CRLF', `\r\nGET /v1/p1/echo/x HTTP/1.1\r\nHost: gw.test\r\n${sub(A1)}\r\n\r\n`);
const gz = gzipSync(Buffer.from(chat('p1/llm')));
one('gzip body llm', 'POST', '/openai/v1/chat/completions', [A1, AJ, 'Content-Encoding: gzip'], gz);
one('gzip body echo', 'POST', '/v1/p1/echo/p', [A1, 'Content-Encoding: gzip'], gzipSync(Buffer.from('hello')));
one('gzip bad body llm', 'POST', '/openai/v1/chat/completions', [A1, AJ, 'Content-Encoding: gzip'], 'notgzip');
one(
  'gzip bomb llm',
  'POST',
  '/openai/v1/chat/completions',
  [A1, AJ, 'Content-Encoding: gzip'],
  gzipSync(Buffer.alloc(20_000_000, 32)),
);
one(
  'br unknown encoding llm',
  'POST',
  '/openai/v1/chat/completions',
  [A1, AJ, 'Content-Encoding: compress'],
  chat('p1/llm'),
);
// predictive
one('iris predict', 'POST', '/v1/p1/iris/v1/models/iris:predict', [A1, AJ], '{"instances":[[1,2,3,4]]}');
one('iris predict bad json', 'POST', '/v1/p1/iris/v1/models/iris:predict', [A1, AJ], '{"instances":');
one('iris predict wrong type', 'POST', '/v1/p1/iris/v1/models/iris:predict', [A1, 'Content-Type: text/plain'], '{}');
one('iris wrong verb', 'POST', '/v1/p1/iris/v1/models/iris:explain', [A1, AJ], '{}');
one('iris GET model', 'GET', '/v1/p1/iris/v1/models/iris', [A1]);
one('iris GET predict', 'GET', '/v1/p1/iris/v1/models/iris:predict', [A1]);
one('iris websocket', 'GET', '/v1/p1/iris/v1/models/iris', [
  A1,
  'Connection: Upgrade',
  'Upgrade: websocket',
  'Sec-WebSocket-Version: 13',
  'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==',
]);
// openai
one('openai chat known', 'POST', '/openai/v1/chat/completions', [A1, AJ], chat('p1/llm'));
one('openai chat bare name', 'POST', '/openai/v1/chat/completions', [A1, AJ], chat('llm'));
one('openai chat bare ambiguous', 'POST', '/openai/v1/chat/completions', [A12, AJ], chat('llm'));
one('openai chat unknown', 'POST', '/openai/v1/chat/completions', [A1, AJ], chat('p1/nope'));
one('openai chat not allowed', 'POST', '/openai/v1/chat/completions', [A1, AJ], chat('p2/llm'));
one('openai chat not allowed bare', 'POST', '/openai/v1/chat/completions', [A1, AJ], chat('only2'));
one('openai chat not llm', 'POST', '/openai/v1/chat/completions', [A1, AJ], chat('p1/echo'));
one('openai chat no model', 'POST', '/openai/v1/chat/completions', [A1, AJ], '{"messages":[]}');
one('openai chat model number', 'POST', '/openai/v1/chat/completions', [A1, AJ], '{"model":1}');
one('openai chat model twice', 'POST', '/openai/v1/chat/completions', [A1, AJ], '{"model":"p1/llm","model":"p1/llm"}');
one('openai chat Model case', 'POST', '/openai/v1/chat/completions', [A1, AJ], '{"Model":"p1/llm","model":"p1/llm"}');
one('openai chat bad json', 'POST', '/openai/v1/chat/completions', [A1, AJ], '{"model":');
one('openai chat array', 'POST', '/openai/v1/chat/completions', [A1, AJ], '[]');
one('openai chat no key', 'POST', '/openai/v1/chat/completions', [AJ], chat('p1/llm'));
one('openai chat bad key', 'POST', '/openai/v1/chat/completions', ['Authorization: Bearer x.y', AJ], chat('p1/llm'));
one(
  'openai chat form-urlencoded',
  'POST',
  '/openai/v1/chat/completions',
  [A1, 'Content-Type: application/x-www-form-urlencoded'],
  'model=p1/llm',
);
one('openai chat no content-type', 'POST', '/openai/v1/chat/completions', [A1], chat('p1/llm'));
one(
  'openai chat chunked body',
  'POST',
  '/openai/v1/chat/completions',
  [A1, AJ, 'Transfer-Encoding: chunked'],
  chunked([chat('p1/llm').slice(0, 10), chat('p1/llm').slice(10)]),
);
one('openai chat query model mismatch', 'POST', '/openai/v1/chat/completions?model=p1/llmfb', [A1, AJ], chat('p1/llm'));
one('openai chat query model match', 'POST', '/openai/v1/chat/completions?model=p1%2Fllm', [A1, AJ], chat('p1/llm'));
one('openai stream', 'POST', '/openai/v1/chat/completions', [A1, AJ], chat('p1/llm', ',"stream":true'));
one(
  'openai stream usage',
  'POST',
  '/openai/v1/chat/completions',
  [A1, AJ],
  chat('p1/llm', ',"stream":true,"stream_options":{"include_usage":true}'),
);
one(
  'openai stream usage false',
  'POST',
  '/openai/v1/chat/completions',
  [A1, AJ],
  chat('p1/llm', ',"stream":true,"stream_options":{"include_usage":false}'),
);
one('openai stream Stream case', 'POST', '/openai/v1/chat/completions', [A1, AJ], chat('p1/llm', ',"Stream":true'));
one(
  'openai stream reset mid',
  'POST',
  '/openai/v1/chat/completions?resetmid=1',
  [A1, AJ],
  chat('p1/llm', ',"stream":true'),
);
one(
  'openai stream via deployment url',
  'POST',
  '/v1/p1/llm/v1/chat/completions',
  [A1, AJ],
  chat('whatever', ',"stream":true,"stream_options":{"include_usage":true}'),
);
one('deployment url model of other deployment', 'POST', '/v1/p1/llm/v1/chat/completions', [A1, AJ], chat('served-fb'));
one('openai completions', 'POST', '/openai/v1/completions', [A1, AJ], '{"model":"p1/llm","prompt":"hi"}');
one('openai embeddings', 'POST', '/openai/v1/embeddings', [A1, AJ], '{"model":"p1/llm","input":"hi"}');
one('openai models', 'GET', '/openai/v1/models', [A1]);
one('openai models k12', 'GET', '/openai/v1/models', [A12]);
one('openai models star', 'GET', '/openai/v1/models', ['Authorization: Bearer {kall}']);
one('openai models no key', 'GET', '/openai/v1/models', []);
one('openai model retrieve', 'GET', '/openai/v1/models/p1%2Fllm', [A1]);
one('openai model retrieve unknown', 'GET', '/openai/v1/models/p1%2Fzz', [A1]);
one('openai model retrieve forbidden', 'GET', '/openai/v1/models/p2%2Fllm', [A1]);
one('openai models HEAD', 'HEAD', '/openai/v1/models', [A1]);
one('openai models POST', 'POST', '/openai/v1/models', [A1, AJ], '{}');
one('openai unknown path', 'POST', '/openai/v1/nothing', [A1, AJ], chat('p1/llm'));
one('openai v2', 'GET', '/openai/v2/models', [A1]);
one('openai root', 'GET', '/openai/', [A1]);
one('openai fallback on 5xx', 'POST', '/openai/v1/chat/completions?status=503', [A1, AJ], chat('p1/llmfb'));
one(
  'openai fallback stream',
  'POST',
  '/openai/v1/chat/completions?reset=1',
  [A1, AJ],
  chat('p1/llmfb', ',"stream":true,"stream_options":{"include_usage":true}'),
);
one('openai 500 no fallback', 'POST', '/openai/v1/chat/completions?status=500', [A1, AJ], chat('p1/llm'));
one(
  'openai gzip body stream',
  'POST',
  '/openai/v1/chat/completions',
  [A1, AJ, 'Content-Encoding: gzip'],
  gzipSync(Buffer.from(chat('p1/llm', ',"stream":true'))),
);
one('openai realtime ws no model', 'GET', '/openai/v1/realtime', [
  A1,
  'Connection: Upgrade',
  'Upgrade: websocket',
  'Sec-WebSocket-Version: 13',
  'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==',
]);
add('openai realtime ws', [
  { write: wsHead('/openai/v1/realtime?model=p1%2Fllm') },
  { waitBytes: 50 },
  { write: maskedFrame },
]);
// upstream failures
one('backend 503 no fallback', 'GET', '/v1/p1/echo/x?status=503', [A1]);
one('backend 502', 'GET', '/v1/p1/echo/x?status=502', [A1]);
one('backend 429', 'GET', '/v1/p1/echo/x?status=429', [A1]);
one('backend 404', 'GET', '/v1/p1/echo/x?status=404', [A1]);
one('backend 204', 'GET', '/v1/p1/echo/x?status=204', [A1]);
one('backend 304', 'GET', '/v1/p1/echo/x?status=304', [A1]);
one('backend reset no fallback', 'GET', '/v1/p1/echo/x?reset=1', [A1]);
one('backend reset mid-body', 'GET', '/v1/p1/echo/x?resetmid=1', [A1]);
one('backend reset POST body', 'POST', '/v1/p1/echo/x?reset=1', [A1], 'abc');
one('backend 503 fallback', 'GET', '/v1/p1/flaky/x?status=503', [A1]);
one('backend 500 fallback', 'POST', '/v1/p1/flaky/x?status=500', [A1], 'body');
one('backend 404 fallback', 'GET', '/v1/p1/flaky/x?status=404', [A1]);
one('backend reset fallback', 'GET', '/v1/p1/flaky/x?reset=1', [A1]);
one(
  'backend reset fallback chunked body',
  'POST',
  '/v1/p1/flaky/x?reset=1',
  [A1, 'Transfer-Encoding: chunked'],
  chunked(['ab', 'c']),
);
one('backend timeout', 'GET', '/v1/p1/slow/x?hang=1', [A1], undefined, { idleMs: 2000 });
one('backend timeout HEAD', 'HEAD', '/v1/p1/slow/x?hang=1', [A1], undefined, { idleMs: 2000 });
one('backend timeout fallback chain deadline', 'GET', '/v1/p1/slowfb/x?hang=1', [A1], undefined, { idleMs: 2500 });
one('backend reset both in fallback chain', 'GET', '/v1/p1/slowfb/x?reset=1', [A1], undefined, { idleMs: 2500 });
add(
  'websocket echo then wait for its record',
  [{ write: wsHead('/v1/p1/echo/ws') }, { waitBytes: 50 }, { write: maskedFrame }, { waitBytes: 200 }, { half: true }],
  ['GET'],
  { idleMs: 2500 },
);
one('backend timeout ok', 'GET', '/v1/p1/slow/x', [A1]);
one('dead backend', 'GET', '/v1/p1/dead/x', [A1]);
one('dead backend POST', 'POST', '/v1/p1/dead/x', [A1], 'abc');
one('dead backend fallback', 'GET', '/v1/p1/deadfb/x', [A1]);
one('dead backend fallback POST', 'POST', '/v1/p1/deadfb/x', [A1, AJ], '{"a":1}');
for (let i = 0; i < 4; i++) one(`multi endpoints retry ${i}`, 'GET', '/v1/p1/multi/x', [A1]);
one('multi endpoints retry POST', 'POST', '/v1/p1/multi/x', [A1], 'abc');
one('multi endpoints retry chunked', 'POST', '/v1/p1/multi/x', [A1, 'Transfer-Encoding: chunked'], chunked(['abc']));
// websockets
add('websocket echo', [{ write: wsHead('/v1/p1/echo/ws') }, { waitBytes: 50 }, { write: maskedFrame }]);
add('websocket refused by backend', wsHead('/v1/p1/echo/ws?refuse=1'));
add('websocket no key', wsHead('/v1/p1/echo/ws', 'X-None: 1'));
add('websocket dead backend', wsHead('/v1/p1/dead/ws'));
add('websocket hang backend', wsHead('/v1/p1/slow/ws?hang=1'), ['GET'], { idleMs: 2000 });
add(
  'websocket bad version',
  rq('GET', '/v1/p1/echo/ws', [
    A1,
    'Connection: Upgrade',
    'Upgrade: websocket',
    'Sec-WebSocket-Version: 8',
    'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==',
  ]),
);
add(
  'websocket no key header',
  rq('GET', '/v1/p1/echo/ws', [A1, 'Connection: Upgrade', 'Upgrade: websocket', 'Sec-WebSocket-Version: 13']),
);
add(
  'websocket POST',
  rq(
    'POST',
    '/v1/p1/echo/ws',
    [
      A1,
      'Connection: Upgrade',
      'Upgrade: websocket',
      'Sec-WebSocket-Version: 13',
      'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==',
    ],
    'abc',
  ),
  ['POST'],
);
add('websocket with cors origin', wsHead('/v1/p1/echo/ws', A1, ['Origin: http://evil.test']));
add(
  'upgrade h2c',
  rq('GET', '/v1/p1/echo/x', [
    A1,
    'Connection: Upgrade, HTTP2-Settings',
    'Upgrade: h2c',
    'HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA',
  ]),
);
add('websocket then pipelined bytes', Buffer.concat([wsHead('/v1/p1/echo/ws'), maskedFrame]));
// pipelining
add('pipelined two gets', Buffer.concat([rq('GET', '/v1/p1/echo/1', [A1]), rq('GET', '/v1/p1/echo/2', [A1])]), [
  'GET',
  'GET',
]);
add(
  'pipelined get head get',
  Buffer.concat([
    rq('GET', '/v1/p1/echo/1', [A1]),
    rq('HEAD', '/v1/p1/echo/2', [A1]),
    rq('GET', '/v1/p1/echo/3', [A1]),
  ]),
  ['GET', 'HEAD', 'GET'],
);
add('pipelined 401 then ok', Buffer.concat([rq('GET', '/v1/p1/echo/1', []), rq('GET', '/v1/p1/echo/2', [A1])]), [
  'GET',
  'GET',
]);
add(
  'pipelined post bodies',
  Buffer.concat([
    rq('POST', '/v1/p1/echo/1', [A1], 'abc'),
    rq('POST', '/v1/p1/echo/2', [A1, 'Transfer-Encoding: chunked'], chunked(['de'])),
    rq('GET', '/v1/p1/echo/3', [A1]),
  ]),
  ['POST', 'POST', 'GET'],
);
add(
  'pipelined 413 then get',
  Buffer.concat([rq('POST', '/v1/p1/echo/1', [A1], 'x'.repeat(5000)), rq('GET', '/v1/p1/echo/2', [A1])]),
  ['POST', 'GET'],
);
add(
  'pipelined close then get',
  Buffer.concat([rq('GET', '/v1/p1/echo/1', [A1, 'Connection: close']), rq('GET', '/v1/p1/echo/2', [A1])]),
  ['GET', 'GET'],
);
add(
  'pipelined bad then get',
  Buffer.concat([
    rq('GET', '/v1/p1/echo/1', [A1, 'Content-Length: 1', 'Content-Length: 2']),
    rq('GET', '/v1/p1/echo/2', [A1]),
  ]),
  ['GET', 'GET'],
);
add(
  'pipelined llm stream then get',
  Buffer.concat([
    rq('POST', '/openai/v1/chat/completions', [A1, AJ], chat('p1/llm', ',"stream":true')),
    rq('GET', '/openai/v1/models', [A1]),
  ]),
  ['POST', 'GET'],
);
add(
  'pipelined preflight then get',
  Buffer.concat([
    rq('OPTIONS', '/v1/p1/echo/1', ['Origin: http://ok.test', 'Access-Control-Request-Method: GET']),
    rq('GET', '/v1/p1/echo/2', [A1, 'Origin: http://ok.test']),
  ]),
  ['OPTIONS', 'GET'],
);
add(
  'pipelined unread body 401 then get',
  Buffer.concat([rq('POST', '/v1/p1/echo/1', [], 'abcdef'), rq('GET', '/v1/p1/echo/2', [A1])]),
  ['POST', 'GET'],
);
add(
  'pipelined expect then get',
  Buffer.concat([rq('POST', '/v1/p1/echo/1', [A1, 'Expect: 100-continue'], 'abc'), rq('GET', '/v1/p1/echo/2', [A1])]),
  ['POST', 'GET'],
);
add(
  'pipelined 5 keep-alive',
  Buffer.concat(Array.from({ length: 5 }, (_, i) => rq('GET', `/v1/p1/echo/${i}?status=${i % 2 ? 503 : 200}`, [A1]))),
  ['GET', 'GET', 'GET', 'GET', 'GET'],
);
add(
  'sequential keep-alive',
  [
    { write: rq('GET', '/v1/p1/echo/1', [A1]) },
    { pause: 150 },
    { write: rq('POST', '/openai/v1/chat/completions', [A1, AJ], chat('p1/llm')) },
    { pause: 150 },
    { write: rq('GET', '/v1/p1/zz', [A1]) },
  ],
  ['GET', 'POST', 'GET'],
);
add('half close after request', [{ write: rq('GET', '/v1/p1/echo/1', [A1]) }, { half: true }]);
add(
  'client gone mid-stream',
  [
    { write: rq('POST', '/openai/v1/chat/completions', [A1, AJ], chat('p1/llm', ',"stream":true')) },
    { waitBytes: 100 },
    { half: true },
  ],
  ['POST'],
);

// more routes and limits
one('canary 100', 'GET', '/v1/p1/canary/x', [A1]);
one('canary 0', 'GET', '/v1/p1/canary0/x', [A1]);
one('canary fallback-less 503', 'GET', '/v1/p1/canary/x?status=503', [A1]);
one('prefixed backend path', 'GET', '/v1/p1/prefixed/a?b=1', [A1]);
one('prefixed backend root', 'GET', '/v1/p1/prefixed/', [A1]);
one('v2 infer', 'POST', '/v1/p1/v2/v2/models/m2/infer', [A1, AJ], '{"inputs":[]}');
one('v2 ready', 'GET', '/v1/p1/v2/v2/models/m2/ready', [A1]);
one('v2 wrong model', 'POST', '/v1/p1/v2/v2/models/zz/infer', [A1, AJ], '{"inputs":[]}');
one('v2 on v1 path', 'POST', '/v1/p1/v2/v1/models/m2:predict', [A1, AJ], '{}');
one('tf classify', 'POST', '/v1/p1/tf/v1/models/mn:classify', [A1, AJ], '{"examples":[]}');
one('tf metadata', 'GET', '/v1/p1/tf/v1/models/mn/metadata', [A1]);
add('deployment rpm 3 in a row', Buffer.concat([1, 2, 3].map((i) => rq('GET', `/v1/p1/rpm/${i}`, [A1]))), [
  'GET',
  'GET',
  'GET',
]);
add(
  'key rpm 3 in a row',
  Buffer.concat([1, 2, 3].map((i) => rq('GET', `/v1/p1/echo/${i}`, ['Authorization: Bearer {krpm}']))),
  ['GET', 'GET', 'GET'],
);
add(
  'key tpm llm',
  Buffer.concat(
    [1, 2, 3].map(() =>
      rq('POST', '/openai/v1/chat/completions', ['Authorization: Bearer {ktpm}', AJ], chat('p1/llm')),
    ),
  ),
  ['POST', 'POST', 'POST'],
);
add(
  'deployment tpm llm',
  Buffer.concat([1, 2, 3, 4].map(() => rq('POST', '/openai/v1/chat/completions', [A1, AJ], chat('p1/llmtpm')))),
  ['POST', 'POST', 'POST', 'POST'],
);
add('rate per key burst', Buffer.concat([1, 2, 3, 4, 5].map((i) => rq('GET', `/v1/p1/echo/${i}`, [A12]))), [
  'GET',
  'GET',
  'GET',
  'GET',
  'GET',
]);
const form = (model, boundary = 'XyZ') =>
  `--${boundary}\r\nContent-Disposition: form-data; name="model"\r\n\r\n${model}\r\n--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\nContent-Type: audio/wav\r\n\r\nRIFF\r\n--${boundary}--\r\n`;
one(
  'form model',
  'POST',
  '/openai/v1/audio/transcriptions',
  [A1, 'Content-Type: multipart/form-data; boundary=XyZ'],
  form('p1/llm'),
);
one(
  'form model forbidden',
  'POST',
  '/openai/v1/audio/transcriptions',
  [A1, 'Content-Type: multipart/form-data; boundary=XyZ'],
  form('p2/llm'),
);
one(
  'form no boundary',
  'POST',
  '/openai/v1/audio/transcriptions',
  [A1, 'Content-Type: multipart/form-data'],
  form('p1/llm'),
);
one(
  'form model twice',
  'POST',
  '/openai/v1/audio/transcriptions',
  [A1, 'Content-Type: multipart/form-data; boundary=XyZ'],
  form('p1/llm').replace('--XyZ--', '--XyZ\r\nContent-Disposition: form-data; name="model"\r\n\r\np1/llm\r\n--XyZ--'),
);
one('audio octet on openai', 'POST', '/openai/v1/audio/transcriptions', [A1, 'Content-Type: audio/wav'], 'RIFF');
one(
  'stream stall idle timeout',
  'POST',
  '/openai/v1/chat/completions?stall=1500',
  [A1, AJ],
  chat('p1/llm', ',"stream":true'),
  { idleMs: 2500 },
);
one(
  'stream stall via deployment',
  'POST',
  '/v1/p1/llm/v1/chat/completions?stall=1500',
  [A1, AJ],
  chat('x', ',"stream":true,"stream_options":{"include_usage":true}'),
  { idleMs: 2500 },
);
add('websocket to llm deployment', [
  { write: wsHead('/v1/p1/llm/v1/realtime', A1, ['Sec-WebSocket-Extensions: permessage-deflate']) },
  { waitBytes: 50 },
  { write: maskedFrame },
]);
add('realtime ws forbidden model', wsHead('/openai/v1/realtime?model=p2%2Fllm'));
add('realtime ws unknown model', wsHead('/openai/v1/realtime?model=p1%2Fzz'));
add('realtime ws bare model', [{ write: wsHead('/openai/v1/realtime?model=llm') }, { waitBytes: 50 }]);
one(
  'query model on deployment url other',
  'POST',
  '/v1/p1/llm/v1/chat/completions?model=served-fb',
  [A1, AJ],
  chat('served-llm'),
);
one(
  'llm json checks dup stream',
  'POST',
  '/v1/p1/llm/v1/chat/completions',
  [A1, AJ],
  '{"model":"x","stream":true,"stream":false}',
);
one(
  'llm big ints kept',
  'POST',
  '/openai/v1/chat/completions',
  [A1, AJ],
  '{ "seed" : 12345678901234567890123, "model" : "p1/llm" , "messages":[] }',
);
one('llm unicode model escape', 'POST', '/openai/v1/chat/completions', [A1, AJ], '{"model":"p1\\/llm","messages":[]}');
one('llm model escaped u', 'POST', '/openai/v1/chat/completions', [A1, AJ], '{"model":"p1/ll\\u006d","messages":[]}');
one('llm bom', 'POST', '/openai/v1/chat/completions', [A1, AJ], '\ufeff' + chat('p1/llm'));
one('llm trailing garbage', 'POST', '/openai/v1/chat/completions', [A1, AJ], chat('p1/llm') + 'x');
one(
  'llm charset latin1',
  'POST',
  '/openai/v1/chat/completions',
  [A1, 'Content-Type: application/json; charset=latin1'],
  chat('p1/llm'),
);
one(
  'llm content-type json+suffix',
  'POST',
  '/openai/v1/chat/completions',
  [A1, 'Content-Type: application/vnd.api+json'],
  chat('p1/llm'),
);
one('openai models cors', 'GET', '/openai/v1/models', [A1, 'Origin: http://ok.test']);
one('openai 401 cors', 'GET', '/openai/v1/models', ['Origin: http://ok.test']);
one('xff trusted chain', 'GET', '/v1/p1/echo/x', [
  A1,
  'X-Forwarded-For: 1.1.1.1, 2.2.2.2',
  'X-Forwarded-Proto: https',
  'X-Forwarded-Host: pub.test',
  'X-Forwarded-Port: 443',
]);
one('custom header preflight', 'OPTIONS', '/v1/p1/echo/x', [
  'Origin: http://any.test',
  'Access-Control-Request-Method: PUT',
  'Access-Control-Request-Headers: x-custom, x-other',
]);
one('preflight private network', 'OPTIONS', '/v1/p1/echo/x', [
  'Origin: http://ok.test',
  'Access-Control-Request-Method: GET',
  'Access-Control-Request-Private-Network: true',
]);
one('preflight bad method', 'OPTIONS', '/v1/p1/echo/x', [
  'Origin: http://ok.test',
  'Access-Control-Request-Method: TRACE',
]);

// concurrency, budgets, admin port
const AJS = [A1, AJ];
cases.push({
  name: 'websockets per key: second refused',
  conns: [
    {
      steps: [{ write: wsHead('/v1/p1/echo/ws', 'Authorization: Bearer {kws}') }, { waitBytes: 50 }],
      methods: ['GET'],
    },
    { steps: [{ write: wsHead('/v1/p1/echo/ws', 'Authorization: Bearer {kws}') }], methods: ['GET'], delayMs: 150 },
  ],
});
cases.push({
  name: 'two slow answers at once',
  conns: [1, 2].map((i) => ({ steps: [{ write: rq('GET', `/v1/p1/echo/${i}?delay=200`, [A1]) }], methods: ['GET'] })),
});
cases.push({
  name: 'stream and a request beside it',
  conns: [
    {
      steps: [{ write: rq('POST', '/openai/v1/chat/completions?stall=400', AJS, chat('p1/llm', ',"stream":true')) }],
      methods: ['POST'],
    },
    { steps: [{ write: rq('GET', '/openai/v1/models', [A1]) }], methods: ['GET'], delayMs: 100 },
  ],
  idleMs: 700,
});
add(
  'key budget tokens',
  Buffer.concat(
    [1, 2, 3].map(() =>
      rq('POST', '/openai/v1/chat/completions', ['Authorization: Bearer {kbud}', AJ], chat('p1/llm')),
    ),
  ),
  ['POST', 'POST', 'POST'],
);
add(
  'key budget stream usage',
  Buffer.concat(
    [1, 2].map(() =>
      rq('POST', '/openai/v1/chat/completions', ['Authorization: Bearer {kbud}', AJ], chat('p1/llm', ',"stream":true')),
    ),
  ),
  ['POST', 'POST'],
);
for (const path of ['/healthz', '/readyz', '/deployments', '/', '/nope', '/metrics?x=1'])
  cases.push({
    name: `admin GET ${path}`,
    steps: [{ write: rq('GET', path, [], undefined, { host: 'admin.test' }) }],
    methods: ['GET'],
    admin: true,
  });
cases.push({
  name: 'admin HEAD /deployments',
  steps: [{ write: rq('HEAD', '/deployments', []) }],
  methods: ['HEAD'],
  admin: true,
});
cases.push({
  name: 'admin POST /metrics',
  steps: [{ write: rq('POST', '/metrics', [], 'x') }],
  methods: ['POST'],
  admin: true,
});

// backends answering what no HTTP library writes
for (const name of Object.keys(RAW)) {
  one(`raw backend ${name}`, 'GET', `/v1/p1/raw/${name}`, [A1, 'Origin: http://ok.test']);
  if (name === 'badws') add('raw backend bad 101 to websocket', wsHead(`/v1/p1/raw/${name}`));
}
for (const name of ['dupcl', 's429', 'short', 'badstatus', 'early'])
  one(`raw backend ${name} with fallback`, 'GET', `/v1/p1/rawfb/${name}`, [A1]);
for (const name of ['gzsse', 'ssecut', 'chunkcut', 'tecl'])
  one(
    `raw llm backend ${name}`,
    'POST',
    `/openai/v1/chat/completions?raw=${name}`,
    [A1, AJ],
    chat('p1/rawllm', ',"stream":true'),
  );
one('raw backend HEAD closedelim', 'HEAD', '/v1/p1/raw/closedelim', [A1]);
add(
  'raw backend pipelined after close-delimited',
  Buffer.concat([rq('GET', '/v1/p1/raw/closedelim', [A1]), rq('GET', '/v1/p1/raw/named', [A1])]),
  ['GET', 'GET'],
);

// as the openai SDK (node) sends them
const SDK = [
  'Accept: application/json',
  'Content-Type: application/json',
  'User-Agent: OpenAI/JS 6.49.0',
  'X-Stainless-Lang: js',
  'X-Stainless-Package-Version: 6.49.0',
  'X-Stainless-OS: Linux',
  'X-Stainless-Arch: x64',
  'X-Stainless-Runtime: node',
  'X-Stainless-Runtime-Version: v20.18.1',
  'Authorization: Bearer {k1}',
  'X-Stainless-Retry-Count: 0',
  'X-Stainless-Timeout: 600',
  'Accept-Encoding: gzip, deflate',
  'Connection: keep-alive',
];
add(
  'sdk stream then list',
  [
    {
      write: rq(
        'POST',
        '/openai/v1/chat/completions',
        SDK,
        chat('p1/llm', ',"stream":true,"stream_options":{"include_usage":true}'),
      ),
    },
    { pause: 200 },
    { write: rq('GET', '/openai/v1/models', SDK) },
    { pause: 200 },
    { write: rq('GET', '/openai/v1/models/p1%2Fllm', SDK) },
    { pause: 200 },
    { write: rq('POST', '/openai/v1/chat/completions', SDK, chat('p1/nope')) },
  ],
  ['POST', 'GET', 'GET', 'POST'],
);
add(
  'sdk retry of a 5xx',
  Buffer.concat([
    rq('POST', '/openai/v1/chat/completions?status=500', SDK, chat('p1/llm')),
    rq(
      'POST',
      '/openai/v1/chat/completions?status=500',
      [...SDK.filter((h) => !/retry-count/i.test(h)), 'X-Stainless-Retry-Count: 1'],
      chat('p1/llm'),
    ),
  ]),
  ['POST', 'POST'],
);

// after the manifests change (run last)
const reloadCase = (name, method, path, headers, body) =>
  one(`reload: ${name}`, method, path, headers, body, { reload: true });
reloadCase('removed key', 'GET', '/v1/p1/echo/x', [A12]);
reloadCase('kept key', 'GET', '/v1/p1/echo/x', [A1]);
reloadCase('removed deployment', 'GET', '/v1/p1/canary0/x', [A1]);
reloadCase('added deployment', 'GET', '/v1/p1/late/x', [A1]);
reloadCase('fallback added', 'GET', '/v1/p1/echo/x?status=503', [A1]);
reloadCase('models list', 'GET', '/openai/v1/models', ['Authorization: Bearer {kall}']);
cases.push({
  name: 'reload: admin deployments',
  steps: [{ write: rq('GET', '/deployments', []) }],
  methods: ['GET'],
  admin: true,
  reload: true,
});

// the client or the backend ending early
add(
  'client gone while waiting for the head',
  [{ write: rq('GET', '/v1/p1/echo/x?hang=1', [A1]) }, { pause: 200 }, { half: true }],
  ['GET'],
  { idleMs: 600 },
);
add(
  'client gone while waiting llm',
  [{ write: rq('POST', '/openai/v1/chat/completions?hang=1', AJS, chat('p1/llm')) }, { pause: 200 }, { half: true }],
  ['POST'],
  { idleMs: 600 },
);
add(
  'backend answers before the body',
  [
    { write: rq('POST', '/v1/p1/echo/x?early=1', [A1, 'Content-Length: 10']) },
    { write: 'abc' },
    { pause: 300 },
    { write: 'defghij' },
  ],
  ['POST'],
  { idleMs: 600 },
);
add(
  'backend 503 before the body, fallback',
  [
    { write: rq('POST', '/v1/p1/flaky/x?early=1&status=503', [A1, 'Content-Length: 10']) },
    { write: 'abc' },
    { pause: 300 },
    { write: 'defghij' },
  ],
  ['POST'],
  { idleMs: 600 },
);
add(
  'backend answers before a chunked body',
  [
    { write: rq('POST', '/v1/p1/echo/x?early=1', [A1, 'Transfer-Encoding: chunked']) },
    { write: '3\r\nabc\r\n' },
    { pause: 300 },
    { write: '0\r\n\r\n' },
    { write: rq('GET', '/v1/p1/echo/after', [A1]) },
  ],
  ['POST', 'GET'],
  { idleMs: 600 },
);
add(
  'body idle then pipelined',
  [
    { write: rq('POST', '/v1/p1/echo/x', [A1, 'Content-Length: 4']) },
    { write: 'ab' },
    { pause: 400 },
    { write: 'cd' },
    { write: rq('GET', '/v1/p1/echo/after', [A1]) },
  ],
  ['POST', 'GET'],
);
add(
  'expect continue with fallback streaming body',
  [
    { write: rq('POST', '/v1/p1/flaky/x?status=503', [A1, 'Expect: 100-continue', 'Content-Length: 5']) },
    { waitBytes: 20, maxMs: 1500 },
    { write: 'hello' },
  ],
  ['POST'],
);

// failed-auth throttling by address (profile c makes it bite after 3)
const xff = (ip) => `X-Forwarded-For: ${ip}`;
add(
  'auth failures from one address then others',
  Buffer.concat([
    ...[1, 2, 3, 4].map(() => rq('GET', '/v1/p1/echo/t', ['Authorization: Bearer bad.bad', xff('9.9.9.9')])),
    rq('GET', '/v1/p1/echo/t', ['Authorization: Bearer bad.bad', xff('8.8.8.8')]),
    rq('GET', '/v1/p1/echo/t', [A1, xff('9.9.9.9')]),
    rq('GET', '/v1/p1/echo/t', ['Authorization: Bearer bad.bad', xff('7.7.7.7, 9.9.9.9')]),
  ]),
  ['GET', 'GET', 'GET', 'GET', 'GET', 'GET', 'GET'],
);
add(
  'refused bare model counts as a failure',
  Buffer.concat([
    ...[1, 2, 3, 4].map(() => rq('POST', '/openai/v1/chat/completions', [A1, AJ, xff('6.6.6.6')], chat('only2'))),
    rq('POST', '/openai/v1/chat/completions', ['Authorization: Bearer no.no', AJ, xff('6.6.6.6')], chat('p1/llm')),
    rq('POST', '/openai/v1/chat/completions', [A1, AJ, xff('6.6.6.6')], chat('p1/llm')),
  ]),
  ['POST', 'POST', 'POST', 'POST', 'POST', 'POST'],
);
add(
  'unknown model by websocket counts as a failure',
  Buffer.concat([wsHead('/openai/v1/realtime?model=only2', A1, [xff('5.5.5.5')])]),
);

// prompt-prefix picks across the fleet: four long system prompts, users and turns
const SYSTEMS = ['alpha', 'beta', 'gamma', 'delta'].map(
  (w) => `You are the ${w} assistant. ${`${w} rules apply. `.repeat(120)}`,
);
for (let i = 0; i < 16; i++) {
  const sys = SYSTEMS[(i * 7) % 4];
  const body = JSON.stringify({
    model: 'p1/fleet',
    messages: [
      { role: 'system', content: sys },
      { role: 'user', content: `question ${i % 5}` },
      ...(i % 3 === 0
        ? [
            { role: 'assistant', content: 'earlier answer' },
            { role: 'user', content: 'more' },
          ]
        : []),
    ],
    max_tokens: 4,
    ...(i % 2 ? { stream: true } : {}),
  });
  one(
    `fleet pick ${i}`,
    'POST',
    '/openai/v1/chat/completions',
    [A1, AJ, ...(i % 4 === 1 ? ['X-Servegate-Tenant: t1'] : [])],
    body,
    { fleet: true },
  );
}
one(
  'fleet completions prompt',
  'POST',
  '/openai/v1/completions',
  [A1, AJ],
  JSON.stringify({ model: 'p1/fleet', prompt: SYSTEMS[0], max_tokens: 2 }),
  { fleet: true },
);
one(
  'fleet via deployment url',
  'POST',
  '/v1/p1/fleet/v1/chat/completions',
  [A1, AJ],
  JSON.stringify({ model: 'sim-llama', messages: [{ role: 'system', content: SYSTEMS[1] }], max_tokens: 2 }),
  { fleet: true },
);

const only = args.only ? new RegExp(args.only) : undefined;
let battery = cases.filter((c) => !only || only.test(c.name));
const fuzzN = Number(args.fuzz);
if (fuzzN > 0)
  battery = battery.concat(
    fuzzCases(fuzzN, Number(args.seed), { rq, sub, chunked, chat }).filter((c) => !only || only.test(c.name)),
  );

// ---- run ----
const ports = gws.flatMap((g) => [g.port, g.adminPort]);
/** The lines since `from`, once none has come for 250 ms: the access log is written in batches every 100 ms. */
async function logsSettled(gw, from) {
  let n = gw.lines.length;
  let quiet = 0;
  for (let i = 0; i < 60 && quiet < 5; i++) {
    await new Promise((r) => setTimeout(r, 50));
    quiet = gw.lines.length === n ? quiet + 1 : 0;
    n = gw.lines.length;
  }
  return gw.lines.slice(from);
}
async function runOn(gw, c) {
  const before = await metrics(gw);
  const from = gw.lines.length;
  const t0 = Date.now();
  // A case is one connection, or several at once (`conns`, each with its own steps, methods and start delay), or
  // one on the admin port.
  const conns = c.conns ?? [{ steps: c.steps, methods: c.methods }];
  const outs = await Promise.all(
    conns.map((k) =>
      exchange(c.admin ? gw.adminPort : gw.port, k.steps, {
        idleMs: c.idleMs ?? 300,
        maxMs: c.maxMs ?? 10_000,
        delayMs: k.delayMs ?? 0,
      }),
    ),
  );
  const ms = Date.now() - t0;
  const logs = await logsSettled(gw, from);
  const after = await metrics(gw);
  const ctx = { ports, ids: new Map() };
  const responses = outs.flatMap((o, i) => parseResponses(o.bytes, conns[i].methods).map((r) => normResponse(r, ctx)));
  // Admin answers carry live figures: /metrics is compared by its HELP/TYPE lines, other pages with digits as N.
  if (c.admin)
    for (const r of responses) {
      if (r.body === undefined) continue;
      if (r.body.startsWith('# HELP'))
        r.body = r.body
          .split('\n')
          .filter((l) => l.startsWith('#'))
          .join('\n');
      else r.body = r.body.replace(/\d+(\.\d+)?(e[-+]?\d+)?/g, 'N');
      r.headers = r.headers.map((h) => (/^content-length:/i.test(h) ? 'content-length: N' : h));
    }
  const ended = outs.map((o) => o.ended).join(',');
  return {
    responses,
    ended,
    logs: logs.map((l) => normLog(l, ctx)),
    metrics: metricDelta(before, after, ports),
    // Coarse time to the end of the exchange: only waits (timeouts, holds) show, not speed.
    timing: ms < 700 ? 'quick' : `~${(Math.round(ms / 500) / 2).toFixed(1)}s`,
  };
}
const results = [];
let diffs = 0;
if (args.drain) battery = [];

// Shutdown: SIGTERM at 300 ms while one connection idles between requests, one waits on a slow answer, one streams
// past the drain deadline, one holds a websocket, one arrives within the accept window and one after it.
async function drainScenario(gw) {
  const t0 = Date.now();
  const exited = new Promise((r) => gw.child.once('exit', (code, sig) => r({ code, sig, at: Date.now() - t0 })));
  const long = { idleMs: 4000, maxMs: 8000 };
  const conns = {
    idle: exchange(
      gw.port,
      [{ write: rq('GET', '/v1/p1/echo/1', [A1]) }, { pause: 900 }, { write: rq('GET', '/v1/p1/echo/2', [A1]) }],
      long,
    ),
    slow: exchange(gw.port, [{ write: rq('GET', '/v1/p1/echo/x?delay=1000', [A1]) }], long),
    stream: exchange(
      gw.port,
      [{ write: rq('POST', '/openai/v1/chat/completions?stall=5000', [A1, AJ], chat('p1/llm', ',"stream":true')) }],
      long,
    ),
    ws: exchange(gw.port, [{ write: wsHead('/v1/p1/echo/ws') }, { waitBytes: 50 }, { write: maskedFrame }], long),
    late: exchange(gw.port, [{ write: rq('GET', '/v1/p1/echo/late', [A1]) }], { ...long, delayMs: 550 }),
    after: exchange(gw.port, [{ write: rq('GET', '/v1/p1/echo/after', [A1]) }], { ...long, delayMs: 1200 }),
  };
  const from = gw.lines.length;
  setTimeout(() => gw.child.kill('SIGTERM'), 300);
  const out = {};
  for (const [k, p] of Object.entries(conns)) {
    const { bytes, ended } = await p;
    const ctx = { ports, ids: new Map() };
    out[k] = {
      ended,
      responses: parseResponses(bytes, k === 'idle' ? ['GET', 'GET'] : k === 'stream' ? ['POST'] : ['GET']).map((r) =>
        normResponse(r, ctx),
      ),
    };
  }
  const ex = await exited;
  out.exit = { code: ex.code, sig: ex.sig, after: `~${(Math.round(ex.at / 500) / 2).toFixed(1)}s` };
  const ctx = { ports, ids: new Map() };
  out.logs = gw.lines.slice(from).map((l) => normLog(l, ctx));
  return out;
}
if (args.drain) {
  const o = await drainScenario(gws[0]);
  const n = await drainScenario(gws[1]);
  for (const k of Object.keys(o)) {
    const a = JSON.stringify(o[k], null, 1);
    const b = JSON.stringify(n[k], null, 1);
    if (a !== b) diffs++;
    console.log(`${a === b ? 'same' : 'DIFF'}  drain ${k}${a === b ? '' : `\n  old: ${a}\n  new: ${b}`}`);
    const brief = (x) =>
      x.responses
        ? `${x.responses.map((r) => `${r.statusLine} (${(r.headers ?? []).filter((h) => /^connection:/i.test(h)).join(', ')})${r.framing ? ` ${r.framing}` : ''}`).join(' | ')} [${x.ended}]`
        : JSON.stringify(x).slice(0, 300);
    if (args['show-same'] && a === b) console.log(`  ${brief(o[k])}`);
  }
}
// Fleet cases: all on old, the replicas emptied, all on new (their picks depend on what the replicas hold).
const fleetRuns = new Map();
const fleetCases = battery.filter((c) => c.fleet);
for (const gw of gws) {
  if (!fleetCases.length) break;
  await restartFleet();
  for (const c of fleetCases) fleetRuns.set(`${gw.label}:${c.name}`, await runOn(gw, c));
}
// Reload cases last: the manifests change under both gateways (a key removed, a deployment added, one removed, one
// given a fallback), and they run once both serve the added deployment.
battery = battery.filter((c) => !c.reload).concat(battery.filter((c) => c.reload));
let reloaded = false;
async function applyReload() {
  reloaded = true;
  const changed = manifestDocs()
    .filter((d) => d.metadata.name !== 'k12' && d.metadata.name !== 'canary0')
    .map((d) =>
      d.metadata.name === 'echo' && d.metadata.namespace === 'p1'
        ? { ...d, spec: { ...d.spec, fallbacks: ['plain'] } }
        : d,
    )
    .concat([dep('p1', 'late', { type: 'python', backend: { url: P } })]);
  writeFileSync(join(dir, 'all.yaml'), changed.map((x) => stringify(x)).join('---\n'));
  for (const gw of gws) {
    const until = Date.now() + 15_000;
    for (;;) {
      const { bytes } = await exchange(gw.port, [{ write: rq('GET', '/v1/p1/late/probe', [A1]) }], { idleMs: 100 });
      if (bytes.toString('latin1').startsWith('HTTP/1.1 200')) break;
      if (Date.now() > until) throw new Error(`${gw.label} did not load the changed manifests`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}
for (const c of battery) {
  if (c.reload && !reloaded) await applyReload();
  const o = c.fleet ? fleetRuns.get(`old:${c.name}`) : await runOn(gws[0], c);
  const n = c.fleet ? fleetRuns.get(`new:${c.name}`) : await runOn(gws[1], c);
  const parts = {};
  for (const k of ['responses', 'ended', 'logs', 'metrics', 'timing']) {
    const a = JSON.stringify(o[k], null, 1);
    const b = JSON.stringify(n[k], null, 1);
    if (a !== b) parts[k] = { old: o[k], new: n[k] };
  }
  let same = Object.keys(parts).length === 0;
  let racy = false;
  if (!same && !c.fleet) {
    // A difference that timing alone makes: run again; if some run of old and some run of new agree, call it racy.
    const key = (x) => JSON.stringify([x.responses, x.ended, x.logs, x.metrics, x.timing]);
    const olds = new Set([key(o)]);
    const news = new Set([key(n)]);
    for (let i = 0; i < 3 && !racy; i++) {
      olds.add(key(await runOn(gws[0], c)));
      news.add(key(await runOn(gws[1], c)));
      racy = [...olds].some((k) => news.has(k));
    }
    if (racy) same = true;
  }
  if (!same) diffs++;
  results.push({ name: c.name, same, racy, parts, old: o, new: n });
  if (racy) console.log(`racy  ${c.name}: ${Object.keys(parts).join(', ')} differ from run to run on both builds`);
  const status = (x) => x.responses.map((r) => r.statusLine ?? '(incomplete)').join(' | ') + ` [${x.ended}]`;
  if (!same) {
    console.log(`DIFF  ${c.name}: ${Object.keys(parts).join(', ')}`);
    console.log(`  old: ${status(o)}`);
    console.log(`  new: ${status(n)}`);
  } else if (args['show-same']) console.log(`same  ${c.name}: ${status(o)}`);
}
console.log(`\n${battery.length} cases, ${diffs} differ`);
if (args.json) writeFileSync(args.json, JSON.stringify(results, null, 1));

for (const g of gws) g.child.kill('SIGKILL');
await modal.close();
await plain.close();
await raw.close();
rmSync(dir, { recursive: true, force: true });
for (const r of fleet) await r.close();
rmSync(cfgFile, { force: true });
process.exit(diffs ? 1 : 0);
