// LLM-aware endpoint picking and fallbacks end to end (SPEC §12): a small fleet of OpenAI-compatible replicas on
// loopback, each serving vLLM's /metrics with figures the test sets, reached through files-source `backend.urls`.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import { closedPort } from '../../support/backends.js';
import { send, startGateway, type Gateway } from '../../support/harness.js';
import { metricValue } from '../../support/metrics.js';
import { waitFor } from '../../support/wait.js';

interface Replica {
  index: number;
  url: string;
  server: Server;
  /** What /metrics says; `metrics: 'fail'` answers 500. */
  waiting: number;
  kv: number;
  oldKvName: boolean;
  metricsFail: boolean;
  /** Status for completions (200 = a normal answer). */
  status: number;
  /** Start an event stream, then break the connection. */
  breakStream: boolean;
  served: Array<{ model: unknown; path: string }>;
}

function replica(index: number): Promise<Replica> {
  const r = {
    index,
    waiting: 0,
    kv: 0.1,
    oldKvName: false,
    metricsFail: false,
    status: 200,
    served: [],
  } as unknown as Replica;
  r.server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (req.url === '/metrics') {
        if (r.metricsFail) return void res.writeHead(500).end('no');
        const kvName = r.oldKvName ? 'vllm:gpu_cache_usage_perc' : 'vllm:kv_cache_usage_perc';
        res.writeHead(200, { 'content-type': 'text/plain' });
        res.end(
          `vllm:num_requests_waiting{model_name="m"} ${r.waiting}\nvllm:num_requests_running{model_name="m"} 1\n` +
            `${kvName}{model_name="m"} ${r.kv}\nvllm:cache_config_info{block_size="16"} 1\n`,
        );
        return;
      }
      const body = JSON.parse(Buffer.concat(chunks).toString() || '{}') as Record<string, unknown>;
      r.served.push({ model: body.model, path: req.url ?? '' });
      if (r.breakStream) {
        res.writeHead(200, { 'content-type': 'text/event-stream', 'x-replica': String(index) });
        res.write(`data: ${JSON.stringify({ id: 'x', choices: [{ index: 0, delta: { content: 'par' } }] })}\n\n`);
        setTimeout(() => res.socket?.resetAndDestroy(), 20);
        return;
      }
      const answer = JSON.stringify(
        r.status === 200
          ? {
              id: 'x',
              object: 'chat.completion',
              model: body.model,
              choices: [{ index: 0, message: { role: 'assistant', content: `r${index}` } }],
              usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 },
            }
          : { error: { message: `replica ${index} says ${r.status}`, type: 'server_error' } },
      );
      res.writeHead(r.status, { 'content-type': 'application/json', 'x-replica': String(index) });
      res.end(answer);
    });
  });
  return new Promise((resolve) =>
    r.server.listen(0, '127.0.0.1', () => {
      r.url = `http://127.0.0.1:${(r.server.address() as AddressInfo).port}`;
      resolve(r);
    }),
  );
}

let fleet: Replica[];
let backup: Replica;
let gws: Gateway[];
let refused: number;

const chatDoc = (name: string, urls: string[], extra: Record<string, unknown> = {}) => ({
  apiVersion: 'serving.servegate.dev/v1alpha1',
  kind: 'ServingDeployment',
  metadata: { name, namespace: 'demo' },
  spec: { type: 'model', modelServer: 'llm', backend: urls.length === 1 ? { url: urls[0] } : { urls }, ...extra },
});

