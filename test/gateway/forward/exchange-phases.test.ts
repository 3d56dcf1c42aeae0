// One Exchange (src/gateway/forward/exchange.ts) driven phase by phase, without a listener: the data plane's context
// is built (createDataPlane, never listening), and the exchange is given a fake client connection — a socket that
// records what the gateway writes, an IncomingMessage whose body this test pushes piece by piece. The backend is a real
// loopback one. What each phase does is read from outside: the bytes written, the backend's requests, the drain count.
import { Duplex } from 'node:stream';
import { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import { parseConfig } from '../../../src/config/load.js';
import { silentLogger } from '../../../src/log.js';
import { Metrics } from '../../../src/observe/metrics.js';
import { RouteStore } from '../../../src/routing/store.js';
import { createDataPlane, type DataPlane } from '../../../src/gateway/listen/data-plane.js';
import { Conn } from '../../../src/gateway/listen/connection.js';
import { Drain } from '../../../src/gateway/listen/drain.js';
import { Exchange } from '../../../src/gateway/forward/exchange.js';
import { HoldQueues } from '../../../src/gateway/forward/scale-from-zero.js';
import { startOpenAIBackend, type OpenAIBackend } from '../../support/backends.js';
import { apiKey, buildOptions, sdep, snapshot } from '../../support/fixtures.js';
import { metricValue } from '../../support/metrics.js';
import { parseResponses, type ParsedResponse } from '../../support/raw-backend.js';
import { waitFor } from '../../support/wait.js';

/** The client's side of a connection as the gateway sees it: what is written to it is kept, nothing is read. */
class FakeSocket extends Duplex {
  written = Buffer.alloc(0);
  bytesRead = 0;
  readonly remoteAddress = '127.0.0.1';
  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (err?: Error | null) => void): void {
    this.written = Buffer.concat([this.written, chunk]);
    cb();
  }
  override _read(): void {}
  setTimeout(): this {
    return this;
  }
  setNoDelay(): this {
    return this;
  }
  setKeepAlive(): this {
    return this;
  }
  destroySoon(): void {
    this.end();
  }
  /** The answers written so far, parsed strictly. */
  answers(): ParsedResponse[] {
    return parseResponses(this.written);
  }
}

let backend: OpenAIBackend;
let store: RouteStore;
let metrics: Metrics;
let drain: Drain;
let plane: DataPlane;
let key: string;

beforeAll(async () => {
  backend = await startOpenAIBackend();
  const k = apiKey('k', 'demo');
  key = k.key;
  store = new RouteStore(buildOptions);
  store.apply(snapshot({ deployments: [sdep('demo/chat').llm().url(backend.url).build()], keySecrets: [k.secret] }));
  const config = parseConfig({}, { port: 0, namespace: 'servegate' });
  metrics = new Metrics(false);
  drain = new Drain();
  plane = createDataPlane({
    config,
    store,
    metrics,
    logger: silentLogger,
    drain,
    holds: new HoldQueues({ maxQueue: 10, maxQueueBytes: 1 << 20 }),
  });
});

afterAll(async () => {
  await plane?.close();
  await backend?.close();
});

/** A request head on a fresh fake connection, its body not sent yet; the exchange made for it, not started. */
function arrive(
  method: string,
  url: string,
  headers: Array<[string, string]>,
): { socket: FakeSocket; conn: Conn; req: IncomingMessage; exchange: Exchange } {
  const socket = new FakeSocket();
  const conn = new Conn(socket as unknown as Socket, drain, plane.ctx);
  const req = new IncomingMessage(socket as unknown as Socket);
  req.method = method;
  req.url = url;
  req.httpVersionMajor = 1;
  req.httpVersionMinor = 1;
  req.httpVersion = '1.1';
  req.rawHeaders = headers.flat();
  const res = new ServerResponse(req);
  res.assignSocket(socket as unknown as Socket);
  // What Node's server does once an answer is written out (resOnFinish in node:_http_server): the response closes.
  res.on('finish', () => {
    res.detachSocket(socket as unknown as Socket);
    process.nextTick(() => res.emit('close'));
  });
  return { socket, conn, req, exchange: new Exchange(conn, res) };
}

/** The body's bytes as the parser would hand them over: pushed, counted as read from the socket. */
function send(socket: FakeSocket, req: IncomingMessage, piece: string, last = false): void {
  socket.bytesRead += Buffer.byteLength(piece);
  req.push(Buffer.from(piece));
  if (last) {
    req.complete = true;
    req.push(null);
  }
}

