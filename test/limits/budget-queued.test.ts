// A budget that runs out while requests wait in a saturated deployment's fair queue (SPEC §14: the check is made
// before the body is forwarded): the requests still queued are refused with 429 insufficient_quota when their turn
// comes, and never reach the backend. Before, the check was made once on arrival, so a tenant's whole backlog (up to
// maxQueued requests, for up to maxWaitSeconds) went on after its budget was spent. Found by a hostile review.
import { afterAll, beforeAll, expect, test } from '@jest/globals';
import { send, startGateway, type Gateway, type Reply } from '../support/harness.js';
import { metricValue } from '../support/metrics.js';
import { waitFor } from '../support/wait.js';
import { startSimReplica, type SimReplica } from '../support/vllm-sim.js';

let replica: SimReplica;
let gw: Gateway;
const chat = (content: string, maxTokens: number) => ({
  model: 'chat',
  max_tokens: maxTokens,
  messages: [{ role: 'user', content }],
});

beforeAll(async () => {
  // One running sequence, 10 ms a token: answers follow one another.
  replica = await startSimReplica({ maxRunning: 1, decodeMsPerToken: 10, prefillMsPerBlock: 0 });
  gw = await startGateway({
    config: {
      balancing: { maxWaiting: 0, scrapeIntervalMs: 10, staleAfterMs: 5000 },
      queueing: { maxWaitSeconds: 20 },
    },
    deployments: [{ namespace: 'demo', name: 'chat', modelServer: 'llm', url: replica.url }],
    keys: [
      { name: 'apikey-other', projects: 'demo' },
      // Any answer spends it: the first request that reaches the backend runs it out.
      { name: 'apikey-budget', projects: 'demo', fields: { budgetTokens: '1' } },
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
  });
const queued = async () =>
  metricValue((await send(`${gw.adminUrl}/metrics`)).text, 'servegate_queue_length', {
    project: 'demo',
    deployment: 'chat',
    priority: 'standard',
  }) ?? 0;

test('requests admitted before their budget ran out, still queued when it did, get 429 insufficient_quota', async () => {
  // Saturate the replica (one running, one waiting) and let the gateway read it.
  const long = [post('apikey-other', chat('long one', 60)), post('apikey-other', chat('long two', 60))];
  await waitFor(() => replica.stats().waiting === 1, 'the replica to have one waiting');
  await waitFor(async () => {
    const d = JSON.parse((await send(`${gw.adminUrl}/deployments`)).text);
    return d.deployments.find((x: { name: string }) => x.name === 'chat').endpoints?.[0]?.waiting === 1;
  }, 'the gateway to read it');
  const served = replica.stats().served;

  // Six requests of the budgeted key, all admitted (nothing spent yet), all waiting in the gateway.
  const budgeted: Promise<Reply>[] = [];
  for (let i = 0; i < 6; i++) budgeted.push(post('apikey-budget', chat(`question ${i}`, 5)));
  await waitFor(async () => (await queued()) === 6, 'six requests to wait in the gateway');

  const answers = await Promise.all(budgeted);
  for (const r of await Promise.all(long)) expect(r.status).toBe(200);
  // Those sent on before the first of them ended and was charged are answered (the gateway lets capacity + maxWaiting
  // + 1 = 2 be at the replica); every one whose turn came after is refused, in queue order.
  const ok = answers.filter((r) => r.status === 200).length;
  expect(ok).toBeGreaterThanOrEqual(1);
  expect(ok).toBeLessThanOrEqual(3);
  expect(answers.map((r) => r.status)).toEqual([...Array(ok).fill(200), ...Array(6 - ok).fill(429)]);
  for (const r of answers.slice(ok)) {
    expect(r.json().error).toMatchObject({ type: 'insufficient_quota', code: 'insufficient_quota' });
    expect(r.json().error.message).toMatch(/API key "apikey-budget" has spent \d+ tokens of 1 of its month budget/);
    // The figures of the refusal alone, not those of the admission before them ("1, 0").
    expect(r.headers['x-servegate-budget-remaining-tokens']).toBe('0');
    expect(r.headers['x-servegate-budget-limit-tokens']).toBe('1');
  }
  // Only the long two and the budgeted requests answered reached the backend.
  await waitFor(() => replica.stats().served - served === 2 + ok, 'the backend to have served them');
  // Stays: "no other request reaches the backend" has no event to wait for; a window anchored on the count reached.
  await new Promise((r) => setTimeout(r, 200));
  expect(replica.stats().served - served).toBe(2 + ok);
  const text = (await send(`${gw.adminUrl}/metrics`)).text;
  expect(metricValue(text, 'servegate_rate_limited_total', { scope: 'key', kind: 'tokens', reason: 'budget' })).toBe(
    6 - ok,
  );
}, 30_000);
