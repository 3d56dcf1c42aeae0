// Hostile review (R3) of the pass-over of an address a connection to failed (targets.ts `unreachable`): the promise is
// that such an address is passed over for 5 s "while another address of its backend is not". With two dead addresses
// of three (a node that took two pods with it), the pick that replaces a down address must not land on the other down
// one: every request then paid a failed connect and a retry, or, when the retry's own pick (which never read the
// down marks) went to the second dead address, was answered 502 although a live address stood in the list.
import { afterAll, beforeAll, expect, test } from '@jest/globals';
import { closedPort, RecordingBackend } from '../../support/backends.js';
import { send, startGateway, type Gateway } from '../../support/harness.js';

let live: RecordingBackend;
let gw: Gateway;
let dead: string[];
let alive: string;

const doc = (name: string, spec: Record<string, unknown>) => ({
  apiVersion: 'serving.servegate.dev/v1alpha1',
  kind: 'ServingDeployment',
  metadata: { name, namespace: 'demo' },
  spec,
});

beforeAll(async () => {
  live = await new RecordingBackend((_rec, res) => void res.end('ok')).listen();
  dead = [`127.0.0.1:${await closedPort()}`, `127.0.0.1:${await closedPort()}`];
  alive = new URL(live.url).host;
  const urls = [`http://${dead[0]}`, `http://${dead[1]}`, live.url];
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

async function picks(name: string): Promise<Record<string, number>> {
  const d = (await send(`${gw.adminUrl}/deployments`)).json().deployments as Array<{
    name: string;
    endpoints?: Array<{ address: string; picks: number }>;
  }>;
  const eps = d.find((x) => x.name === name)?.endpoints ?? [];
  return Object.fromEntries(eps.map((e) => [e.address, e.picks]));
}

test.each(['rr', 'least'])('%s: two dead addresses of three are both passed over once each refused', async (name) => {
  const before = await picks(name);
  const statuses: number[] = [];
  for (let i = 0; i < 8; i++) {
    const r = await send(`${gw.url}/v1/demo/${name}/work?i=${i}`, {
      headers: { authorization: `ApiKey ${gw.keys.k}` },
    });
    statuses.push(r.status);
  }
  const after = await picks(name);
  const deadPicks = dead.map((a) => (after[a] ?? 0) - (before[a] ?? 0));
  // Each dead address is tried at most once (its first refusal marks it); everything else goes to the live one. The
  // first request may meet both dead addresses (its one retry included) and be answered 502; none after it.
  expect({ later: statuses.slice(1), deadPicks }).toEqual({
    later: statuses.slice(1).map(() => 200),
    deadPicks: deadPicks.map((n) => Math.min(n, 1)),
  });
  expect((after[alive] ?? 0) - (before[alive] ?? 0)).toBeGreaterThanOrEqual(7);
});
