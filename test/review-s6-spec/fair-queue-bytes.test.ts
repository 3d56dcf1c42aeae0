// SPEC §14 queueing bounds and priorities on cases the project's own tests do not reach end to end: past
// `maxQueuedBytes` a request is refused at once with 503 + Retry-After, OpenAI code `overloaded` (the per-deployment
// URL and /openai/v1 alike), shed as `queue_bytes`, while what waited keeps its place and is answered; /deployments
// counts the queued bytes; a deployment's `spec.priority: sheddable` refuses its keys' requests with 429 `overloaded`
// at once while saturated, and a key's own priority (critical) goes before the deployment's. Real sockets against a
// simulated vLLM replica of one running sequence (examples/backends/vllm-sim.mjs).
import { afterAll, beforeAll, expect, test } from '@jest/globals';
import { send, startGateway, type Gateway, type Reply } from '../support/harness.js';
import { metricValue } from '../support/metrics.js';
import { waitFor } from '../support/wait.js';
import { startSimReplica, type SimReplica } from '../support/vllm-sim.js';

let replica: SimReplica;
let gw: Gateway;
/** One answer of `maxTokens` takes about maxTokens × 10 ms. */
const chat = (content: string, maxTokens: number, extra: object = {}) => ({
  model: 'chat',
  max_tokens: maxTokens,
  messages: [{ role: 'user', content }],
  ...extra,
});

beforeAll(async () => {
  replica = await startSimReplica({ maxRunning: 1, decodeMsPerToken: 10, prefillMsPerBlock: 0 });
  gw = await startGateway({
    config: {
      balancing: { maxWaiting: 0, scrapeIntervalMs: 10, staleAfterMs: 5000 },
      queueing: { maxQueued: 10, maxQueuedBytes: 1500, maxWaitSeconds: 4 },
    },
    deployments: [
      { namespace: 'demo', name: 'chat', modelServer: 'llm', url: replica.url },
      { namespace: 'demo', name: 'batch', modelServer: 'llm', url: replica.url, spec: { priority: 'sheddable' } },
    ],
    keys: [
      { name: 'apikey-std', projects: 'demo' },
      { name: 'apikey-crit', projects: 'demo', fields: { priority: 'critical' } },
    ],
  });
});

afterAll(async () => {
  await gw?.close();
  await replica?.close();
});

const post = (key: string, body: object, path = '/v1/demo/chat/v1/chat/completions') =>
  send(`${gw.url}${path}`, { method: 'POST', headers: { authorization: `ApiKey ${gw.keys[key]}` }, body });
const queueOf = async (name: string) =>
  (await send(`${gw.adminUrl}/deployments`)).json().deployments.find((x: { name: string }) => x.name === name)?.queue;

test('past maxQueuedBytes 503 overloaded at once; a sheddable deployment refuses with 429; a critical key goes on', async () => {
  // Saturate: one running (2 s), one waiting in the replica's own queue; the gateway reads it.
  const long = [post('apikey-std', chat('long one', 200)), post('apikey-std', chat('long two', 20))];
  await waitFor(() => replica.stats().waiting === 1, 'the replica to have one waiting');
  await waitFor(async () => {
    const d = (await send(`${gw.adminUrl}/deployments`)).json();
    return d.deployments.find((x: { name: string }) => x.name === 'chat').endpoints?.[0]?.waiting === 1;
  }, 'the gateway to read it');

  const small = chat('q1', 2);
  const waiting = post('apikey-std', small);
  await waitFor(async () => (await queueOf('chat'))?.queued === 1, 'q1 to be queued');
  expect(await queueOf('chat')).toEqual({
    queued: 1,
    bytes: Buffer.byteLength(JSON.stringify(small)),
    byPriority: { critical: 0, standard: 1 },
    saturated: true,
  });

  const big = chat('x'.repeat(2000), 2);
  const refused = [
    await post('apikey-std', big),
    await post('apikey-std', { ...big, model: 'demo/chat' }, '/openai/v1/chat/completions'),
  ];
  for (const r of refused) {
    expect(r.status).toBe(503);
    expect(r.headers['retry-after']).toBe('4');
    expect(r.json().error).toMatchObject({ code: 'overloaded' });
    expect(r.json().error.message).toMatch(
      /deployment demo\/chat is saturated: its queue in the gateway holds too many bytes/,
    );
  }

  const shed: Reply = await post('apikey-std', chat('batch', 2), '/v1/demo/batch/v1/chat/completions');
  expect(shed.status).toBe(429);
  expect(shed.headers['retry-after']).toBe('4');
  expect(shed.json().error).toMatchObject({ code: 'overloaded' });
  expect(shed.json().error.message).toMatch(/sheddable requests are refused while it is saturated/);
  // The key's own priority before the deployment's: a critical request is not shed.
  const critical = post('apikey-crit', chat('batch critical', 2), '/v1/demo/batch/v1/chat/completions');

  const answers = await Promise.all([...long, waiting, critical]);
  expect(answers.map((a) => a.status)).toEqual([200, 200, 200, 200]);
  const text = (await send(`${gw.adminUrl}/metrics`)).text;
  const labels = { project: 'demo', deployment: 'chat', priority: 'standard' };
  expect(metricValue(text, 'servegate_queue_shed_total', { ...labels, reason: 'queue_bytes' })).toBe(2);
  expect(
    metricValue(text, 'servegate_queue_shed_total', {
      project: 'demo',
      deployment: 'batch',
      priority: 'sheddable',
      reason: 'sheddable',
    }),
  ).toBe(1);
  expect(metricValue(text, 'servegate_queue_wait_seconds_count', labels)).toBe(1);
}, 30_000);
