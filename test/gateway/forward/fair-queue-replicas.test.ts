// Fair queueing across gateway replicas (SPEC §14, docs/llm.md "Across replicas"): two gateways (two data planes in
// this process, sharing nothing) in front of one simulated vLLM replica whose metrics answer late, as a busy server's
// API does (examples/backends/vllm-sim.mjs behind a server that reads its /metrics at once and answers 300 ms later,
// or when the test lets it). Each gateway counts a request it sends against the endpoint from the moment it sends it,
// and takes from a report only what the endpoint held when that scrape was sent: a late answer, whose figures predate
// its own requests, opens no room they already took. So a noisy tenant's burst waits in the gateways, in fair order,
// not in the backend's FIFO, and a quiet tenant's request at either gateway is answered ahead of that backlog.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, expect, test } from '@jest/globals';
import { send, startGateway, type Gateway, type Reply } from '../../support/harness.js';
import { metricValue } from '../../support/metrics.js';
import { waitFor } from '../../support/wait.js';
import { startSimReplica, type SimReplica } from '../../support/vllm-sim.js';

/** How late the replica's metrics answer: figures read at once, sent this much later (unless held). */
const METRICS_DELAY_MS = 300;

/**
 * The replica's metrics as one gateway scrapes them (each gateway its own, so that the test knows whose scrape is
 * whose): `reads` has the figures of every scrape asked, read when it was; while `hold` is set, answers wait for it.
 */
interface LateMetrics {
  server: Server;
  reads: Array<{ running: number; waiting: number }>;
  hold: { done: Promise<void>; release(): void } | undefined;
}
const late: LateMetrics[] = [];
/** From now on, `m`'s answers wait until the returned hold is released. */
function holdAnswers(m: LateMetrics): { done: Promise<void>; release(): void } {
  let release!: () => void;
  const done = new Promise<void>((resolve) => (release = resolve));
  return (m.hold = { done, release });
}
/** Running sequences of the replica; balancing.maxWaiting 0: each gateway's view holds 2 running + 1 waiting. */
const MAX_RUNNING = 2;

let replica: SimReplica;
const gws: Gateway[] = [];
/** One answer of `max_tokens` takes about max_tokens × 10 ms. */
const chat = (content: string, maxTokens: number) => ({
  model: 'chat',
  max_tokens: maxTokens,
  messages: [{ role: 'user', content }],
});

beforeAll(async () => {
  replica = await startSimReplica({
    maxRunning: MAX_RUNNING,
    decodeMsPerToken: 10,
    prefillMsPerBlock: 0,
  });
  for (let i = 0; i < 2; i++) {
    const m: LateMetrics = { server: createServer(), reads: [], hold: undefined };
    m.server.on('request', (req, res) => {
      const gate = m.hold?.done;
      void fetch(`${replica.url}/metrics`)
        .then((r) => r.text())
        .then(async (text) => {
          const { running, waiting } = replica.stats();
          m.reads.push({ running, waiting });
          if (gate) await gate;
          else await new Promise((resolve) => setTimeout(resolve, METRICS_DELAY_MS));
          res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4' }).end(text);
        });
    });
    await new Promise<void>((resolve) => m.server.listen(0, '127.0.0.1', resolve));
    late.push(m);
    const metricsPort = (m.server.address() as AddressInfo).port;
    gws.push(
      await startGateway({
        config: {
          balancing: { maxWaiting: 0, scrapeIntervalMs: 10, staleAfterMs: 10_000, scrapeTimeoutMs: 10_000 },
          queueing: { maxQueued: 50, maxWaitSeconds: 20 },
        },
        deployments: [
          {
            namespace: 'demo',
            name: 'chat',
            modelServer: 'llm',
            url: replica.url,
            spec: { balancing: { metricsPort } },
          },
        ],
        keys: [
          { name: 'apikey-noisy', projects: 'demo', fields: { tenant: 'noisy' } },
          { name: 'apikey-quiet', projects: 'demo', fields: { tenant: 'quiet' } },
        ],
      }),
    );
  }
});

afterAll(async () => {
  for (const m of late) m.hold?.release();
  for (const gw of gws) await gw.close();
  for (const m of late) await new Promise((resolve) => m.server.close(resolve));
  await replica?.close();
});

