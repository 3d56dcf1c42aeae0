// Starts a real servegate (files source over a temp folder of manifests) for black-box tests,
// plus small real-socket clients: `send` (node:http, any header) and `RawClient` (bytes on a TCP socket).
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import http, { type IncomingHttpHeaders } from 'node:http';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { stringify } from 'yaml';
import { parseConfig } from '../../src/config/load.js';
import { createLogger } from '../../src/log.js';
import { startServegate } from '../../src/server.js';
import { waitFor } from './wait.js';
import { FilesSource } from '../../src/sources/files/index.js';

export const KEYS_NAMESPACE = 'servegate';

export interface DeploymentManifest {
  /** metadata.name = the deployment name. */
  name: string;
  /** metadata.namespace; the project defaults to it. */
  namespace: string;
  project?: string;
  type?: 'model' | 'python';
  modelServer?: 'python' | 'sklearn' | 'tensorflow' | 'llm';
  modelName?: string;
  /** backend.url, e.g. backend.url */
  url: string;
  timeoutSeconds?: number;
  /** spec.limits (SPEC §9). */
  limits?: { requestsPerMinute?: number; tokensPerMinute?: number };
  /** More spec fields (pricing, priority, ...). */
  spec?: Record<string, unknown>;
}

export interface KeyManifest {
  /** The Secret name (sent upstream as x-servegate-key). */
  name: string;
  /** "p1,p2" or "*". */
  projects: string;
  expiresAt?: string;
  /** Default: the keys namespace. `null` writes no metadata.namespace at all. */
  namespace?: string | null;
  /** Write the fields as base64 `data` instead of `stringData`. */
  base64?: boolean;
  /** Use this key instead of a fresh one (e.g. to rotate a Secret to a known key). */
  key?: string;
  /** The Secret's rpm/tpm fields (SPEC §9). */
  rpm?: number | string;
  tpm?: number | string;
  /** More Secret fields (budgetTokens, tenant, priority, ...: SPEC §14). */
  fields?: Record<string, string>;
}

export interface Gateway {
  url: string;
  port: number;
  adminUrl: string;
  adminPort: number;
  dir: string;
  /** Secret name → the whole key "<prefix>.<secret>". */
  keys: Record<string, string>;
  /** Every log line the gateway wrote (JSON text). */
  logs: string[];
  writeManifest(file: string, content: string | object | object[]): void;
  removeManifest(file: string): void;
  /** Writes `deploy-<namespace>-<name>.yaml`. */
  writeDeployment(d: DeploymentManifest): void;
  removeDeployment(namespace: string, name: string): void;
  /** Writes `key-<name>.yaml` and returns the key. */
  writeKey(k: KeyManifest): string;
  removeKey(name: string): void;
  close(): Promise<void>;
}

export function deploymentDoc(d: DeploymentManifest): object {
  const spec: Record<string, unknown> = { type: d.type ?? 'model' };
  if (d.project !== undefined) spec.project = d.project;
  if ((d.type ?? 'model') === 'model') spec.modelServer = d.modelServer ?? 'sklearn';
  if (d.modelName !== undefined) spec.modelName = d.modelName;
  spec.backend = { url: d.url };
  if (d.timeoutSeconds !== undefined) spec.timeoutSeconds = d.timeoutSeconds;
  if (d.limits !== undefined) spec.limits = d.limits;
  Object.assign(spec, d.spec);
  return {
    apiVersion: 'serving.servegate.dev/v1alpha1',
    kind: 'ServingDeployment',
    metadata: { name: d.name, namespace: d.namespace },
    spec,
  };
}

/** A fresh key: 16-character prefix, 43-character secret. */
export function newKey(): string {
  const prefix = randomBytes(24)
    .toString('base64')
    .replace(/[^A-Za-z0-9]/g, '')
    .slice(0, 16)
    .padEnd(16, 'k');
  return `${prefix}.${randomBytes(32).toString('base64url')}`;
}

