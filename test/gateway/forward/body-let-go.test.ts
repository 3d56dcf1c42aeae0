// An open answer does not keep its request's body: LLM answers stream for minutes, and a gateway holding thousands of
// them must not hold thousands of prompts too (undici keeps a request's body as long as the request lasts; the gateway
// hands it large bodies in a form it lets go of once written: upstream-call.ts, SentOnce).
import { createHash } from 'node:crypto';
import diagnostics_channel from 'node:diagnostics_channel';
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import { LET_GO_MIN } from '../../../src/gateway/forward/upstream-call.js';
import { forceGc } from '../../support/attack.js';
import { startGateway, type Gateway } from '../../support/harness.js';
import { sleep, waitFor } from '../../support/wait.js';
import { closedPort } from '../../support/backends.js';
import { SCRAPER_USER_AGENT } from '../../../src/gateway/forward/endpoint-stats.js';

interface Received {
  size: number;
  sha256: string;
  /** The body's `model` and the length of its first message's content. */
  model?: string;
  prompt?: number;
}

/**
 * A backend that reads each body (keeping its size, hash, model and prompt length), starts an event stream and holds
 * it open; or, with `status`, answers that status once the body is read (0: closes the connection without answering).
 */
class HoldingBackend {
  readonly server = http.createServer((req, res) => this.handle(req, res));
  readonly received: Received[] = [];

  constructor(private readonly status = 200) {}
  readonly open = new Set<ServerResponse>();

  async start(): Promise<string> {
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    if (req.headers['user-agent'] === SCRAPER_USER_AGENT) return void res.writeHead(404).end(); // a scrape (SPEC §12)
    const hash = createHash('sha256');
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      hash.update(c);
      if (size <= 1 << 20) chunks.push(c);
    });
    req.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      chunks.length = 0; // the open answer keeps this closure: it must not keep the body (the measure is of the gateway)
      const doc = JSON.parse(text) as {
        model?: string;
        messages?: Array<{ content: string }>;
      };
      this.received.push({
        size,
        sha256: hash.digest('hex'),
        model: doc.model,
        prompt: doc.messages?.[0]?.content.length,
      });
      if (this.status === 0) {
        req.socket.destroy();
        return;
      }
      if (this.status !== 200) {
        res.writeHead(this.status, { 'content-type': 'application/json' });
        res.end('{"error":{"message":"busy","type":"server_error"}}');
        return;
      }
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
let busy: HoldingBackend;
let hangup: HoldingBackend;
let gw: Gateway;

const chatDoc = (name: string, url: string, extra: Record<string, unknown> = {}) => ({
  apiVersion: 'serving.servegate.dev/v1alpha1',
  kind: 'ServingDeployment',
  metadata: { name, namespace: 'demo' },
  spec: { type: 'model', modelServer: 'llm', backend: { url }, ...extra },
});

beforeAll(async () => {
  backend = new HoldingBackend();
  busy = new HoldingBackend(503);
  hangup = new HoldingBackend(0);
  const [url, busyUrl, hangupUrl] = await Promise.all([backend.start(), busy.start(), hangup.start()]);
  gw = await startGateway({
    files: {
      'llm.yaml': [
        chatDoc('chat', url),
        chatDoc('first', busyUrl, { modelName: 'big', fallbacks: ['rescue'] }),
        chatDoc('down', `http://127.0.0.1:${await closedPort()}`, { modelName: 'big', fallbacks: ['rescue'] }),
        chatDoc('hangup', hangupUrl, { modelName: 'big', fallbacks: ['rescue'] }),
        chatDoc('rescue', url, { modelName: 'small' }),
      ],
    },
    keys: [{ name: 'k', projects: 'demo' }],
  });
});

afterAll(async () => {
  await gw?.close();
  await Promise.all([backend?.close(), busy?.close(), hangup?.close()]);
});

/** Starts a streamed chat completion with `body`; resolves once its first event arrived, with its request. */
function openStream(body: Buffer, deployment = 'chat'): Promise<{ req: http.ClientRequest; res: IncomingMessage }> {
  return new Promise((resolve, reject) => {
    const req = http.request(`${gw.url}/v1/demo/${deployment}/v1/chat/completions`, {
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
    // Stays: a turn of the event loop between collections, for the finalizers that free external memory to run.
    await sleep(20);
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
      for (const r of backend.received) expect(r).toMatchObject({ size: body.length, sha256 });
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
      expect(backend.received.at(-1)).toMatchObject({
        size: body.length,
        sha256: createHash('sha256').update(body).digest('hex'),
      });
    }
  });

  test.each([
    ['first', 'its backend answered 503 after reading it'],
    ['down', 'its backend refused the connection (tried twice)'],
    ['hangup', 'its backend read it and closed the connection without answering'],
  ])('a large body sent to %s goes whole to the fallback deployment when %s', async (deployment) => {
    backend.received.length = 0;
    const body = Buffer.from(
      JSON.stringify({ model: 'big', stream: true, messages: [{ role: 'user', content: 'z'.repeat(96 * 1024) }] }),
    );
    const { res } = await openStream(body, deployment);
    backend.endAll();
    await new Promise((r) => (res.on('end', r), res.resume()));
    for (const [name, b] of [
      ['first', busy],
      ['hangup', hangup],
    ] as const) {
      if (deployment === name) expect(b.received).toEqual([expect.objectContaining({ size: body.length })]);
      b.received.length = 0;
    }
    // The fallback's body is the same request with its own served model.
    expect(backend.received).toEqual([expect.objectContaining({ model: 'small', prompt: 96 * 1024 })]);
  });
});

describe('an open answer holds none of its request header lines', () => {
  test('the client request no longer carries its header lines (the API key among them) once the answer streams', async () => {
    // The gateway's own IncomingMessage, as its HTTP server made it (the channel also sees the backends' requests).
    const seen: IncomingMessage[] = [];
    const onStart = (m: unknown): void => {
      const { request } = m as { request: IncomingMessage };
      if (request.url?.startsWith('/v1/demo/chat/')) seen.push(request);
    };
    diagnostics_channel.subscribe('http.server.request.start', onStart);
    const body = Buffer.from(
      JSON.stringify({ model: 'chat', stream: true, messages: [{ role: 'user', content: 'hi' }] }),
    );
    let stream: Awaited<ReturnType<typeof openStream>> | undefined;
    try {
      stream = await openStream(body);
    } finally {
      diagnostics_channel.unsubscribe('http.server.request.start', onStart);
    }
    try {
      expect(seen).toHaveLength(1);
      const [req] = seen;
      expect(req.complete).toBe(true);
      expect(req.rawHeaders).toEqual([]);
      expect(JSON.stringify(req.headers)).not.toContain(gw.keys.k);
      expect(JSON.stringify(req.headersDistinct)).not.toContain(gw.keys.k); // and reading it does not throw
    } finally {
      backend.endAll();
      await new Promise((r) => (stream!.res.on('end', r), stream!.res.resume()));
    }
    // The answer ended as any other: the request was served and counted.
    expect(backend.received.at(-1)).toMatchObject({ size: body.length, model: 'chat' });
  });
});
