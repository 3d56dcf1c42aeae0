// SPEC §14: "/deployments and the page show the queue" — of every LLM deployment, one that never queued included
// (an empty queue, not none); deployments of other kinds never queue and show none.
import { afterAll, beforeAll, expect, test } from '@jest/globals';
import { RecordingBackend } from '../../support/backends.js';
import { send, startGateway, type Gateway } from '../../support/harness.js';
import { startSimReplica, type SimReplica } from '../../support/vllm-sim.js';

let replica: SimReplica;
let py: RecordingBackend;
let gw: Gateway;

beforeAll(async () => {
  replica = await startSimReplica({ maxRunning: 4, decodeMsPerToken: 1, prefillMsPerBlock: 0 });
  py = await new RecordingBackend((_req, res) => void res.end('ok')).listen();
  gw = await startGateway({
    deployments: [
      { namespace: 'demo', name: 'chat', modelServer: 'llm', url: replica.url },
      { namespace: 'demo', name: 'app', type: 'python', url: py.url },
    ],
    keys: [{ name: 'apikey-a', projects: 'demo' }],
  });
});

afterAll(async () => {
  await gw?.close();
  await replica?.close();
  await py?.close();
});

test('an LLM deployment that never queued shows an empty queue; a python one shows none', async () => {
  const d = (await send(`${gw.adminUrl}/deployments`)).json().deployments as Array<{ name: string; queue?: unknown }>;
  expect(d.find((x) => x.name === 'chat')?.queue).toEqual({
    queued: 0,
    bytes: 0,
    byPriority: { critical: 0, standard: 0 },
    saturated: false,
  });
  expect(d.find((x) => x.name === 'app')).toBeDefined();
  expect(d.find((x) => x.name === 'app')?.queue).toBeUndefined();
  const page = (await send(`${gw.adminUrl}/`)).text;
  expect(page).toContain('0 waiting; has room');
});
