// An address that refused a connection is passed over for a while (targets.ts `unreachable`): with one dead address of
// two, the first request pays the failed connect and the one retry; the next ones go straight to the live address
// instead of each trying the dead one first (round robin handed every request to it: the retry's pick moved the turn
// on). Found by a hostile review of the request path.
import { afterAll, beforeAll, expect, test } from '@jest/globals';
import { closedPort, RecordingBackend } from '../../support/backends.js';
import { send, startGateway, type Gateway } from '../../support/harness.js';

let live: RecordingBackend;
let gw: Gateway;
let dead: string;
let alive: string;

const doc = (name: string, spec: Record<string, unknown>) => ({
  apiVersion: 'serving.servegate.dev/v1alpha1',
  kind: 'ServingDeployment',
  metadata: { name, namespace: 'demo' },
  spec,
});

beforeAll(async () => {
  live = await new RecordingBackend((_req, res) => void res.end('ok')).listen();
  dead = `127.0.0.1:${await closedPort()}`;
  alive = new URL(live.url).host;
  const urls = [`http://${dead}`, live.url];
  gw = await startGateway({
    files: {
      'apps.yaml': [
        doc('rr', { type: 'python', backend: { urls } }),
        doc('least', { type: 'python', backend: { urls }, balancing: { policy: 'least-request' } }),
      ],
    },
    keys: [{ name: 'k', projects: 'demo' }],
  });
});

afterAll(async () => {
  await gw?.close();
  await live?.close();
});

/** The picks /deployments counts per address of `name` (retries' picks included). */
async function picks(name: string): Promise<Record<string, number>> {
  const d = (await send(`${gw.adminUrl}/deployments`)).json().deployments as Array<{
    name: string;
    endpoints?: Array<{ address: string; picks: number }>;
  }>;
  const eps = d.find((x) => x.name === name)?.endpoints ?? [];
  return Object.fromEntries(eps.map((e) => [e.address, e.picks]));
}

test.each(['rr', 'least'])('%s: after one refused connect, the dead address of two is passed over', async (name) => {
  // The two deployments share one backend, so its list and its counts: only this test's picks are read.
  const before = await picks(name);
  const statuses: number[] = [];
  for (let i = 0; i < 6; i++) {
    const r = await send(`${gw.url}/v1/demo/${name}/work?i=${i}`, {
      headers: { authorization: `ApiKey ${gw.keys.k}` },
    });
    statuses.push(r.status);
  }
  expect(statuses).toEqual([200, 200, 200, 200, 200, 200]);
  // At most the first request went to the dead address (round robin's turn may start on either); every answer
  // came from the live one.
  const after = await picks(name);
  expect((after[dead] ?? 0) - (before[dead] ?? 0)).toBeLessThanOrEqual(1);
  expect((after[alive] ?? 0) - (before[alive] ?? 0)).toBe(6);
});
