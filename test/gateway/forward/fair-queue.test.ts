// Fair, prioritized queueing of a saturated LLM deployment (SPEC §14), with real sockets against a simulated vLLM
// replica (examples/backends/vllm-sim.mjs: one running sequence at a time, vLLM's /metrics): a queue that fills,
// sheds with 503 overloaded and drains; critical before standard; a quiet tenant's requests between a noisy one's;
// sheddable refused at once with 429; a client that leaves is out of the queue at once and never reaches the backend;
// a request that waits too long gets 503; streams and /openai/v1 queue like the rest.
import type { Socket } from 'node:net';
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import { send, startGateway, type Gateway, type Reply } from '../../support/harness.js';
import { metricValue } from '../../support/metrics.js';
import { waitFor } from '../../support/wait.js';
import { startSimReplica, type SimReplica } from '../../support/vllm-sim.js';

let replica: SimReplica;
let gw: Gateway;
/** One answer of `max_tokens` takes about max_tokens × 10 ms. */
const chat = (content: string, maxTokens = 10, extra: object = {}) => ({
  model: 'chat',
  max_tokens: maxTokens,
  messages: [{ role: 'user', content }],
  ...extra,
});

beforeAll(async () => {
  replica = await startSimReplica({ maxRunning: 1, decodeMsPerToken: 10, prefillMsPerBlock: 0 });
  gw = await startGateway({
    config: {
      balancing: { maxWaiting: 0, scrapeIntervalMs: 10, staleAfterMs: 5000 },
      queueing: { maxQueued: 4, maxWaitSeconds: 3 },
    },
    deployments: [{ namespace: 'demo', name: 'chat', modelServer: 'llm', url: replica.url }],
    keys: [
      { name: 'apikey-std', projects: 'demo' },
      { name: 'apikey-crit', projects: 'demo', fields: { priority: 'critical' } },
      { name: 'apikey-shed', projects: 'demo', fields: { priority: 'sheddable' } },
      { name: 'apikey-noisy1', projects: 'demo', fields: { tenant: 'noisy' } },
      { name: 'apikey-noisy2', projects: 'demo', fields: { tenant: 'noisy' } },
      { name: 'apikey-quiet', projects: 'demo' },
    ],
  });
});

afterAll(async () => {
  await gw?.close();
  await replica?.close();
});

const post = (key: string, body: object, path = '/v1/demo/chat/v1/chat/completions') =>
  send(`${gw.url}${path}`, { method: 'POST', headers: { authorization: `ApiKey ${gw.keys[key]}` }, body });
const metrics = async () => (await send(`${gw.adminUrl}/metrics`)).text;
const queued = async () => {
  const text = await metrics();
  return ['critical', 'standard'].reduce(
    (n, priority) =>
      n + (metricValue(text, 'servegate_queue_length', { project: 'demo', deployment: 'chat', priority }) ?? 0),
    0,
  );
};

/**
 * Fills the replica (one running, one waiting) with two long requests and waits until the gateway reads it as
 * saturated; returns their answers: the first runs `ms` / 2, then the second `secondMs` / 2 (10 ms a token).
 */
async function saturate(ms = 1500, secondMs = ms): Promise<Promise<Reply>[]> {
  const long = [post('apikey-std', chat('long one', ms / 20)), post('apikey-std', chat('long two', secondMs / 20))];
  await waitFor(() => replica.stats().waiting === 1, 'the replica to have one waiting');
  await waitFor(async () => {
    const d = JSON.parse((await send(`${gw.adminUrl}/deployments`)).text);
    return d.deployments.find((x: { name: string }) => x.name === 'chat').endpoints?.[0]?.waiting === 1;
  }, 'the gateway to read it');
  return long;
}

/** Sends `n` requests one after another, each once the one before is queued (their order in the queue is known). */
async function enqueue(
  list: Array<() => Promise<Reply>>,
  finished: string[],
  names: string[],
): Promise<Promise<Reply>[]> {
  const out: Promise<Reply>[] = [];
  for (let i = 0; i < list.length; i++) {
    const before = await queued();
    out.push(list[i]().then((r) => (finished.push(names[i]), r)));
    await waitFor(async () => (await queued()) === before + 1, `${names[i]} to be queued`);
  }
  return out;
}

