// Hostile review (R3) of the pass-over of an address a connection to failed (targets.ts `unreachable`): what held.
// When every address of a backend refuses, the marks never turn "all down" into "none tried": each request still
// tries (502 after its retry, not a wait of 5 s), and an address that comes back within the 5 s (a pod restarted on
// the same address) is used by the very next request, although it is still marked down.
import http from 'node:http';
import { afterAll, beforeAll, expect, test } from '@jest/globals';
import { closedPort } from '../../support/backends.js';
import { send, startGateway, type Gateway } from '../../support/harness.js';

let gw: Gateway;
let ports: number[];
let revived: http.Server | undefined;

const doc = (name: string, spec: Record<string, unknown>) => ({
  apiVersion: 'serving.servegate.dev/v1alpha1',
  kind: 'ServingDeployment',
  metadata: { name, namespace: 'demo' },
  spec,
});

beforeAll(async () => {
  ports = [await closedPort(), await closedPort()];
  const urls = ports.map((p) => `http://127.0.0.1:${p}`);
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
  await new Promise<void>((r) => (revived ? revived.close(() => r()) : r()));
});

const get = (name: string, i: number) =>
  send(`${gw.url}/v1/demo/${name}/work?i=${i}`, { headers: { authorization: `ApiKey ${gw.keys.k}` } });

test('every address refusing: each request is still tried; one that comes back is used at once', async () => {
  const started = Date.now();
  for (const name of ['rr', 'least'])
    for (let i = 0; i < 3; i++)
      expect({ name, i, status: (await get(name, i)).status }).toEqual({ name, i, status: 502 });
  // Both addresses are marked down now; the second comes back on its own address.
  revived = http.createServer((_req, res) => res.end('back'));
  await new Promise<void>((r) => revived!.listen(ports[1], '127.0.0.1', r));
  for (const name of ['rr', 'least'])
    for (let i = 0; i < 3; i++) {
      const r = await get(name, 10 + i);
      expect({ name, i, status: r.status, text: r.text }).toEqual({ name, i, status: 200, text: 'back' });
    }
  // All of it inside the 5 s the marks last: the recovery did not wait for them to lapse.
  expect(Date.now() - started).toBeLessThan(5_000);
});
