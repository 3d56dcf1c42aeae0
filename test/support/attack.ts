// Helpers for attacker-style tests: raw sockets that misbehave (pipeline floods, resets, half-closes, trickles),
// backends that record concurrency, and measurements of what the gateway process still holds (descriptors, heap).
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import net, { type AddressInfo } from 'node:net';
import v8 from 'node:v8';
import vm from 'node:vm';
import { RecordingBackend, type RecordedRequest } from './backends.js';
import { send } from './harness.js';
import { sleep } from './wait.js';

/** Open file descriptors of this process (the in-process gateway, its backends and the test's own sockets). */
export function fdCount(): number {
  return readdirSync('/proc/self/fd').length;
}

/**
 * Descriptors this process holds for TCP connections (not listeners) matching the ports: `localPort` = connections
 * accepted by a server on that port (e.g. the gateway's client connections); `remotePort` = connections made to it
 * (e.g. the gateway's connections to a backend). Read from /proc/self/fd and /proc/self/net/tcp{,6}.
 */
export function tcpFds(match: { localPort?: number; remotePort?: number }): number {
  const inodes = new Set<string>();
  for (const table of ['/proc/self/net/tcp', '/proc/self/net/tcp6']) {
    let text = '';
    try {
      text = readFileSync(table, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const f = line.trim().split(/\s+/);
      if (f.length < 10 || f[3] === '0A') continue; // 0A = LISTEN
      const local = parseInt(f[1].split(':')[1], 16);
      const remote = parseInt(f[2].split(':')[1], 16);
      if (match.localPort !== undefined && local !== match.localPort) continue;
      if (match.remotePort !== undefined && remote !== match.remotePort) continue;
      inodes.add(f[9]);
    }
  }
  let n = 0;
  for (const fd of readdirSync('/proc/self/fd')) {
    let target = '';
    try {
      target = readlinkSync(`/proc/self/fd/${fd}`);
    } catch {
      continue;
    }
    const m = /^socket:\[(\d+)\]$/.exec(target);
    if (m && inodes.has(m[1])) n++;
  }
  return n;
}

/** fdCount() once two readings 200 ms apart agree (bounded: the last reading after 3 s). */
export async function stableFdCount(): Promise<number> {
  let last = fdCount();
  for (let i = 0; i < 15; i++) {
    await sleep(200);
    const now = fdCount();
    if (now === last) return now;
    last = now;
  }
  return last;
}

let gcFn: (() => void) | undefined;
/** A full, synchronous garbage collection (no --expose-gc needed on the command line). */
export function forceGc(): void {
  if (!gcFn) {
    v8.setFlagsFromString('--expose-gc');
    gcFn = vm.runInNewContext('gc') as () => void;
  }
  gcFn();
}

/** heapUsed after a few full collections (bytes). */
export async function settledHeap(): Promise<number> {
  for (let i = 0; i < 3; i++) {
    forceGc();
    await sleep(20);
  }
  forceGc();
  return process.memoryUsage().heapUsed;
}

/** One sample value from the admin /metrics text (summed over label sets); NaN when absent. */
export async function metricValue(adminUrl: string, name: string): Promise<number> {
  const r = await send(`${adminUrl}/metrics`);
  let sum = NaN;
  for (const line of r.text.split('\n')) {
    if (line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)/.exec(line);
    if (m && m[1] === name) sum = (Number.isNaN(sum) ? 0 : sum) + Number(m[3]);
  }
  return sum;
}

/** A TCP socket to 127.0.0.1 that keeps every byte it receives, with a bounded wait for text in it. */
export class Peer {
  received = Buffer.alloc(0);
  /** The gateway ended its side ('end' seen). */
  gotEnd = false;
  closed = false;
  closedAt = 0;
  private waiters: Array<() => void> = [];

  private constructor(readonly socket: net.Socket) {
    socket.on('data', (d: Buffer) => {
      this.received = Buffer.concat([this.received, d]);
      this.wake();
    });
    socket.on('end', () => {
      this.gotEnd = true;
      this.wake();
    });
    socket.on('close', () => {
      this.closed = true;
      this.closedAt = performance.now();
      this.wake();
    });
    socket.on('error', () => undefined);
  }

  /** allowHalfOpen: the socket does not end its side when the gateway ends its own. */
  static connect(port: number, opts: { allowHalfOpen?: boolean } = {}): Promise<Peer> {
    return new Promise((resolve, reject) => {
      const s = net.connect({ port, host: '127.0.0.1', allowHalfOpen: opts.allowHalfOpen ?? false }, () => {
        s.off('error', reject);
        resolve(new Peer(s));
      });
      s.once('error', reject);
    });
  }

  get text(): string {
    return this.received.toString('latin1');
  }

  write(data: string | Buffer): void {
    if (!this.socket.destroyed) this.socket.write(data);
  }

  private wake(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }

  /** Waits (bounded) until `cond` holds; throws with what was received so far. */
  async until(cond: (p: Peer) => boolean, timeoutMs: number, what: string): Promise<void> {
    const deadline = performance.now() + timeoutMs;
    while (!cond(this)) {
      const left = deadline - performance.now();
      if (left <= 0) {
        throw new Error(
          `timed out after ${timeoutMs} ms waiting for ${what}; closed=${this.closed}; received ${this.received.length} bytes: ${JSON.stringify(this.text.slice(0, 300))}`,
        );
      }
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, Math.min(left, 100));
        this.waiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
  }

  /** Waits until `n` complete HTTP responses with Content-Length bodies (or a close) have arrived. */
  async untilResponses(n: number, timeoutMs: number): Promise<void> {
    await this.until((p) => countResponses(p.received) >= n, timeoutMs, `${n} responses`);
  }

  /** Sends RST instead of FIN: whatever the gateway has not read yet is discarded. */
  reset(): void {
    const s = this.socket as net.Socket & { resetAndDestroy?: () => void };
    if (s.destroyed) return;
    if (s.resetAndDestroy) s.resetAndDestroy();
    else s.destroy();
  }

  destroy(): void {
    this.socket.destroy();
  }
}

/** Status lines of the responses in `buf` (heads only; bodies are not parsed). */
export function statusLines(buf: Buffer): number[] {
  const out: number[] = [];
  const re = /HTTP\/1\.1 (\d{3})/g;
  const s = buf.toString('latin1');
  let m: RegExpExecArray | null;
  while ((m = re.exec(s))) out.push(Number(m[1]));
  return out;
}

function countResponses(buf: Buffer): number {
  return statusLines(buf).length;
}

/** The same request `n` times, back to back, as one buffer (each may be made distinct by `i`). */
export function pipeline(n: number, make: (i: number) => Buffer): Buffer {
  const parts: Buffer[] = [];
  for (let i = 0; i < n; i++) parts.push(make(i));
  return Buffer.concat(parts);
}

/** A websocket upgrade request (GET + Upgrade headers), optionally with an Authorization header. */
export function upgradeRequest(path: string, port: number, key?: string): Buffer {
  const lines = [
    `GET ${path} HTTP/1.1`,
    `Host: 127.0.0.1:${port}`,
    'Connection: Upgrade',
    'Upgrade: websocket',
    'Sec-WebSocket-Version: 13',
    'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==',
  ];
  if (key) lines.push(`Authorization: ApiKey ${key}`);
  return Buffer.from(lines.join('\r\n') + '\r\n\r\n', 'latin1');
}

/**
 * A python-style backend that records how many requests it is handling at once.
 * `/delay/<ms>...` answers after that many ms (or when the gateway hangs up); anything else at once.
 * Answers JSON `{seq, path}`.
 */
export class ConcurrencyBackend extends RecordingBackend {
  /** Requests received since the last reset() that are being handled now; the most there were at once. */
  active = 0;
  maxActive = 0;
  private epoch = 0;
  constructor() {
    super(async (_req: IncomingMessage, res: ServerResponse, rec: RecordedRequest) => {
      const epoch = this.epoch;
      this.active++;
      this.maxActive = Math.max(this.maxActive, this.active);
      void rec.closed.then(() => {
        if (this.epoch === epoch) this.active--;
      });
      const m = /^\/delay\/(\d+)/.exec(rec.url);
      if (m) await Promise.race([sleep(Number(m[1])), rec.closed]);
      if (rec.aborted || res.destroyed) return;
      const body = JSON.stringify({ seq: rec.seq, path: rec.url });
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
      res.end(body);
    });
  }

  /** Forgets recorded requests; concurrency is counted afresh from requests that arrive after this. */
  reset(): void {
    this.clear();
    this.epoch++;
    this.active = 0;
    this.maxActive = 0;
  }
}

/** A backend that declines every websocket upgrade with a 400 and `body` (and closes), recording the attempts. */
export class DecliningUpgradeBackend {
  readonly server: net.Server;
  attempts = 0;
  port = 0;
  private sockets = new Set<net.Socket>();
  constructor(body = '{"error":"no websockets here"}') {
    this.server = net.createServer((s) => {
      this.sockets.add(s);
      s.on('close', () => this.sockets.delete(s));
      s.on('error', () => undefined);
      let head = '';
      s.on('data', (d: Buffer) => {
        head += d.toString('latin1');
        if (!head.includes('\r\n\r\n')) return;
        this.attempts++;
        s.end(
          `HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n${body}`,
        );
        head = '';
      });
    });
  }
  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }
  async listen(): Promise<this> {
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.port = (this.server.address() as AddressInfo).port;
    return this;
  }
  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}