/** Lets every callback already due run (not a timed wait): what a phase does at once has been done after it. */
const settle = () => new Promise<void>((r) => setImmediate(r));

/** Requests the picker counts in flight at the backend: one from the pick until the call is over. */
const inflight = (): number => plane.ctx.picker.inflightAt(new URL(backend.url).origin);

const requests = async (status: string): Promise<number> =>
  metricValue(await metrics.registry.metrics(), 'servegate_requests_total', {
    project: 'demo',
    deployment: 'chat',
    status,
  }) ?? 0;

describe('an exchange, phase by phase', () => {
  test('admit → body (read whole for an LLM route) → pick and call → answer → record', async () => {
    // A stream of three events 200 ms apart: the call is in flight long enough to be seen.
    backend.stream = { chunks: 3, delayMs: 200 };
    const body = JSON.stringify({ model: 'chat', stream: true, messages: [{ role: 'user', content: 'hello' }] });
    const seen = backend.requests.length;
    const served = await requests('200');
    const { socket, conn, req, exchange } = arrive('POST', '/v1/demo/chat/v1/chat/completions', [
      ['Host', 'gw.test'],
      ['Authorization', `ApiKey ${key}`],
      ['Content-Type', 'application/json'],
      ['Content-Length', String(Buffer.byteLength(body))],
    ]);

    // admit: the connection's turn starts the exchange; admitted, it waits for the body. Nothing is answered yet.
    conn.submit(exchange);
    expect(conn.active).toBe(exchange);
    expect(drain.busy).toBe(1);
    await settle();
    expect(socket.written.length).toBe(0);

    // body: half of it arrives; an LLM body is read whole before a backend is picked, so nothing is picked or sent.
    send(socket, req, body.slice(0, 10));
    await settle();
    expect(inflight()).toBe(0);
    expect(backend.requests.length).toBe(seen);
    expect(socket.written.length).toBe(0);

    // pick and call: the rest arrives; an endpoint is picked at once and the backend gets the body whole.
    send(socket, req, body.slice(10), true);
    await waitFor(() => inflight() === 1, 'the pick', 3000);
    const [call] = await waitFor(
      () => backend.requests.length > seen && backend.requests.slice(seen),
      'the backend call',
      3000,
    );
    expect(call.url).toBe('/v1/chat/completions');
    expect(JSON.parse(call.body.toString())).toEqual(JSON.parse(body));

    // answer: the backend's answer, whole, on the client's connection.
    const [answer] = await waitFor(
      () => socket.answers().length === 1 && socket.answers()[0].complete && socket.answers(),
      'the answer to be written',
      3000,
    );
    expect(answer.status).toBe(200);
    expect(answer.headers['content-type']).toMatch(/^text\/event-stream/);
    expect(answer.body.toString().match(/"content":"[^"]/g)).toHaveLength(3);
    expect(answer.body.toString()).toMatch(/data: \[DONE\]\n\n$/);
    expect(answer.headers['x-request-id']).toMatch(/./);

    // record: the endpoint's count and the connection's turn are released, and the request counted once.
    await waitFor(() => drain.busy === 0 && conn.active === undefined, 'the turn to be released', 3000);
    expect(inflight()).toBe(0);
    expect(await requests('200')).toBe(served + 1);
  });

  test('admit refuses a request without a key: 401 at once, the body never read, nothing called', async () => {
    const seen = backend.requests.length;
    const refused = await requests('401');
    const { socket, conn, req, exchange } = arrive('POST', '/v1/demo/chat/v1/chat/completions', [
      ['Host', 'gw.test'],
      ['Content-Type', 'application/json'],
      ['Content-Length', '1000'],
    ]);
    conn.submit(exchange);
    const [answer] = await waitFor(
      () => socket.answers().length === 1 && socket.answers()[0].complete && socket.answers(),
      'the refusal',
      3000,
    );
    expect(answer.status).toBe(401);
    expect(answer.headers.connection).toBe('close'); // a body was announced and is not read: the connection ends
    expect(req.readableLength + socket.bytesRead).toBe(0);
    await waitFor(() => drain.busy === 0, 'the turn to be released', 3000);
    expect(backend.requests.length).toBe(seen);
    expect(await requests('401')).toBe(refused + 1);
  });
});
