// The running slot fair queueing keeps free for critical requests (SPEC §14, docs/llm.md "Fair queueing of a saturated
// deployment"), with real sockets against a simulated vLLM replica of 8 sequences that another client (another
// gateway replica, as far as this one can tell) also sends to: for a second after a critical request, a noisy
// tenant's backlog leaves the last free running slot free and waits in the gateway, while a quiet tenant's request (a
// tenant below its share of the deployment's recent requests) takes that slot at once instead of waiting for a running
// request of its own replica to end: a replica sees only the slots its own requests free.
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import { send, startGateway, type Gateway, type Reply } from '../../support/harness.js';
import { metricValue } from '../../support/metrics.js';
import { waitFor } from '../../support/wait.js';
import { startSimReplica, type SimReplica } from '../../support/vllm-sim.js';

/** Running sequences of the replica: the smallest with a slot kept for critical requests (one in eight). */
const MAX_RUNNING = 8;

let replica: SimReplica;
let gw: Gateway;
/** One answer of `max_tokens` takes about max_tokens × 10 ms. */
const chat = (content: string, maxTokens: number) => ({
  model: 'chat',
  max_tokens: maxTokens,
  messages: [{ role: 'user', content }],
});

beforeAll(async () => {
  replica = await startSimReplica({ maxRunning: MAX_RUNNING, decodeMsPerToken: 10, prefillMsPerBlock: 0 });
  gw = await startGateway({
    config: {
      balancing: { maxWaiting: 0, scrapeIntervalMs: 10, staleAfterMs: 5000 },
      queueing: { maxQueued: 50, maxWaitSeconds: 20 },
    },
    deployments: [{ namespace: 'demo', name: 'chat', modelServer: 'llm', url: replica.url }],
    keys: [
      { name: 'apikey-noisy', projects: 'demo', fields: { tenant: 'noisy' } },
      { name: 'apikey-quiet', projects: 'demo', fields: { tenant: 'quiet' } },
      { name: 'apikey-crit', projects: 'demo', fields: { priority: 'critical' } },
    ],
  });
});

afterAll(async () => {
  await gw?.close();
  await replica?.close();
});