describe('a saturated deployment', () => {
  test('requests queue in the gateway; past maxQueued 503 overloaded with Retry-After; the queue drains', async () => {
    const long = await saturate();
    const finished: string[] = [];
    const waiting = await enqueue(
      [1, 2, 3, 4].map((i) => () => post('apikey-std', chat(`q${i}`, 2))),
      finished,
      ['q1', 'q2', 'q3', 'q4'],
    );
    expect(replica.stats().waiting + replica.stats().running).toBe(2); // nothing more reached the replica
    const refused = await post('apikey-std', chat('one too many', 2));
    expect(refused.status).toBe(503);
    expect(refused.headers['retry-after']).toBe('3');
    expect(refused.json().error).toMatchObject({ code: 'overloaded', type: 'api_error' });
    expect(refused.json().error.message).toMatch(
      /deployment demo\/chat is saturated: its queue in the gateway is full/,
    );
    const page = await send(`${gw.adminUrl}/`);
    expect(page.text).toContain('4 waiting (4 standard); saturated');
    const d = JSON.parse((await send(`${gw.adminUrl}/deployments`)).text);
    expect(d.deployments.find((x: { name: string }) => x.name === 'chat').queue).toMatchObject({
      queued: 4,
      byPriority: { critical: 0, standard: 4 },
      saturated: true,
    });

    const answers = await Promise.all([...long, ...waiting]);
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200, 200, 200, 200]);
    expect(finished).toEqual(['q1', 'q2', 'q3', 'q4']); // first in, first out within a tenant
    expect(await queued()).toBe(0);
    const text = await metrics();
    const labels = { project: 'demo', deployment: 'chat', priority: 'standard' };
    expect(metricValue(text, 'servegate_queue_shed_total', { ...labels, reason: 'queue_full' })).toBe(1);
    expect(metricValue(text, 'servegate_queue_wait_seconds_count', labels)).toBeGreaterThanOrEqual(4);
  });

  test('critical goes before standard; sheddable is refused at once with 429 overloaded', async () => {
    const long = await saturate();
    const finished: string[] = [];
    const waiting = await enqueue(
      [() => post('apikey-std', chat('s1', 2)), () => post('apikey-std', chat('s2', 2))],
      finished,
      ['s1', 's2'],
    );
    // A critical request takes one place more than maxWaiting, in the backend's own queue: ahead of the standard
    // requests queued in the gateway, and it starts at the next slot the backend frees.
    const critical = post('apikey-crit', chat('c1', 2)).then((r) => (finished.push('c1'), r));
    await waitFor(() => replica.stats().waiting === 2, 'c1 in the backend queue');
    expect(await queued()).toBe(2);
    // A second one finds no place more and waits in the gateway, ahead of the standard ones.
    const critical2 = await enqueue([() => post('apikey-crit', chat('c2', 2))], finished, ['c2']);
    waiting.push(critical, ...critical2);
    const shed = await post('apikey-shed', chat('shed me', 2));
    expect(shed.status).toBe(429);
    expect(shed.json().error).toMatchObject({ code: 'overloaded', type: 'rate_limit_error' });
    expect(shed.json().error.message).toMatch(/sheddable requests are refused while it is saturated/);
    expect(shed.headers['retry-after']).toBe('3');
    await Promise.all([...long, ...waiting]);
    expect(finished).toEqual(['c1', 'c2', 's1', 's2']);
    // Once there is room, a sheddable request goes through.
    await waitFor(() => replica.stats().running + replica.stats().waiting === 0, 'the replica to be idle');
    await waitFor(async () => (await post('apikey-shed', chat('room now', 1))).status === 200, 'sheddable served');
  });

  test("a quiet tenant's requests go between a noisy tenant's (two keys of one tenant share one share)", async () => {
    const long = await saturate();
    const finished: string[] = [];
    const noisy = ['n1', 'n2', 'n3'].map((n, i) => () => post(i % 2 ? 'apikey-noisy2' : 'apikey-noisy1', chat(n, 2)));
    const waiting = await enqueue([...noisy, () => post('apikey-quiet', chat('k1', 2))], finished, [
      'n1',
      'n2',
      'n3',
      'k1',
    ]);
    await Promise.all([...long, ...waiting]);
    // Arrived last, served second: its tag starts where the noisy tenant's first does.
    expect(finished.indexOf('k1')).toBeLessThanOrEqual(1);
  });

  test('a streamed request on /openai/v1 queues too; a client that leaves is out of the queue at once', async () => {
    const long = await saturate();
    const finished: string[] = [];
    const [stream] = await enqueue(
      [
        () =>
          post('apikey-std', chat('streamed', 2, { model: 'demo/chat', stream: true }), '/openai/v1/chat/completions'),
      ],
      finished,
      ['stream'],
    );
    const served = replica.stats().served;
    const socket = await rawPost(chat('leaving', 2));
    await waitFor(async () => (await queued()) === 2, 'the raw request to be queued');
    socket.destroy();
    await waitFor(async () => (await queued()) === 1, 'the queue to drop it');
    await Promise.all(long);
    const s = await stream;
    expect(s.status).toBe(200);
    expect(s.text.trimEnd().endsWith('data: [DONE]')).toBe(true);
    await waitFor(() => replica.stats().running + replica.stats().waiting === 0, 'the replica to be idle');
    expect(replica.stats().served).toBe(served + 3); // the two long ones and the stream, not the one that left
  });

  test('a tenant whose queued requests leave gets their turns back; a drained queue reads 0', async () => {
    const long = await saturate();
    const finished: string[] = [];
    const first = await enqueue([() => post('apikey-noisy1', chat('n1', 2))], finished, ['n1']);
    // Two more of the noisy tenant's, whose clients leave while they wait: turns 2 and 3 it never used.
    const leaving = [await rawPost(chat('n2', 2), 'apikey-noisy1'), await rawPost(chat('n3', 2), 'apikey-noisy2')];
    await waitFor(async () => (await queued()) === 3, 'n2 and n3 queued');
    for (const socket of leaving) socket.destroy();
    await waitFor(async () => (await queued()) === 1, 'the queue to drop them');
    const rest = await enqueue(
      [
        () => post('apikey-quiet', chat('k1', 2)),
        () => post('apikey-quiet', chat('k2', 2)),
        () => post('apikey-noisy1', chat('n4', 2)),
      ],
      finished,
      ['k1', 'k2', 'n4'],
    );
    await Promise.all([...long, ...first, ...rest]);
    // n4 starts where n1 finishes (turn 2), beside k2, not at turn 4 behind every quiet request.
    expect(finished.indexOf('n4')).toBeLessThan(finished.indexOf('k2'));
    // Drained: the series reads 0 rather than vanishing (a vanished gauge reads its last value in Prometheus).
    const text = await metrics();
    for (const priority of ['critical', 'standard'])
      expect(metricValue(text, 'servegate_queue_length', { project: 'demo', deployment: 'chat', priority })).toBe(0);
  });
});

