// The chart's heap and the default body limit agree: a gateway started as the chart starts it (512 Mi × 75 % =
// --max-old-space-size=384, default limits: 32 MiB bodies) survives the JSON bodies that cost the most once parsed,
// each just under the limit, four at once on a deployment with fallbacks (whose body is kept until the backend
// answers), and answers the next request. A parsed tree of 30 MiB of `{},` took the process down (SPEC §3, §12).
// Bodies live outside the heap: eight at once took the RSS to 760–820 MB, past the chart's 512 Mi, so the default
// limits.maxBufferedBodyBytes (64 MiB) holds one near-limit body and its edited copy; more wait, then get 503.
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createServer, request, type Server } from 'node:http';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, expect, test } from '@jest/globals';
import { CLI } from '../../support/paths.js';
import { waitFor } from '../../support/wait.js';
import { SCRAPER_USER_AGENT } from '../../../src/gateway/forward/endpoint-stats.js';

const KEY = 'JsonHeapTestKey1.0123456789abcdef0123456789abcdef';
/** The default limits.maxRequestBodyBytes. */
const LIMIT = 33_554_432;
const SIZE = LIMIT - 4096;

/** `head` + `unit` repeated + `tail`, `size` bytes in all (the units fill what the ends leave). */
function fill(head: string, unit: string, tail: string, size = SIZE): Buffer {
  const n = Math.floor((size - head.length - tail.length) / unit.length);
  const b = Buffer.alloc(head.length + n * unit.length + tail.length);
  let at = b.write(head);
  const u = Buffer.from(unit);
  for (let i = 0; i < n; i++) at += u.copy(b, at);
  b.write(tail, at);
  return b;
}

/** The worst bodies of each shape, each a valid chat request of just under the limit. */
function shapes(): Array<[string, Buffer]> {
  const depth = Math.floor((SIZE - 64) / 2);
  const nested = Buffer.alloc(depth * 2 + 64, 0x20);
  let at = nested.write('{"model":"demo/chat","messages":');
  nested.fill('[', at, at + depth);
  nested.fill(']', at + depth, at + 2 * depth);
  nested.write('}', at + 2 * depth);
  at = 0;
  // Unique member names: an object with millions of properties.
  const keys: string[] = [];
  let total = 0;
  for (let i = 0; total < SIZE - 64; i++) {
    const k = `"k${i.toString(36)}":0,`;
    keys.push(k);
    total += k.length;
  }
  return [
    ['{}, repeated', fill('{"model":"demo/chat","messages":[', '{},', '{}]}')],
    ['[ nested deep', nested],
    ['one long string', fill('{"model":"demo/chat","messages":[{"role":"user","content":"', 'abcdefgh', '"}]}')],
    ['short strings', fill('{"model":"demo/chat","messages":[', '"",', '""]}')],
    ['many small numbers', fill('{"model":"demo/chat","prompt":[', '0,', '0]}')],
    ['many keys', Buffer.from(`{${keys.join('')}"model":"demo/chat","prompt":"x"}`)],
  ];
}

let child: ChildProcess;
let port = 0;
let exit: { code: number | null; signal: string | null } | undefined;
let stderr = '';
const backends: Server[] = [];
/** Answers of the holding backend, until `release`. */
const holding: Array<() => void> = [];

/** A backend that reads the whole body, then answers `status`. */
async function backend(status: number): Promise<string> {
  const s = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(status === 200 ? '{"id":"x","object":"chat.completion","choices":[]}' : '{"error":"busy"}');
    });
  });
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  backends.push(s);
  return `http://127.0.0.1:${(s.address() as AddressInfo).port}`;
}

/** A backend that reads the whole body, then answers 200 only when released. */
async function holdingBackend(): Promise<string> {
  const s = createServer((req, res) => {
    // The gateway's scrapes of /metrics (SPEC §12) are not held: only the requests under test.
    if (req.headers['user-agent'] === SCRAPER_USER_AGENT) return void res.writeHead(404).end();
    req.resume();
    req.on('end', () =>
      holding.push(() => res.writeHead(200, { 'content-type': 'application/json' }).end('{"choices":[]}')),
    );
  });
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  backends.push(s);
  return `http://127.0.0.1:${(s.address() as AddressInfo).port}`;
}

