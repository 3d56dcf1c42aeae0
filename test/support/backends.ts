// Real loopback backends for gateway integration tests; each records every request it sees
// (method, raw path with query, headers, whole body, whether the client hung up).
import { createHash } from 'node:crypto';
import http, { type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { performance } from 'node:perf_hooks';
import { WebSocketServer } from 'ws';
import { SCRAPER_USER_AGENT } from '../../src/gateway/forward/endpoint-stats.js';
import { sleep } from './wait.js';

export interface RecordedRequest {
  /** 1, 2, 3... in arrival order. */
  seq: number;
  method: string;
  /** The request target exactly as received: path and query string. */
  url: string;
  /** Lower-case names (Node's view). */
  headers: IncomingHttpHeaders;
  /** Name/value pairs as sent on the wire. */
  rawHeaders: string[];
  body: Buffer;
  /** The whole body arrived. */
  complete: boolean;
  /** The connection closed before the response was finished (the gateway hung up). */
  aborted: boolean;
  /** performance.now() when the request arrived. */
  receivedAt: number;
  /** performance.now() when the request/response pair closed. */
  closedAt?: number;
  /** performance.now() of every streamed chunk written (LLM streams). */
  sent: number[];
  /** Resolves when the request/response pair is closed (finished or aborted). */
  closed: Promise<void>;
}

export type Handler = (req: IncomingMessage, res: ServerResponse, rec: RecordedRequest) => void | Promise<void>;

export interface UpgradeRecord {
  url: string;
  headers: IncomingHttpHeaders;
}

/** An HTTP server on 127.0.0.1 that records requests and answers with a replaceable handler. */
export class RecordingBackend {
  readonly server: http.Server;
  readonly requests: RecordedRequest[] = [];
  /** The gateway's scrapes of this backend's metrics (kept out of `requests`). */
  readonly scrapes: RecordedRequest[] = [];
  readonly upgrades: UpgradeRecord[] = [];
  port = 0;
  /** TCP connections accepted. */
  connections = 0;
  private seq = 0;
  private sockets = new Set<Socket>();

  /**
   * @param handler called once the whole body is in `rec.body` (unless `early` is set: then at once).
   */
  constructor(
    public handler: Handler,
    private readonly early = false,
  ) {
    this.server = http.createServer((req, res) => this.onRequest(req, res));
    this.server.on('connection', (s: Socket) => {
      this.connections++;
      this.sockets.add(s);
      s.on('close', () => this.sockets.delete(s));
    });
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  async listen(): Promise<this> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.port = (this.server.address() as AddressInfo).port;
    return this;
  }

  private onRequest(req: IncomingMessage, res: ServerResponse): void {
    let resolveClosed!: () => void;
    const rec: RecordedRequest = {
      seq: ++this.seq,
      method: req.method ?? '',
      url: req.url ?? '',
      headers: req.headers,
      rawHeaders: req.rawHeaders,
      body: Buffer.alloc(0),
      complete: false,
      aborted: false,
      receivedAt: performance.now(),
      sent: [],
      closed: new Promise<void>((r) => (resolveClosed = r)),
    };
    // The gateway's scrapes of an LLM endpoint's /metrics (SPEC §12) are not the traffic a test sends.
    if (req.headers['user-agent'] === SCRAPER_USER_AGENT) this.scrapes.push(rec);
    else this.requests.push(rec);
    res.on('close', () => {
      if (!res.writableFinished) rec.aborted = true;
      rec.closedAt = performance.now();
      resolveClosed();
    });
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('error', () => {});
    const run = () => {
      Promise.resolve()
        .then(() => this.handler(req, res, rec))
        .catch((err: Error) => {
          if (!res.headersSent && !res.destroyed) {
            res.writeHead(500, { 'content-type': 'application/json' });
            res.end(JSON.stringify({ backendError: err.message }));
          } else res.destroy();
        });
    };
    req.on('end', () => {
      rec.body = Buffer.concat(chunks);
      rec.complete = true;
      if (!this.early) run();
    });
    if (this.early) run();
  }

  /** Requests whose path starts with `prefix`. */
  matching(prefix: string): RecordedRequest[] {
    return this.requests.filter((r) => r.url.startsWith(prefix));
  }

  /** The last request seen; throws if there is none. */
  last(): RecordedRequest {
    const r = this.requests.at(-1);
    if (!r) throw new Error(`backend :${this.port} saw no request`);
    return r;
  }

  /** Waits (bounded) until `n` requests have arrived. */
  async waitForRequests(n: number, timeoutMs = 3000): Promise<RecordedRequest[]> {
    const deadline = Date.now() + timeoutMs;
    while (this.requests.length < n) {
      if (Date.now() > deadline)
        throw new Error(`backend :${this.port} saw ${this.requests.length} requests, wanted ${n}`);
      await sleep(10);
    }
    return this.requests;
  }

  clear(): void {
    this.requests.length = 0;
    this.upgrades.length = 0;
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

function json(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...headers });
  res.end(text);
}

function parseJson(buf: Buffer): unknown {
  try {
    return JSON.parse(buf.toString('utf8'));
  } catch {
    return undefined;
  }
}

/** V1 predictive echo: answers `{backend:'v1', method, path, model, verb, received}` to everything. */
export function startV1Backend(): Promise<RecordingBackend> {
  return new RecordingBackend((_req, res, rec) => {
    const m = /^\/v1\/models\/([^/:?]+):([a-z]+)/.exec(rec.url);
    json(res, 200, {
      backend: 'v1',
      method: rec.method,
      path: rec.url,
      model: m?.[1],
      verb: m?.[2],
      received: parseJson(rec.body),
      predictions: [1, 0],
    });
  }).listen();
}

export interface StreamControl {
  /** Content chunks per stream (a final finish chunk and [DONE] follow). */
  chunks: number;
  /** Pause before each chunk. */
  delayMs: number;
  /** If set, stop writing after this many content chunks and leave the response open. */
  stallAfter?: number;
}

export interface UsageControl {
  /** prompt_tokens and completion_tokens of every answer (total_tokens is their sum). */
  prompt: number;
  completion: number;
  /** Pause before the first streamed chunk (a slow time to first token). */
  firstDelayMs?: number;
  /** OpenAI's own habit: once usage is asked for, every chunk carries `"usage": null` (vLLM leaves it out). */
  nullInChunks?: boolean;
  /** The usage rides on the last content chunk (choices not empty) instead of a chunk of its own. */
  onLastChunk?: boolean;
}

export class OpenAIBackend extends RecordingBackend {
  stream: StreamControl = { chunks: 3, delayMs: 10 };
  /** Streams report usage only when `stream_options.include_usage` asks for it, as vLLM and OpenAI do. */
  usage: UsageControl = { prompt: 1, completion: 2 };
}

/**
 * An OpenAI-compatible server: chat/completions, completions (both streaming), models, embeddings. Usage as
 * `backend.usage` says; a stream sends its usage chunk (choices: []) before [DONE] only when the request asked for it.
 */
export async function startOpenAIBackend(): Promise<OpenAIBackend> {
  const backend: OpenAIBackend = new OpenAIBackend(async (_req, res, rec) => {
    const path = rec.url.split('?')[0];
    const created = Math.floor(Date.now() / 1000);
    if (rec.method === 'GET' && path === '/v1/models') {
      json(res, 200, { object: 'list', data: [{ id: 'tiny-llm', object: 'model', created, owned_by: 'test' }] });
      return;
    }
    if (rec.method !== 'POST') {
      json(res, 404, {
        error: { message: `backend: no route ${rec.method} ${path}`, type: 'invalid_request_error', code: null },
      });
      return;
    }
    const body = (parseJson(rec.body) ?? {}) as Record<string, unknown>;
    const model = typeof body.model === 'string' ? body.model : 'tiny-llm';
    if (path === '/v1/embeddings') {
      json(res, 200, {
        object: 'list',
        data: [{ object: 'embedding', index: 0, embedding: [0.25, -0.5, 0.125] }],
        model,
        usage: { prompt_tokens: 2, total_tokens: 2 },
      });
      return;
    }
    const chat = path === '/v1/chat/completions';
    if (!chat && path !== '/v1/completions') {
      json(res, 404, {
        error: { message: `backend: no route ${rec.method} ${path}`, type: 'invalid_request_error', code: null },
      });
      return;
    }
    const messages = Array.isArray(body.messages) ? (body.messages as Array<{ content?: unknown }>) : [];
    const prompt = chat ? String(messages.at(-1)?.content ?? '') : String(body.prompt ?? '');
    const id = `cmpl-${rec.seq}`;
    if (body.stream !== true) {
      const text = `echo: ${prompt}`;
      json(
        res,
        200,
        chat
          ? {
              id,
              object: 'chat.completion',
              created,
              model,
              choices: [
                { index: 0, message: { role: 'assistant', content: text }, finish_reason: 'stop', logprobs: null },
              ],
              usage: usageOf(backend.usage),
            }
          : {
              id,
              object: 'text_completion',
              created,
              model,
              choices: [{ index: 0, text, finish_reason: 'stop', logprobs: null }],
              usage: usageOf(backend.usage),
            },
      );
      return;
    }
    const ctl = { ...backend.stream };
    const u = { ...backend.usage };
    const so = body.stream_options as { include_usage?: unknown } | null | undefined;
    const withUsage = so?.include_usage === true;
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
    res.flushHeaders();
    const chunk = (i: number, finish: boolean): Record<string, unknown> => {
      const c = plainChunk(i, finish);
      if (withUsage && u.nullInChunks) c.usage = null;
      if (withUsage && finish && u.onLastChunk) c.usage = usageOf(u);
      return c;
    };
    const plainChunk = (i: number, finish: boolean): Record<string, unknown> =>
      chat
        ? {
            id,
            object: 'chat.completion.chunk',
            created,
            model,
            choices: [
              {
                index: 0,
                delta: finish ? {} : { role: 'assistant', content: `tok${i} ` },
                finish_reason: finish ? 'stop' : null,
                logprobs: null,
              },
            ],
          }
        : {
            id,
            object: 'text_completion',
            created,
            model,
            choices: [
              { index: 0, text: finish ? '' : `tok${i} `, finish_reason: finish ? 'stop' : null, logprobs: null },
            ],
          };
    for (let i = 0; i < ctl.chunks; i++) {
      await sleep(i === 0 && u.firstDelayMs !== undefined ? u.firstDelayMs : ctl.delayMs);
      if (res.destroyed || rec.aborted) return;
      if (ctl.stallAfter !== undefined && i >= ctl.stallAfter) {
        await rec.closed; // stalled: write nothing more, wait for the gateway to give up
        return;
      }
      res.write(`data: ${JSON.stringify(chunk(i, false))}\n\n`);
      rec.sent.push(performance.now());
    }
    if (res.destroyed) return;
    res.write(`data: ${JSON.stringify(chunk(ctl.chunks, true))}\n\n`);
    if (withUsage && !u.onLastChunk) {
      res.write(
        `data: ${JSON.stringify({ id, object: chat ? 'chat.completion.chunk' : 'text_completion', created, model, choices: [], usage: usageOf(u) })}\n\n`,
      );
    }
    res.end('data: [DONE]\n\n');
  });
  return backend.listen();
}

function usageOf(u: UsageControl): { prompt_tokens: number; completion_tokens: number; total_tokens: number } {
  return { prompt_tokens: u.prompt, completion_tokens: u.completion, total_tokens: u.prompt + u.completion };
}

/**
 * A user's Python server: any method and path answers
 * `{backend:'python', method, path, bodyLength, bodySha256, headers}`;
 * `/bytes...` streams the request body back as application/octet-stream; `/status/<n>` answers status n;
 * `/cookies` sets two cookies;
 * websocket upgrades on any path echo every message (and record the upgrade request).
 */
export async function startPythonBackend(): Promise<RecordingBackend> {
  const backend = new RecordingBackend((_req, res, rec) => {
    const path = rec.url.split('?')[0];
    if (path.startsWith('/bytes')) {
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': rec.body.length });
      res.end(rec.body);
      return;
    }
    if (path === '/cookies') {
      res.setHeader('set-cookie', ['a=1; Path=/; HttpOnly', 'b=2; Path=/; Expires=Wed, 21 Oct 2037 07:28:00 GMT']);
      json(res, 200, { backend: 'python', cookies: 2 });
      return;
    }
    const st = /^\/status\/(\d{3})$/.exec(path);
    json(res, st ? Number(st[1]) : 200, {
      backend: 'python',
      method: rec.method,
      path: rec.url,
      bodyLength: rec.body.length,
      bodySha256: createHash('sha256').update(rec.body).digest('hex'),
      headers: rec.headers,
    });
  });
  const wss = new WebSocketServer({ noServer: true });
  backend.server.on('upgrade', (req: IncomingMessage, socket: Socket, head: Buffer) => {
    backend.upgrades.push({ url: req.url ?? '', headers: req.headers });
    wss.handleUpgrade(req, socket, head, (ws) => {
      ws.on('message', (data, isBinary) => ws.send(data, { binary: isBinary }));
      ws.on('error', () => {});
    });
  });
  backend.server.on('close', () => wss.close());
  return backend.listen();
}

/** Answers 200 JSON only after `delayMs` (or never, when the gateway hangs up first). */
export function startDelayBackend(delayMs: number): Promise<RecordingBackend> {
  return new RecordingBackend(async (_req, res, rec) => {
    await Promise.race([sleep(delayMs), rec.closed]);
    if (rec.aborted || res.destroyed) return;
    json(res, 200, { backend: 'delay', delayedMs: delayMs });
  }).listen();
}

/** Resets the TCP connection (RST) as soon as a request's headers arrive. */
export function startResetBackend(): Promise<RecordingBackend> {
  return new RecordingBackend((req) => {
    const s = req.socket as Socket & { resetAndDestroy?: () => void };
    if (s.resetAndDestroy) s.resetAndDestroy();
    else s.destroy();
  }, true).listen();
}

/** A port on 127.0.0.1 where nothing listens (connection refused). */
export async function closedPort(): Promise<number> {
  const srv = http.createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as AddressInfo).port;
  await new Promise<void>((r) => srv.close(() => r()));
  return port;
}

export function sha256(data: Buffer | string): string {
  return createHash('sha256').update(data).digest('hex');
}
