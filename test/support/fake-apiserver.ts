// A fake kube-apiserver over real HTTP, speaking enough of the wire protocol for the real @kubernetes/client-node:
// list (paging, selectors), watch (replay from a resourceVersion, bookmarks, 410 after compaction), get/create/update/
// patch/delete, the status subresource, optimistic concurrency, Status errors, and faults (failNext, dropWatches, down/up).
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { KubeConfig } from '@kubernetes/client-node';

type Obj = Record<string, any>;

export interface ResourceDef {
  apiVersion: string;
  kind: string;
  plural: string;
  namespaced: boolean;
  /** Has a /status subresource: PUT/PATCH of the main resource keeps the status, /status changes only the status. */
  statusSubresource: boolean;
  /** metadata.generation is kept (bumped when anything but metadata and status changes), as for custom resources. */
  generation: boolean;
  /** Custom resource: PUT without metadata.resourceVersion is refused (422), as the real server does. */
  custom: boolean;
}

export const DEFAULT_RESOURCES: ResourceDef[] = [
  {
    apiVersion: 'serving.servegate.dev/v1alpha1',
    kind: 'ServingDeployment',
    plural: 'servingdeployments',
    namespaced: true,
    statusSubresource: true,
    generation: true,
    custom: true,
  },
  {
    apiVersion: 'serving.kserve.io/v1beta1',
    kind: 'InferenceService',
    plural: 'inferenceservices',
    namespaced: true,
    statusSubresource: true,
    generation: true,
    custom: true,
  },
  {
    apiVersion: 'v1',
    kind: 'Secret',
    plural: 'secrets',
    namespaced: true,
    statusSubresource: false,
    generation: false,
    custom: false,
  },
  {
    apiVersion: 'v1',
    kind: 'Service',
    plural: 'services',
    namespaced: true,
    statusSubresource: true,
    generation: false,
    custom: false,
  },
  {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    plural: 'configmaps',
    namespaced: true,
    statusSubresource: false,
    generation: false,
    custom: false,
  },
  {
    apiVersion: 'v1',
    kind: 'Event',
    plural: 'events',
    namespaced: true,
    statusSubresource: false,
    generation: false,
    custom: false,
  },
  {
    apiVersion: 'v1',
    kind: 'Namespace',
    plural: 'namespaces',
    namespaced: false,
    statusSubresource: true,
    generation: false,
    custom: false,
  },
  {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    plural: 'endpointslices',
    namespaced: true,
    statusSubresource: false,
    generation: false,
    custom: false,
  },
  {
    apiVersion: 'coordination.k8s.io/v1',
    kind: 'Lease',
    plural: 'leases',
    namespaced: true,
    statusSubresource: false,
    generation: false,
    custom: false,
  },
  {
    apiVersion: 'events.k8s.io/v1',
    kind: 'Event',
    plural: 'events',
    namespaced: true,
    statusSubresource: false,
    generation: false,
    custom: false,
  },
];

export interface FakeApiServerOptions {
  /** BOOKMARK interval on watches that allow bookmarks; default 60 000 (the real server: about a minute); 0 = none. */
  bookmarkIntervalMs?: number;
  /** Port to listen on; default ephemeral. */
  port?: number;
  /** Watch events kept for replay (the etcd compaction window); older resourceVersions get 410. Default 100 000. */
  historyLimit?: number;
}

export interface RecordedRequest {
  method: string;
  path: string;
  query: string;
  status: number;
  watch: boolean;
}

/** Thrown by the in-process helpers (create/update/delete) and turned into a Status by the HTTP layer. */
export class ApiError extends Error {
  constructor(
    readonly code: number,
    readonly reason: string,
    message: string,
    readonly details?: Obj,
  ) {
    super(message);
  }
}

interface StoredEvent {
  rv: number;
  def: ResourceDef;
  type: 'ADDED' | 'MODIFIED' | 'DELETED';
  obj: Obj;
  old?: Obj;
  /** JSON of the object, serialised once for every watcher. */
  json: string;
}

interface OpenWatch {
  def: ResourceDef;
  namespace?: string;
  labelSel: Selector;
  fieldSel: Selector;
  res: http.ServerResponse;
  bookmarks: boolean;
  timers: NodeJS.Timeout[];
  closed: boolean;
}

interface Fault {
  remaining: number;
  status: number;
  match?: (method: string, path: string) => boolean;
}

type Requirement = { key: string; op: '=' | '!=' | 'exists' | '!exists' | 'in' | 'notin'; values: string[] };
type Selector = Requirement[];

const REASONS: Record<number, string> = {
  400: 'BadRequest',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'NotFound',
  405: 'MethodNotAllowed',
  409: 'Conflict',
  410: 'Expired',
  415: 'UnsupportedMediaType',
  422: 'Invalid',
  429: 'TooManyRequests',
  500: 'InternalError',
  503: 'ServiceUnavailable',
  504: 'Timeout',
};

export class FakeApiServer {
  readonly requests: RecordedRequest[] = [];
  private readonly defs: ResourceDef[] = [...DEFAULT_RESOURCES];
  /** def key → "ns/name" → stored object (never handed out: clones only). */
  private readonly store = new Map<string, Map<string, Obj>>();
  private events: StoredEvent[] = [];
  private rv = 1;
  private compactedRv = 0;
  private readonly watches = new Set<OpenWatch>();
  private readonly sockets = new Set<Socket>();
  private readonly faults: Fault[] = [];
  private readonly pages = new Map<string, { items: Obj[]; rv: number; kind: string; apiVersion: string }>();
  private server: http.Server;
  private port = 0;
  private isUp = false;
  private readonly bookmarkIntervalMs: number;
  private readonly historyLimit: number;

