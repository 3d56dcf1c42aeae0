// An answer whose head is written after SIGTERM carries Connection: close, also when its request was sent upstream
// before the signal: otherwise a keep-alive client sends its next request on a connection the drain is about to close.
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createServer, request, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, expect, test } from '@jest/globals';
import { waitFor } from '../../support/wait.js';
import { CLI } from '../../support/paths.js';

const KEY = 'DrainCloseTestK1.0123456789abcdef0123456789abcdef';
let backend: Server;
let child: ChildProcess;
let port = 0;
let adminPort = 0;
/** The backend's requests, answered when the test says. */
const waiting: ServerResponse[] = [];

beforeAll(async () => {
  backend = createServer((req: IncomingMessage, res: ServerResponse) => {
    req.resume();
    waiting.push(res);
  });
  await new Promise<void>((r) => backend.listen(0, '127.0.0.1', r));
  const bport = (backend.address() as AddressInfo).port;
  const dir = mkdtempSync(join(tmpdir(), 'servegate-drain-close-'));
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
stringData: {prefix: DrainCloseTestK1, projects: demo, sha256: ${createHash('sha256').update(KEY).digest('hex')}}
`,
  );
  writeFileSync(join(dir, 'config.yaml'), 'logLevel: info\nshutdown: {drainSeconds: 10, acceptSeconds: 0}\n');
  child = spawn(
    process.execPath,
    [CLI, 'serve', '--manifests', join(dir, 'app.yaml'), '--config', join(dir, 'config.yaml'), '--port', '0'].concat([
      '--admin-port',
      '0',
      '--host',
      '127.0.0.1',
    ]),
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  let buf = '';
  child.stdout!.on('data', (c: Buffer) => (buf += c.toString()));
  await waitFor(() => buf.includes('servegate listening'), 'the gateway to listen', 10_000);
  const line = buf.split('\n').find((l) => l.includes('servegate listening'))!;
  ({ port, adminPort } = JSON.parse(line) as { port: number; adminPort: number });
});

afterAll(async () => {
  child?.kill('SIGKILL');
  backend.closeAllConnections();
  await new Promise<void>((r) => backend.close(() => r()));
});

test('a relayed answer whose head leaves after SIGTERM says Connection: close', async () => {
  const answer = new Promise<IncomingMessage>((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port,
        path: '/v1/demo/app/x',
        headers: { authorization: `ApiKey ${KEY}`, connection: 'keep-alive' },
      },
      resolve,
    );
    req.on('error', reject);
    req.end();
  });
  // In flight upstream before the signal.
  await waitFor(() => waiting.length === 1, 'the request to reach the backend', 5000);
  child.kill('SIGTERM');
  await waitFor(
    async () => (await fetch(`http://127.0.0.1:${adminPort}/readyz`)).status === 503,
    'readiness to turn 503 (draining)',
    5000,
    10,
  );
  waiting[0].end('{"ok":true}');
  const res = await answer;
  res.resume();
  expect(res.statusCode).toBe(200);
  expect(res.headers.connection).toBe('close');
});
