// The costliest JSON bodies at the chart's default heap (issue 31, item 2): starts the built gateway as the chart does
// (--max-old-space-size=384, default limits: 32 MiB bodies), sends each worst shape just under the limit, N at once
// through a deployment whose fallback keeps the body, and prints per shape whether the gateway survived and answered
// the next request, the time, and the gateway's peak RSS while it was read. Then the prefix key's cost on a body with
// a 24 MiB image part and 15 MiB of tools (item 10; SPEC §12: a few µs). Runs the built code (dist/).
// With the buffered-body budget (limits.maxBufferedBodyBytes) a body past it waits or is answered 503 (Retry-After):
// each line counts the 200s and 503s, and "survived" means the gateway answered every request one way or the other
// and then served the next one.
//   node bench/json-bodies.mjs [--concurrent 4] [--heap 384] [--shapes 6] [--dist <dir>]
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, request } from 'node:http';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

const { values } = parseArgs({
  options: {
    concurrent: { type: 'string', default: '4' },
    heap: { type: 'string', default: '384' },
    shapes: { type: 'string', default: '6' },
    dist: { type: 'string' },
  },
});
const concurrent = Number(values.concurrent);
const root = values.dist ? pathToFileURL(`${resolve(values.dist)}/`) : new URL('../dist/', import.meta.url);
const LIMIT = 33_554_432;
const SIZE = LIMIT - 4096;
const KEY = 'JsonBenchKeyAbcd.0123456789abcdef0123456789abcdef';

function fill(head, unit, tail) {
  const n = Math.floor((SIZE - head.length - tail.length) / unit.length);
  return Buffer.from(head + unit.repeat(n) + tail);
}
function nested() {
  const depth = Math.floor((SIZE - 64) / 2);
  return Buffer.from(`{"model":"demo/chat","messages":${'['.repeat(depth)}${']'.repeat(depth)}}`);
}
function manyKeys() {
  const parts = [];
  let total = 0;
  for (let i = 0; total < SIZE - 64; i++) {
    const k = `"k${i.toString(36)}":0,`;
    parts.push(k);
    total += k.length;
  }
  return Buffer.from(`{${parts.join('')}"model":"demo/chat","prompt":"x"}`);
}
const SHAPES = [
  ['{}, repeated', () => fill('{"model":"demo/chat","messages":[', '{},', '{}]}')],
  ['[ nested deep', nested],
  ['one long string', () => fill('{"model":"demo/chat","messages":[{"role":"user","content":"', 'abcdefgh', '"}]}')],
  ['short strings', () => fill('{"model":"demo/chat","messages":[', '"",', '""]}')],
  ['small numbers', () => fill('{"model":"demo/chat","prompt":[', '0,', '0]}')],
  ['many keys', manyKeys],
];

const servers = [];
async function backend(status) {
  const s = createServer((req, res) => {
    req.resume();
    req.on('end', () => res.writeHead(status, { 'content-type': 'application/json' }).end('{}'));
  });
  await new Promise((r) => s.listen(0, '127.0.0.1', r));
  servers.push(s);
  return `http://127.0.0.1:${s.address().port}`;
}

function post(port, body) {
  return new Promise((resolve) => {
    const req = request(
      {
        host: '127.0.0.1',
        port,
        path: '/openai/v1/chat/completions',
        method: 'POST',
        headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', 'content-length': body.length },
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode));
      },
    );
    req.on('error', (e) => resolve(e.code ?? e.message));
    req.end(body);
  });
}

const rssMb = (pid) => {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) / 1024 : 0;
  } catch {
    return 0;
  }
};