beforeAll(async () => {
  fleet = await Promise.all([0, 1, 2, 3].map(replica));
  backup = await replica(9);
  refused = await closedPort();
  const files = {
    'llm.yaml': [
      chatDoc(
        'chat',
        fleet.map((r) => r.url),
        { modelName: 'llama' },
      ),
      chatDoc(
        'rr',
        fleet.map((r) => r.url),
        { balancing: { policy: 'round-robin' } },
      ),
      chatDoc('primary', [fleet[0].url], { modelName: 'big', fallbacks: ['forbidden/other', 'backup'] }),
      chatDoc('down', [`http://127.0.0.1:${refused}`], { modelName: 'big', fallbacks: ['backup'] }),
      chatDoc('backup', [backup.url], { modelName: 'small' }),
      { ...chatDoc('other', [backup.url]), metadata: { name: 'other', namespace: 'forbidden' } },
    ],
  };
  const opts = {
    config: { balancing: { scrapeIntervalMs: 20, staleAfterMs: 500 } },
    files,
    keys: [{ name: 'k', projects: 'demo', key: undefined as string | undefined }],
  };
  const first = await startGateway(opts);
  // A second replica of the gateway with the same manifests and key: no state shared with the first.
  opts.keys[0].key = first.keys.k;
  gws = [first, await startGateway(opts)];
});

afterAll(async () => {
  await Promise.all(gws?.map((g) => g.close()) ?? []);
  await Promise.all([...(fleet ?? []), backup].filter(Boolean).map((r) => new Promise((ok) => r.server.close(ok))));
});

const SYSTEM = (tenant: string) => `You are the assistant of ${tenant}. Follow the house rules. `.repeat(60);
async function ask(gw: Gateway, deployment: string, tenant: string, question: string) {
  const r = await send(`${gw.url}/v1/demo/${deployment}/v1/chat/completions`, {
    headers: { authorization: `Bearer ${gw.keys.k}` },
    body: {
      model: 'llama',
      messages: [
        { role: 'system', content: SYSTEM(tenant) },
        { role: 'user', content: question },
      ],
    },
  });
  return { status: r.status, replica: Number(r.headers['x-replica']), headers: r.headers, body: r.json() };
}
const metrics = async (gw: Gateway) => (await send(`${gw.adminUrl}/metrics`)).text;
const resetFleet = () => {
  for (const r of fleet)
    Object.assign(r, { waiting: 0, kv: 0.1, oldKvName: false, metricsFail: false, status: 200, breakStream: false });
};

describe('prefix affinity', () => {
  test('requests sharing a system prompt go to one replica, through either gateway replica', async () => {
    resetFleet();
    for (const tenant of ['acme', 'globex', 'initech']) {
      const seen = new Set<number>();
      for (let i = 0; i < 6; i++) seen.add((await ask(gws[i % 2], 'chat', tenant, `question ${i}`)).replica);
      expect([...seen]).toHaveLength(1);
    }
    expect(
      metricValue(await metrics(gws[0]), 'servegate_endpoint_picks_total', {
        project: 'demo',
        deployment: 'chat',
        reason: 'prefix',
      }),
    ).toBeGreaterThanOrEqual(9);
    // The access log says which rule picked each endpoint.
    await waitFor(async () =>
      gws.some((g) =>
        g.logs.some((l) => {
          const line = JSON.parse(l) as Record<string, unknown>;
          return line.msg === 'request' && line.deployment === 'chat' && line.pick === 'prefix';
        }),
      ),
    );
  });

  test('round-robin takes the replicas in turn whatever the prompt', async () => {
    resetFleet();
    const seen = [];
    for (let i = 0; i < 8; i++) {
      const a = await ask(gws[0], 'rr', 'acme', 'q');
      expect(a.status).toBe(200);
      seen.push(a.replica);
    }
    expect(new Set(seen).size).toBe(4);
  });
});

