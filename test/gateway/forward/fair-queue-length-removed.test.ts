// servegate_queue_length after a deployment that queued is removed: its series goes with it, as the deployment's other
// series do (a deployment deleted an hour ago is not listed as one with an empty queue).
import { afterAll, beforeAll, expect, test } from '@jest/globals';
import { send, startGateway, type Gateway, type Reply } from '../../support/harness.js';
import { metricValue } from '../../support/metrics.js';
import { waitFor } from '../../support/wait.js';
import { startSimReplica, type SimReplica } from '../../support/vllm-sim.js';

let replica: SimReplica;
let gw: Gateway;
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
      queueing: { maxQueued: 4, maxWaitSeconds: 10 },
    },
    deployments: [{ namespace: 'demo', name: 'chat', modelServer: 'llm', url: replica.url }],
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
const queued = async () =>
  metricValue((await send(`${gw.adminUrl}/metrics`)).text, 'servegate_queue_length', {
    project: 'demo',
    deployment: 'chat',
    priority: 'standard',
  });

test('a removed deployment has no queue length', async () => {
  const out: Promise<Reply>[] = [post(chat('long one', 60)), post(chat('long two', 60))];
  await waitFor(() => replica.stats().waiting === 1, 'the replica to have one waiting');
  await waitFor(async () => {
    const d = JSON.parse((await send(`${gw.adminUrl}/deployments`)).text);
    return d.deployments.find((x: { name: string }) => x.name === 'chat').endpoints?.[0]?.waiting === 1;
  }, 'the gateway to read it');
  out.push(post(chat('queued', 2)));
  await waitFor(async () => (await queued()) === 1, 'one queued');
  expect((await Promise.all(out)).map((r) => r.status)).toEqual([200, 200, 200]);
  expect(await queued()).toBe(0);
  gw.removeDeployment('demo', 'chat');
  await waitFor(async () => (await post(chat('hello', 1))).status === 404, 'the deployment gone');
  expect(await queued()).toBeUndefined();
});