  private constructor(opts: FakeApiServerOptions) {
    this.bookmarkIntervalMs = opts.bookmarkIntervalMs ?? 60_000;
    this.historyLimit = opts.historyLimit ?? 100_000;
    this.server = http.createServer((req, res) => this.handle(req, res));
    this.server.keepAliveTimeout = 5_000;
    this.server.on('connection', (s: Socket) => {
      this.sockets.add(s);
      s.on('close', () => this.sockets.delete(s));
    });
  }

  static async start(opts: FakeApiServerOptions = {}): Promise<FakeApiServer> {
    const s = new FakeApiServer(opts);
    s.port = opts.port ?? 0;
    await s.up();
    return s;
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /** A KubeConfig for the real client: plain http (skipTLSVerify is what client-node requires for http), token auth. */
  kubeConfig(namespace = 'default'): KubeConfig {
    const kc = new KubeConfig();
    kc.loadFromOptions({
      clusters: [{ name: 'fake', server: this.url, skipTLSVerify: true }],
      users: [{ name: 'fake', token: 'fake-token' }],
      contexts: [{ name: 'fake', cluster: 'fake', user: 'fake', namespace }],
      currentContext: 'fake',
    });
    return kc;
  }

  /** Register another resource type (the defaults cover what servegate uses). */
  addResource(def: ResourceDef): void {
    this.defs.push(def);
  }

  /** The current (latest) resourceVersion. */
  resourceVersion(): string {
    return String(this.rv);
  }

  // ---------- in-process helpers (what kubectl would do) ----------

  /** Creates an object as a user would; a given creationTimestamp is kept (tests of "oldest wins"). */
  create(obj: Obj): Obj {
    const def = this.defFor(obj.apiVersion, obj.kind);
    return clone(this.doCreate(def, clone(obj), { keepTimestamp: true }));
  }

  /**
   * Replaces an object regardless of its resourceVersion. `status` is replaced when the object carries one and kept
   * otherwise; generation is bumped when anything outside metadata and status changed.
   */
  update(obj: Obj): Obj {
    const def = this.defFor(obj.apiVersion, obj.kind);
    const o = clone(obj);
    if (o.metadata) delete o.metadata.resourceVersion;
    return clone(this.doUpdate(def, o, { mode: 'helper' }));
  }

  upsert(obj: Obj): Obj {
    const def = this.defFor(obj.apiVersion, obj.kind);
    const ns = def.namespaced ? (obj.metadata?.namespace ?? 'default') : '';
    return this.bucket(def).has(`${ns}/${obj.metadata?.name}`) ? this.update(obj) : this.create(obj);
  }

  delete(apiVersion: string, kind: string, namespace: string | undefined, name: string): void {
    const def = this.defFor(apiVersion, kind);
    this.doDelete(def, def.namespaced ? (namespace ?? 'default') : '', name);
  }

  get(apiVersion: string, kind: string, namespace: string | undefined, name: string): Obj | undefined {
    const def = this.defFor(apiVersion, kind);
    const o = this.bucket(def).get(`${def.namespaced ? (namespace ?? 'default') : ''}/${name}`);
    return o ? clone(o) : undefined;
  }

  list(apiVersion: string, kind: string, namespace?: string): Obj[] {
    const def = this.defFor(apiVersion, kind);
    return this.sorted(def, namespace).map(clone);
  }

  // ---------- faults ----------

  /** The next n requests (matching `match`, default all) answer `status` with a Status body. */
  failNext(n: number, status: number, match?: (method: string, path: string) => boolean): void {
    this.faults.push({ remaining: n, status, match });
  }

  /** Forgets the faults not yet used up. */
  clearFaults(): void {
    this.faults.length = 0;
  }

  /** Writes one raw line (an event object, or any text) to every open watch of a resource: for malformed input. */
  injectWatchEvent(apiVersion: string, kind: string, event: unknown): void {
    const def = this.defFor(apiVersion, kind);
    const line = typeof event === 'string' ? event : JSON.stringify(event);
    for (const w of this.watches) if (w.def === def && !w.closed) w.res.write(`${line}\n`);
  }

  /** Ends every open watch cleanly (end of the chunked body), as the real server does when timeoutSeconds is up. */
  endWatches(): void {
    for (const w of [...this.watches]) {
      this.closeWatch(w);
      w.res.end();
    }
  }

  /** Ends every open watch abruptly (socket destroyed, no clean end of the chunked body). */
  dropWatches(): void {
    for (const w of [...this.watches]) {
      this.closeWatch(w);
      w.res.socket?.destroy();
    }
  }

  /** Every resourceVersion older than now becomes too old: watches and continue tokens from it get 410. */
  compact(): void {
    this.compactedRv = this.rv;
    this.events = [];
    this.pages.clear();
  }

  /** Sends a BOOKMARK now on every watch that asked for bookmarks. */
  bookmark(): void {
    for (const w of this.watches) this.sendBookmark(w);
  }

  /** Stops accepting connections and destroys the open ones: the API server is unreachable. */
  async down(): Promise<void> {
    if (!this.isUp) return;
    this.isUp = false;
    for (const w of [...this.watches]) this.closeWatch(w);
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    for (const s of this.sockets) s.destroy();
    await closed;
  }

  /** Listens again on the same port, state kept. */
  async up(): Promise<void> {
    if (this.isUp) return;
    await new Promise<void>((resolve, reject) => {
      const onError = (err: Error) => reject(err);
      this.server.once('error', onError);
      this.server.listen(this.port, '127.0.0.1', () => {
        this.server.off('error', onError);
        resolve();
      });
    });
    this.port = (this.server.address() as AddressInfo).port;
    this.isUp = true;
  }

  openWatches(): number {
    return this.watches.size;
  }

  async stop(): Promise<void> {
    await this.down();
  }

  // ---------- storage ----------

  private defKey(def: ResourceDef): string {
    return `${def.apiVersion}/${def.plural}`;
  }

  private defFor(apiVersion: string, kind: string): ResourceDef {
    const def = this.defs.find((d) => d.apiVersion === apiVersion && d.kind === kind);
    if (!def) throw new Error(`fake apiserver: unknown resource ${apiVersion} ${kind}`);
    return def;
  }

  private bucket(def: ResourceDef): Map<string, Obj> {
    const k = this.defKey(def);
    let b = this.store.get(k);
    if (!b) {
      b = new Map();
      this.store.set(k, b);
    }
    return b;
  }

  private sorted(def: ResourceDef, namespace?: string): Obj[] {
    const out: Obj[] = [];
    for (const [k, o] of this.bucket(def)) {
      if (namespace !== undefined && def.namespaced && o.metadata.namespace !== namespace) continue;
      out.push(o);
      void k;
    }
    out.sort((a, b) => cmp(keyOf(a), keyOf(b)));
    return out;
  }

  private record(def: ResourceDef, type: StoredEvent['type'], obj: Obj, old?: Obj): void {
    const ev: StoredEvent = {
      rv: Number(obj.metadata.resourceVersion),
      def,
      type,
      obj,
      old,
      json: JSON.stringify(obj),
    };
    this.events.push(ev);
    if (this.events.length > this.historyLimit * 1.1) {
      // Like etcd compaction: watches from before the kept window get 410.
      const dropped = this.events.splice(0, this.events.length - this.historyLimit);
      this.compactedRv = Math.max(this.compactedRv, dropped[dropped.length - 1].rv);
    }
    for (const w of this.watches) if (w.def === def) this.deliver(w, ev);
  }

  private doCreate(def: ResourceDef, obj: Obj, opts: { keepTimestamp: boolean; namespace?: string }): Obj {
    if (!isObj(obj)) throw new ApiError(400, 'BadRequest', 'the body of the request was not a JSON object');
    obj.apiVersion ??= def.apiVersion;
    obj.kind ??= def.kind;
    if (obj.apiVersion !== def.apiVersion || obj.kind !== def.kind) {
      throw new ApiError(
        400,
        'BadRequest',
        `the API version in the data (${obj.apiVersion}) does not match the expected API version (${def.apiVersion}) or kind ${obj.kind}`,
      );
    }
    const meta: Obj = isObj(obj.metadata) ? obj.metadata : (obj.metadata = {});
    if (!meta.name && typeof meta.generateName === 'string') meta.name = meta.generateName + randomUUID().slice(0, 5);
    if (typeof meta.name !== 'string' || meta.name === '')
      throw invalid(def, '', 'metadata.name: Required value: name or generateName is required');
    if (def.namespaced) {
      if (opts.namespace !== undefined) {
        if (meta.namespace !== undefined && meta.namespace !== '' && meta.namespace !== opts.namespace) {
          throw new ApiError(
            400,
            'BadRequest',
            'the namespace of the provided object does not match the namespace sent on the request',
          );
        }
        meta.namespace = opts.namespace;
      }
      meta.namespace ||= 'default';
    } else delete meta.namespace;
    const key = keyOf(obj);
    if (this.bucket(def).has(key)) {
      throw new ApiError(
        409,
        'AlreadyExists',
        `${resourceName(def)} "${meta.name}" already exists`,
        details(def, meta.name),
      );
    }
    normalizeSecret(def, obj);
    meta.uid = randomUUID();
    if (!(opts.keepTimestamp && typeof meta.creationTimestamp === 'string')) meta.creationTimestamp = nowRfc3339();
    if (def.generation) meta.generation = 1;
    else delete meta.generation;
    delete meta.deletionTimestamp;
    delete meta.managedFields;
    meta.resourceVersion = String(++this.rv);
    this.bucket(def).set(key, obj);
    this.record(def, 'ADDED', obj);
    return obj;
  }

  /**
   * mode 'main': PUT/PATCH of the resource (status kept when there is a status subresource);
   * 'status': the /status subresource (only status changes); 'helper': everything, status kept if absent.
   */
  private doUpdate(
    def: ResourceDef,
    next: Obj,
    opts: { mode: 'main' | 'status' | 'helper'; namespace?: string; name?: string },
  ): Obj {
    if (!isObj(next) || !isObj(next.metadata))
      throw new ApiError(400, 'BadRequest', 'the body of the request must be an object with metadata');
    next.apiVersion ??= def.apiVersion;
    next.kind ??= def.kind;
    if (next.apiVersion !== def.apiVersion || next.kind !== def.kind) {
      throw new ApiError(
        400,
        'BadRequest',
        `the API version or kind in the data (${next.apiVersion} ${next.kind}) does not match ${def.apiVersion} ${def.kind}`,
      );
    }
    const meta = next.metadata;
    if (def.namespaced) {
      if (opts.namespace !== undefined && meta.namespace !== undefined && meta.namespace !== opts.namespace) {
        throw new ApiError(
          400,
          'BadRequest',
          'the namespace of the provided object does not match the namespace sent on the request',
        );
      }
      meta.namespace = opts.namespace ?? meta.namespace ?? 'default';
    } else delete meta.namespace;
    if (opts.name !== undefined && meta.name !== opts.name) {
      throw new ApiError(
        400,
        'BadRequest',
        `the name of the object (${meta.name}) does not match the name on the URL (${opts.name})`,
      );
    }
    const key = keyOf(next);
    const old = this.bucket(def).get(key);
    if (!old)
      throw new ApiError(404, 'NotFound', `${resourceName(def)} "${meta.name}" not found`, details(def, meta.name));
    if (meta.resourceVersion !== undefined && meta.resourceVersion !== '') {
      if (String(meta.resourceVersion) !== old.metadata.resourceVersion) throw conflict(def, meta.name);
    } else if (opts.mode !== 'helper' && def.custom) {
      throw invalid(def, meta.name, 'metadata.resourceVersion: Invalid value: 0x0: must be specified for an update');
    }
    let obj: Obj;
    if (opts.mode === 'status') {
      obj = clone(old);
      obj.status = next.status;
      if (obj.status === undefined) delete obj.status;
    } else {
      obj = next;
      normalizeSecret(def, obj);
      if (opts.mode === 'main' && def.statusSubresource) {
        if (old.status === undefined) delete obj.status;
        else obj.status = clone(old.status);
      } else if (opts.mode === 'helper' && !('status' in obj) && old.status !== undefined) {
        obj.status = clone(old.status);
      }
      const m = obj.metadata;
      m.uid = old.metadata.uid;
      m.creationTimestamp = old.metadata.creationTimestamp;
      delete m.managedFields;
      if (def.generation) {
        m.generation = old.metadata.generation ?? 1;
        if (canonical(withoutMetaStatus(obj)) !== canonical(withoutMetaStatus(old))) m.generation++;
      } else delete m.generation;
    }
    if (
      canonical(obj) ===
      canonical({ ...old, metadata: { ...old.metadata, resourceVersion: obj.metadata.resourceVersion } })
    ) {
      return old; // a no-op write does not bump the resourceVersion, as on the real server
    }
    obj.metadata.resourceVersion = String(++this.rv);
    this.bucket(def).set(key, obj);
    this.record(def, 'MODIFIED', obj, old);
    return obj;
  }

  private doDelete(
    def: ResourceDef,
    namespace: string,
    name: string,
    precondition?: { resourceVersion?: string; uid?: string },
  ): Obj {
    const key = `${namespace}/${name}`;
    const old = this.bucket(def).get(key);
    if (!old) throw new ApiError(404, 'NotFound', `${resourceName(def)} "${name}" not found`, details(def, name));
    if (precondition?.resourceVersion && precondition.resourceVersion !== old.metadata.resourceVersion)
      throw conflict(def, name);
    if (precondition?.uid && precondition.uid !== old.metadata.uid) throw conflict(def, name);
    this.bucket(def).delete(key);
    const gone = clone(old);
    gone.metadata.resourceVersion = String(++this.rv);
    this.record(def, 'DELETED', gone);
    return gone;
  }

  // ---------- HTTP ----------

  private handle(req: http.IncomingMessage, res: http.ServerResponse): void {
    const u = new URL(req.url ?? '/', 'http://x');
    const method = req.method ?? 'GET';
    const isWatch = u.searchParams.get('watch') === 'true' || u.searchParams.get('watch') === '1';
    const entry: RecordedRequest = {
      method,
      path: u.pathname,
      query: u.search.replace(/^\?/, ''),
      status: 0,
      watch: isWatch,
    };
    this.requests.push(entry);
    const fault = this.faults.find((f) => f.remaining > 0 && (!f.match || f.match(method, u.pathname)));
    if (fault) {
      fault.remaining--;
      if (fault.remaining === 0) this.faults.splice(this.faults.indexOf(fault), 1);
      entry.status = fault.status;
      req.resume();
      const headers: Record<string, string> = fault.status === 429 ? { 'Retry-After': '1' } : {};
      sendJson(
        res,
        fault.status,
        statusObj(fault.status, REASONS[fault.status] ?? 'InternalError', `injected failure ${fault.status}`),
        headers,
      );
      return;
    }
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('error', () => undefined);
    req.on('end', () => {
      try {
        const status = this.route(method, u, req, res, Buffer.concat(chunks).toString('utf8'), isWatch);
        entry.status = status;
      } catch (err) {
        const e =
          err instanceof ApiError
            ? err
            : new ApiError(500, 'InternalError', `fake apiserver: ${(err as Error).message}`);
        entry.status = e.code;
        if (!res.headersSent) sendJson(res, e.code, statusObj(e.code, e.reason, e.message, e.details));
        else res.destroy();
      }
    });
  }

  /** Returns the HTTP status it answered. */
  private route(
    method: string,
    u: URL,
    req: http.IncomingMessage,
    res: http.ServerResponse,
    body: string,
    isWatch: boolean,
  ): number {
    const parts = u.pathname.split('/').filter(Boolean).map(decodeURIComponent);
    // Discovery, enough for KubernetesObjectApi.
    if (method === 'GET' && (u.pathname === '/api' || u.pathname === '/apis' || parts.length <= 3)) {
      const d = this.discovery(parts);
      if (d) return sendJson(res, 200, d);
    }
    let apiVersion: string;
    let rest: string[];
    if (parts[0] === 'api' && parts[1] === 'v1') {
      apiVersion = 'v1';
      rest = parts.slice(2);
    } else if (parts[0] === 'apis' && parts.length >= 3) {
      apiVersion = `${parts[1]}/${parts[2]}`;
      rest = parts.slice(3);
    } else {
      throw new ApiError(404, 'NotFound', 'the server could not find the requested resource');
    }
    let namespace: string | undefined;
    let plural: string;
    let name: string | undefined;
    let sub: string | undefined;
    if (
      rest[0] === 'namespaces' &&
      rest.length >= 3 &&
      !(rest.length === 3 && (rest[2] === 'status' || rest[2] === 'finalize'))
    ) {
      namespace = rest[1];
      [plural, name, sub] = rest.slice(2);
    } else {
      [plural, name, sub] = rest;
    }
    const def = this.defs.find((d) => d.apiVersion === apiVersion && d.plural === plural);
    if (!def || rest.length === 0 || (namespace !== undefined && !def.namespaced)) {
      throw new ApiError(404, 'NotFound', 'the server could not find the requested resource');
    }
    if (!def.namespaced) namespace = undefined;
    if (sub !== undefined && !(sub === 'status' && def.statusSubresource)) {
      throw new ApiError(404, 'NotFound', 'the server could not find the requested resource');
    }
    const ns = namespace ?? '';
    const q = u.searchParams;

    if (name === undefined) {
      if (method === 'GET' && isWatch) return this.startWatch(def, namespace, q, req, res);
      if (method === 'GET') return sendJson(res, 200, this.listResponse(def, namespace, q));
      if (method === 'POST') {
        if (def.namespaced && namespace === undefined)
          throw new ApiError(405, 'MethodNotAllowed', 'create needs a namespace in the path');
        const created = this.doCreate(def, parseBody(body), { keepTimestamp: false, namespace });
        return sendJson(res, 201, created);
      }
      throw new ApiError(405, 'MethodNotAllowed', `the server does not allow this method on the requested resource`);
    }
    if (def.namespaced && namespace === undefined)
      throw new ApiError(404, 'NotFound', 'the server could not find the requested resource');
    const key = `${ns}/${name}`;
    switch (method) {
      case 'GET': {
        const o = this.bucket(def).get(key);
        if (!o) throw new ApiError(404, 'NotFound', `${resourceName(def)} "${name}" not found`, details(def, name));
        return sendJson(res, 200, o);
      }
      case 'PUT': {
        const o = this.doUpdate(def, parseBody(body), { mode: sub === 'status' ? 'status' : 'main', namespace, name });
        return sendJson(res, 200, o);
      }
      case 'PATCH': {
        const old = this.bucket(def).get(key);
        if (!old) throw new ApiError(404, 'NotFound', `${resourceName(def)} "${name}" not found`, details(def, name));
        const ct = (req.headers['content-type'] ?? '').split(';')[0].trim().toLowerCase();
        const patch = parseBody(body);
        let next: Obj;
        if (ct === 'application/merge-patch+json' || ct === 'application/strategic-merge-patch+json') {
          if (!isObj(patch)) throw new ApiError(400, 'BadRequest', 'a merge patch must be a JSON object');
          next = mergePatch(clone(old), patch);
        } else if (ct === 'application/json-patch+json') {
          if (!Array.isArray(patch))
            throw new ApiError(400, 'BadRequest', 'a JSON patch must be an array of operations');
          next = jsonPatch(clone(old), patch);
        } else {
          throw new ApiError(
            415,
            'UnsupportedMediaType',
            `the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json`,
          );
        }
        // A resourceVersion in the patch is a precondition; without one the patch applies to the latest version.
        const patchedRv = next.metadata?.resourceVersion;
        if (patchedRv !== undefined && patchedRv !== old.metadata.resourceVersion) throw conflict(def, name);
        next.metadata = { ...next.metadata, resourceVersion: old.metadata.resourceVersion };
        const o = this.doUpdate(def, next, { mode: sub === 'status' ? 'status' : 'main', namespace, name });
        return sendJson(res, 200, o);
      }
      case 'DELETE': {
        let pre: { resourceVersion?: string; uid?: string } | undefined;
        if (body.trim()) {
          const opts = parseBody(body);
          if (isObj(opts) && isObj(opts.preconditions)) pre = opts.preconditions;
        }
        const gone = this.doDelete(def, ns, name, pre);
        return sendJson(res, 200, {
          kind: 'Status',
          apiVersion: 'v1',
          metadata: {},
          status: 'Success',
          details: { name, group: groupOf(def), kind: def.plural, uid: gone.metadata.uid },
        });
      }
      default:
        throw new ApiError(405, 'MethodNotAllowed', 'the server does not allow this method on the requested resource');
    }
  }

  private discovery(parts: string[]): Obj | undefined {
    const resources = (apiVersion: string) => ({
      kind: 'APIResourceList',
      apiVersion: 'v1',
      groupVersion: apiVersion,
      resources: this.defs
        .filter((d) => d.apiVersion === apiVersion)
        .flatMap((d) => [
          {
            name: d.plural,
            singularName: d.kind.toLowerCase(),
            namespaced: d.namespaced,
            kind: d.kind,
            verbs: ['create', 'delete', 'get', 'list', 'patch', 'update', 'watch'],
          },
          ...(d.statusSubresource
            ? [
                {
                  name: `${d.plural}/status`,
                  singularName: '',
                  namespaced: d.namespaced,
                  kind: d.kind,
                  verbs: ['get', 'patch', 'update'],
                },
              ]
            : []),
        ]),
    });
    if (parts.length === 1 && parts[0] === 'api')
      return { kind: 'APIVersions', versions: ['v1'], serverAddressByClientCIDRs: [] };
    if (parts.length === 2 && parts[0] === 'api' && parts[1] === 'v1') return resources('v1');
    if (parts.length === 1 && parts[0] === 'apis') {
      const groups = [...new Set(this.defs.filter((d) => d.apiVersion.includes('/')).map((d) => d.apiVersion))];
      return {
        kind: 'APIGroupList',
        apiVersion: 'v1',
        groups: groups.map((gv) => {
          const [name, version] = gv.split('/');
          return { name, versions: [{ groupVersion: gv, version }], preferredVersion: { groupVersion: gv, version } };
        }),
      };
    }
    if (parts.length === 3 && parts[0] === 'apis') {
      const gv = `${parts[1]}/${parts[2]}`;
      if (this.defs.some((d) => d.apiVersion === gv)) return resources(gv);
    }
    return undefined;
  }

  private listResponse(def: ResourceDef, namespace: string | undefined, q: URLSearchParams): Obj {
    const limit = Number(q.get('limit') ?? 0);
    const cont = q.get('continue');
    let items: Obj[];
    let rv: number;
    let offset = 0;
    let pageId: string;
    if (cont) {
      let token: { id: string; off: number };
      try {
        token = JSON.parse(Buffer.from(cont, 'base64url').toString('utf8'));
      } catch {
        throw new ApiError(400, 'BadRequest', 'continue key is not valid');
      }
      const page = this.pages.get(token.id);
      if (!page) {
        throw new ApiError(
          410,
          'Expired',
          'The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.',
        );
      }
      items = page.items;
      rv = page.rv;
      offset = token.off;
      pageId = token.id;
    } else {
      const labelSel = parseSelector(q.get('labelSelector') ?? '');
      const fieldSel = parseSelector(q.get('fieldSelector') ?? '');
      items = this.sorted(def, namespace).filter(
        (o) => matches(labelSel, o.metadata.labels ?? {}) && matches(fieldSel, fieldsOf(o)),
      );
      rv = this.rv;
      pageId = randomUUID();
    }
    const end = limit > 0 ? Math.min(items.length, offset + limit) : items.length;
    const metadata: Obj = { resourceVersion: String(rv) };
    if (end < items.length) {
      if (!cont) this.pages.set(pageId, { items, rv, kind: def.kind, apiVersion: def.apiVersion });
      metadata.continue = Buffer.from(JSON.stringify({ id: pageId, off: end })).toString('base64url');
      metadata.remainingItemCount = items.length - end;
    } else if (cont) {
      this.pages.delete(pageId);
    }
    // Items of a list carry no kind/apiVersion on the real server for built-in types; custom resources do. Keep both.
    return { kind: `${def.kind}List`, apiVersion: def.apiVersion, metadata, items: items.slice(offset, end) };
  }

  private startWatch(
    def: ResourceDef,
    namespace: string | undefined,
    q: URLSearchParams,
    req: http.IncomingMessage,
    res: http.ServerResponse,
  ): number {
    const w: OpenWatch = {
      def,
      namespace,
      labelSel: parseSelector(q.get('labelSelector') ?? ''),
      fieldSel: parseSelector(q.get('fieldSelector') ?? ''),
      res,
      bookmarks: q.get('allowWatchBookmarks') === 'true',
      timers: [],
      closed: false,
    };
    res.writeHead(200, {
      'Content-Type': 'application/json',
      'Transfer-Encoding': 'chunked',
      'Cache-Control': 'no-cache, private',
    });
    res.flushHeaders();
    const rvParam = q.get('resourceVersion') ?? '';
    const from = Number(rvParam);
    if (rvParam !== '' && rvParam !== '0' && (!Number.isFinite(from) || from < this.compactedRv)) {
      res.end(
        JSON.stringify({
          type: 'ERROR',
          object: statusObj(410, 'Expired', `too old resource version: ${rvParam} (${this.compactedRv})`),
        }) + '\n',
      );
      return 200;
    }
    this.watches.add(w);
    const cleanup = () => this.closeWatch(w);
    res.on('close', cleanup); // (req 'close' fires once the request body is read: not a sign of a gone client)
    if (rvParam === '' || rvParam === '0') {
      for (const o of this.sorted(def, namespace)) {
        if (this.watchMatches(w, o)) w.res.write(`{"type":"ADDED","object":${JSON.stringify(o)}}\n`);
      }
    } else {
      for (const ev of this.events) if (ev.rv > from && ev.def === def) this.deliver(w, ev);
    }
    const timeout = Number(q.get('timeoutSeconds') ?? 0);
    if (timeout > 0) {
      w.timers.push(
        setTimeout(() => {
          this.closeWatch(w);
          res.end();
        }, timeout * 1000),
      );
    }
    if (w.bookmarks && this.bookmarkIntervalMs > 0) {
      w.timers.push(setInterval(() => this.sendBookmark(w), this.bookmarkIntervalMs));
    }
    return 200;
  }

  private watchMatches(w: OpenWatch, o: Obj | undefined): boolean {
    if (!o) return false;
    if (w.namespace !== undefined && o.metadata.namespace !== w.namespace) return false;
    return matches(w.labelSel, o.metadata.labels ?? {}) && matches(w.fieldSel, fieldsOf(o));
  }

  private deliver(w: OpenWatch, ev: StoredEvent): void {
    if (w.closed) return;
    const now = this.watchMatches(w, ev.obj);
    let type: string = ev.type;
    if (ev.type === 'MODIFIED') {
      const before = this.watchMatches(w, ev.old);
      if (!now && !before) return;
      if (now && !before) type = 'ADDED';
      if (!now && before) type = 'DELETED';
    } else if (!now) return;
    w.res.write(`{"type":"${type}","object":${ev.json}}\n`);
  }

  private sendBookmark(w: OpenWatch): void {
    if (w.closed || !w.bookmarks) return;
    w.res.write(
      JSON.stringify({
        type: 'BOOKMARK',
        object: { kind: w.def.kind, apiVersion: w.def.apiVersion, metadata: { resourceVersion: String(this.rv) } },
      }) + '\n',
    );
  }

  private closeWatch(w: OpenWatch): void {
    if (w.closed) return;
    w.closed = true;
    for (const t of w.timers) clearTimeout(t);
    this.watches.delete(w);
  }
}

// ---------- helpers ----------

function clone<T>(o: T): T {
  return structuredClone(o);
}

function isObj(v: unknown): v is Obj {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function cmp(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function keyOf(o: Obj): string {
  return `${o.metadata.namespace ?? ''}/${o.metadata.name}`;
}

function groupOf(def: ResourceDef): string {
  return def.apiVersion.includes('/') ? def.apiVersion.split('/')[0] : '';
}

function resourceName(def: ResourceDef): string {
  const g = groupOf(def);
  return g ? `${def.plural}.${g}` : def.plural;
}

function details(def: ResourceDef, name: string): Obj {
  return { name, group: groupOf(def), kind: def.plural };
}

function conflict(def: ResourceDef, name: string): ApiError {
  return new ApiError(
    409,
    'Conflict',
    `Operation cannot be fulfilled on ${resourceName(def)} "${name}": the object has been modified; please apply your changes to the latest version and try again`,
    details(def, name),
  );
}

function invalid(def: ResourceDef, name: string, message: string): ApiError {
  return new ApiError(422, 'Invalid', `${def.kind} "${name}" is invalid: ${message}`, details(def, name));
}

function statusObj(code: number, reason: string, message: string, det?: Obj): Obj {
  return {
    kind: 'Status',
    apiVersion: 'v1',
    metadata: {},
    status: 'Failure',
    message,
    reason,
    ...(det ? { details: det } : {}),
    code,
  };
}

function sendJson(
  res: http.ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): number {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text), ...headers });
  res.end(text);
  return status;
}

