// Hostile review (R3) of the pass-over of an address a connection to failed (targets.ts `unreachable`) against the fair
// queue of an LLM deployment (SPEC §14). A dead address has no figures (its /metrics cannot be read), which the queue
// reads as unbounded room: while the one live replica is saturated, every request was sent to the dead address
// (`roomiest` replaced the picker's choice, which had passed it over), paid a refused connect and a retry, and then
// piled into the live replica's own queue instead of waiting fairly in the gateway: one dead pod of two switched fair
// queueing off. An address the picker passes over must be passed over by the queue's room too.
import { afterAll, beforeAll, expect, test } from '@jest/globals';
import { closedPort } from '../../support/backends.js';
import { send, startGateway, type Gateway } from '../../support/harness.js';
import { metricValue } from '../../support/metrics.js';
import { waitFor } from '../../support/wait.js';
import { startSimReplica, type SimReplica } from '../../support/vllm-sim.js';

let replica: SimReplica;
let gw: Gateway;
let dead: string;

const chat = (content: string, maxTokens = 2) => ({
  model: 'chat',
  max_tokens: maxTokens,
  messages: [{ role: 'user', content }],
});

beforeAll(async () => {
  replica = await startSimReplica({ maxRunning: 1, decodeMsPerToken: 10, prefillMsPerBlock: 0 });
  dead = `127.0.0.1:${await closedPort()}`;
  gw = await startGateway({
    config: {
      balancing: { maxWaiting: 0, scrapeIntervalMs: 10, staleAfterMs: 5000 },
      queueing: { maxQueued: 4, maxWaitSeconds: 10 },
    },
    deployments: [
      {
        namespace: 'demo',
        name: 'chat',
        modelServer: 'llm',
        url: replica.url,
        spec: { backend: { urls: [`http://${dead}`, replica.url] } },
      },
    ],
    keys: [{ name: 'k', projects: 'demo' }],
  });
});

afterAll(async () => {
  await gw?.close();
  await replica?.close();
});

const post = (body: object) =>
  send(`${gw.url}/v1/demo/chat/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `ApiKey ${gw.keys.k}` },
    body,
  });

async function endpoints(): Promise<Array<{ address: string; picks: number; waiting?: number }>> {
  const d = (await send(`${gw.adminUrl}/deployments`)).json().deployments as Array<{
    name: string;
    endpoints?: Array<{ address: string; picks: number; waiting?: number }>;
  }>;
  return d.find((x) => x.name === 'chat')?.endpoints ?? [];
}

test('while the live replica is saturated, the dead address is not the room: the request waits in the gateway', async () => {
  // Two requests: the first (or its retry) meets the dead address and marks it down.
  for (let i = 0; i < 2; i++) expect((await post(chat(`warm ${i}`))).status).toBe(200);
  // Saturate the live replica: one running, one waiting in its own queue, and the gateway reading it so.
  const long = [post(chat('long one', 150)), post(chat('long two', 150))];
  await waitFor(() => replica.stats().waiting === 1, 'the replica to have one waiting');
  await waitFor(
    async () => (await endpoints()).find((e) => e.address !== dead)?.waiting === 1,
    'the gateway to read it',
  );
  const next = post(chat('short'));
  // It waits in the gateway's queue (the dead address passed over), or it went on: into the replica's own queue
  // (after a refused connect at the dead address, which the queue took for the roomiest endpoint).
  let queued: number | undefined;
  await waitFor(async () => {
    queued = metricValue((await send(`${gw.adminUrl}/metrics`)).text, 'servegate_queue_length', {
      project: 'demo',
      deployment: 'chat',
      priority: 'standard',
    });
    return queued === 1 || replica.stats().waiting > 1;
  }, 'the request to be queued or sent');
  const seen = { queued, replicaWaiting: replica.stats().waiting };
  const answers = await Promise.all([...long, next]);
  expect(seen).toEqual({
    queued: 1,
    replicaWaiting: 1,
  });
  expect(answers.map((r) => r.status)).toEqual([200, 200, 200]);
}, 20_000);
