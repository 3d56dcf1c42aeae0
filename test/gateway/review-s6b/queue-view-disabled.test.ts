// Hostile review (R3) of the empty queue /deployments now shows for an LLM deployment that never queued (fair-queue.ts
// `view`). With queueing switched off (queueing.enabled: false) no request ever waits in the gateway: /deployments
// and the page must not show a queue ("0 waiting; has room", or "saturated") that cannot exist, as they did not before.
import { afterAll, beforeAll, expect, test } from '@jest/globals';
import { send, startGateway, type Gateway } from '../../support/harness.js';
import { startSimReplica, type SimReplica } from '../../support/vllm-sim.js';

let replica: SimReplica;
let gw: Gateway;

beforeAll(async () => {
  replica = await startSimReplica({ maxRunning: 4, decodeMsPerToken: 1, prefillMsPerBlock: 0 });
  gw = await startGateway({
    config: { queueing: { enabled: false } },
    deployments: [{ namespace: 'demo', name: 'chat', modelServer: 'llm', url: replica.url }],
    keys: [{ name: 'apikey-a', projects: 'demo' }],
  });
});

afterAll(async () => {
  await gw?.close();
  await replica?.close();
});

test('queueing off: an LLM deployment shows no queue on /deployments nor on the page', async () => {
  const d = (await send(`${gw.adminUrl}/deployments`)).json().deployments as Array<{ name: string; queue?: unknown }>;
  expect(d.find((x) => x.name === 'chat')).toBeDefined();
  expect(d.find((x) => x.name === 'chat')?.queue).toBeUndefined();
  const page = (await send(`${gw.adminUrl}/`)).text;
  expect(page).not.toContain('0 waiting');
});
