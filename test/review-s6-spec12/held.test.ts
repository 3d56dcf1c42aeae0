// SPEC §12 and its amendment, what held when an independent acceptance tester checked it (R4 conformance probe,
// session 6): SGLang's and vLLM's older metric names, `backend.urls`, the policy's default per kind, the access log
// naming the endpoint, and conversations and a hot prefix keeping their affinity through two gateway replicas.
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import { send, startGateway, type Gateway } from '../support/harness.js';
import { metricValue } from '../support/metrics.js';
import { waitFor } from '../support/wait.js';
import { closeAll, llmDoc, opening, replica, SYSTEM, vllm, type Replica } from './fleet.js';

let fleet: Replica[];
let sglang: Replica[];
let oldVllm: Replica[];
let single: Replica;
let gws: Gateway[];

beforeAll(async () => {
  fleet = await Promise.all(['a', 'b', 'c', 'd'].map(replica));
  for (const r of fleet) r.metrics = () => vllm(0, 0.1);
  sglang = await Promise.all(['s1', 's2'].map(replica));
  const sg = (queue: number, usage: number) =>
    `sglang:num_queue_reqs{model_name="m"} ${queue}\nsglang:num_running_reqs{model_name="m"} 2\n` +
    `sglang:token_usage{model_name="m"} ${usage}\n`;
  sglang[0].metrics = () => sg(7, 0.5);
  sglang[1].metrics = () => sg(0, 0.25);
  oldVllm = await Promise.all(['o1', 'o2'].map(replica));
  for (const r of oldVllm)
    r.metrics = () =>
      'vllm:num_requests_waiting{model_name="m"} 3\nvllm:num_requests_running{model_name="m"} 1\n' +
      'vllm:gpu_cache_usage_perc{model_name="m"} 0.625\n';
  single = await replica('single');
  const sklearn = {
    apiVersion: 'serving.servegate.dev/v1alpha1',
    kind: 'ServingDeployment',
    metadata: { name: 'fraud', namespace: 'demo' },
    spec: { type: 'model', modelServer: 'sklearn', backend: { urls: [single.url, fleet[0].url] } },
  };
  const opts = {
    config: { balancing: { scrapeIntervalMs: 20, staleAfterMs: 2000 } },
    files: {
      'llm.yaml': [
        llmDoc(
          'demo',
          'chat',
          fleet.map((r) => r.url),
        ),
        llmDoc(
          'demo',
          'sg',
          sglang.map((r) => r.url),
        ),
        llmDoc(
          'demo',
          'old',
          oldVllm.map((r) => r.url),
        ),
        {
          ...llmDoc('demo', 'one', []),
          spec: { type: 'model', modelServer: 'llm', backend: { urls: [single.url] } },
        },
        sklearn,
      ],
    },
    keys: [{ name: 'k', projects: 'demo', key: undefined as string | undefined }],
  };
  const first = await startGateway(opts);
  opts.keys[0].key = first.keys.k;
  gws = [first, await startGateway(opts)];
});

afterAll(async () => {
  await Promise.all(gws?.map((g) => g.close()) ?? []);
  await closeAll([...(fleet ?? []), ...(sglang ?? []), ...(oldVllm ?? []), single]);
});

async function chat(gw: Gateway, deployment: string, messages: Array<{ role: string; content: string }>) {
  const r = await send(`${gw.url}/v1/demo/${deployment}/v1/chat/completions`, {
    headers: { authorization: `Bearer ${gw.keys.k}` },
    body: { model: deployment, messages },
  });
  expect(r.status).toBe(200);
  return String(r.headers['x-replica']);
}
const metrics = async (gw: Gateway) => (await send(`${gw.adminUrl}/metrics`)).text;

