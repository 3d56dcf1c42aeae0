// A chain of fallbacks (SPEC §12: the first deployment's spec.fallbacks, in order, while nothing reached the client)
// with a body large enough to be let go once written (upstream-call.ts, LET_GO_MIN): the second fallback is still
// called when the first answers 503; and the answer of a fallback without a canary names no variant (SPEC: responses
// carry x-servegate-variant when a canary is configured).
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, expect, test } from '@jest/globals';
import { LET_GO_MIN } from '../../../src/gateway/forward/upstream-call.js';
import { SCRAPER_USER_AGENT } from '../../../src/gateway/forward/endpoint-stats.js';
import { send, startGateway, type Gateway } from '../../support/harness.js';

/** A backend that reads the body whole and answers `status`, counting the bodies (and their sizes) it got. */
class Backend {
  readonly sizes: number[] = [];
  readonly server = http.createServer((req: IncomingMessage, res: ServerResponse) => {
    if (req.headers['user-agent'] === SCRAPER_USER_AGENT) return void res.writeHead(404).end();
    let size = 0;
    req.on('data', (c: Buffer) => (size += c.length));
    req.on('end', () => {
      this.sizes.push(size);
      res.writeHead(this.status, { 'content-type': 'application/json' });
      res.end(
        this.status === 200
          ? JSON.stringify({ choices: [{ message: { role: 'assistant', content: this.name } }] })
          : '{"error":{"message":"busy","type":"server_error"}}',
      );
    });
  });
  constructor(
    private readonly status: number,
    private readonly name: string,
  ) {}
  async start(): Promise<string> {
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }
  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}

let first: Backend;
let mid: Backend;
let rescue: Backend;
let canary: Backend;
let gw: Gateway;

const doc = (name: string, url: string, extra: Record<string, unknown> = {}) => ({
  apiVersion: 'serving.servegate.dev/v1alpha1',
  kind: 'ServingDeployment',
  metadata: { name, namespace: 'demo' },
  spec: { type: 'model', modelServer: 'llm', backend: { url }, ...extra },
});

beforeAll(async () => {
  first = new Backend(503, 'first');
  mid = new Backend(503, 'mid');
  rescue = new Backend(200, 'rescue');
  canary = new Backend(503, 'canary');
  const [f, m, r, c] = await Promise.all([first.start(), mid.start(), rescue.start(), canary.start()]);
  gw = await startGateway({
    files: {
      'llm.yaml': [
        doc('chat', f, { modelName: 'big', fallbacks: ['mid', 'rescue'] }),
        doc('mid', m, { modelName: 'mid' }),
        doc('rescue', r, { modelName: 'small' }),
        // Every request to the canaried deployment goes to its canary (100 %), which answers 503.
        doc('split', f, {
          modelName: 'big',
          canary: { backend: { url: c }, percent: 100 },
          fallbacks: ['rescue'],
        }),
      ],
    },
    keys: [{ name: 'k', projects: 'demo' }],
  });
});

afterAll(async () => {
  await gw?.close();
  await Promise.all([first?.close(), mid?.close(), rescue?.close(), canary?.close()]);
});

const chat = (deployment: string, promptBytes: number) =>
  send(`${gw.url}/v1/demo/${deployment}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `ApiKey ${gw.keys.k}` },
    body: { model: 'big', messages: [{ role: 'user', content: 'x'.repeat(promptBytes) }] },
  });

test('a small body goes down the whole chain: the second fallback answers', async () => {
  const r = await chat('chat', 100);
  expect(r.status).toBe(200);
  expect(r.text).toContain('rescue');
});

test('a body of LET_GO_MIN bytes or more goes down the whole chain too', async () => {
  const before = rescue.sizes.length;
  const r = await chat('chat', 2 * LET_GO_MIN);
  // Mid (a fallback with no fallbacks of its own) let go of the body once written: rescue was never called.
  expect(mid.sizes.at(-1)).toBeGreaterThan(LET_GO_MIN);
  expect(r.status).toBe(200);
  expect(rescue.sizes.length).toBe(before + 1);
});

test('the answer of a fallback without a canary names no variant', async () => {
  const r = await chat('split', 100);
  expect(r.status).toBe(200);
  expect(r.text).toContain('rescue');
  expect(r.headers['x-servegate-variant']).toBeUndefined();
});