export function keyDoc(k: KeyManifest, key: string): object {
  const prefix = key.split('.')[0];
  const fields: Record<string, string> = {
    prefix,
    sha256: createHash('sha256').update(key).digest('hex'),
    projects: k.projects,
  };
  if (k.expiresAt) fields.expiresAt = k.expiresAt;
  if (k.rpm !== undefined) fields.rpm = String(k.rpm);
  if (k.tpm !== undefined) fields.tpm = String(k.tpm);
  Object.assign(fields, k.fields);
  const metadata: Record<string, unknown> = { name: k.name, labels: { 'serving.servegate.dev/api-key': 'true' } };
  if (k.namespace !== null) metadata.namespace = k.namespace ?? KEYS_NAMESPACE;
  const doc: Record<string, unknown> = { apiVersion: 'v1', kind: 'Secret', metadata, type: 'Opaque' };
  if (k.base64)
    doc.data = Object.fromEntries(Object.entries(fields).map(([f, v]) => [f, Buffer.from(v).toString('base64')]));
  else doc.stringData = fields;
  return doc;
}

function toYaml(content: string | object | object[]): string {
  if (typeof content === 'string') return content;
  const docs = Array.isArray(content) ? content : [content];
  return docs.map((d) => stringify(d)).join('---\n');
}

export interface StartOptions {
  /** The configuration document (chart values `gateway:`). */
  config?: Record<string, unknown>;
  deployments?: DeploymentManifest[];
  keys?: KeyManifest[];
  /** Extra files written before start: name → YAML text or documents. */
  files?: Record<string, string | object | object[]>;
}