describe('signals and what it shows', () => {
  test("SGLang's queue and token usage are read: the endpoint over maxWaiting is avoided", async () => {
    const text = await waitFor(async () => {
      const t = await metrics(gws[0]);
      expect(metricValue(t, 'servegate_endpoint_waiting', { endpoint: sglang[0].host })).toBe(7);
      return t;
    });
    expect(metricValue(text, 'servegate_endpoint_kv_cache_usage', { endpoint: sglang[0].host })).toBe(0.5);
    expect(metricValue(text, 'servegate_endpoint_kv_cache_usage', { endpoint: sglang[1].host })).toBe(0.25);
    for (let i = 0; i < 6; i++)
      expect(await chat(gws[0], 'sg', [{ role: 'user', content: `q${i}`.repeat(50) }])).toBe('s2');
  });

  test("vLLM's older vllm:gpu_cache_usage_perc is read as the KV use", async () => {
    await waitFor(async () => {
      const t = await metrics(gws[0]);
      expect(metricValue(t, 'servegate_endpoint_kv_cache_usage', { endpoint: oldVllm[1].host })).toBe(0.625);
      expect(metricValue(t, 'servegate_endpoint_waiting', { endpoint: oldVllm[1].host })).toBe(3);
    });
  });

  test('backend.urls of one URL serves, counted under reason only; the policy defaults per kind', async () => {
    expect(await chat(gws[0], 'one', [{ role: 'user', content: 'hi' }])).toBe('single');
    const labels = { project: 'demo', deployment: 'one', reason: 'only' };
    expect(metricValue(await metrics(gws[0]), 'servegate_endpoint_picks_total', labels)).toBe(1);
    const all = JSON.parse((await send(`${gws[0].adminUrl}/deployments`)).text).deployments as Array<{
      name: string;
      balancing: string;
    }>;
    expect(all.find((d) => d.name === 'chat')?.balancing).toBe('llm');
    expect(all.find((d) => d.name === 'fraud')?.balancing).toBe('round-robin');
    // A predictive deployment over two URLs: in turn.
    const seen: string[] = [];
    for (let i = 0; i < 4; i++) {
      const r = await send(`${gws[0].url}/v1/demo/fraud/v1/models/fraud:predict`, {
        headers: { authorization: `Bearer ${gws[0].keys.k}` },
        body: { instances: [[1]] },
      });
      seen.push(String(r.headers['x-replica']));
    }
    expect(new Set(seen)).toEqual(new Set(['single', 'a']));
    expect(seen[0]).not.toBe(seen[1]);
  });

  test('the access log line names the endpoint that answered', async () => {
    const got = await chat(gws[0], 'chat', [{ role: 'user', content: 'which endpoint?' }]);
    const host = fleet.find((r) => r.name === got)!.host;
    await waitFor(() =>
      expect(gws[0].logs.some((l) => l.includes('"deployment":"chat"') && l.includes(`"upstream":"${host}`))).toBe(
        true,
      ),
    );
  });
});

describe('the amendment, through two gateway replicas', () => {
  test('conversations under one system prompt spread, and each keeps its endpoint whichever replica sends the turn', async () => {
    const homes = new Set<string>();
    for (let c = 0; c < 16; c++) {
      const history = opening(100 + c);
      const seen = new Set<string>();
      for (let turn = 0; turn < 4; turn++) {
        seen.add(await chat(gws[turn % 2], 'chat', [...history, { role: 'user', content: `turn ${turn}` }]));
        history.push({ role: 'user', content: `turn ${turn}` }, { role: 'assistant', content: `answer ${turn}` });
      }
      expect(seen.size).toBe(1);
      homes.add([...seen][0]);
    }
    expect(homes.size).toBeGreaterThanOrEqual(3);
  });

  test('a prefix whose endpoint is saturated moves to the same next endpoint on both replicas', async () => {
    const ask = (gw: Gateway, i: number) =>
      chat(gw, 'chat', [
        { role: 'system', content: `Hot tenant. ${SYSTEM}` },
        { role: 'user', content: `question ${i}` },
      ]);
    await ask(gws[0], 0);
    await ask(gws[1], 0);
    const home = await ask(gws[0], 1);
    expect(await ask(gws[1], 1)).toBe(home);
    const hot = fleet.find((r) => r.name === home)!;
    hot.metrics = () => vllm(12, 0.5);
    for (const gw of gws)
      await waitFor(async () =>
        expect(metricValue(await metrics(gw), 'servegate_endpoint_waiting', { endpoint: hot.host })).toBe(12),
      );
    const moved = await ask(gws[0], 2);
    expect(moved).not.toBe(home);
    for (let i = 3; i < 9; i++) expect(await ask(gws[i % 2], i)).toBe(moved);
    hot.metrics = () => vllm(0, 0.1);
  });
});