describe('load from the servers’ own metrics', () => {
  test.each([
    ['a long queue (vllm:num_requests_waiting)', (r: Replica) => (r.waiting = 40)],
    ['a full KV cache (vllm:kv_cache_usage_perc)', (r: Replica) => (r.kv = 0.97)],
    [
      'a full KV cache under the older name (vllm:gpu_cache_usage_perc)',
      (r: Replica) => Object.assign(r, { oldKvName: true, kv: 0.97 }),
    ],
  ])('a replica reporting %s gets no requests while another is free', async (_what, saturate) => {
    resetFleet();
    const home = (await ask(gws[0], 'chat', 'umbrella', 'first')).replica;
    saturate(fleet[home]);
    // The gauges show what the replica reported once a scrape has read it.
    const address = fleet[home].url.slice(7);
    await waitFor(async () => {
      const m = await metrics(gws[0]);
      return (
        (metricValue(m, 'servegate_endpoint_waiting', { endpoint: address }) ?? -1) === fleet[home].waiting &&
        (metricValue(m, 'servegate_endpoint_kv_cache_usage', { endpoint: address }) ?? -1) === fleet[home].kv
      );
    }, 'the replica figures to be scraped');
    for (let i = 0; i < 5; i++) expect((await ask(gws[0], 'chat', 'umbrella', `q${i}`)).replica).not.toBe(home);
    resetFleet();
  });

  test('a replica whose /metrics fails is judged by in-flight requests alone, and the failures are counted', async () => {
    resetFleet();
    fleet[1].metricsFail = true;
    const address = fleet[1].url.slice(7);
    await waitFor(
      async () =>
        (metricValue(await metrics(gws[0]), 'servegate_endpoint_scrape_errors_total', { endpoint: address }) ?? 0) > 2,
    );
    // Its last figures age out (staleAfterMs): from then on only in-flight requests judge it.
    await waitFor(
      async () => metricValue(await metrics(gws[0]), 'servegate_endpoint_waiting', { endpoint: address }) === undefined,
    );
    const served = new Set<number>();
    for (let i = 0; i < 40; i++) served.add((await ask(gws[0], 'chat', `tenant-${i}`, 'q')).replica);
    expect(served.has(1)).toBe(true);
    resetFleet();
  });
});

describe('what it shows', () => {
  test('/deployments lists the policy, the fallbacks and each endpoint with its in-flight requests and figures', async () => {
    resetFleet();
    fleet[2].waiting = 3;
    const address = fleet[2].url.slice(7);
    await waitFor(
      async () => (metricValue(await metrics(gws[0]), 'servegate_endpoint_waiting', { endpoint: address }) ?? -1) === 3,
    );
    const all = JSON.parse((await send(`${gws[0].adminUrl}/deployments`)).text).deployments;
    const chat = all.find((d: { name: string }) => d.name === 'chat');
    expect(chat.balancing).toBe('llm');
    expect(chat.endpoints.map((e: { address: string }) => e.address)).toEqual(fleet.map((r) => r.url.slice(7)));
    expect(chat.endpoints[2]).toMatchObject({ address, inflight: 0, waiting: 3, running: 1, kvCacheUsage: 0.1 });
    // Each endpoint's picks by this gateway since its list was made, their share, and its rendezvous weight.
    const picks = chat.endpoints.map((e: { picks: number }) => e.picks);
    const total = picks.reduce((a: number, b: number) => a + b, 0);
    expect(total).toBeGreaterThan(0);
    for (const e of chat.endpoints) {
      expect(e.share).toBeCloseTo(e.picks / total, 9);
      expect(e.weight).toBeGreaterThan(0);
    }
    // The deployments page lists them too, and its live poll (/api/stats) carries the same lines.
    const page = (await send(`${gws[0].adminUrl}/`)).text;
    expect(page).toContain('Endpoints (llm)');
    expect(page).toContain(`${address}: 0 in flight, 3 waiting, 1 running, KV 10%; ${picks[2]} picked (`);
    const stats = JSON.parse((await send(`${gws[0].adminUrl}/api/stats`)).text);
    expect(stats.endpoints['demo/chat'][2]).toMatch(`${address}: 0 in flight, 3 waiting, 1 running, KV 10%; `);
    expect(stats.endpoints['demo/primary']).toBeUndefined(); // one endpoint: nothing to pick
    expect(all.find((d: { name: string }) => d.name === 'primary')).toMatchObject({
      balancing: 'llm',
      fallbacks: ['forbidden/other', 'demo/backup'],
      endpoints: [{ address: fleet[0].url.slice(7), inflight: 0 }],
    });
    resetFleet();
  });
});