export async function startGateway(opts: StartOptions = {}): Promise<Gateway> {
  const dir = mkdtempSync(join(tmpdir(), 'servegate-gw-'));
  const keys: Record<string, string> = {};
  const logs: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      for (const line of chunk.toString('utf8').split('\n')) if (line.trim()) logs.push(line);
      cb();
    },
  });
  const logger = createLogger('debug', sink);

  const writeManifest = (file: string, content: string | object | object[]) =>
    writeFileSync(join(dir, file), toYaml(content));
  const removeManifest = (file: string) => unlinkSync(join(dir, file));
  const writeDeployment = (d: DeploymentManifest) =>
    writeManifest(`deploy-${d.namespace}-${d.name}.yaml`, deploymentDoc(d));
  const writeKey = (k: KeyManifest) => {
    const key = k.key ?? newKey();
    keys[k.name] = key;
    writeManifest(`key-${k.name}.yaml`, keyDoc(k, key));
    return key;
  };

  for (const d of opts.deployments ?? []) writeDeployment(d);
  for (const k of opts.keys ?? []) writeKey(k);
  for (const [f, c] of Object.entries(opts.files ?? {})) writeManifest(f, c);

  const config = parseConfig(opts.config ?? {}, { port: 0, namespace: KEYS_NAMESPACE });
  const source = new FilesSource(dir, { keysNamespace: config.auth.keysNamespace, logger });
  const sg = await startServegate({ config, source, port: 0, adminPort: 0, host: '127.0.0.1', logger });
  let closed = false;
  return {
    url: `http://127.0.0.1:${sg.port}`,
    port: sg.port,
    adminUrl: `http://127.0.0.1:${sg.adminPort}`,
    adminPort: sg.adminPort,
    dir,
    keys,
    logs,
    writeManifest,
    removeManifest,
    writeDeployment,
    removeDeployment: (namespace, name) => removeManifest(`deploy-${namespace}-${name}.yaml`),
    writeKey,
    removeKey: (name) => {
      removeManifest(`key-${name}.yaml`);
      delete keys[name];
    },
    async close() {
      if (closed) return;
      closed = true;
      try {
        await sg.close();
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  };
}

/** waitFor (test/support/wait.ts) for an assertion: polls until `check` stops throwing. */
export function eventually<T>(
  check: () => Promise<T> | T,
  timeoutMs = 3000,
  intervalMs = 50,
): Promise<Exclude<T, false>> {
  return waitFor(check, 'the check to pass', timeoutMs, intervalMs);
}

export interface Reply {
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
  text: string;
  json(): any;
}

export interface SendOptions {
  method?: string;
  headers?: Record<string, string | string[]>;
  body?: string | Buffer | object;
  timeoutMs?: number;
}

/** One HTTP request with node:http (no connection reuse; any header, Host included, may be set). */
export function send(url: string, opts: SendOptions = {}): Promise<Reply> {
  const u = new URL(url);
  let body: Buffer | undefined;
  const headers: Record<string, string | string[]> = { ...(opts.headers ?? {}) };
  if (opts.body !== undefined) {
    if (Buffer.isBuffer(opts.body)) body = opts.body;
    else if (typeof opts.body === 'string') body = Buffer.from(opts.body);
    else {
      body = Buffer.from(JSON.stringify(opts.body));
      if (!Object.keys(headers).some((h) => h.toLowerCase() === 'content-type'))
        headers['content-type'] = 'application/json';
    }
    // node:http sends a GET/DELETE/OPTIONS body unframed unless told its length.
    if (!Object.keys(headers).some((h) => /^(content-length|transfer-encoding)$/i.test(h)))
      headers['content-length'] = String(body.length);
  }
  return new Promise<Reply>((resolve, reject) => {
    const req = http.request(
      {
        host: u.hostname,
        port: u.port,
        path: `${u.pathname}${u.search}`,
        method: opts.method ?? (body ? 'POST' : 'GET'),
        headers,
        agent: false,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('error', reject);
        res.on('end', () => {
          const b = Buffer.concat(chunks);
          const text = b.toString('utf8');
          resolve({
            status: res.statusCode ?? 0,
            headers: res.headers,
            body: b,
            text,
            json: () => {
              try {
                return JSON.parse(text);
              } catch {
                throw new Error(`not JSON (status ${res.statusCode}): ${text.slice(0, 300)}`);
              }
            },
          });
        });
      },
    );
    req.setTimeout(opts.timeoutMs ?? 10_000, () =>
      req.destroy(new Error(`no answer from ${url} within ${opts.timeoutMs ?? 10_000} ms`)),
    );
    req.on('error', reject);
    req.end(body);
  });
}

export interface RawResponse {
  status: number;
  statusText: string;
  /** Lower-case names; repeated headers joined with ", ". */
  headers: Record<string, string>;
  head: string;
  body: Buffer;
  text: string;
}

/** Bytes on a TCP socket: write anything, read HTTP/1.1 responses (interim 1xx ones included) in order. */
export class RawClient {
  private buf = Buffer.alloc(0);
  private ended = false;
  private waiters: Array<() => void> = [];
  private constructor(readonly socket: net.Socket) {
    socket.on('data', (d: Buffer) => {
      this.buf = Buffer.concat([this.buf, d]);
      this.wake();
    });
    const end = () => {
      this.ended = true;
      this.wake();
    };
    socket.on('end', end);
    socket.on('close', end);
    socket.on('error', end);
  }

  static connect(port: number): Promise<RawClient> {
    return new Promise((resolve, reject) => {
      const s = net.connect(port, '127.0.0.1', () => resolve(new RawClient(s)));
      s.once('error', reject);
    });
  }

  write(data: string | Buffer): void {
    this.socket.write(data);
  }

  private wake(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }

  private async more(deadline: number): Promise<void> {
    if (this.ended)
      throw new Error(`connection closed; got so far: ${JSON.stringify(this.buf.toString('latin1').slice(0, 300))}`);
    const left = deadline - Date.now();
    if (left <= 0)
      throw new Error(
        `timed out waiting for a response; got so far: ${JSON.stringify(this.buf.toString('latin1').slice(0, 300))}`,
      );
    await new Promise<void>((resolve) => {
      const t = setTimeout(resolve, left);
      this.waiters.push(() => {
        clearTimeout(t);
        resolve();
      });
    });
  }

  /** The next response on the connection (a 1xx counts as one). */
  async next(opts: { timeoutMs?: number; headRequest?: boolean } = {}): Promise<RawResponse> {
    const deadline = Date.now() + (opts.timeoutMs ?? 5000);
    let end: number;
    while ((end = this.buf.indexOf('\r\n\r\n')) < 0) await this.more(deadline);
    const head = this.buf.subarray(0, end).toString('latin1');
    this.buf = this.buf.subarray(end + 4);
    const [statusLine, ...lines] = head.split('\r\n');
    const m = /^HTTP\/1\.[01] (\d{3}) ?(.*)$/.exec(statusLine);
    if (!m) throw new Error(`bad status line ${JSON.stringify(statusLine)}`);
    const status = Number(m[1]);
    const headers: Record<string, string> = {};
    for (const l of lines) {
      const i = l.indexOf(':');
      const name = l.slice(0, i).trim().toLowerCase();
      const value = l.slice(i + 1).trim();
      headers[name] = headers[name] !== undefined ? `${headers[name]}, ${value}` : value;
    }
    let body = Buffer.alloc(0);
    const noBody = (status >= 100 && status < 200) || status === 204 || status === 304 || opts.headRequest;
    if (!noBody) {
      if (/\bchunked\b/i.test(headers['transfer-encoding'] ?? '')) {
        const parts: Buffer[] = [];
        for (;;) {
          let nl: number;
          while ((nl = this.buf.indexOf('\r\n')) < 0) await this.more(deadline);
          const size = parseInt(this.buf.subarray(0, nl).toString('latin1'), 16);
          while (this.buf.length < nl + 2 + size + 2) await this.more(deadline);
          parts.push(Buffer.from(this.buf.subarray(nl + 2, nl + 2 + size)));
          this.buf = this.buf.subarray(nl + 2 + size + 2);
          if (size === 0) break;
        }
        body = Buffer.concat(parts);
      } else if (headers['content-length'] !== undefined) {
        const n = Number(headers['content-length']);
        while (this.buf.length < n) await this.more(deadline);
        body = Buffer.from(this.buf.subarray(0, n));
        this.buf = this.buf.subarray(n);
      } else {
        while (!this.ended) {
          if (Date.now() >= deadline) throw new Error('timed out reading a body delimited by connection close');
          await this.more(deadline).catch(() => undefined);
        }
        body = this.buf;
        this.buf = Buffer.alloc(0);
      }
    }
    return { status, statusText: m[2], headers, head, body, text: body.toString('utf8') };
  }

  /** The next final (non-1xx) response. */
  async final(opts: { timeoutMs?: number } = {}): Promise<RawResponse> {
    for (;;) {
      const r = await this.next(opts);
      if (r.status >= 200) return r;
    }
  }

  close(): void {
    this.socket.destroy();
  }
}

/** Sends raw bytes on a new connection and returns the first final response. */
export async function rawRequest(port: number, data: string | Buffer, timeoutMs = 5000): Promise<RawResponse> {
  const c = await RawClient.connect(port);
  try {
    c.write(data);
    return await c.final({ timeoutMs });
  } finally {
    c.close();
  }
}

/** `METHOD path HTTP/1.1` + headers + body, CRLF-framed, with a Content-Length when there is a body. */
export function rawHttp(
  method: string,
  path: string,
  headers: Array<[string, string]>,
  body?: string | Buffer,
): Buffer {
  const lines = [`${method} ${path} HTTP/1.1`, ...headers.map(([n, v]) => `${n}: ${v}`)];
  const b = body === undefined ? undefined : Buffer.isBuffer(body) ? body : Buffer.from(body);
  if (b && !headers.some(([n]) => /^(content-length|transfer-encoding)$/i.test(n)))
    lines.push(`Content-Length: ${b.length}`);
  return Buffer.concat([Buffer.from(lines.join('\r\n') + '\r\n\r\n', 'latin1'), b ?? Buffer.alloc(0)]);
}
