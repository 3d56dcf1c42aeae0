// Byte-exact peers for framing tests: a backend that answers with a script writing raw bytes on the socket,
// a client connection that records every byte and how the connection ended (FIN or RST), and a strict
// HTTP/1.1 response parser that says whether a message arrived complete.
import net, { type AddressInfo } from 'node:net';
import { expect } from './expect.js';
import type { RecordingBackend } from './backends.js';
import { send } from './harness.js';
import { SCRAPER_USER_AGENT } from '../../src/gateway/forward/endpoint-stats.js';

export interface RawRequest {
  /** 1, 2, 3... in arrival order. */
  seq: number;
  /** Request line and header lines, without the final CRLF CRLF. */
  head: string;
  method: string;
  target: string;
  /** Name/value pairs as sent. */
  headers: Array<[string, string]>;
  /** The de-chunked body (or the Content-Length bytes). */
  body: Buffer;
  socket: net.Socket;
}

/** Writes the answer to one request; the request's socket is the connection it came on. */
export type RawScript = (req: RawRequest, socket: net.Socket) => void | Promise<void>;

/**
 * A backend on 127.0.0.1 that parses each request (Content-Length or chunked bodies, keep-alive) and hands it to
 * `script`, which writes whatever bytes it likes. The next request on a connection is read once the script returns.
 */
export class RawBackend {
  readonly requests: RawRequest[] = [];
  readonly sockets = new Set<net.Socket>();
  /** TCP connections accepted. */
  connections = 0;
  port = 0;
  private seq = 0;
  private readonly server: net.Server;

  constructor(public script: RawScript) {
    this.server = net.createServer((s) => this.onConnection(s));
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  async listen(): Promise<this> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.port = (this.server.address() as AddressInfo).port;
    return this;
  }

  private onConnection(s: net.Socket): void {
    this.connections++;
    this.sockets.add(s);
    s.on('close', () => this.sockets.delete(s));
    s.on('error', () => {});
    let buf = Buffer.alloc(0);
    let busy = false;
    const pump = async (): Promise<void> => {
      if (busy) return;
      busy = true;
      try {
        for (;;) {
          const parsed = parseRequest(buf);
          if (!parsed) return;
          buf = buf.subarray(parsed.used);
          // The gateway's scrapes of an LLM endpoint's /metrics (SPEC §12) are not what a test scripts: not found.
          if (parsed.req.headers.some(([n, v]) => n.toLowerCase() === 'user-agent' && v === SCRAPER_USER_AGENT)) {
            s.write('HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n');
            continue;
          }
          const req: RawRequest = { seq: ++this.seq, ...parsed.req, socket: s };
          this.requests.push(req);
          await this.script(req, s);
          if (s.destroyed) return;
        }
      } finally {
        busy = false;
      }
    };
    s.on('data', (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      void pump();
    });
  }

