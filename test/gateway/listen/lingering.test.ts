// A request refused before its body was read (413 for a declared size over the limit, 401 without a key) while the
// client is still sending a large body: the answer must reach the client. Closed at once with unread bytes, the
// socket would be reset and the reset would erase the answer before the client read it (RFC 9112 §9.6): the client
// would see a broken pipe instead of its 413 or 401 (SPEC §6: a request is forwarded whole or refused with a status
// that says why). Raw sockets that keep writing, as HTTP clients that send the whole body before reading do.
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import { connect } from 'node:net';
import { once } from 'node:events';
import { startPythonBackend, type RecordingBackend } from '../../support/backends.js';
import { startGateway, type Gateway } from '../../support/harness.js';
import { within } from '../../support/net.js';
import { sleep, waitFor } from '../../support/wait.js';

const LIMIT = 1024 * 1024;
let backend: RecordingBackend;
let gw: Gateway;

beforeAll(async () => {
  backend = await startPythonBackend();
  gw = await startGateway({
    deployments: [{ namespace: 'demo', name: 'app', type: 'python', url: backend.url }],
    keys: [{ name: 'k', projects: 'demo' }],
    config: { limits: { maxRequestBodyBytes: LIMIT } },
  });
});

afterAll(async () => {
  await gw?.close();
  await backend?.close();
});

/** The gateway lingers 5 s at most after a last answer (LINGER_MS in src/gateway/http/answers.ts). */
const LINGER_MS = 5_000;

/** The HTTP/1.1 status lines in what a client read. */
const statusLines = (text: string): string[] => text.match(/HTTP\/1\.1 \d{3} /g) ?? [];

/**
 * Sends `head`, then `size` bytes of body in 64 KB writes without reading first (as urllib and requests do), each
 * framed by `frame` (as is by default), then `last`, then reads until the gateway closes the connection, which must
 * come within the linger time (the client ended its side, so at once in fact). Resolves what was read and whether
 * writing failed (EPIPE / ECONNRESET).
 */
async function uploadThenRead(
  head: string,
  size: number,
  frame: (piece: Buffer) => Buffer = (p) => p,
  last = '',
): Promise<{ text: string; writeError?: string }> {
  const s = connect(gw.port, '127.0.0.1');
  await once(s, 'connect');
  let text = '';
  let writeError: string | undefined;
  s.setEncoding('latin1');
  s.on('data', (c: string) => (text += c));
  const closed = new Promise<void>((resolve) => s.on('close', () => resolve()));
  s.on('error', (e: NodeJS.ErrnoException) => (writeError ??= e.code ?? e.message));
  s.write(head);
  const piece = Buffer.alloc(64 * 1024, 0x61);
  const framed = frame(piece);
  for (let sent = 0; sent < size && !s.destroyed; sent += piece.length) {
    if (!s.write(framed)) await Promise.race([once(s, 'drain').catch(() => undefined), closed]);
  }
  if (!s.destroyed) s.end(last);
  try {
    await within(closed, 2 * LINGER_MS, 'the gateway to close the connection after its refusal');
  } finally {
    s.destroy();
  }
  return { text, writeError };
}

const SIZE = 16 * 1024 * 1024;

describe('a refused upload gets its answer', () => {
  test('413 for a declared body over the limit, the client still sending 16 MB', async () => {
    const head =
      `POST /v1/demo/app/upload HTTP/1.1\r\nHost: x\r\nAuthorization: ApiKey ${gw.keys.k}\r\n` +
      `Content-Type: application/octet-stream\r\nContent-Length: ${SIZE}\r\n\r\n`;
    const r = await uploadThenRead(head, SIZE);
    expect(statusLines(r.text)).toEqual(['HTTP/1.1 413 ']);
    expect(r.text.startsWith('HTTP/1.1 413 ')).toBe(true);
    expect(r.text).toContain('connection: close');
    expect(r.writeError).toBeUndefined();
  });

  test('401 without a key, the client still sending 16 MB', async () => {
    const head = `POST /v1/demo/app/upload HTTP/1.1\r\nHost: x\r\nContent-Length: ${SIZE}\r\n\r\n`;
    const r = await uploadThenRead(head, SIZE);
    expect(statusLines(r.text)).toEqual(['HTTP/1.1 401 ']);
    expect(r.text.startsWith('HTTP/1.1 401 ')).toBe(true);
    expect(r.writeError).toBeUndefined();
  });

  test('a request pipelined after the refused body is never served; the refusal still arrives', async () => {
    const before = backend.requests.length;
    const body = 'x'.repeat(2 * LIMIT);
    const smuggled = `GET /v1/demo/app/smuggled HTTP/1.1\r\nHost: x\r\nAuthorization: ApiKey ${gw.keys.k}\r\n\r\n`;
    const head = `POST /v1/demo/app/upload HTTP/1.1\r\nHost: x\r\nContent-Length: ${body.length}\r\n\r\n`;
    const s = connect(gw.port, '127.0.0.1');
    await once(s, 'connect');
    let text = '';
    s.setEncoding('latin1');
    s.on('data', (c: string) => (text += c));
    s.on('error', () => undefined);
    const closed = once(s, 'close');
    s.write(head + body + smuggled);
    // The gateway ends its side after the 401 (the client, not half-open, ends its own then) and ends the connection at
    // the request parsed after the body. Nothing follows that request, so the gateway has read everything the client
    // sent when it closes: no reset, and the 401 written before is not erased (SPEC §6).
    try {
      await within(closed, 3000, 'the connection to end at the pipelined request');
    } finally {
      s.destroy();
    }
    expect(statusLines(text)).toEqual(['HTTP/1.1 401 ']);
    expect(text.startsWith('HTTP/1.1 401 ')).toBe(true);
    expect(backend.requests.slice(before).map((q) => q.url)).toEqual([]);
  });
});