beforeAll(async () => {
  const [busy, ok, hold] = await Promise.all([backend(503), backend(200), holdingBackend()]);
  const dir = mkdtempSync(join(tmpdir(), 'servegate-json-heap-'));
  const sha = createHash('sha256').update(KEY).digest('hex');
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
apiVersion: serving.servegate.dev/v1alpha1
kind: ServingDeployment
metadata: {name: held, namespace: demo}
spec: {type: model, modelServer: llm, modelName: held, backend: {url: "${hold}"}, fallbacks: [rescue]}
---
apiVersion: v1
kind: Secret
metadata: {name: k, labels: {serving.servegate.dev/api-key: "true"}}
stringData: {prefix: JsonHeapTestKey1, projects: demo, sha256: ${sha}}
`,
  );
  // Default limits; only the access log is off (one line per request is not what is measured).
  writeFileSync(join(dir, 'config.yaml'), 'logLevel: info\naccessLog: false\n');
  child = spawn(
    process.execPath,
    [
      '--max-old-space-size=384',
      CLI,
      'serve',
      '--manifests',
      join(dir, 'app.yaml'),
      '--config',
      join(dir, 'config.yaml'),
      '--port',
      '0',
      '--admin-port',
      '0',
      '--host',
      '127.0.0.1',
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  child.stderr!.on('data', (c: Buffer) => {
    if (stderr.length < 65_536) stderr += c.toString();
  });
  child.once('exit', (code, signal) => (exit = { code, signal }));
  await new Promise<void>((resolve, reject) => {
    let buf = '';
    const t = setTimeout(() => reject(new Error(`gateway did not start: ${stderr}`)), 20_000);
    child.stdout!.on('data', (c: Buffer) => {
      buf += c.toString();
      for (const line of buf.split('\n')) {
        if (!line.includes('servegate listening')) continue;
        port = (JSON.parse(line) as { port: number }).port;
        clearTimeout(t);
        resolve();
      }
    });
  });
});

afterAll(async () => {
  child?.kill('SIGKILL');
  await Promise.all(backends.map((s) => new Promise<void>((r) => s.close(() => r()))));
});

/** POSTs `body` to the OpenAI base URL; the status, or the error that ended the exchange. */
function post(body: Buffer, path = '/openai/v1/chat/completions'): Promise<number | string> {
  return postFull(body, path).then((r) => (typeof r === 'string' ? r : r.status));
}

/** POSTs `body`; the status and the answer's Retry-After and error code, or the error that ended the exchange. */
function postFull(
  body: Buffer,
  path = '/openai/v1/chat/completions',
): Promise<string | { status: number; retryAfter?: string; code?: string }> {
  return new Promise((resolve) => {
    const req = request(
      {
        host: '127.0.0.1',
        port,
        path,
        method: 'POST',
        headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', 'content-length': body.length },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (text += text.length < 4096 ? c : ''));
        res.on('end', () => {
          let code: string | undefined;
          try {
            code = (JSON.parse(text) as { error?: { code?: string } }).error?.code;
          } catch {
            // not JSON: no code
          }
          const retryAfter = res.headers['retry-after'];
          resolve({ status: res.statusCode!, ...(retryAfter ? { retryAfter } : {}), ...(code ? { code } : {}) });
        });
        res.on('error', (e) => resolve(e.message));
      },
    );
    req.on('error', (e) => resolve(e.message));
    req.end(body);
  });
}

test('the costliest JSON bodies just under the default limit, four at once through a fallback, leave the gateway serving', async () => {
  const small = Buffer.from('{"model":"demo/chat","messages":[{"role":"user","content":"hi"}]}');
  for (const [shape, body] of shapes()) {
    expect(body.length).toBeLessThanOrEqual(LIMIT);
    // The deployment answers 503, its fallback 200: every body is kept until the fallback answers.
    // Past the budget of buffered bodies one may wait its turn and, on a slow machine, get 503 instead.
    const got = await Promise.all([post(body), post(body), post(body), post(body)]);
    expect({ shape, served: got.includes(200), exit }).toEqual({ shape, served: true, exit: undefined });
    expect({ shape, got: got.filter((s) => s !== 200 && s !== 503) }).toEqual({ shape, got: [] });
    expect({ shape, next: await post(small) }).toEqual({ shape, next: 200 });
  }
  // The deployment's own URL reads the body the same way.
  const [, deep] = shapes()[1];
  expect(await post(deep, '/v1/demo/chat/v1/chat/completions')).toBe(200);
  expect({ exit, stderr: exit ? stderr : '' }).toEqual({ exit: undefined, stderr: '' });
}, 240_000);

test('eight of the largest bodies at once: each is served or waits and gets 503 server_busy, and the gateway serves on', async () => {
  const [, body] = shapes()[0];
  const got = await Promise.all(Array.from({ length: 8 }, () => postFull(body)));
  for (const r of got) {
    expect(typeof r === 'string' || r.status === 200 || (r.status === 503 && r.retryAfter === '1')).toBe(true);
    if (typeof r !== 'string' && r.status === 503) expect(r.code).toBe('server_busy');
  }
  expect(got.some((r) => typeof r !== 'string' && r.status === 200)).toBe(true);
  expect(got.every((r) => typeof r !== 'string')).toBe(true);
  expect(await post(Buffer.from('{"model":"demo/chat","messages":[]}'))).toBe(200);
  expect({ exit }).toEqual({ exit: undefined });
}, 240_000);

test('at the default limits, a near-limit body held for its answer leaves no room for another: it waits, then 503', async () => {
  const body = fill('{"model":"demo/held","messages":[{"role":"user","content":"', 'abcdefgh', '"}]}');
  // Kept for a fallback and rewritten for /openai/v1: the body and its edited copy, 64 MiB, the whole budget.
  const first = postFull(body);
  await waitFor(() => holding.length > 0, 'the first body at the backend', 60_000);
  const t0 = performance.now();
  // 16 KiB: more than the few KiB the first leaves (it is 4 KiB under the body limit).
  const small = fill('{"model":"demo/held","messages":[{"role":"user","content":"', 'abcdefgh', '"}]}', 16_384);
  const second = await postFull(small);
  expect(second).toEqual({ status: 503, retryAfter: '1', code: 'server_busy' });
  // It waited for room (limits.bufferedBodyWaitSeconds, 10 s) before the refusal.
  expect(performance.now() - t0).toBeGreaterThanOrEqual(9_000);
  holding.shift()!();
  expect(await first).toEqual({ status: 200 });
  expect({ exit }).toEqual({ exit: undefined });
}, 120_000);