  /** Waits (bounded) until `n` requests have arrived. */
  async waitForRequests(n: number, timeoutMs = 3000): Promise<RawRequest[]> {
    const deadline = Date.now() + timeoutMs;
    while (this.requests.length < n) {
      if (Date.now() > deadline)
        throw new Error(`raw backend :${this.port} saw ${this.requests.length} requests, wanted ${n}`);
      await new Promise((r) => setTimeout(r, 10));
    }
    return this.requests;
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

function parseRequest(buf: Buffer): { req: Omit<RawRequest, 'seq' | 'socket'>; used: number } | undefined {
  const end = buf.indexOf('\r\n\r\n');
  if (end < 0) return undefined;
  const head = buf.subarray(0, end).toString('latin1');
  const [line, ...lines] = head.split('\r\n');
  const [method, target] = line.split(' ');
  const headers = lines.map((l): [string, string] => {
    const i = l.indexOf(':');
    return [l.slice(0, i).trim(), l.slice(i + 1).trim()];
  });
  const get = (n: string) => headers.find(([k]) => k.toLowerCase() === n)?.[1];
  let pos = end + 4;
  if (/chunked/i.test(get('transfer-encoding') ?? '')) {
    const parts: Buffer[] = [];
    for (;;) {
      const nl = buf.indexOf('\r\n', pos);
      if (nl < 0) return undefined;
      const size = parseInt(buf.subarray(pos, nl).toString('latin1'), 16);
      if (size === 0) {
        const fin = buf.indexOf('\r\n\r\n', nl);
        if (fin < 0) return undefined;
        pos = fin + 4;
        break;
      }
      if (buf.length < nl + 2 + size + 2) return undefined;
      parts.push(buf.subarray(nl + 2, nl + 2 + size));
      pos = nl + 2 + size + 2;
    }
    return { req: { head, method, target, headers, body: Buffer.concat(parts) }, used: pos };
  }
  const n = Number(get('content-length') ?? 0);
  if (buf.length < pos + n) return undefined;
  return { req: { head, method, target, headers, body: Buffer.from(buf.subarray(pos, pos + n)) }, used: pos + n };
}

/** The body of a plain answer with a Content-Length. */
export function plainAnswer(status: number, body: string, extra: string[] = []): string {
  return [
    `HTTP/1.1 ${status} X`,
    `Content-Length: ${Buffer.byteLength(body)}`,
    'Content-Type: text/plain',
    ...extra,
    '',
    body,
  ].join('\r\n');
}

/** A client TCP connection that keeps every byte received and records how the connection ended. */
export class Conn {
  data = Buffer.alloc(0);
  /** undefined while open; 'fin' for a clean close by the peer, 'reset' for ECONNRESET, 'error' otherwise. */
  closedBy: 'fin' | 'reset' | 'error' | undefined;
  private waiters: Array<() => void> = [];

  private constructor(readonly socket: net.Socket) {
    socket.on('data', (d: Buffer) => {
      this.data = Buffer.concat([this.data, d]);
      this.wake();
    });
    socket.on('end', () => {
      this.closedBy ??= 'fin';
      this.wake();
    });
    socket.on('error', (e: NodeJS.ErrnoException) => {
      this.closedBy ??= e.code === 'ECONNRESET' ? 'reset' : 'error';
      this.wake();
    });
    socket.on('close', () => {
      this.closedBy ??= 'fin';
      this.wake();
    });
  }

  static connect(port: number): Promise<Conn> {
    return new Promise((resolve, reject) => {
      const s = net.connect(port, '127.0.0.1', () => resolve(new Conn(s)));
      s.once('error', reject);
    });
  }

  write(data: string | Buffer): void {
    this.socket.write(typeof data === 'string' ? Buffer.from(data, 'latin1') : data);
  }

  get text(): string {
    return this.data.toString('latin1');
  }

  private wake(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }

  /** Waits until `check` holds (re-checked on every event); throws with what arrived so far on timeout. */
  async until(check: (c: Conn) => boolean, timeoutMs = 5000, what = 'condition'): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!check(this)) {
      const left = deadline - Date.now();
      if (left <= 0) {
        throw new Error(
          `timed out after ${timeoutMs} ms waiting for ${what}; closed: ${this.closedBy ?? 'no'}; got: ${JSON.stringify(this.text.slice(0, 600))}`,
        );
      }
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, left);
        this.waiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
  }

  /** Waits until the peer has closed the connection; returns how. Throws if it stays open. */
  async closed(timeoutMs = 5000): Promise<'fin' | 'reset' | 'error'> {
    await this.until((c) => c.closedBy !== undefined, timeoutMs, 'the connection to close');
    return this.closedBy!;
  }

  /**
   * Waits until the bytes hold response number `index` (0-based; 1xx answers count) whole, or the connection closes.
   * `headRequests`: indexes of responses that answer HEAD requests (no body).
   */
  async response(opts: { index?: number; headRequests?: number[]; timeoutMs?: number } = {}): Promise<ParsedResponse> {
    const index = opts.index ?? 0;
    const pick = () => responsesOf(this, opts.headRequests ?? [])[index];
    await this.until(
      () => this.closedBy !== undefined || pick()?.complete === true,
      opts.timeoutMs ?? 5000,
      `response #${index}`,
    );
    const r = pick();
    if (!r)
      throw new Error(
        `no response #${index}; closed: ${this.closedBy}; got: ${JSON.stringify(this.text.slice(0, 600))}`,
      );
    return r;
  }

  close(): void {
    this.socket.destroy();
  }
}

export interface ParsedResponse {
  status: number;
  /** Lower-case names; repeated ones joined with ", ". */
  headers: Record<string, string>;
  rawHeaders: Array<[string, string]>;
  /** How the body is delimited: chunked, content-length, connection close, or no body at all. */
  framing: 'chunked' | 'length' | 'close' | 'none';
  body: Buffer;
  /** Trailer fields of a chunked body. */
  trailers: Array<[string, string]>;
  /**
   * The whole message arrived: all Content-Length bytes, the last chunk and the trailer section, or (close-delimited)
   * the connection ended with a clean FIN — known only when `eof` was passed.
   */
  complete: boolean;
  /** Set when the bytes do not parse as HTTP/1.1 (e.g. a bad chunk-size line). */
  error?: string;
}

/**
 * Parses consecutive responses from the bytes received on one connection. Interim (1xx) answers are entries of
 * their own. `eof`: the connection has ended (with a FIN when `closedBy` is 'fin').
 */
