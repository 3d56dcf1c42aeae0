// The gateway-wide budget of request-body bytes held in memory (limits.maxBufferedBodyBytes, issue 31 item 2): bodies
// live outside V8's heap, so eight near-limit bodies at once took the gateway to 760–820 MB of RSS, past the chart's
// 512 Mi. A body past the budget waits for room in arrival order, then gets 503 with Retry-After; one body alone always
// fits; a body no fallback can need is let go once written to the backend.
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import { BodyBudget } from '../../../src/gateway/forward/body-budget.js';
import { send, startGateway, type Gateway, type Reply } from '../../support/harness.js';
import { waitFor } from '../../support/wait.js';
import { SCRAPER_USER_AGENT } from '../../../src/gateway/forward/endpoint-stats.js';

describe('BodyBudget', () => {
  test('a reservation alone always fits; others fit within the limit; the rest wait in arrival order', async () => {
    const budget = new BodyBudget(100, 5_000);
    const a = budget.reservation();
    expect(a.resize(250)).toBe(true); // alone: past the limit
    const b = budget.reservation();
    expect(b.resize(10)).toBe(false);
    const order: string[] = [];
    b.acquire(60, (ok) => order.push(`b:${ok}`));
    const c = budget.reservation();
    c.acquire(10, (ok) => order.push(`c:${ok}`)); // small, but after b
    expect(order).toEqual([]);
    expect(budget.queued).toBe(2);
    a.release();
    expect(order).toEqual(['b:true', 'c:true']);
    expect(budget.used).toBe(70);
    // One that holds bytes may grow past those waiting (it is further along); shrinking frees room at once.
    expect(b.resize(90)).toBe(true);
    expect(budget.used).toBe(100);
    b.release();
    c.release();
    expect(budget.used).toBe(0);
  });

  test('a wait ends with a refusal after waitMs, and a request that leaves stops waiting', async () => {
    const budget = new BodyBudget(100, 50);
    const a = budget.reservation();
    a.resize(100);
    const b = budget.reservation();
    const got: boolean[] = [];
    b.acquire(50, (ok) => got.push(ok));
    const c = budget.reservation();
    c.acquire(50, () => got.push(true));
    c.release(); // gone before room came
    await waitFor(() => got.length > 0, 'the wait to end', 2_000);
    expect(got).toEqual([false]);
    expect(budget.queued).toBe(0);
    a.release();
    expect(budget.used).toBe(0);
  });
});

/** A backend that reads each body and answers only when told (`release`). */
class HoldingBackend {
  readonly server = http.createServer((req, res) => this.handle(req, res));
  readonly received: number[] = [];
  private readonly waiting: ServerResponse[] = [];

  async start(): Promise<string> {
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    if (req.headers['user-agent'] === SCRAPER_USER_AGENT) return void res.writeHead(404).end(); // a scrape (SPEC §12)
    let size = 0;
    req.on('data', (c: Buffer) => (size += c.length));
    req.on('end', () => {
      this.received.push(size);
      this.waiting.push(res);
    });
  }

  release(): void {
    for (const res of this.waiting.splice(0)) {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{"id":"x","object":"chat.completion","choices":[]}');
    }
  }
}

/** A chat body of about `size` bytes. */
function chat(size: number): Buffer {
  return Buffer.from(JSON.stringify({ messages: [{ role: 'user', content: 'x'.repeat(size) }] }));
}

describe('the gateway keeps to limits.maxBufferedBodyBytes', () => {
  let gw: Gateway;
  let key: string;
  const backend = new HoldingBackend();
  const rescue = new HoldingBackend();

  beforeAll(async () => {
    const [url, rescueUrl] = await Promise.all([backend.start(), rescue.start()]);
    const llm = { modelServer: 'llm' as const, namespace: 'demo' };
    gw = await startGateway({
      config: { limits: { maxBufferedBodyBytes: 1_048_576, bufferedBodyWaitSeconds: 0.5 } },
      deployments: [
        // A deployment with fallbacks keeps its body until the answer comes (a fallback may need it).
        { ...llm, name: 'kept', modelName: 'kept', url, spec: { fallbacks: ['rescue'] } },
        { ...llm, name: 'rescue', modelName: 'rescue', url: rescueUrl },
        { ...llm, name: 'plain', modelName: 'plain', url },
      ],
      keys: [{ name: 'k', projects: 'demo' }],
    });
    key = gw.keys.k;
  });

  afterAll(async () => {
    backend.release();
    await gw?.close();
    await Promise.all([backend, rescue].map((b) => new Promise((r) => b.server.close(r))));
  });

  const post = (deployment: string, body: Buffer, headers: Record<string, string> = {}): Promise<Reply> =>
    send(`${gw.url}/v1/demo/${deployment}/v1/chat/completions`, {
      method: 'POST',
      body,
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
    });

  test('a body alone may pass the budget; the next waits, then gets 503 server_busy with Retry-After', async () => {
    const before = backend.received.length;
    // 700 KB kept for a fallback: room for it and an edited copy, 1.4 MB, more than the budget, alone.
    const first = post('kept', chat(700_000));
    await waitFor(() => backend.received.length > before, 'the first body at the backend');
    const t0 = performance.now();
    const second = await post('kept', chat(10_000));
    const waited = performance.now() - t0;
    expect(second.status).toBe(503);
    expect(second.headers['retry-after']).toBe('1');
    expect(second.json()).toMatchObject({ error: { code: 'server_busy', type: 'api_error' } });
    expect(second.json().error.message).toContain('limits.maxBufferedBodyBytes');
    expect(waited).toBeGreaterThanOrEqual(400);
    // A chunked body finds no room either (it asks as it grows).
    const chunked = await post('plain', chat(10_000), { 'transfer-encoding': 'chunked' });
    expect(chunked.status).toBe(503);
    expect(backend.received.length).toBe(before + 1);
    // Once the first is answered, its room is free again.
    backend.release();
    expect((await first).status).toBe(200);
    const third = post('kept', chat(10_000));
    await waitFor(() => backend.received.length > before + 1, 'the third body at the backend');
    backend.release();
    expect((await third).status).toBe(200);
  }, 20_000);

  test('a body no fallback can need is let go once written: a second near the budget is not held up', async () => {
    const before = backend.received.length;
    // Each 700 KB body alone fits; both at once would not, were the first still held while its answer is awaited.
    const first = post('plain', chat(700_000));
    await waitFor(() => backend.received.length > before, 'the first body at the backend');
    const second = post('plain', chat(700_000));
    await waitFor(() => backend.received.length > before + 1, 'the second body at the backend', 3_000);
    backend.release();
    expect([(await first).status, (await second).status]).toEqual([200, 200]);
  }, 20_000);
});