function parseBody(body: string): any {
  try {
    return JSON.parse(body);
  } catch {
    throw new ApiError(400, 'BadRequest', 'the body of the request could not be decoded as JSON');
  }
}

function nowRfc3339(): string {
  return new Date().toISOString().replace(/\.\d{3}Z$/, 'Z');
}

/** Secrets: stringData is merged into data (base64) and not stored, as on the real server. */
function normalizeSecret(def: ResourceDef, obj: Obj): void {
  if (def.apiVersion !== 'v1' || def.kind !== 'Secret') return;
  if (isObj(obj.stringData)) {
    obj.data = { ...(isObj(obj.data) ? obj.data : {}) };
    for (const [k, v] of Object.entries(obj.stringData))
      obj.data[k] = Buffer.from(String(v), 'utf8').toString('base64');
  }
  delete obj.stringData;
  obj.type ??= 'Opaque';
}

function withoutMetaStatus(o: Obj): Obj {
  const { metadata: _m, status: _s, ...rest } = o;
  return rest;
}

/** JSON with sorted keys: equal values give equal text. */
function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  if (isObj(v)) {
    return `{${Object.keys(v)
      .filter((k) => v[k] !== undefined)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonical(v[k])}`)
      .join(',')}}`;
  }
  return JSON.stringify(v);
}

/** RFC 7386. */
function mergePatch(target: unknown, patch: unknown): any {
  if (!isObj(patch)) return clone(patch);
  const t: Obj = isObj(target) ? { ...target } : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete t[k];
    else t[k] = mergePatch(t[k], v);
  }
  return t;
}

/** RFC 6902. */
function jsonPatch(doc: Obj, ops: unknown[]): Obj {
  let root: any = doc;
  const pointer = (p: unknown): string[] => {
    if (typeof p !== 'string' || (p !== '' && !p.startsWith('/')))
      throw new ApiError(422, 'Invalid', `invalid JSON pointer ${JSON.stringify(p)}`);
    return p === ''
      ? []
      : p
          .slice(1)
          .split('/')
          .map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'));
  };
  const parentOf = (path: string[]): { parent: any; last: string } => {
    let cur = root;
    for (const seg of path.slice(0, -1)) {
      cur = Array.isArray(cur) ? cur[Number(seg)] : isObj(cur) ? cur[seg] : undefined;
      if (cur === undefined) throw new ApiError(422, 'Invalid', `path /${path.join('/')} does not exist`);
    }
    return { parent: cur, last: path[path.length - 1] };
  };
  const getAt = (path: string[]): unknown => {
    let cur = root;
    for (const seg of path) {
      cur = Array.isArray(cur) ? cur[Number(seg)] : isObj(cur) ? cur[seg] : undefined;
      if (cur === undefined) throw new ApiError(422, 'Invalid', `path /${path.join('/')} does not exist`);
    }
    return cur;
  };
  const remove = (path: string[]): unknown => {
    const { parent, last } = parentOf(path);
    if (Array.isArray(parent)) return parent.splice(Number(last), 1)[0];
    if (!isObj(parent) || !(last in parent))
      throw new ApiError(422, 'Invalid', `path /${path.join('/')} does not exist`);
    const v = parent[last];
    delete parent[last];
    return v;
  };
  const add = (path: string[], value: unknown): void => {
    if (path.length === 0) {
      root = value;
      return;
    }
    const { parent, last } = parentOf(path);
    if (Array.isArray(parent)) {
      if (last === '-') parent.push(value);
      else parent.splice(Number(last), 0, value);
    } else if (isObj(parent)) parent[last] = value;
    else throw new ApiError(422, 'Invalid', `path /${path.join('/')} has no parent object`);
  };
  for (const raw of ops) {
    if (!isObj(raw)) throw new ApiError(422, 'Invalid', 'a JSON patch operation must be an object');
    const path = pointer(raw.path);
    switch (raw.op) {
      case 'add':
        add(path, clone(raw.value));
        break;
      case 'remove':
        remove(path);
        break;
      case 'replace':
        getAt(path);
        if (path.length === 0) root = clone(raw.value);
        else {
          const { parent, last } = parentOf(path);
          if (Array.isArray(parent)) parent[Number(last)] = clone(raw.value);
          else parent[last] = clone(raw.value);
        }
        break;
      case 'move': {
        const v = remove(pointer(raw.from));
        add(path, v);
        break;
      }
      case 'copy':
        add(path, clone(getAt(pointer(raw.from))));
        break;
      case 'test':
        if (canonical(getAt(path)) !== canonical(raw.value))
          throw new ApiError(422, 'Invalid', `test operation failed at ${raw.path}`);
        break;
      default:
        throw new ApiError(422, 'Invalid', `unknown JSON patch op ${JSON.stringify(raw.op)}`);
    }
  }
  return root;
}

function fieldsOf(o: Obj): Record<string, string> {
  const f: Record<string, string> = { 'metadata.name': o.metadata?.name ?? '' };
  if (o.metadata?.namespace !== undefined) f['metadata.namespace'] = o.metadata.namespace;
  if (typeof o.type === 'string') f.type = o.type;
  return f;
}

/** Label/field selectors: `k=v`, `k==v`, `k!=v`, `k`, `!k`, `k in (a,b)`, `k notin (a,b)`, comma-separated. */
export function parseSelector(s: string): Selector {
  const out: Selector = [];
  const terms: string[] = [];
  let depth = 0;
  let cur = '';
  for (const ch of s) {
    if (ch === '(') depth++;
    if (ch === ')') depth--;
    if (ch === ',' && depth === 0) {
      terms.push(cur);
      cur = '';
    } else cur += ch;
  }
  terms.push(cur);
  for (const t0 of terms) {
    const t = t0.trim();
    if (!t) continue;
    let m: RegExpMatchArray | null;
    if ((m = t.match(/^([^\s!=]+)\s+(in|notin)\s+\((.*)\)$/))) {
      out.push({ key: m[1], op: m[2] as 'in' | 'notin', values: m[3].split(',').map((v) => v.trim()) });
    } else if ((m = t.match(/^([^!=\s]+)\s*!=\s*(.*)$/))) {
      out.push({ key: m[1], op: '!=', values: [m[2].trim()] });
    } else if ((m = t.match(/^([^!=\s]+)\s*==?\s*(.*)$/))) {
      out.push({ key: m[1], op: '=', values: [m[2].trim()] });
    } else if ((m = t.match(/^!\s*(\S+)$/))) {
      out.push({ key: m[1], op: '!exists', values: [] });
    } else {
      out.push({ key: t, op: 'exists', values: [] });
    }
  }
  return out;
}

function matches(sel: Selector, labels: Record<string, string>): boolean {
  for (const r of sel) {
    const has = Object.prototype.hasOwnProperty.call(labels, r.key);
    const v = labels[r.key];
    switch (r.op) {
      case '=':
        if (!has || v !== r.values[0]) return false;
        break;
      case '!=':
        if (has && v === r.values[0]) return false;
        break;
      case 'exists':
        if (!has) return false;
        break;
      case '!exists':
        if (has) return false;
        break;
      case 'in':
        if (!has || !r.values.includes(v)) return false;
        break;
      case 'notin':
        if (has && r.values.includes(v)) return false;
        break;
    }
  }
  return true;
}