export function parseResponses(
  data: Buffer,
  opts: { headRequests?: number[]; eof?: boolean; closedBy?: 'fin' | 'reset' | 'error' } = {},
): ParsedResponse[] {
  const out: ParsedResponse[] = [];
  let pos = 0;
  while (pos < data.length) {
    const end = data.indexOf('\r\n\r\n', pos);
    if (end < 0) break;
    const head = data.subarray(pos, end).toString('latin1');
    const [statusLine, ...lines] = head.split('\r\n');
    const m = /^HTTP\/1\.[01] (\d{3})(?: .*)?$/.exec(statusLine);
    const r: ParsedResponse = {
      status: m ? Number(m[1]) : 0,
      headers: {},
      rawHeaders: [],
      framing: 'none',
      body: Buffer.alloc(0),
      trailers: [],
      complete: false,
    };
    out.push(r);
    if (!m) {
      r.error = `bad status line ${JSON.stringify(statusLine.slice(0, 80))}`;
      return out;
    }
    for (const l of lines) {
      const i = l.indexOf(':');
      const name = l.slice(0, i).trim();
      const value = l.slice(i + 1).trim();
      r.rawHeaders.push([name, value]);
      const k = name.toLowerCase();
      r.headers[k] = r.headers[k] !== undefined ? `${r.headers[k]}, ${value}` : value;
    }
    pos = end + 4;
    const noBody =
      (r.status >= 100 && r.status < 200) ||
      r.status === 204 ||
      r.status === 304 ||
      opts.headRequests?.includes(out.length - 1);
    if (noBody) {
      r.complete = true;
      continue;
    }
    if (/chunked\s*$/i.test(r.headers['transfer-encoding'] ?? '')) {
      r.framing = 'chunked';
      const parts: Buffer[] = [];
      for (;;) {
        const nl = data.indexOf('\r\n', pos);
        if (nl < 0) {
          r.body = Buffer.concat(parts);
          return out;
        }
        const sizeText = data.subarray(pos, nl).toString('latin1').split(';')[0].trim();
        if (!/^[0-9a-fA-F]{1,8}$/.test(sizeText)) {
          r.body = Buffer.concat(parts);
          r.error = `bad chunk-size line ${JSON.stringify(data.subarray(pos, Math.min(nl, pos + 80)).toString('latin1'))}`;
          return out;
        }
        const size = parseInt(sizeText, 16);
        if (size === 0) {
          // Trailer section: header lines up to an empty line.
          let p = nl + 2;
          for (;;) {
            const e = data.indexOf('\r\n', p);
            if (e < 0) {
              r.body = Buffer.concat(parts);
              return out;
            }
            if (e === p) {
              pos = e + 2;
              break;
            }
            const l = data.subarray(p, e).toString('latin1');
            const i = l.indexOf(':');
            r.trailers.push([l.slice(0, i).trim(), l.slice(i + 1).trim()]);
            p = e + 2;
          }
          r.body = Buffer.concat(parts);
          r.complete = true;
          break;
        }
        if (data.length < nl + 2 + size + 2) {
          parts.push(data.subarray(nl + 2, Math.min(data.length, nl + 2 + size)));
          r.body = Buffer.concat(parts);
          return out;
        }
        if (data.subarray(nl + 2 + size, nl + 4 + size).toString('latin1') !== '\r\n') {
          r.body = Buffer.concat(parts);
          r.error = 'chunk data not followed by CRLF';
          return out;
        }
        parts.push(data.subarray(nl + 2, nl + 2 + size));
        pos = nl + 2 + size + 2;
      }
      continue;
    }
    if (r.headers['content-length'] !== undefined) {
      r.framing = 'length';
      const n = Number(r.headers['content-length']);
      r.body = Buffer.from(data.subarray(pos, Math.min(data.length, pos + n)));
      if (r.body.length < n) return out;
      r.complete = true;
      pos += n;
      continue;
    }
    r.framing = 'close';
    r.body = Buffer.from(data.subarray(pos));
    r.complete = opts.eof === true && (opts.closedBy ?? 'fin') === 'fin';
    return out;
  }
  return out;
}

/** The responses on a connection, parsed with what is known about how it ended. */
export function responsesOf(c: Conn, headRequests: number[] = []): ParsedResponse[] {
  return parseResponses(c.data, { headRequests, eof: c.closedBy !== undefined, closedBy: c.closedBy });
}

/**
 * The URLs a backend saw since `before`, once a marker request sent afterwards has been answered: whatever an earlier
 * attack made the gateway forward has arrived by then.
 */
export async function backendSawSince(
  gatewayUrl: string,
  key: string,
  backend: RecordingBackend,
  before: number,
  markerPath: string,
): Promise<string[]> {
  const r = await send(`${gatewayUrl}${markerPath}`, { headers: { authorization: `ApiKey ${key}` } });
  expect(r.status, `marker ${markerPath}: ${r.text}`).toBe(200);
  return backend.requests.slice(before).map((q) => q.url);
}

/** Checks that an answer is the gateway's JSON error ({"error": "..."}) and returns the message. */
export function jsonError(r: ParsedResponse): string {
  expect(r.headers['content-type'] ?? '', `content-type of the ${r.status}`).toMatch(/^application\/json/);
  const doc = JSON.parse(r.body.toString('utf8'));
  expect(typeof doc.error, `error body ${r.body.toString('utf8')}`).toBe('string');
  return doc.error;
}