describe('waiting too long', () => {
  test('a request queued past maxWaitSeconds gets 503 overloaded', async () => {
    // Saturated for 4 s (the first runs 4 s; then the second runs and the view has room): 1 s past the 3 s wait.
    // The second is short, so that both are answered well within the client's 10 s idle timeout.
    const long = await saturate(8000, 400);
    const r = await post('apikey-std', chat('too late', 2));
    expect(r.status).toBe(503);
    expect(r.json().error.message).toMatch(/waited in its queue for the longest time allowed/);
    expect(
      metricValue(await metrics(), 'servegate_queue_shed_total', {
        project: 'demo',
        deployment: 'chat',
        priority: 'standard',
        reason: 'timeout',
      }),
    ).toBe(1);
    await Promise.all(long);
  }, 20_000);
});

/** A POST on a raw socket (to hang up while it waits). */
function rawPost(body: object, key = 'apikey-std'): Promise<Socket> {
  const text = JSON.stringify(body);
  return new Promise((resolve) => {
    const s = connect(gw.port, '127.0.0.1', () => {
      s.write(
        `POST /v1/demo/chat/v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: ApiKey ${gw.keys[key]}\r\n` +
          `content-type: application/json\r\ncontent-length: ${Buffer.byteLength(text)}\r\n\r\n${text}`,
      );
      resolve(s);
    });
    s.on('error', () => undefined);
  });
}
