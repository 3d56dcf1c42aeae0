// SPEC §12's per-deployment options as a user writes them (R4 conformance probe, session 6): `metricsPath` and
// `metricsPort` (a metrics server apart from the serving port), `policy: least-request`, and a fallback in another
// project the key is granted (`other-project/chat`), named in x-servegate-deployment with its spec.modelName.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, expect, test } from '@jest/globals';
import { closedPort } from '../support/backends.js';
import { send, startGateway, type Gateway } from '../support/harness.js';
import { metricValue } from '../support/metrics.js';
import { waitFor } from '../support/wait.js';
import { closeAll, llmDoc, replica, vllm, type Replica } from './fleet.js';

let fleet: Replica[];
let other: Replica;
let metricsServer: Server;
let metricsPort: number;
let gw: Gateway;

beforeAll(async () => {
  fleet = await Promise.all(['a', 'b'].map(replica));
  other = await replica('other');
  // Both replicas' figures served on one port apart from the serving ones, under /stats/prom: 4 waiting each.
  metricsServer = createServer((req, res) => {
    if (req.url !== '/stats/prom') return void res.writeHead(404).end();
    res.writeHead(200, { 'content-type': 'text/plain' }).end(vllm(4, 0.3));
  });
  await new Promise<void>((ok) => metricsServer.listen(0, '127.0.0.1', ok));
  metricsPort = (metricsServer.address() as AddressInfo).port;
  const refused = await closedPort();
  gw = await startGateway({
    config: { balancing: { scrapeIntervalMs: 20, staleAfterMs: 2000 } },
    files: {
      'llm.yaml': [
        llmDoc(
          'demo',
          'chat',
          fleet.map((r) => r.url),
          { balancing: { policy: 'llm', metricsPath: '/stats/prom', metricsPort } },
        ),
        llmDoc(
          'demo',
          'lr',
          fleet.map((r) => r.url),
          { balancing: { policy: 'least-request' } },
        ),
        llmDoc('demo', 'broken', [`http://127.0.0.1:${refused}`], { fallbacks: ['other-project/chat'] }),
        llmDoc('other', 'chat', [other.url], { project: 'other-project', modelName: 'mistral' }),
      ],
    },
    keys: [{ name: 'k', projects: 'demo,other-project' }],
  });
});

afterAll(async () => {
  await gw?.close();
  await closeAll([...(fleet ?? []), other]);
  await new Promise((ok) => metricsServer?.close(ok));
});

test('metricsPath and metricsPort say where the figures are scraped', async () => {
  await waitFor(async () => {
    const text = (await send(`${gw.adminUrl}/metrics`)).text;
    for (const r of fleet) expect(metricValue(text, 'servegate_endpoint_waiting', { endpoint: r.host })).toBe(4);
  });
});

test('least-request is a policy of its own: counted under load', async () => {
  for (let i = 0; i < 4; i++) {
    const r = await send(`${gw.url}/v1/demo/lr/v1/chat/completions`, {
      headers: { authorization: `Bearer ${gw.keys.k}` },
      body: { model: 'lr', messages: [{ role: 'user', content: `q${i}` }] },
    });
    expect(r.status).toBe(200);
  }
  const text = (await send(`${gw.adminUrl}/metrics`)).text;
  expect(
    metricValue(text, 'servegate_endpoint_picks_total', { project: 'demo', deployment: 'lr', reason: 'load' }),
  ).toBe(4);
});

test('a fallback in another granted project answers, with its own model name, and the answer names it', async () => {
  const r = await send(`${gw.url}/openai/v1/chat/completions`, {
    headers: { authorization: `Bearer ${gw.keys.k}` },
    body: { model: 'demo/broken', messages: [{ role: 'user', content: 'hi' }] },
  });
  expect(r.status).toBe(200);
  expect(r.headers['x-servegate-deployment']).toBe('other-project/chat');
  expect(other.served.map((s) => s.model)).toEqual(['mistral']);
  const text = (await send(`${gw.adminUrl}/metrics`)).text;
  const labels = { project: 'demo', deployment: 'broken', to: 'other-project/chat', reason: 'connect' };
  expect(metricValue(text, 'servegate_fallbacks_total', labels)).toBe(1);
});