const post = (key: string, body: object) =>
  send(`${gw.url}/v1/demo/chat/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `ApiKey ${gw.keys[key]}` },
    body,
  });
/** The endpoint's figures as the gateway last read them. */
const seen = async (): Promise<{ running?: number; waiting?: number }> => {
  const d = JSON.parse((await send(`${gw.adminUrl}/deployments`)).text);
  return d.deployments.find((x: { name: string }) => x.name === 'chat').endpoints?.[0] ?? {};
};
/** Standard requests that waited in the queue 10 ms or less (servegate_queue_wait_seconds). */
const waitedUnder10ms = async () =>
  metricValue((await send(`${gw.adminUrl}/metrics`)).text, 'servegate_queue_wait_seconds_bucket', {
    project: 'demo',
    deployment: 'chat',
    priority: 'standard',
    le: '0.01',
  }) ?? 0;
const queued = async () =>
  metricValue((await send(`${gw.adminUrl}/metrics`)).text, 'servegate_queue_length', {
    project: 'demo',
    deployment: 'chat',
    priority: 'standard',
  }) ?? 0;

test("after a critical request, a quiet tenant's request takes the slot kept free; the noisy backlog waits", async () => {
  // The gateway learns the replica's capacity from a report of 8 running with some waiting, read when a request comes
  // while it is the latest; then the replica idles. The burst reaches the replica over a few scrapes (the capacity is
  // guessed until then) and 1 s answers keep the report of waiting requests up long enough to be read on a busy CI.
  const learn: Promise<Reply>[] = [];
  for (let i = 0; i < MAX_RUNNING + 2; i++) learn.push(post('apikey-noisy', chat(`learn ${i}`, 100)));
  await waitFor(async () => (await seen()).waiting! >= 1, 'a report of requests waiting');
  learn.push(post('apikey-noisy', chat('read it', 1)));
  expect((await Promise.all(learn)).every((r) => r.status === 200)).toBe(true);
  await waitFor(async () => {
    const s = await seen();
    return s.running === 0 && s.waiting === 0;
  }, 'a report of the idle replica');

  // Another replica's three requests (1 s each), in a report the gateway reads.
  const finished: string[] = [];
  const answers: Promise<Reply>[] = [];
  for (let i = 0; i < 3; i++)
    answers.push(
      send(`${replica.url}/v1/chat/completions`, { method: 'POST', body: chat(`other ${i}`, 100) }).then(
        (r) => (finished.push('other'), r),
      ),
    );
  await waitFor(async () => (await seen()).running === 3, "a report of the other replica's requests");
  // For a second after a critical request, standard requests leave the last running slot free: of a noisy burst of
  // 10 (0.6 s each), 4 run, none waits in the replica, 6 wait in the gateway.
  expect((await post('apikey-crit', chat('critical', 1))).status).toBe(200);
  for (let i = 0; i < 10; i++)
    answers.push(post('apikey-noisy', chat(`noisy ${i}`, 60)).then((r) => (finished.push('noisy'), r)));
  await waitFor(async () => replica.stats().running === MAX_RUNNING - 1 && (await queued()) === 6, '7 running');
  expect(replica.stats().waiting).toBe(0);
  // The quiet tenant sent nothing in the last second: its request takes the free slot and is answered before any
  // other. (Waiting for a noisy request to end, 0.6 s, before the reserve lapses, it came after those.) It takes the
  // slot only after 20 ms in the queue, in case its own replica frees one by then.
  const quick = await waitedUnder10ms();
  answers.push(post('apikey-quiet', chat('quiet', 2)).then((r) => (finished.push('quiet'), r)));
  await waitFor(() => finished.length > 0, 'the first answer');
  expect(finished[0]).toBe('quiet');
  expect(await waitedUnder10ms()).toBe(quick);
  expect((await Promise.all(answers)).map((r) => r.status)).toEqual(Array(14).fill(200));
});

test('a replica alone keeps the slot for critical requests: a quiet request waits for a running one to end', async () => {
  await waitFor(async () => {
    const s = await seen();
    return s.running === 0 && s.waiting === 0;
  }, 'a report of the idle replica');
  // Alone, a replica sees every slot freed and refills it at once: a quiet request waits only for the next to end.
  expect((await post('apikey-crit', chat('critical', 1))).status).toBe(200);
  const finished: string[] = [];
  const answers: Promise<Reply>[] = [];
  for (let i = 0; i < 10; i++)
    answers.push(post('apikey-noisy', chat(`noisy ${i}`, 60)).then((r) => (finished.push('noisy'), r)));
  await waitFor(async () => replica.stats().running === MAX_RUNNING - 1 && (await queued()) === 3, '7 running');
  answers.push(post('apikey-quiet', chat('quiet', 2)).then((r) => (finished.push('quiet'), r)));
  await waitFor(async () => (await queued()) === 4, 'the quiet request queued');
  expect(replica.stats().running).toBe(MAX_RUNNING - 1);
  expect((await Promise.all(answers)).map((r) => r.status)).toEqual(Array(11).fill(200));
  expect(finished.indexOf('quiet')).toBeGreaterThan(0);
});

test("where other clients' requests run, a replica keeps none of its own waiting in the replica's queue", async () => {
  await waitFor(async () => {
    const s = await seen();
    return s.running === 0 && s.waiting === 0;
  }, 'a report of the idle replica');
  // The last critical request was sent more than a second ago (the test before waited for two rounds of 0.6 s
  // answers after it): no slot is kept free. Three requests of another client (3 s each), in a report.
  const answers: Promise<Reply>[] = [];
  for (let i = 0; i < 3; i++)
    answers.push(send(`${replica.url}/v1/chat/completions`, { method: 'POST', body: chat(`other ${i}`, 300) }));
  await waitFor(async () => (await seen()).running === 3, "a report of the other client's requests");
  // A noisy burst of 8 (2 s each) fills the 5 running slots left; the other 3 wait in the gateway, none in the
  // replica's queue (alone, a replica keeps one there, to start the moment a slot frees; with others each would, ahead
  // of a critical request).
  for (let i = 0; i < 8; i++) answers.push(post('apikey-noisy', chat(`noisy ${i}`, 200)));
  await waitFor(
    async () => replica.stats().running === MAX_RUNNING && (await queued()) === 3,
    '8 running, 3 queued in the gateway',
  );
  expect(replica.stats().waiting).toBe(0);
  expect((await Promise.all(answers)).map((r) => r.status)).toEqual(Array(11).fill(200));
});

describe('a deployment of 16 slots or more', () => {
  let big: SimReplica;
  let gw16: Gateway;
  const BIG = 16;
  beforeAll(async () => {
    // Every running sequence may prefill at once: a request waits in the replica only for a running slot.
    big = await startSimReplica({
      maxRunning: BIG,
      prefillConcurrency: BIG,
      decodeMsPerToken: 10,
      prefillMsPerBlock: 0,
    });
    gw16 = await startGateway({
      config: {
        balancing: { maxWaiting: 0, scrapeIntervalMs: 10, staleAfterMs: 5000 },
        queueing: { maxQueued: 50, maxWaitSeconds: 20 },
      },
      deployments: [{ namespace: 'demo', name: 'chat', modelServer: 'llm', url: big.url }],
      keys: [
        { name: 'apikey-noisy', projects: 'demo', fields: { tenant: 'noisy' } },
        { name: 'apikey-crit', projects: 'demo', fields: { priority: 'critical' } },
      ],
    });
  });
  afterAll(async () => {
    await gw16?.close();
    await big?.close();
  });
  const post16 = (key: string, body: object) =>
    send(`${gw16.url}/v1/demo/chat/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `ApiKey ${gw16.keys[key]}` },
      body,
    });
  const seen16 = async (): Promise<{ running?: number; waiting?: number }> => {
    const d = JSON.parse((await send(`${gw16.adminUrl}/deployments`)).text);
    return d.deployments.find((x: { name: string }) => x.name === 'chat').endpoints?.[0] ?? {};
  };
  test('where other clients send too, two running slots are kept for critical requests', async () => {
    // Learn the capacity (a report of 16 running with some waiting), as in the first test; 3 s answers, so that the
    // burst has reached the replica whole before any ends, however slowly the scrapes come on a busy CI.
    const learn: Promise<Reply>[] = [];
    for (let i = 0; i < BIG + 4; i++) learn.push(post16('apikey-noisy', chat(`learn ${i}`, 300)));
    await waitFor(async () => (await seen16()).waiting! >= 1, 'a report of requests waiting', 10_000);
    learn.push(post16('apikey-noisy', chat('read it', 1)));
    expect((await Promise.all(learn)).every((r) => r.status === 200)).toBe(true);
    await waitFor(async () => {
      const s = await seen16();
      return s.running === 0 && s.waiting === 0;
    }, 'a report of the idle replica');
    // Another client's three requests (3 s each), in a report: this replica is one of several. A critical request,
    // then a noisy burst of 20 (2 s each): for the second after the critical request it leaves two running slots free
    // (a replica sees another's take of the slot only at its next scrape: the second covers that), so at most 11 run
    // and none waits in the replica.
    const answers: Promise<Reply>[] = [];
    for (let i = 0; i < 3; i++)
      answers.push(send(`${big.url}/v1/chat/completions`, { method: 'POST', body: chat(`other ${i}`, 300) }));
    await waitFor(async () => (await seen16()).running === 3, "a report of the other client's requests");
    expect((await post16('apikey-crit', chat('critical', 1))).status).toBe(200);
    const critical = performance.now();
    let most = 0;
    let waited = 0;
    const watch = setInterval(() => {
      // While the slots are kept (CRITICAL_RECENT_MS: 1 s after the critical request; 0.8 s to leave a margin).
      if (performance.now() - critical > 800) return;
      const st = big.stats();
      most = Math.max(most, st.running);
      waited = Math.max(waited, st.waiting);
    }, 1);
    try {
      for (let i = 0; i < 20; i++) answers.push(post16('apikey-noisy', chat(`noisy ${i}`, 200)));
      await waitFor(() => performance.now() - critical > 800, 'the time the slots are kept');
    } finally {
      clearInterval(watch);
    }
    expect(most).toBe(BIG - 2);
    expect(waited).toBe(0);
    // A critical request is answered (a slot kept free, or the place more it may take).
    expect((await post16('apikey-crit', chat('critical', 1))).status).toBe(200);
    expect((await Promise.all(answers)).map((r) => r.status)).toEqual(Array(23).fill(200));
  });
});
