// `servegate demo` / `npm start`: the sample backends and the gateway on examples/ answer the printed requests.
// Everything listens on free ports: the sample backends too (--backend-ports 0,0,0), the examples' URLs rewritten.
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import { silentLogger } from '../../src/log.js';
import { DEMO_API_KEY, demoCommand, startDemo, type Demo } from '../../src/cli/demo.js';

describe('servegate demo', () => {
  let demo: Demo;
  beforeAll(async () => {
    demo = await startDemo({ port: 0, adminPort: 0, host: '127.0.0.1', logger: silentLogger, backendPorts: [0, 0, 0] });
  });
  afterAll(() => demo?.stop());

  const auth = { authorization: `ApiKey ${DEMO_API_KEY}`, 'content-type': 'application/json' };

  test('prints one curl per example deployment, on the real port, with the demo key', () => {
    expect(demo.lines).toHaveLength(4);
    expect(demo.lines.map((l) => l.split(/\s+/)[0])).toEqual(['demo/chat', 'demo/echo', 'demo/iris', 'demo/mnist']);
    for (const l of demo.lines) {
      expect(l).toContain(DEMO_API_KEY);
      expect(l).toContain(`http://localhost:${demo.server.port}/v1/demo/`);
    }
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
