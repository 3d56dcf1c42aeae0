// Review of the request path's reshaping (2026-11-27, R1), hold + body read while held: a body still arriving while its
// request is held for scale from zero is read and counted in the budget of buffered bodies (next-target.ts hold(),
// scale-from-zero.ts readWhileHeld). When the held request is answered without being forwarded (the hold's timeout
// here; a 408 of a slow body alike), its room is given back, but the reader stayed on the request: what the client
// still sent while the refused connection lingered (Node reads it on) was counted again into the room given back,
// which nothing gives back again. Those bytes were taken from every other request for good: past
// limits.maxBufferedBodyBytes, every LLM or predictive request (their bodies are read whole) waited
// bufferedBodyWaitSeconds and got 503 server_busy, until the gateway restarted.
import net from 'node:net';
import { afterAll, beforeAll, expect, test } from '@jest/globals';
import { request } from 'undici';
import { startKubernetesWith } from '../../../src/cli/serve-kubernetes.js';
import { parseConfig } from '../../../src/config/load.js';
import { silentLogger } from '../../../src/log.js';
import type { Servegate } from '../../../src/server.js';
import { startOpenAIBackend, type OpenAIBackend } from '../../support/backends.js';
import { FakeApiServer } from '../../support/fake-apiserver.js';
import { apiKey } from '../../support/fixtures.js';
import { keySecretRaw, sdepRaw, serviceRaw, sliceRaw } from '../../support/k8s-objects.js';
import { waitFor } from '../../support/wait.js';

/** The budget of buffered bodies: 256 KiB. */
const BUDGET = 262_144;

let api: FakeApiServer;
let gw: Servegate;
let warm: OpenAIBackend;
let cold: OpenAIBackend;
const key = apiKey('apikey-held', 'demo');

beforeAll(async () => {
  [warm, cold] = await Promise.all([startOpenAIBackend(), startOpenAIBackend()]);
  api = await FakeApiServer.start({ bookmarkIntervalMs: 500 });
  api.create(keySecretRaw(key.secret));
  for (const [name, b] of [
    ['warm', warm],
    ['cold', cold],
  ] as const) {
    const port = Number(new URL(b.url).port);
    api.create(serviceRaw(`demo/${name}`, [{ name: 'http', port }]));
    api.create(
      sliceRaw(`demo/${name}-1`, name, [{ name: 'http', port }], [{ ip: '127.0.0.1', ready: name === 'warm' }]),
    );
  }
  // An LLM deployment that is up, and a python one (its bodies stream through) scaled to zero: held 1 s at most.
  api.create(
    sdepRaw('demo/warm', { modelServer: 'llm', backend: { service: 'warm', port: Number(new URL(warm.url).port) } }),
  );
  api.create(
    sdepRaw('demo/cold', {
      type: 'python',
      modelServer: undefined,
      backend: { service: 'cold', port: Number(new URL(cold.url).port) },
      scaleFromZero: { holdSeconds: 1 },
    }),
  );
  const config = parseConfig(
    { limits: { maxBufferedBodyBytes: BUDGET, bufferedBodyWaitSeconds: 1, requestBodyMinBytesPerSecond: 0 } },
    { port: 0, namespace: 'servegate' },
  );
  gw = await startKubernetesWith(api.kubeConfig(), config, {
    port: 0,
    adminPort: 0,
    host: '127.0.0.1',
    logger: silentLogger,
    namespace: 'servegate',
    identity: 'review-s6-held-body',
    processMetrics: false,
    backoff: { initialMs: 50, maxMs: 500 },
  });
}, 30_000);

afterAll(async () => {
  await gw?.close();
  await api?.stop();
  await Promise.all([warm?.close(), cold?.close()]);
});

/** A chat request whose 100 KB body is read whole, within the budget. */
const chat = () =>
  request(`http://127.0.0.1:${gw.port}/v1/demo/warm/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `ApiKey ${key.key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'warm', messages: [{ role: 'user', content: 'x'.repeat(100_000) }] }),
  }).then(async (r) => ({ status: r.statusCode, text: await r.body.text() }));

test('a held upload answered 503 at the hold’s timeout takes no room from the budget with what it still sends', async () => {
  expect((await chat()).status).toBe(200);
  await waitFor(async () => {
    const d = JSON.parse(await (await request(`http://127.0.0.1:${gw.adminPort}/deployments`)).body.text());
    return d.deployments.some((x: { name: string }) => x.name === 'cold');
  }, 'the cold deployment to be routed');

  // 1 MB declared, 1,000 bytes sent: held, and answered 503 after its second.
  // A client that reads the answer only once its upload is sent (its side stays open when the gateway ends its own).
  const s = net.connect({ port: gw.port, host: '127.0.0.1', allowHalfOpen: true });
  let answer = '';
  s.on('data', (c: Buffer) => (answer += c.toString('latin1')));
  s.on('error', () => undefined);
  const closed = new Promise<void>((r) => s.once('close', () => r()));
  await new Promise<void>((r) => s.once('connect', () => r()));
  s.write(
    `POST /v1/demo/cold/upload HTTP/1.1\r\nHost: x\r\nAuthorization: ApiKey ${key.key}\r\n` +
      'Content-Type: application/octet-stream\r\nContent-Length: 1000000\r\n\r\n' +
      'a'.repeat(1000),
  );
  await waitFor(() => answer.startsWith('HTTP/1.1 503 '), 'the hold’s timeout to answer 503');
  expect(answer).toMatch(/no ready endpoint within 1s/);
  // The client sends on (it had not read the answer yet): 400 KB, more than the whole budget, then ends its side. The
  // gateway reads it on while the refused connection lingers, and closes once the client's end is in.
  s.end(Buffer.alloc(400_000, 0x62));
  await closed;

  // The budget is as it was: a 100 KB body is read whole and answered.
  const after = await chat();
  expect([after.status, after.text.slice(0, 120)]).toEqual([200, expect.any(String)]);
  expect(cold.requests).toHaveLength(0);
}, 30_000);