describe('fallbacks', () => {
  test('a 503 before any byte reached the client: the next deployment the key is granted answers, model rewritten', async () => {
    resetFleet();
    fleet[0].status = 503;
    const before = backup.served.length;
    const r = await ask(gws[0], 'primary', 'acme', 'q');
    expect(r.status).toBe(200);
    expect(r.replica).toBe(9);
    // forbidden/other was skipped (the key does not grant it); backup's served model replaced "llama".
    expect(r.headers['x-servegate-deployment']).toBe('demo/backup');
    expect(backup.served.slice(before)).toEqual([{ model: 'small', path: '/v1/chat/completions' }]);
    expect(
      metricValue(await metrics(gws[0]), 'servegate_fallbacks_total', {
        project: 'demo',
        deployment: 'primary',
        to: 'demo/backup',
        reason: '5xx',
      }),
    ).toBe(1);
    resetFleet();
  });

  test('429 and a refused connection fall back too; an answer that works carries its own deployment', async () => {
    resetFleet();
    fleet[0].status = 429;
    expect((await ask(gws[0], 'primary', 'acme', 'q')).replica).toBe(9);
    resetFleet();
    const ok = await ask(gws[0], 'primary', 'acme', 'q');
    expect([ok.replica, ok.headers['x-servegate-deployment']]).toEqual([0, 'demo/primary']);
    const down = await ask(gws[0], 'down', 'acme', 'q');
    expect([down.status, down.replica, down.headers['x-servegate-deployment']]).toEqual([200, 9, 'demo/backup']);
    const m = await metrics(gws[0]);
    expect(
      metricValue(m, 'servegate_fallbacks_total', {
        project: 'demo',
        deployment: 'primary',
        to: 'demo/backup',
        reason: '429',
      }),
    ).toBe(1);
    expect(
      metricValue(m, 'servegate_fallbacks_total', {
        project: 'demo',
        deployment: 'down',
        to: 'demo/backup',
        reason: 'connect',
      }),
    ).toBe(1);
  });

  test('every fallback failing too: the client gets the last answer as it was', async () => {
    resetFleet();
    fleet[0].status = 503;
    backup.status = 502;
    try {
      const r = await ask(gws[0], 'primary', 'acme', 'q');
      expect([r.status, r.replica]).toEqual([502, 9]);
      expect(r.body.error.message).toBe('replica 9 says 502');
    } finally {
      backup.status = 200;
      resetFleet();
    }
  });

  test('through the OpenAI SDK on the one base URL', async () => {
    fleet[0].status = 500;
    try {
      const client = new OpenAI({ baseURL: `${gws[1].url}/openai/v1`, apiKey: gws[1].keys.k, maxRetries: 0 });
      const raw = await client.chat.completions
        .create({ model: 'demo/primary', messages: [{ role: 'user', content: 'hi' }] })
        .withResponse();
      expect(raw.data.choices[0].message.content).toBe('r9');
      expect(raw.response.headers.get('x-servegate-deployment')).toBe('demo/backup');
    } finally {
      resetFleet();
    }
  });

  test('never after bytes reached the client: a stream that breaks ends with the error event, no fallback', async () => {
    resetFleet();
    fleet[0].breakStream = true;
    const before = backup.served.length;
    try {
      const client = new OpenAI({ baseURL: `${gws[0].url}/v1/demo/primary/v1`, apiKey: gws[0].keys.k, maxRetries: 0 });
      const stream = await client.chat.completions.create({
        model: 'big',
        messages: [{ role: 'user', content: 'hi' }],
        stream: true,
      });
      const got: string[] = [];
      await expect(
        (async () => {
          for await (const c of stream) got.push(c.choices[0]?.delta?.content ?? '');
        })(),
      ).rejects.toThrow('the backend broke off its answer: the answer is incomplete');
      expect(got).toEqual(['par']);
      expect(backup.served.length).toBe(before);
    } finally {
      resetFleet();
    }
  });
});
