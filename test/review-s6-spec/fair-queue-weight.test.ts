// SPEC §14: within a priority, fair shares across tenants "weighted by the Secret's `weight` (default 1)". A tenant of
// weight 2 gets two turns for each turn of a tenant of weight 1 while both wait in a saturated deployment's queue
// (start-time fair queueing, docs/llm.md), each tenant's own requests in their order; once the heavier one's backlog
// is gone, the other's rest go. Real sockets against a simulated vLLM replica of one running sequence (vllm-sim.mjs).
// Pins what no other test did end to end: the weight field changes the order.
import { afterAll, beforeAll, expect, test } from '@jest/globals';
import { send, startGateway, type Gateway, type Reply } from '../support/harness.js';
import { metricValue } from '../support/metrics.js';
import { waitFor } from '../support/wait.js';
import { startSimReplica, type SimReplica } from '../support/vllm-sim.js';

let replica: SimReplica;
let gw: Gateway;
/** One answer of `maxTokens` takes about maxTokens × 10 ms. */
const chat = (content: string, maxTokens: number) => ({
  model: 'chat',
  max_tokens: maxTokens,
  messages: [{ role: 'user', content }],
});

beforeAll(async () => {
  replica = await startSimReplica({ maxRunning: 1, decodeMsPerToken: 10, prefillMsPerBlock: 0 });
  gw = await startGateway({
    config: {
      balancing: { maxWaiting: 0, scrapeIntervalMs: 10, staleAfterMs: 5000 },
      queueing: { maxQueued: 50, maxWaitSeconds: 30 },
    },
    deployments: [{ namespace: 'demo', name: 'chat', modelServer: 'llm', url: replica.url }],
    keys: [
      { name: 'apikey-filler', projects: 'demo' },
      { name: 'apikey-heavy', projects: 'demo', fields: { weight: '2' } },
      { name: 'apikey-light', projects: 'demo' },
    ],
  });
});

afterAll(async () => {
  await gw?.close();
  await replica?.close();
});

const post = (key: string, body: object) =>
  send(`${gw.url}/v1/demo/chat/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `ApiKey ${gw.keys[key]}` },
    body,
    timeoutMs: 30_000,
  });
const queued = async () =>
  metricValue((await send(`${gw.adminUrl}/metrics`)).text, 'servegate_queue_length', {
    project: 'demo',
    deployment: 'chat',
    priority: 'standard',
  }) ?? 0;

test('a tenant of weight 2 gets two turns for each of a tenant of weight 1', async () => {
  // Saturate: one running (3 s), one waiting in the replica's own queue; the gateway reads it.
  const long = [post('apikey-filler', chat('long one', 300)), post('apikey-filler', chat('long two', 30))];
  await waitFor(() => replica.stats().waiting === 1, 'the replica to have one waiting');
  await waitFor(async () => {
    const d = (await send(`${gw.adminUrl}/deployments`)).json();
    return d.deployments.find((x: { name: string }) => x.name === 'chat').endpoints?.[0]?.waiting === 1;
  }, 'the gateway to read it');

  // Six of each, the heavy tenant's first: each sent once the one before is queued (their arrival order is known).
  const finished: string[] = [];
  const answers: Promise<Reply>[] = [];
  const names = ['H0', 'H1', 'H2', 'H3', 'H4', 'H5', 'L0', 'L1', 'L2', 'L3', 'L4', 'L5'];
  for (const n of names) {
    const before = await queued();
    const key = n.startsWith('H') ? 'apikey-heavy' : 'apikey-light';
    answers.push(post(key, chat(n, 2)).then((r) => (finished.push(n), r)));
    await waitFor(async () => (await queued()) === before + 1, `${n} to be queued`);
  }
  // All twelve were queued while the first long answer still ran: the order below is the queue's alone.
  expect(replica.stats().served).toBe(0);

  const all = await Promise.all([...long, ...answers]);
  expect(all.map((r) => r.status)).toEqual(all.map(() => 200));
  expect(finished).toEqual(['H0', 'L0', 'H1', 'H2', 'L1', 'H3', 'H4', 'L2', 'H5', 'L3', 'L4', 'L5']);
}, 30_000);
