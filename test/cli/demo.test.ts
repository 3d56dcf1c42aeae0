// `servegate demo` / `npm start`: the sample backends and the gateway on examples/ answer the printed requests.
// Everything listens on free ports: the sample backends too (--backend-ports 0,0,0 moves the fleet's simulated vLLM
// replicas as well), the examples' URLs (backend.url and each backend.urls entry) rewritten.
import { createServer, type Server } from 'node:net';
import OpenAI from 'openai';
import { freePort } from '../support/net.js';
import { waitFor } from '../support/wait.js';
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import { silentLogger } from '../../src/log.js';
import { DEMO_API_KEY, DEMO_BACKENDS, demoCommand, startDemo, type Demo } from '../../src/cli/demo.js';

describe('servegate demo', () => {
  let demo: Demo;
  beforeAll(async () => {
    demo = await startDemo({ port: 0, adminPort: 0, host: '127.0.0.1', logger: silentLogger, backendPorts: [0, 0, 0] });
  });
  afterAll(() => demo?.stop());

  const auth = { authorization: `ApiKey ${DEMO_API_KEY}`, 'content-type': 'application/json' };

  test('prints one curl per example deployment, on the real port, with the demo key', () => {
    expect(demo.lines).toHaveLength(5);
    expect(demo.lines.map((l) => l.split(/\s+/)[0])).toEqual([
      'demo/chat',
      'demo/echo',
      'demo/fleet',
      'demo/iris',
      'demo/mnist',
    ]);
    for (const l of demo.lines) {
      expect(l).toContain(DEMO_API_KEY);
      expect(l).toContain(`http://localhost:${demo.server.port}/v1/demo/`);
    }
  });

  test('starts the six sample backends on free ports: three servers and the three replicas of demo/fleet', () => {
    expect(demo.backends.map((b) => b.file)).toEqual(DEMO_BACKENDS.map((b) => b.file));
    const ports = demo.backends.map((b) => b.port);
    expect(new Set(ports).size).toBe(6);
    for (const p of ports) expect(DEMO_BACKENDS.map((b) => b.port)).not.toContain(p);
  });

  test.each([
    ['iris', '/v1/demo/iris/v1/models/iris:predict', { instances: [[5.1, 3.5, 1.4, 0.2]] }, { predictions: [0] }],
    ['mnist', '/v1/demo/mnist/v1/models/mnist:regress', { instances: [[1, 2, 3]] }, { predictions: [2] }],
  ])('the %s deployment answers through the gateway', async (_n, path, body, want) => {
    const r = await fetch(`http://127.0.0.1:${demo.server.port}${path}`, {
      method: 'POST',
      headers: auth,
      body: JSON.stringify(body),
    });
    expect(r.status).toBe(200);
    expect(await r.json()).toEqual(want);
  });

  test('the echo deployment sees the stripped path, the project and the key name, not the key', async () => {
    const r = await fetch(`http://127.0.0.1:${demo.server.port}/v1/demo/echo/hello?name=world`, { headers: auth });
    expect(r.status).toBe(200);
    const body = (await r.json()) as { path: string; query: object; headers: Record<string, string> };
    expect(body.path).toBe('/hello');
    expect(body.query).toEqual({ name: 'world' });
    expect(body.headers['x-servegate-project']).toBe('demo');
    expect(body.headers['x-servegate-key']).toBe('apikey-demo');
    expect(body.headers.authorization).toBeUndefined();
  });

  test('the chat deployment streams to the openai SDK through the gateway', async () => {
    const client = new OpenAI({
      apiKey: DEMO_API_KEY,
      baseURL: `http://127.0.0.1:${demo.server.port}/v1/demo/chat/v1`,
      maxRetries: 0,
    });
    let text = '';
    for await (const chunk of await client.chat.completions.create({
      model: 'chat',
      messages: [{ role: 'user', content: 'Hello' }],
      stream: true,
    })) {
      text += chunk.choices[0]?.delta?.content ?? '';
    }
    expect(text).toBe('You said: Hello');
  });

  describe('the fleet deployment (three simulated vLLM replicas, endpoint picked per request)', () => {
    const systemPrompt = (tenant: string) =>
      `You are the support assistant of ${tenant}. ` + 'Answer briefly, cite the manual, never guess. '.repeat(40);
    const chat = async (system: string, user: string, maxTokens = 16) => {
      const r = await fetch(`http://127.0.0.1:${demo.server.port}/v1/demo/fleet/v1/chat/completions`, {
        method: 'POST',
        headers: { ...auth, authorization: `Bearer ${DEMO_API_KEY}` },
        body: JSON.stringify({
          model: 'sim-llama',
          max_tokens: maxTokens,
          messages: [
            { role: 'system', content: system },
            { role: 'user', content: user },
          ],
        }),
      });
      const body = (await r.json()) as {
        model: string;
        choices: Array<{ message: { content: string } }>;
        usage: { prompt_tokens_details: { cached_tokens: number } };
      };
      return { status: r.status, replica: r.headers.get('x-vllm-replica'), body };
    };

    test('two requests with the same long system prompt are answered by the same replica, from its cache', async () => {
      const system = systemPrompt('Acme');
      const first = await chat(system, 'Where is my order?');
      const second = await chat(system, 'How do I return a parcel?');
      expect([first.status, second.status]).toEqual([200, 200]);
      expect(['0', '1', '2']).toContain(first.replica);
      expect(second.replica).toBe(first.replica);
      expect(first.body.model).toBe('sim-llama');
      expect(first.body.choices[0].message.content).toMatch(/^( tok\d+){16}$/);
      // The second prompt's shared prefix was in that replica's KV cache already.
      expect(second.body.usage.prompt_tokens_details.cached_tokens).toBeGreaterThan(
        first.body.usage.prompt_tokens_details.cached_tokens,
      );
    });

    test('different prompts are spread over the replicas', async () => {
      const replicas = new Set<string | null>();
      for (let i = 0; i < 12; i++) replicas.add((await chat(systemPrompt(`tenant ${i}`), 'Hello', 1)).replica);
      expect(replicas.size).toBeGreaterThan(1);
      for (const r of replicas) expect(['0', '1', '2']).toContain(r);
    });

    test('/deployments lists its balancing and its three endpoints, with their scraped load', async () => {
      type Endpoint = {
        address: string;
        inflight: number;
        waiting?: number;
        running?: number;
        kvCacheUsage?: number;
        picks?: number;
        share?: number;
        weight?: number;
      };
      type View = { deployments: Array<{ name: string; balancing?: string; endpoints?: Endpoint[] }> };
      const replicaAddresses = demo.backends
        .filter((b) => b.file === 'vllm-replica.mjs')
        .map((b) => `127.0.0.1:${b.port}`);
      const fleet = await waitFor(
        async () => {
          const r = await fetch(`http://127.0.0.1:${demo.server.adminPort}/deployments`);
          expect(r.status).toBe(200);
          const d = ((await r.json()) as View).deployments.find((x) => x.name === 'fleet');
          return d?.endpoints?.every((e) => e.waiting !== undefined) === true && d;
        },
        "the fleet's endpoints with their scraped figures",
        5000,
        50,
      );
      expect(fleet?.balancing).toBe('llm');
      expect(fleet?.endpoints?.map((e) => e.address)).toEqual(replicaAddresses);
      const endpoints = fleet?.endpoints ?? [];
      const total = endpoints.reduce((n, e) => n + (e.picks ?? 0), 0);
      for (const e of endpoints) {
        expect(e).toEqual({
          address: expect.any(String),
          inflight: 0,
          waiting: expect.any(Number),
          running: expect.any(Number),
          kvCacheUsage: expect.any(Number),
          picks: expect.any(Number),
          share: expect.any(Number),
          weight: expect.any(Number),
        });
        // Picks so far and each endpoint's share of them (issue 33: the page shows per-endpoint shares).
        expect(Number.isInteger(e.picks)).toBe(true);
        expect(e.share).toBeCloseTo(total ? e.picks! / total : 0, 10);
        expect(e.weight).toBeGreaterThan(0);
      }
      // The earlier tests of this file sent the fleet requests: they were counted.
      expect(total).toBeGreaterThan(0);
    });
  });

  test('without the key the gateway answers 401', async () => {
    const r = await fetch(`http://127.0.0.1:${demo.server.port}/v1/demo/echo/hello`);
    expect(r.status).toBe(401);
  });
});

