// SIGTERM under load: nothing accepted before the signal fails, an event stream in flight is cut with an error event
// at the drain deadline, the process exits.
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import { Agent, request } from 'undici';
import { afterAll, beforeAll, expect, test } from '@jest/globals';
import { sleep, waitFor } from '../../support/wait.js';

import { CLI } from '../../support/paths.js';
const KEY = 'ShutdownTestKey1.0123456789abcdef0123456789abcdef';

let backend: Server;
let child: ChildProcess;
let port = 0;
let adminPort = 0;
const exited = new Promise<number | null>((resolve) => {
  const wait = setInterval(() => {
    if (child) {
      clearInterval(wait);
      child.once('exit', (code) => resolve(code));
    }
  }, 5);
});

beforeAll(async () => {
  backend = createServer((req, res) => {
    if (req.url?.startsWith('/events')) {
      // An LLM-style stream: one event every 100 ms, far longer than the drain deadline.
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      let n = 0;
      const t = setInterval(() => res.write(`data: {"n":${n++}}\n\n`), 100);
      res.on('close', () => clearInterval(t));
      return;
    }
    req.resume();
    req.on('end', () => setTimeout(() => res.end('{"ok":true}'), 20));
  });
  await new Promise<void>((r) => backend.listen(0, '127.0.0.1', r));
  const bport = (backend.address() as AddressInfo).port;
  const dir = mkdtempSync(join(tmpdir(), 'servegate-shutdown-'));
  writeFileSync(
    join(dir, 'app.yaml'),
    `apiVersion: serving.servegate.dev/v1alpha1
kind: ServingDeployment
metadata: {name: app, namespace: demo}
spec: {type: python, backend: {url: "http://127.0.0.1:${bport}"}}
---
apiVersion: v1
kind: Secret
metadata: {name: k, labels: {serving.servegate.dev/api-key: "true"}}
stringData: {prefix: ShutdownTestKey1, projects: demo, sha256: ${createHash('sha256').update(KEY).digest('hex')}}
`,
  );
  writeFileSync(join(dir, 'config.yaml'), 'logLevel: info\nshutdown: {drainSeconds: 2, acceptSeconds: 0.3}\n');
  child = spawn(
    process.execPath,
    [
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
    {
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  );
  await new Promise<void>((resolve, reject) => {
    let buf = '';
    const t = setTimeout(() => reject(new Error('gateway did not start')), 10_000);
    child.stdout!.on('data', (c: Buffer) => {
      buf += c.toString();
      for (const line of buf.split('\n')) {
        if (!line.includes('servegate listening')) continue;
        const l = JSON.parse(line) as { port: number; adminPort: number };
        port = l.port;
        adminPort = l.adminPort;
        clearTimeout(t);
        resolve();
      }
    });
  });
});

afterAll(async () => {
  child?.kill('SIGKILL');
  await new Promise<void>((r) => backend.close(() => r()));
});

test('SIGTERM under load: no request accepted before the signal fails, the stream ends with an error event, the process exits', async () => {
  const agent = new Agent({ connections: 8, keepAliveTimeout: 10_000 });
  const url = `http://127.0.0.1:${port}`;
  const headers = { authorization: `ApiKey ${KEY}` };

  // The stream in flight.
  const stream = await request(`${url}/v1/demo/app/events`, { headers, dispatcher: agent });
  expect(stream.statusCode).toBe(200);
  // Read as it comes, so that what arrived before the connection closed is kept when the read fails.
  let streamed = '';
  stream.body.setEncoding('utf8');
  stream.body.on('data', (c: string) => (streamed += c));
  const streamEnd = new Promise<{ ok: boolean }>((resolve) => {
    stream.body.on('end', () => resolve({ ok: true }));
    stream.body.on('error', () => resolve({ ok: false }));
  });

  // Bounded load: 8 workers, until 1.5 s after the signal.
  let signalAt = Infinity;
  let stopAt = Infinity;
  const results: Array<{ sent: number; ok: boolean; err?: string }> = [];
  const worker = async (): Promise<void> => {
    for (let i = 0; i < 10_000 && Date.now() < stopAt; i++) {
      const sent = Date.now();
      try {
        const r = await request(`${url}/v1/demo/app/work`, { method: 'POST', headers, body: '{}', dispatcher: agent });
        await r.body.text();
        results.push({ sent, ok: r.statusCode === 200, err: r.statusCode === 200 ? undefined : String(r.statusCode) });
      } catch (e) {
        results.push({ sent, ok: false, err: (e as Error).message });
        // Stays: a back-off, so that a worker whose connections are refused does not spin the CPU the drain needs.
        await sleep(20);
      }
    }
  };
  const load = Promise.all(Array.from({ length: 8 }, worker));
  // The signal comes once the load is really flowing (40 answers), however slow the machine: counted, not timed.
  await waitFor(() => results.length >= 40, '40 answers under load', 20_000);
  signalAt = Date.now();
  child.kill('SIGTERM');
  stopAt = signalAt + 1500;

  // Readiness turns 503 as soon as the signal is handled (the admin listener stays up while draining).
  await waitFor(
    async () => {
      const ready = await request(`http://127.0.0.1:${adminPort}/readyz`);
      await ready.body.text();
      return ready.statusCode === 503;
    },
    'readiness to turn 503',
    1000,
    10,
  );

  await load;
  const before = results.filter((r) => r.sent < signalAt);
  expect(before.length).toBeGreaterThanOrEqual(40);
  expect(before.filter((r) => !r.ok)).toEqual([]);

  // The stream is cut at the 2 s drain deadline like any broken stream (SPEC §6): what was sent, a blank line that ends
  // any event left open, one last event in the route's dialect (KServe's here: a python deployment), then the
  // connection closes without a clean end, so that a client cannot take the shortened answer for a whole one.
  const s = await streamEnd;
  expect(s.ok).toBe(false);
  expect(streamed.startsWith('data: ')).toBe(true);
  expect(streamed.endsWith('\n\ndata: {"error":"the gateway is shutting down: the answer is incomplete"}\n\n')).toBe(
    true,
  );
  const code = await Promise.race([exited, new Promise((r) => setTimeout(() => r('timeout'), 8000))]);
  expect(code).toBe(0);
  expect(Date.now() - signalAt).toBeLessThan(8000);
  await agent.close();
}, 30_000);
