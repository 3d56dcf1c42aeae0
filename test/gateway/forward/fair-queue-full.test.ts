// Fair shares at the queue's bound (SPEC §14: "within a priority, fair shares across tenants"): a tenant that keeps
// maxQueued requests waiting must not turn another tenant's first request away. Before, a full queue made room only
// from a lower priority, so at one priority the newcomer got 503 queue_full whoever held the queue (a probe through
// `servegate serve`, maxQueued 4, a noisy tenant sending 10: the quiet tenant's one request refused while the noisy
// tenant had 4 waiting). Now the newest request of the tenant holding the most places (per weight) is refused instead,
// as one of a lower priority would be. Found by a hostile review.
import { afterAll, beforeAll, expect, test } from '@jest/globals';
import { send, startGateway, type Gateway, type Reply } from '../../support/harness.js';
import { metricValue } from '../../support/metrics.js';
import { waitFor } from '../../support/wait.js';
import { startSimReplica, type SimReplica } from '../../support/vllm-sim.js';

let replica: SimReplica;
let gw: Gateway;

beforeAll(async () => {
  replica = await startSimReplica({ maxRunning: 1, decodeMsPerToken: 10, prefillMsPerBlock: 0 });
  gw = await startGateway({
    config: {
      balancing: { maxWaiting: 0, scrapeIntervalMs: 10, staleAfterMs: 5000 },
      queueing: { maxQueued: 4, maxWaitSeconds: 10 },
    },
    deployments: [{ namespace: 'demo', name: 'chat', modelServer: 'llm', url: replica.url }],
    keys: [
      { name: 'apikey-noisy', projects: 'demo' },
      { name: 'apikey-quiet', projects: 'demo' },
    ],
  });
});

afterAll(async () => {
  await gw?.close();
  await replica?.close();
});

const post = (key: string, content: string, maxTokens = 10) =>
  send(`${gw.url}/v1/demo/chat/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `ApiKey ${gw.keys[key]}` },
    body: { model: 'chat', max_tokens: maxTokens, messages: [{ role: 'user', content }] },
  });
const queued = async () =>
  metricValue((await send(`${gw.adminUrl}/metrics`)).text, 'servegate_queue_length', {
    project: 'demo',
    deployment: 'chat',
    priority: 'standard',
  }) ?? 0;

test("a tenant holding the whole queue does not turn another tenant's first request away", async () => {
  // The replica busy (one running, one waiting) and read as such.
  const long = [post('apikey-noisy', 'long one', 60), post('apikey-noisy', 'long two', 60)];
  await waitFor(() => replica.stats().waiting === 1, 'the replica to have one waiting');
  await waitFor(async () => {
    const d = JSON.parse((await send(`${gw.adminUrl}/deployments`)).text);
    return d.deployments.find((x: { name: string }) => x.name === 'chat').endpoints?.[0]?.waiting === 1;
  }, 'the gateway to read it');
  const noisy: Promise<Reply>[] = [];
  for (let i = 0; i < 4; i++) noisy.push(post('apikey-noisy', `noisy ${i}`));
  await waitFor(async () => (await queued()) === 4, 'the queue to be full of the noisy tenant');
  const quiet = await post('apikey-quiet', 'quiet one');
  expect(quiet.status).toBe(200);
  const statuses = (await Promise.all(noisy)).map((r) => r.status);
  // The noisy tenant's newest made room: refused with 503 overloaded, the others answered.
  expect(statuses).toEqual([200, 200, 200, 503]);
  for (const r of await Promise.all(long)) expect(r.status).toBe(200);
}, 30_000);