describe('servegate demo arguments', () => {
  test.each([
    [['--port', 'abc'], 2],
    [['--nope'], 2],
    [['--backend-ports', '8081,8082'], 2],
    [['--backend-ports', '8081,8082,8083,8084'], 2],
    [['--backend-ports', '1,2,70000'], 2],
    [['--help'], 0],
  ])('%j exits with %i without starting anything', async (argv, code) => {
    const write = process.stdout.write;
    const writeErr = process.stderr.write;
    process.stdout.write = (() => true) as typeof process.stdout.write;
    process.stderr.write = (() => true) as typeof process.stderr.write;
    try {
      expect(await demoCommand(argv)).toBe(code);
    } finally {
      process.stdout.write = write;
      process.stderr.write = writeErr;
    }
  });
});

describe('servegate demo with a port in use', () => {
  let busy: Server;
  beforeAll(async () => {
    busy = await listenOn(0);
  });
  afterAll(() => close(busy));

  test('names the backend that needs it, and stops the backends it had started', async () => {
    const busyPort = portOf(busy);
    const before: number[] = [];
    for (let i = 0; i < 4; i++) before.push(await freePort());
    await expect(
      startDemo({
        port: 0,
        adminPort: 0,
        host: '127.0.0.1',
        logger: silentLogger,
        backendPorts: [before[0], before[1], before[2], before[3], busyPort, 0],
      }),
    ).rejects.toThrow(
      `port ${busyPort} is in use, and the demo's simulated vLLM replica 1 (fleet) needs it; stop what uses it, ` +
        'or move the backends with --backend-ports',
    );
    // The four backends started before it listen no more.
    for (const p of before) await close(await listenOn(p));
  });

  test('a port given to two backends is named as such', async () => {
    const free = await freePort();
    await expect(
      startDemo({
        port: 0,
        adminPort: 0,
        host: '127.0.0.1',
        logger: silentLogger,
        backendPorts: [0, free, 0, free, 0, 0],
      }),
    ).rejects.toThrow(
      `port ${free} is given to the demo's OpenAI-compatible LLM server (chat) and to its simulated vLLM replica 0 (fleet)`,
    );
  });
});

function listenOn(port: number): Promise<Server> {
  return new Promise((res, rej) => {
    const s = createServer();
    s.once('error', rej);
    s.listen(port, '127.0.0.1', () => res(s));
  });
}

function portOf(s: Server): number {
  return (s.address() as { port: number }).port;
}

/** A port nothing listens on (one the system just handed out and that was closed again). */
function close(s: Server): Promise<void> {
  return new Promise((res) => s.close(() => res()));
}
