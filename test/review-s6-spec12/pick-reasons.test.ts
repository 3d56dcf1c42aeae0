// SPEC §12 "What it shows": servegate_endpoint_picks_total{project,deployment,reason} with reason `prefix`, `load`,
// `only`, `round-robin`. The amendment's load (1) — many conversations under one long system prompt — counted
// through admin /metrics (R4 conformance probe, session 6).
import { afterAll, beforeAll, expect, test } from '@jest/globals';
import { send, startGateway, type Gateway } from '../support/harness.js';
import { metricValue, samples } from '../support/metrics.js';
import { waitFor } from '../support/wait.js';
import { closeAll, llmDoc, opening, replica, vllm, type Replica } from './fleet.js';

let fleet: Replica[];
let gw: Gateway;

beforeAll(async () => {
  fleet = await Promise.all(['a', 'b', 'c', 'd'].map(replica));
  for (const r of fleet) r.metrics = () => vllm(0, 0.1);
  gw = await startGateway({
    config: { balancing: { scrapeIntervalMs: 20, staleAfterMs: 2000 } },
    files: {
      'llm.yaml': [
        llmDoc(
          'demo',
          'chat',
          fleet.map((r) => r.url),
        ),
      ],
    },
    keys: [{ name: 'k', projects: 'demo' }],
  });
});

afterAll(async () => {
  await gw?.close();
  await closeAll(fleet ?? []);
});

const SPEC_REASONS = ['prefix', 'load', 'only', 'round-robin'];

test('every pick is counted under one of the four reasons SPEC §12 names, conversations and saturation too', async () => {
  let sent = 0;
  for (let c = 0; c < 6; c++) {
    const history = opening(c);
    for (let turn = 0; turn < 3; turn++) {
      const r = await send(`${gw.url}/v1/demo/chat/v1/chat/completions`, {
        headers: { authorization: `Bearer ${gw.keys.k}` },
        body: { model: 'chat', messages: [...history, { role: 'user', content: `turn ${turn}` }] },
      });
      expect(r.status).toBe(200);
      sent++;
      history.push({ role: 'user', content: `turn ${turn}` }, { role: 'assistant', content: `answer ${turn}` });
    }
  }
  // One endpoint saturated (waiting above maxWaiting): a conversation homed there is sent elsewhere.
  const text0 = (await send(`${gw.adminUrl}/metrics`)).text;
  expect(samples(text0, 'servegate_endpoint_picks_total').length).toBeGreaterThan(0);
  for (const r of fleet) r.metrics = () => vllm(20, 0.1);
  fleet[3].metrics = () => vllm(0, 0.1);
  await waitFor(async () => {
    const t = (await send(`${gw.adminUrl}/metrics`)).text;
    expect(metricValue(t, 'servegate_endpoint_waiting', { endpoint: fleet[0].host })).toBe(20);
  });
  for (let c = 0; c < 6; c++) {
    const r = await send(`${gw.url}/v1/demo/chat/v1/chat/completions`, {
      headers: { authorization: `Bearer ${gw.keys.k}` },
      body: { model: 'chat', messages: [...opening(c), { role: 'user', content: 'again' }] },
    });
    expect(r.headers['x-replica']).toBe('d');
    sent++;
  }
  const text = (await send(`${gw.adminUrl}/metrics`)).text;
  const series = samples(text, 'servegate_endpoint_picks_total').filter((s) => s.labels.deployment === 'chat');
  expect(series.filter((s) => !SPEC_REASONS.includes(s.labels.reason))).toEqual([]);
  expect(series.reduce((n, s) => n + s.value, 0)).toBe(sent);
});
