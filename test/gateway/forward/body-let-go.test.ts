// An open answer does not keep its request's body: LLM answers stream for minutes, and a gateway holding thousands of
// them must not hold thousands of prompts too (undici keeps a request's body as long as the request lasts; the gateway
// hands it large bodies in a form it lets go of once written: upstream-call.ts, SentOnce).
import { createHash } from 'node:crypto';
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import { LET_GO_MIN } from '../../../src/gateway/forward/upstream-call.js';
import { forceGc } from '../../support/attack.js';
import { startGateway, type Gateway } from '../../support/harness.js';
import { waitFor } from '../../support/wait.js';

/** A backend that reads each body (keeping only its size and hash), starts an event stream and holds it open. */
class HoldingBackend {
  readonly server = http.createServer((req, res) => this.handle(req, res));
  readonly received: Array<{ size: number; sha256: string }> = [];
  readonly open = new Set<ServerResponse>();

  async start(): Promise<string> {
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    const hash = createHash('sha256');
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      hash.update(c);
    });
    req.on('end', () => {
      this.received.push({ size, sha256: hash.digest('hex') });
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(`data: {"choices":[{"delta":{"content":"hi"}}]}\n\n`);
      this.open.add(res);
    });
  }

  endAll(): void {
    for (const res of this.open) res.end('data: [DONE]\n\n');
    this.open.clear();
  }

  async close(): Promise<void> {
    this.endAll();
    this.server.closeAllConnections();
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}

let backend: HoldingBackend;
let gw: Gateway;

beforeAll(async () => {
  backend = new HoldingBackend();
  const url = await backend.start();
  gw = await startGateway({
    deployments: [{ namespace: 'demo', name: 'chat', modelServer: 'llm', url }],
    keys: [{ name: 'k', projects: 'demo' }],
  });
});

afterAll(async () => {
  await gw?.close();
  await backend?.close();
});

/** Starts a streamed chat completion with `body`; resolves once its first event arrived, with its request. */
function openStream(body: Buffer): Promise<{ req: http.ClientRequest; res: IncomingMessage }> {
  return new Promise((resolve, reject) => {
    const req = http.request(`${gw.url}/v1/demo/chat/v1/chat/completions`, {
      method: 'POST',
      headers: {
        authorization: `ApiKey ${gw.keys.k}`,
        'content-type': 'application/json',
        'content-length': body.length,
      },
    });
    req.on('error', reject);
    req.on('response', (res) => {
      if (res.statusCode !== 200) return reject(new Error(`status ${res.statusCode}`));
      res.once('data', () => resolve({ req, res }));
    });
    req.end(body);
  });
}

/** External (ArrayBuffer) memory of this process after full collections: where Buffers live. */
async function settledArrayBuffers(): Promise<number> {
  for (let i = 0; i < 3; i++) {
    forceGc();
    await new Promise((r) => setTimeout(r, 20));
  }
  return process.memoryUsage().arrayBuffers;
}

describe('an open answer holds no copy of its request body', () => {
  const STREAMS = 16;
  const PROMPT = 256 * 1024;

  test(`${STREAMS} open streams of ${PROMPT / 1024} KB prompts: their bodies are let go while the answers stream`, async () => {
    const body = Buffer.from(
      JSON.stringify({ model: 'chat', stream: true, messages: [{ role: 'user', content: 'x'.repeat(PROMPT) }] }),
    );
    const sha256 = createHash('sha256').update(body).digest('hex');
    const before = await settledArrayBuffers();
    const streams = await Promise.all(Array.from({ length: STREAMS }, () => openStream(body)));
    try {
      await waitFor(() => backend.received.length >= STREAMS);
      // Every byte reached the backend as sent.
      for (const r of backend.received) expect(r).toEqual({ size: body.length, sha256 });
      const during = await settledArrayBuffers();
      // Holding the bodies would be STREAMS × 256 KB = 4 MB; the sockets' own buffers are far below a quarter of it.
      expect(during - before).toBeLessThan((STREAMS * PROMPT) / 4);
    } finally {
      backend.endAll();
      await Promise.all(streams.map(({ res }) => new Promise((r) => (res.on('end', r), res.resume()))));
    }
  });

  test('bodies below the size undici is handed as they are still arrive whole', async () => {
    backend.received.length = 0;
    for (const size of [0, 1, LET_GO_MIN - 200, LET_GO_MIN + 1]) {
      const body = Buffer.from(
        JSON.stringify({ model: 'chat', stream: true, messages: [{ role: 'user', content: 'y'.repeat(size) }] }),
      );
      const { res } = await openStream(body);
      backend.endAll();
      await new Promise((r) => (res.on('end', r), res.resume()));
      expect(backend.received.at(-1)).toEqual({
        size: body.length,
        sha256: createHash('sha256').update(body).digest('hex'),
      });
    }
  });
});
