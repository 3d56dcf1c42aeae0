// Every answer head the gateway writes goes out here (test/gateway/http/answer-heads.test.ts keeps it so; headers.ts
// makes the lists): its own answers (an error in the route's dialect, JSON, an empty 204) and the heads of backends'
// answers it relays, to a response or a raw socket; and the graceful close of a raw socket (answer, then read and
// discard until the peer closes, bounded in time).
import { STATUS_CODES, type ServerResponse } from 'node:http';
import { Socket as SocketClass, type Socket } from 'node:net';
import { renderError, type Dialect, type GatewayError } from './errors.js';
import { mergeVary } from './headers.js';

/** How long a socket we answered and closed may linger while its peer sends its last bytes. */
const LINGER_MS = 5_000;

/**
 * Writes an error answer. `extra` is a flat [name, value, ...] list (request id, CORS). With `close` the connection
 * closes after the answer (a body we did not read must not be taken for the next request).
 */
export function sendError(
  res: ServerResponse,
  err: GatewayError,
  dialect: Dialect,
  extra: readonly string[],
  close: boolean,
): void {
  const body = renderError(err, dialect);
  const h: string[] = ['content-type', 'application/json', 'content-length', String(Buffer.byteLength(body)), ...extra];
  for (const k in err.headers) h.push(k, err.headers[k]);
  if (close) h.push('connection', 'close');
  res.writeHead(err.status, h);
  res.end(body);
}

/** The gateway's own successful JSON answer (the model list of the OpenAI base URL). */
export function sendJson(
  res: ServerResponse,
  status: number,
  body: string,
  extra: readonly string[],
  close: boolean,
  head = false,
): void {
  const h: string[] = ['content-type', 'application/json', 'content-length', String(Buffer.byteLength(body)), ...extra];
  if (close) h.push('connection', 'close');
  res.writeHead(status, h);
  res.end(head ? undefined : body);
}

/** The interim 100 Continue to a request that asked for it (Expect: 100-continue), once it is admitted. */
export function sendContinue(res: ServerResponse): void {
  res.writeContinue();
}

/** An answer with no body (a CORS preflight's 204): `headers` gets its content-length: 0 (and connection: close). */
export function sendEmpty(res: ServerResponse, status: number, headers: string[], close: boolean): void {
  headers.push('content-length', '0');
  if (close) headers.push('connection', 'close');
  res.writeHead(status, headers);
  res.end();
}

/**
 * The head of a backend's answer the gateway relays, its Vary lines and the gateway's CORS one made one (each field
 * name once); the caller writes the body. `flush`: the head leaves at once
 * (an event stream: Node would otherwise hold it until the first body write, and the client waits on the first token).
 */
export function sendRelayedHead(res: ServerResponse, status: number, headers: string[], flush: boolean): void {
  mergeVary(headers);
  res.writeHead(status, headers);
  if (flush) res.flushHeaders();
}

/** A backend's head relayed on a raw socket (an upgrade's 101); the tunnel's bytes follow. */
export function writeRawHead(socket: Socket, status: number, headers: readonly string[]): void {
  socket.write(rawHead(status, headers));
}

/** A backend's whole answer relayed on a raw socket (an upgrade it declined), then the socket closes. */
export function sendRawAnswer(socket: Socket, status: number, headers: string[], body: Buffer, reason?: string): void {
  mergeVary(headers);
  closeSocket(socket, Buffer.concat([Buffer.from(rawHead(status, headers, reason), 'latin1'), body]));
}

/** The same error answer as raw bytes on a socket Node's HTTP server has let go of (upgrades, parse errors); then closes. */
export function sendRawError(socket: Socket, err: GatewayError, dialect: Dialect, extra: readonly string[]): void {
  const body = renderError(err, dialect);
  const h: string[] = ['content-type', 'application/json', 'content-length', String(Buffer.byteLength(body)), ...extra];
  for (const k in err.headers) h.push(k, err.headers[k]);
  h.push('connection', 'close');
  closeSocket(socket, rawHead(err.status, h) + body);
}

/** A status line and header block, for raw sockets. */
export function rawHead(status: number, headers: readonly string[], reason?: string): string {
  let out = `HTTP/1.1 ${status} ${reason ?? STATUS_CODES[status] ?? ''}\r\n`;
  for (let i = 0; i < headers.length; i += 2) out += `${headers[i]}: ${headers[i + 1]}\r\n`;
  return `${out}\r\n`;
}

/**
 * Ends a raw socket after `data`: whatever the peer still sends is read and dropped (an unread socket never sees the
 * peer's close and would hold its descriptor forever), and the socket is destroyed when the peer closes, on error, or
 * after LINGER_MS at the latest.
 */
export function closeSocket(socket: Socket, data?: string | Buffer): void {
  if (socket.destroyed || (socket as Lingering)[kLingering]) return;
  (socket as Lingering)[kLingering] = true;
  const timer = setTimeout(() => socket.destroy(), LINGER_MS);
  timer.unref();
  socket.once('close', () => clearTimeout(timer));
  socket.on('error', () => socket.destroy());
  socket.on('end', () => socket.destroySoon());
  socket.on('data', drop);
  socket.resume();
  if (data !== undefined && socket.writable) socket.end(data);
  else socket.end();
}

function drop(): void {}

const kLingering = Symbol('servegate.lingering');
interface Lingering extends Socket {
  [kLingering]?: boolean;
}

/**
 * The answer on `socket` is the last one (it says `connection: close`) and the client may still be sending a body the
 * gateway did not read: when Node's server ends the socket after that answer (`destroySoon`), it lingers instead
 * (closeSocket: the write side ends, what the client still sends is read and dropped until it closes, 5 s at most).
 * Destroyed at once, the socket would have unread bytes, and the kernel's reset would erase the answer before the
 * client read it (RFC 9112 §9.6): a client uploading a large body would see a broken pipe instead of its 413 or 401.
 */
export function lingerAfterAnswer(socket: Socket): void {
  if (socket.destroyed) return;
  socket.destroySoon = lingeringDestroySoon;
  // Node takes its own error listener off a socket it hands over (an upgrade or CONNECT parsed after the refused
  // body): this one stays, so a client's reset while lingering ends the socket instead of the process.
  socket.on('error', destroyOnError);
}

/** An 'error' listener that ends the socket (a socket with none would take the process down on a reset). */
export function destroyOnError(this: Socket): void {
  this.destroy();
}

function lingeringDestroySoon(this: Lingering): void {
  // The second call (the client's end, seen while lingering) ends it as Node would.
  if (this[kLingering]) return SocketClass.prototype.destroySoon.call(this);
  this[kLingering] = true;
  const timer = setTimeout(() => this.destroy(), LINGER_MS);
  timer.unref();
  this.once('close', () => clearTimeout(timer));
  this.on('end', lingeringDestroySoon);
  this.end();
  // Node's parser still reads the socket (a 'data' listener would take the socket from it, and Node would not start
  // reading again): resumed, it reads what the client still sends into the request, which Node drops once answered.
  this.resume();
}

/**
 * Ends an event stream cut short: one last event in the route's dialect, after a blank line that ends any event left
 * open (an SDK then raises an error instead of returning a shortened answer); then the connection closes, never cleanly.
 */
export function breakStream(res: ServerResponse, dialect: Dialect, message: string, code: string): void {
  const error = dialect === 'openai' ? { message, type: 'upstream_error', code } : message;
  res.write(`\n\ndata: ${JSON.stringify({ error })}\n\n`, () => res.destroy());
}