const dir = mkdtempSync(join(tmpdir(), 'servegate-json-bench-'));
let child;
try {
  const [busy, ok] = await Promise.all([backend(503), backend(200)]);
  writeFileSync(
    join(dir, 'app.yaml'),
    `apiVersion: serving.servegate.dev/v1alpha1
kind: ServingDeployment
metadata: {name: chat, namespace: demo}
spec: {type: model, modelServer: llm, modelName: big, backend: {url: "${busy}"}, fallbacks: [rescue]}
---
apiVersion: serving.servegate.dev/v1alpha1
kind: ServingDeployment
metadata: {name: rescue, namespace: demo}
spec: {type: model, modelServer: llm, modelName: small, backend: {url: "${ok}"}}
---
apiVersion: v1
kind: Secret
metadata: {name: k, labels: {serving.servegate.dev/api-key: "true"}}
stringData: {prefix: JsonBenchKeyAbcd, projects: demo, sha256: ${createHash('sha256').update(KEY).digest('hex')}}
`,
  );
  writeFileSync(join(dir, 'config.yaml'), 'logLevel: info\naccessLog: false\n');
  const cli = new URL('cli/main.js', root).pathname;
  child = spawn(
    process.execPath,
    [`--max-old-space-size=${values.heap}`, cli, 'serve', '--manifests', join(dir, 'app.yaml')].concat([
      '--config',
      join(dir, 'config.yaml'),
      '--port',
      '0',
      '--admin-port',
      '0',
      '--host',
      '127.0.0.1',
    ]),
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  let exited = false;
  child.once('exit', () => (exited = true));
  const port = await new Promise((resolve, reject) => {
    let buf = '';
    const t = setTimeout(() => reject(new Error('gateway did not start')), 20_000);
    child.stdout.on('data', (c) => {
      buf += c;
      const line = buf.split('\n').find((l) => l.includes('servegate listening'));
      if (line) {
        clearTimeout(t);
        resolve(JSON.parse(line).port);
      }
    });
  });
  const small = Buffer.from('{"model":"demo/chat","messages":[{"role":"user","content":"hi"}]}');
  console.log(
    `JSON bodies of ${(SIZE / 1048576).toFixed(1)} MiB, ${concurrent} at once through a fallback, heap ${values.heap} MiB:`,
  );
  let survived = 0;
  for (const [name, make] of SHAPES.slice(0, Number(values.shapes))) {
    if (exited) break;
    const body = make();
    let peak = rssMb(child.pid);
    const sampler = setInterval(() => (peak = Math.max(peak, rssMb(child.pid))), 10);
    const t0 = performance.now();
    const got = await Promise.all(Array.from({ length: concurrent }, () => post(port, body)));
    const ms = performance.now() - t0;
    clearInterval(sampler);
    const next = exited ? 'gone' : await post(port, small);
    const served = got.filter((s) => s === 200).length;
    const busy = got.filter((s) => s === 503).length;
    const ok = served + busy === got.length && served > 0 && next === 200;
    if (ok) survived++;
    console.log(
      `  ${name.padEnd(16)} ${ok ? 'survived' : 'FAILED  '} 200×${served} 503×${busy}${served + busy < got.length ? ` other ${got.filter((s) => s !== 200 && s !== 503).join(',')}` : ''} next ${next}  ${ms.toFixed(0)} ms  peak RSS ${peak.toFixed(0)} MB`,
    );
  }
  console.log(
    `goal: every worst shape at the limit survives at the chart's heap: ${survived === Math.min(SHAPES.length, Number(values.shapes)) ? 'met' : 'MISSED'}`,
  );
} finally {
  child?.kill('SIGKILL');
  for (const s of servers) s.close();
  rmSync(dir, { recursive: true, force: true });
}

// The prefix key of a body with a 24 MiB image part and 15 MiB of tools (the part and the tools before the question).
const { llmMembers } = await import(new URL('gateway/openai/llm-body.js', root).href);
const { prefixKey } = await import(new URL('gateway/openai/prefix.js', root).href);
const big = Buffer.from(
  JSON.stringify({
    model: 'x',
    tools: Array.from({ length: 40_000 }, (_, i) => ({
      type: 'function',
      function: { name: `f${i}`, description: 'd'.repeat(360), parameters: { type: 'object' } },
    })),
    messages: [
      {
        role: 'user',
        content: [
          { type: 'image_url', image_url: { url: `data:image/png;base64,${'A'.repeat(24 << 20)}` } },
          { type: 'text', text: 'what is this?' },
        ],
      },
      { role: 'user', content: 'and?' },
    ],
  }),
);
const members = llmMembers(big);
const runs = 50;
const t0 = process.cpuUsage();
for (let i = 0; i < runs; i++) prefixKey(big, members, 'm');
const c = process.cpuUsage(t0);
const us = (c.user + c.system) / runs;
console.log(
  `prefix key of a ${(big.length / 1048576).toFixed(0)} MiB body (24 MiB image part, 15 MiB of tools): ${us.toFixed(0)} µs CPU per key`,
);
