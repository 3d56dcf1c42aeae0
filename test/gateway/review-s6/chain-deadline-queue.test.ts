// Review of the request path's reshaping (2026-11-27, R1): the chain's deadline now rides on each try's UpstreamCall
// and a wait moves the previous call's deadline on (next-target.ts `waited`, `deadlineFor`). Pinned end to end: a
// fallback that waits in its fair queue longer than the first deployment's whole timeoutSeconds still gets what was
// left of the deadline when the wait began (docs/llm.md: the wait does not count against timeoutSeconds; one deadline
// for the chain), and is answered, not 504.
import type { ServerResponse } from 'node:http';
import { afterAll, beforeAll, expect, test } from '@jest/globals';
import { RecordingBackend } from '../../support/backends.js';
import { send, startGateway, type Gateway, type Reply } from '../../support/harness.js';
import { metricValue } from '../../support/metrics.js';
import { waitFor } from '../../support/wait.js';
import { startSimReplica, type SimReplica } from '../../support/vllm-sim.js';

let replica: SimReplica;
let failing: RecordingBackend;
let gw: Gateway;

const doc = (name: string, url: string, extra: Record<string, unknown> = {}) => ({
  apiVersion: 'serving.servegate.dev/v1alpha1',
  kind: 'ServingDeployment',
  metadata: { name, namespace: 'demo' },
  spec: { type: 'model', modelServer: 'llm', backend: { url }, ...extra },
});

beforeAll(async () => {
  replica = await startSimReplica({ maxRunning: 1, decodeMsPerToken: 10, prefillMsPerBlock: 0 });
  failing = await new RecordingBackend((_req, res: ServerResponse) => {
    res.writeHead(503, { 'content-type': 'application/json' });
    res.end('{"error":{"message":"overloaded","type":"server_error"}}');
  }).listen();
  gw = await startGateway({
    config: {
      balancing: { maxWaiting: 0, scrapeIntervalMs: 10, staleAfterMs: 5000 },
      queueing: { maxQueued: 4, maxWaitSeconds: 10 },
    },
    files: {
      'llm.yaml': [
        // The chain's one deadline: 3 s from the first forward.
        doc('first', failing.url, { timeoutSeconds: 3, fallbacks: ['chat'] }),
        doc('chat', replica.url, { timeoutSeconds: 30 }),
      ],
    },
    keys: [{ name: 'k', projects: 'demo' }],
  });
});

afterAll(async () => {
  await gw?.close();
  await Promise.all([replica?.close(), failing?.close()]);
});

const chat = (deployment: string, content: string, maxTokens: number): Promise<Reply> =>
  send(`${gw.url}/v1/demo/${deployment}/v1/chat/completions`, {
    headers: { authorization: `ApiKey ${gw.keys.k}` },
    body: { model: deployment, max_tokens: maxTokens, messages: [{ role: 'user', content }] },
    timeoutMs: 15_000,
  });
const metrics = async () => (await send(`${gw.adminUrl}/metrics`)).text;

test('a fallback that waits in its fair queue past the first deployment’s timeoutSeconds is still answered (the wait does not count)', async () => {
  // The replica runs one sequence at a time: a 4 s one running, a short one waiting, so the gateway reads it as
  // saturated for 4 s; once the long one ends there is room (the short one runs and nothing waits).
  const long = [chat('chat', 'long one', 400), chat('chat', 'long two', 20)];
  await waitFor(() => replica.stats().waiting === 1, 'the replica to have one waiting');
  await waitFor(async () => {
    const d = JSON.parse((await send(`${gw.adminUrl}/deployments`)).text);
    return d.deployments.find((x: { name: string }) => x.name === 'chat').endpoints?.[0]?.waiting === 1;
  }, 'the gateway to read it');
  const t0 = performance.now();
  // Its own answer takes 1.2 s after the 0.2 s of the one before it: longer than undici's coarse clock takes to fire
  // a headers timeout of what would be left (nothing) if the wait counted, shorter than the 3 s left if it does not.
  const r = chat('first', 'falls back and waits', 120);
  await waitFor(
    async () =>
      (metricValue(await metrics(), 'servegate_queue_length', {
        project: 'demo',
        deployment: 'chat',
        priority: 'standard',
      }) ?? 0) === 1,
    'the fallback to wait in the queue',
  );
  const answer = await r;
  const ms = performance.now() - t0;
  expect(failing.requests).toHaveLength(1);
  // Waited longer than the whole chain's 3 s: only a wait that does not count leaves the fallback its time.
  expect(ms).toBeGreaterThan(3200);
  expect([answer.status, answer.text.slice(0, 200)]).toEqual([200, expect.any(String)]);
  expect(answer.headers['x-servegate-deployment']).toBe('demo/chat');
  await Promise.all(long);
}, 30_000);