const post = (gw: Gateway, key: string, body: object) =>
  send(`${gw.url}/v1/demo/chat/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `ApiKey ${gw.keys[key]}` },
    body,
  });
/** The endpoint's figures as `gw` last read them. */
const seen = async (gw: Gateway): Promise<{ running?: number; waiting?: number }> => {
  const d = JSON.parse((await send(`${gw.adminUrl}/deployments`)).text);
  return d.deployments.find((x: { name: string }) => x.name === 'chat').endpoints?.[0] ?? {};
};
const queued = async (gw: Gateway) =>
  metricValue((await send(`${gw.adminUrl}/metrics`)).text, 'servegate_queue_length', {
    project: 'demo',
    deployment: 'chat',
    priority: 'standard',
  }) ?? 0;

test("a noisy burst through two replicas waits in their queues, not the backend's; quiet requests go ahead on both", async () => {
  // Both gateways learn the replica's capacity from a report of 2 running with some waiting, read when a request of
  // theirs comes while it is the latest (three of 400 ms through each gateway fill it); then it idles.
  const learn: Promise<Reply>[] = [];
  for (let i = 0; i < 6; i++) learn.push(post(gws[i % 2], 'apikey-noisy', chat(`learn ${i}`, 40)));
  for (const gw of gws) {
    await waitFor(async () => (await seen(gw)).waiting! >= 1, 'a report of requests waiting');
    learn.push(post(gw, 'apikey-noisy', chat('read it', 1)));
  }
  expect((await Promise.all(learn)).map((r) => r.status)).toEqual(Array(8).fill(200));
  for (const gw of gws)
    await waitFor(async () => {
      const s = await seen(gw);
      return s.running === 0 && s.waiting === 0;
    }, 'a report of the idle replica');

  // The most requests the replica holds at once while the burst drains.
  let most = 0;
  const watch = setInterval(() => {
    const s = replica.stats();
    most = Math.max(most, s.running + s.waiting);
  }, 1);
  try {
    const finished: string[] = [];
    const answers: Promise<Reply>[] = [];
    for (const [g, gw] of gws.entries())
      for (let i = 0; i < 12; i++)
        answers.push(post(gw, 'apikey-noisy', chat(`noisy ${g}.${i}`, 10)).then((r) => (finished.push('noisy'), r)));
    // Each gateway sends the replica what its view has room for (2 running + 1 waiting) and queues the rest.
    await waitFor(async () => {
      const s = replica.stats();
      return s.served - 8 + s.running + s.waiting + (await queued(gws[0])) + (await queued(gws[1])) === 24;
    }, 'the whole burst in the replica or queued');
    for (const [g, gw] of gws.entries())
      answers.push(post(gw, 'apikey-quiet', chat(`quiet ${g}`, 10)).then((r) => (finished.push(`quiet ${g}`), r)));
    expect((await Promise.all(answers)).map((r) => r.status)).toEqual(Array(26).fill(200));

    // Two replicas, each at most 2 running + 1 waiting in its own view: never more than 6 at the replica. (Counting
    // only from when a late report was read, each replica sent its 3 again on the report from before the burst: 12.)
    expect(most).toBeLessThanOrEqual(2 * (MAX_RUNNING + 1));
    // Each quiet request went ahead of the backlog: of 24 noisy requests, fewer than half were answered before it.
    for (const g of [0, 1]) expect(finished.indexOf(`quiet ${g}`)).toBeLessThan(12);
  } finally {
    clearInterval(watch);
  }
});

test("a late report does not open room the replica's own requests took after its scrape was sent", async () => {
  await waitFor(() => replica.stats().running + replica.stats().waiting === 0, 'the replica to be idle');
  for (const gw of gws)
    await waitFor(async () => {
      const s = await seen(gw);
      return s.running === 0 && s.waiting === 0;
    }, 'a report of the idle replica');
  const answers: Promise<Reply>[] = [];
  const servedBefore = replica.stats().served;
  // Gateway 0 runs two long requests; both gateways read a report of them.
  for (const i of [1, 2]) answers.push(post(gws[0], 'apikey-noisy', chat(`long ${i}`, 300)));
  for (const gw of gws) await waitFor(async () => (await seen(gw)).running === 2, 'a report of 2 running');
  // Gateway 0's scrapes answer only when let; the one it asks next reads 2 running and none waiting.
  const m = late[0];
  const first = holdAnswers(m);
  let asked = m.reads.length;
  await waitFor(() => m.reads.length > asked, "gateway 0's next scrape");
  // A request of a client of the replica's own (not a gateway's: one whose report shows 2 requests of others keeps no
  // request waiting in the replica's queue, docs/llm.md) waits in the replica's queue.
  // 1 s each from here on: nothing may end, and no waiting request move up, while the counts below are read.
  answers.push(send(`${replica.url}/v1/chat/completions`, { method: 'POST', body: chat('a client of its own', 100) }));
  await waitFor(() => replica.stats().waiting === 1, "the other client's request waiting");
  // Gateway 0 gets its report from before (2 running, both its own); its next scrape reads 2 running and 1 waiting.
  const second = holdAnswers(m);
  asked = m.reads.length;
  first.release();
  await waitFor(() => m.reads.length > asked, "gateway 0's scrape after the other client's request");
  expect(m.reads[asked]).toEqual({ running: 2, waiting: 1 });
  // On the report from before, gateway 0 sends one request into the replica's queue; three queue in the gateway.
  for (let i = 0; i < 4; i++) answers.push(post(gws[0], 'apikey-noisy', chat(`burst ${i}`, 100)));
  await waitFor(async () => (await queued(gws[0])) === 3, 'three queued in gateway 0');
  expect(replica.stats().waiting).toBe(2);
  // The held report arrives (2 running, 1 waiting: scraped before that request went); the next ones are held.
  const third = holdAnswers(m);
  second.release();
  await waitFor(async () => (await seen(gws[0])).waiting === 1, 'gateway 0 reading the held report');
  // Its two long requests end: two running slots free, which the two waiting requests take. The replica holds 2, and
  // gateway 0 sends one more (room for one waiting), not two: its report holds the other client's request and not
  // its own sent after the scrape (counting its own only from when it read the report, it would see room for two).
  await waitFor(() => replica.stats().served >= servedBefore + 2, 'the long requests answered');
  await waitFor(async () => (await queued(gws[0])) <= 2, 'gateway 0 refilling');
  expect(await queued(gws[0])).toBe(2);
  expect(replica.stats().waiting).toBe(1);
  m.hold = undefined;
  third.release();
  expect((await Promise.all(answers)).map((r) => r.status)).toEqual(Array(7).fill(200));
});