describe('what a client sends after the refused body, while the socket lingers', () => {
  const refused = (): string => `POST /v1/demo/app/x HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n0123456789`;

  test.each([
    ['an upgrade', 'GET /v1/demo/app/ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n'],
    ['a CONNECT', 'CONNECT a:1 HTTP/1.1\r\nHost: a:1\r\n\r\n'],
  ])('%s then a reset: the gateway goes on serving', async (_what, next) => {
    const s = connect(gw.port, '127.0.0.1');
    await once(s, 'connect');
    s.on('error', () => undefined);
    let text = '';
    s.setEncoding('latin1');
    s.on('data', (c: string) => (text += c));
    s.write(refused() + next);
    // The refusal is out, so the socket lingers; the request behind it came in the same write.
    await waitFor(() => statusLines(text).length > 0, 'the refusal');
    expect(statusLines(text)).toEqual(['HTTP/1.1 401 ']);
    s.resetAndDestroy();
    await sleep(100); // stays: the window in which a reset with no error listener would take the process down
    const r = await fetch(`${gw.url}/v1/demo/app/alive`, { headers: { authorization: `ApiKey ${gw.keys.k}` } });
    expect(r.status).toBe(200);
  });

  // The one case where RFC 9112 §9.6 lets the refusal be lost: the client is still sending after a request the gateway
  // will not serve. The gateway closes with bytes unread, its kernel answers them with a reset, and the reset may
  // erase the 401 before the client reads it. What must hold: the connection ends (promptly, not at the linger's end),
  // nothing is served, and whatever the client read is that one 401.
  test('a flood of pipelined requests after the refused body: the connection ends at the first, nothing is served', async () => {
    const before = backend.requests.length;
    const s = connect({ port: gw.port, host: '127.0.0.1', allowHalfOpen: true });
    await once(s, 'connect');
    s.on('error', () => undefined);
    let text = '';
    s.setEncoding('latin1');
    s.on('data', (c: string) => (text += c));
    const closed = new Promise<void>((resolve) => s.on('close', () => resolve()));
    // Half-open (the client does not end when the gateway does): the close must be the gateway's, not the linger's end.
    // 16 MB of pipelined requests, more than the kernel's buffers hold: read on, they would all be taken off the wire
    // and parsed while the socket lingers (5 s); the connection ends instead.
    const one = `GET /v1/demo/app/flood HTTP/1.1\r\nHost: x\r\nAuthorization: ApiKey ${gw.keys.k}\r\nx-pad: ${'p'.repeat(4000)}\r\n\r\n`;
    s.write(refused());
    s.write(Buffer.from(one.repeat(Math.ceil((16 * 1024 * 1024) / one.length))));
    await within(closed, 3000, 'the connection to end at the first pipelined request');
    expect(statusLines(text)).toEqual(text === '' ? [] : ['HTTP/1.1 401 ']);
    if (text !== '') expect(text.startsWith('HTTP/1.1 401 ')).toBe(true);
    expect(backend.requests.length).toBe(before);
  });
});

describe('a streamed (chunked) body over the limit, the client still sending', () => {
  test('413 reaches a client that writes the whole body before reading', async () => {
    // A python route streams its body to the backend as it comes: the limit trips while it is piped.
    const r = await uploadThenRead(
      `POST /v1/demo/app/stream HTTP/1.1\r\nHost: x\r\nAuthorization: ApiKey ${gw.keys.k}\r\nTransfer-Encoding: chunked\r\n\r\n`,
      8 * LIMIT,
      (p) => Buffer.concat([Buffer.from(`${p.length.toString(16)}\r\n`), p, Buffer.from('\r\n')]),
      '0\r\n\r\n',
    );
    expect(statusLines(r.text)).toEqual(['HTTP/1.1 413 ']);
    expect(r.text.startsWith('HTTP/1.1 413 ')).toBe(true);
    expect(r.writeError).toBeUndefined();
  });
});
