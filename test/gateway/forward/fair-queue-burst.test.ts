// A burst on a deployment whose capacity the gateway has not learnt yet (no report with waiting requests so far: a
// fresh gateway, or a fleet never saturated before). Before, it passed the fair queue whole into the backend's FIFO:
// room was maxWaiting + 1 - waiting, without this replica's own requests since the scrape, so every request of a burst
// between two scrapes found room (12 of 12 at a replica of 2). Now the unknown capacity is guessed as twice the running
// requests the last report showed (at least 1), growing with each report: the first burst waits in the gateway, and
// the endpoint holds at most twice its capacity + maxWaiting + 1 before a report with waiting requests teaches it.
// Found by a hostile review.
import { afterAll, beforeAll, expect, test } from '@jest/globals';
import { send, startGateway, type Gateway, type Reply } from '../../support/harness.js';
import { waitFor } from '../../support/wait.js';
import { startSimReplica, type SimReplica } from '../../support/vllm-sim.js';

let replica: SimReplica;
let gw: Gateway;

beforeAll(async () => {
  replica = await startSimReplica({ maxRunning: 2, decodeMsPerToken: 10, prefillMsPerBlock: 0 });
  gw = await startGateway({
    config: { balancing: { maxWaiting: 0, scrapeIntervalMs: 20, staleAfterMs: 5000 } },
    deployments: [{ namespace: 'demo', name: 'chat', modelServer: 'llm', url: replica.url }],
    keys: [{ name: 'apikey-a', projects: 'demo' }],
  });
});

afterAll(async () => {
  await gw?.close();
  await replica?.close();
});

test('a first burst waits in the gateway, not in the backend queue, before any report taught the capacity', async () => {
  // The gateway reads the idle replica's figures first (fresh figures: queueing applies).
  await waitFor(async () => {
    const d = JSON.parse((await send(`${gw.adminUrl}/deployments`)).text);
    return d.deployments.find((x: { name: string }) => x.name === 'chat').endpoints?.[0]?.waiting === 0;
  }, 'the gateway to read the replica');
  let most = 0;
  const sample = setInterval(() => {
    const s = replica.stats();
    most = Math.max(most, s.running + s.waiting);
  }, 1);
  const burst: Promise<Reply>[] = [];
  for (let i = 0; i < 12; i++)
    burst.push(
      send(`${gw.url}/v1/demo/chat/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `ApiKey ${gw.keys['apikey-a']}` },
        body: { model: 'chat', max_tokens: 20, messages: [{ role: 'user', content: `q ${i}` }] },
      }),
    );
  for (const r of await Promise.all(burst)) expect(r.status).toBe(200);
  clearInterval(sample);
  // Guessed 1 (nothing running): 2 sent; then 2 running, guessed 4: 3 more (2 running, 3 waiting); that report
  // teaches the capacity, 2, and nothing more goes until the replica has room: 2 x 2 + maxWaiting 0 + 1.
  expect(most).toBeLessThanOrEqual(5);
}, 30_000);
