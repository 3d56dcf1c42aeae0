// servegate/client: the Deployment class. URL helpers in the exact formats of docs/spec.md, and request helpers that send
// `authorization: ApiKey <key>` and turn the gateway's error bodies into GatewayError. Uses global fetch only.
import { deploymentUrls, MODEL_SERVERS, routeKindOf } from '../routing/names.js';
import type { ModelServer, RouteKind } from '../routing/kinds.js';

export type { ModelServer, RouteKind };
export type DeploymentType = 'model' | 'python';

/** Other spellings of the model servers (the interface description's names, KServe's formats). */
const SERVER_ALIASES: Record<string, ModelServer> = {
  'scikit-learn': 'sklearn',
  scikit_learn: 'sklearn',
  tf: 'tensorflow',
  vllm: 'llm',
};

function normalizeServer(s: unknown): ModelServer | undefined {
  if (typeof s !== 'string') return undefined;
  const k = s.trim().toLowerCase();
  return MODEL_SERVERS.includes(k as ModelServer) ? (k as ModelServer) : SERVER_ALIASES[k];
}

/** What `Deployment.openai()` returns when no type is named: the part of the `openai` client it is sure to have. */
export interface OpenAILike {
  baseURL: string;
  apiKey: string;
  chat: { completions: { create(body: Record<string, unknown>, options?: Record<string, unknown>): Promise<unknown> } };
}

type OpenAIConstructor = new (options: Record<string, unknown>) => unknown;

export interface DeploymentOptions {
  /** The gateway's public URL, e.g. https://models.example.com (a trailing slash is ignored). */
  gatewayUrl: string;
  project: string;
  deployment: string;
  /** `model` (default when modelServer is given) or `python`. */
  type?: DeploymentType;
  /** For type `model`: python | sklearn | tensorflow | llm. */
  modelServer?: ModelServer;
  /** Predictive models: the name in /v1/models/<name>:predict; default the deployment name. */
  modelName?: string;
  /** Predictive models: `v1` (`:predict`, the default) or `v2` (the Open Inference Protocol: `infer()`). */
  protocol?: 'v1' | 'v2';
  /** `<prefix>.<secret>`; sent as `authorization: ApiKey <key>`. */
  apiKey: string;
  /** Per request, to response headers and body; default none. */
  timeoutMs?: number;
  /** Extra headers on every request. */
  headers?: Record<string, string>;
  /** A fetch to use instead of the global one (tests, proxies). */
  fetch?: typeof fetch;
}

/** An error answered by the gateway (or by the deployment behind it). */
export class GatewayError extends Error {
  /** HTTP status. */
  readonly status: number;
  /** OpenAI-style error type/code when the body carried one. */
  readonly type?: string;
  readonly code?: string;
  /** The raw response body (at most 64 KiB). */
  readonly body: string;
  /** The gateway's x-request-id, for support. */
  readonly requestId?: string;
  /** The URL that was called. */
  readonly url: string;

  constructor(init: {
    status: number;
    message: string;
    body: string;
    url: string;
    type?: string;
    code?: string;
    requestId?: string;
  }) {
    super(init.message);
    this.name = 'GatewayError';
    this.status = init.status;
    this.body = init.body;
    this.url = init.url;
    this.type = init.type;
    this.code = init.code;
    this.requestId = init.requestId;
  }
}

/**
 * The message in an error body: `{"error":"..."}` (KServe dialect), `{"error":{"message":...}}` (OpenAI dialect),
 * `{"message":...}`/`{"detail":...}` (common server shapes), else the text itself, else the status text.
 */
export function errorMessage(
  status: number,
  body: string,
  statusText = '',
): { message: string; type?: string; code?: string } {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    parsed = undefined;
  }
  if (parsed && typeof parsed === 'object' && !Array.isArray(parsed)) {
    const p = parsed as Record<string, unknown>;
    const e = p.error;
    if (typeof e === 'string' && e) return { message: e };
    if (e && typeof e === 'object') {
      const o = e as Record<string, unknown>;
      if (typeof o.message === 'string' && o.message) {
        return {
          message: o.message,
          type: typeof o.type === 'string' ? o.type : undefined,
          code: typeof o.code === 'string' ? o.code : typeof o.code === 'number' ? String(o.code) : undefined,
        };
      }
    }
    if (typeof p.message === 'string' && p.message) return { message: p.message };
    if (typeof p.detail === 'string' && p.detail) return { message: p.detail };
  }
  const text = body.trim();
  if (text && text.length <= 500 && !/^\s*</.test(text)) return { message: text };
  return { message: `HTTP ${status}${statusText ? ` ${statusText}` : ''}` };
}

const MAX_ERROR_BODY = 64 * 1024;

/** Throws GatewayError for a non-2xx response (consuming its body); returns it otherwise. */
export async function checkResponse(res: Response, url: string): Promise<Response> {
  if (res.ok) return res;
  let body = '';
  try {
    body = (await res.text()).slice(0, MAX_ERROR_BODY);
  } catch {
    body = '';
  }
  const { message, type, code } = errorMessage(res.status, body, res.statusText);
  throw new GatewayError({
    status: res.status,
    message,
    body,
    url,
    type,
    code,
    requestId: res.headers.get('x-request-id') ?? undefined,
  });
}

export interface RequestInitWithOptions extends RequestInit {
  /** Default true: a non-2xx answer throws GatewayError. False: the Response is returned as it is. */
  throwOnError?: boolean;
}

/** A deployment behind a servegate gateway. */
export class Deployment {
  readonly gatewayUrl: string;
  readonly project: string;
  readonly deployment: string;
  readonly type: DeploymentType;
  readonly modelServer?: ModelServer;
  readonly modelName?: string;
  /** Predictive models: the protocol their server speaks. */
  readonly protocol?: 'v1' | 'v2';
  readonly kind: RouteKind;
  private readonly apiKey: string;
  private readonly timeoutMs?: number;
  private readonly extraHeaders: Record<string, string>;
  private readonly fetchImpl: typeof fetch;

  constructor(o: DeploymentOptions) {
    if (!o || typeof o !== 'object')
      throw new TypeError('new Deployment({ gatewayUrl, project, deployment, modelServer | type, apiKey })');
    let gw: URL;
    try {
      gw = new URL(o.gatewayUrl);
    } catch {
      throw new TypeError(`gatewayUrl "${o.gatewayUrl}" is not a URL`);
    }
    if (gw.protocol !== 'http:' && gw.protocol !== 'https:')
      throw new TypeError(`gatewayUrl "${o.gatewayUrl}" must be http(s)`);
    if (gw.search || gw.hash) throw new TypeError(`gatewayUrl "${o.gatewayUrl}" must not have a query or fragment`);
    for (const [field, v] of [
      ['project', o.project],
      ['deployment', o.deployment],
    ] as const) {
      if (typeof v !== 'string' || !/^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$/.test(v)) {
        throw new TypeError(`${field} "${String(v)}" must be a name of letters, digits, '_' or '-'`);
      }
    }
    const type: DeploymentType = o.type ?? 'model';
    if (type !== 'model' && type !== 'python')
      throw new TypeError(`type must be "model" or "python", got "${String(type)}"`);
    const modelServer = normalizeServer(o.modelServer);
    if (type === 'model') {
      if (!modelServer) {
        throw new TypeError(
          `a model deployment needs modelServer: one of ${MODEL_SERVERS.join(', ')} (or type: "python"), got ${JSON.stringify(o.modelServer)}`,
        );
      }
    } else if (o.modelServer !== undefined) {
      throw new TypeError('modelServer is only for type "model"');
    }
    if (typeof o.apiKey !== 'string' || o.apiKey.trim() === '') throw new TypeError('apiKey is required');
    const fetchImpl = o.fetch ?? globalThis.fetch;
    if (typeof fetchImpl !== 'function') throw new TypeError('no global fetch: use Node.js 18+ or pass { fetch }');

    this.gatewayUrl = o.gatewayUrl.replace(/\/+$/, '');
    this.project = o.project;
    this.deployment = o.deployment;
    this.type = type;
    this.modelServer = type === 'model' ? modelServer : undefined;
    this.kind = routeKindOf(type, this.modelServer);
    this.modelName = this.kind === 'predictive' ? o.modelName || o.deployment : undefined;
    if (o.protocol !== undefined && o.protocol !== 'v1' && o.protocol !== 'v2')
      throw new TypeError(`protocol must be "v1" or "v2", got ${JSON.stringify(o.protocol)}`);
    if (o.protocol === 'v2' && this.kind !== 'predictive')
      throw new TypeError('protocol "v2" (Open Inference Protocol) is for predictive model servers only');
    this.protocol = this.kind === 'predictive' ? (o.protocol ?? 'v1') : undefined;
    this.apiKey = o.apiKey.trim();
    this.timeoutMs = o.timeoutMs;
    this.extraHeaders = { ...(o.headers ?? {}) };
    this.fetchImpl = fetchImpl;
  }

  /**
   * From a ServingDeployment as read from the cluster (`kubectl get sdep x -o json`): project, names and model server
   * from the spec, the gateway URL from `status.url` (or `gatewayUrl` when given).
   */
  static fromResource(
    resource: unknown,
    o: { apiKey: string; gatewayUrl?: string } & Pick<DeploymentOptions, 'timeoutMs' | 'headers' | 'fetch'>,
  ): Deployment {
    const r = (resource ?? {}) as {
      metadata?: { name?: string; namespace?: string };
      spec?: Record<string, unknown>;
      status?: Record<string, unknown>;
    };
    const name = r.metadata?.name;
    const spec = r.spec ?? {};
    if (!name) throw new TypeError('the resource has no metadata.name');
    const project = typeof spec.project === 'string' && spec.project ? spec.project : r.metadata?.namespace;
    if (!project) throw new TypeError('the resource has neither spec.project nor metadata.namespace');
    let gatewayUrl = o.gatewayUrl;
    if (!gatewayUrl) {
      const url = typeof r.status?.url === 'string' ? r.status.url : '';
      const suffix = `/v1/${project}/${name}`;
      if (!url.endsWith(suffix)) throw new TypeError('the resource has no status.url yet: pass gatewayUrl');
      gatewayUrl = url.slice(0, -suffix.length);
    }
    return new Deployment({
      ...o,
      gatewayUrl,
      project,
      deployment: name,
      type: spec.type === 'python' ? 'python' : 'model',
      modelServer: spec.type === 'python' ? undefined : (spec.modelServer as ModelServer),
      modelName: typeof spec.modelName === 'string' ? spec.modelName : undefined,
      protocol: spec.protocol === 'v2' ? 'v2' : undefined,
    });
  }

  /** `{gatewayUrl}/v1/<project>/<deployment>`: the base every other URL starts with. */
  getBaseUrl(): string {
    return this.urls().url;
  }

  /** Predictive models: `{base}/v1/models/<name>:predict` (V2: `{base}/v2/models/<name>/infer`); otherwise null. */
  getInferenceUrl(): string | null {
    return this.urls().inferenceUrl ?? null;
  }

  /** LLM deployments: `{base}/v1` (append `/chat/completions`, `/completions`, ...); otherwise null. */
  getOpenaiUrl(): string | null {
    return this.urls().openaiUrl ?? null;
  }

  /** Python deployments: `{base}`; otherwise null. */
  getEndpointUrl(): string | null {
    return this.urls().endpointUrl ?? null;
  }

  /** Predictive models: the URL of a verb (`predict`, and for tensorflow also `classify`, `regress`). */
  getVerbUrl(verb: 'predict' | 'classify' | 'regress'): string {
    if (this.kind !== 'predictive')
      throw new Error(`${this.describe()} is not a predictive model: it has no :${verb} endpoint`);
    if (this.protocol === 'v2')
      throw new Error(`${this.describe()} speaks the Open Inference Protocol (V2): use infer() instead of :${verb}`);
    const allowed = this.modelServer === 'tensorflow' ? ['predict', 'classify', 'regress'] : ['predict'];
    if (!allowed.includes(verb)) {
      throw new Error(
        `${this.describe()} (model server ${this.modelServer}) offers only :${allowed.join(', :')}; :${verb} needs a tensorflow model server`,
      );
    }
    return `${this.getBaseUrl()}/v1/models/${this.modelName}:${verb}`;
  }

  /** V2 (Open Inference Protocol) models: POST `{inputs: [...]}` to `/v2/models/<name>/infer`. */
  async infer<T = unknown>(body: unknown, init?: RequestInit): Promise<T> {
    if (this.protocol !== 'v2')
      throw new Error(`${this.describe()} does not speak the Open Inference Protocol (V2): use predict()`);
    return this.postJson<T>(this.getInferenceUrl()!, body, init);
  }

  /** POST `{instances}` or `{inputs}` to :predict; resolves with the JSON answer. */
  async predict<T = unknown>(body: unknown, init?: RequestInit): Promise<T> {
    return this.postJson<T>(this.getVerbUrl('predict'), body, init);
  }

  /** TensorFlow model servers only: POST to :classify. Other servers throw before any request is sent. */
  async classify<T = unknown>(body: unknown, init?: RequestInit): Promise<T> {
    return this.postJson<T>(this.getVerbUrl('classify'), body, init);
  }

  /** TensorFlow model servers only: POST to :regress. Other servers throw before any request is sent. */
  async regress<T = unknown>(body: unknown, init?: RequestInit): Promise<T> {
    return this.postJson<T>(this.getVerbUrl('regress'), body, init);
  }

  /**
   * LLM deployments: an `openai` client (the `openai` npm package, loaded on first use: install it yourself)
   * with baseURL = getOpenaiUrl() and the API key as its apiKey (the gateway accepts `Bearer <key>`).
   * Name the type for full typing — `await dep.openai<OpenAI>()` — so that servegate's own types never need `openai`.
   */
  async openai<Client = OpenAILike>(options: Record<string, unknown> = {}): Promise<Client> {
    const baseURL = this.getOpenaiUrl();
    if (!baseURL) throw new Error(`${this.describe()} is not an LLM deployment: it has no OpenAI-compatible API`);
    // A computed specifier: bundlers and type checkers leave the optional package alone.
    const specifier = 'openai';
    let mod: { OpenAI?: OpenAIConstructor; default?: OpenAIConstructor };
    try {
      mod = (await import(specifier)) as typeof mod;
    } catch {
      throw new Error('Deployment.openai() needs the "openai" package: npm install openai');
    }
    const OpenAI = mod.OpenAI ?? mod.default;
    if (typeof OpenAI !== 'function')
      throw new Error('the "openai" package has no OpenAI class: install openai 4 or later');
    return new OpenAI({
      baseURL,
      apiKey: this.apiKey,
      ...(this.timeoutMs !== undefined ? { timeout: this.timeoutMs } : {}),
      ...(Object.keys(this.extraHeaders).length ? { defaultHeaders: this.extraHeaders } : {}),
      ...(this.fetchImpl !== globalThis.fetch ? { fetch: this.fetchImpl } : {}),
      ...options,
    }) as Client;
  }

  /** LLM deployments without the openai package: POST `{base}/v1/chat/completions` (non-streaming). */
  async chatCompletions<T = unknown>(body: unknown, init?: RequestInit): Promise<T> {
    const base = this.getOpenaiUrl();
    if (!base) throw new Error(`${this.describe()} is not an LLM deployment: it has no /v1/chat/completions`);
    return this.postJson<T>(`${base}/chat/completions`, body, init);
  }

  /**
   * Any request relative to the base URL: `request('/echo', {method: 'POST', body})` calls `{base}/echo`. Meant for
   * Python deployments (whose server defines the routes); works for every kind. Non-2xx throws GatewayError unless
   * `throwOnError: false`.
   */
  async request(path: string, init: RequestInitWithOptions = {}): Promise<Response> {
    if (typeof path !== 'string') throw new TypeError('path must be a string');
    if (/^[a-z][a-z0-9+.-]*:/i.test(path))
      throw new TypeError('path must be relative to the deployment, not a full URL');
    const rel = path === '' ? '' : path.startsWith('/') || path.startsWith('?') ? path : `/${path}`;
    const url = `${this.getBaseUrl()}${rel}`;
    const { throwOnError = true, ...rest } = init;
    const res = await this.send(url, rest);
    return throwOnError ? checkResponse(res, url) : res;
  }

  private async postJson<T>(url: string, body: unknown, init: RequestInit = {}): Promise<T> {
    const headers = new Headers(init.headers);
    if (!headers.has('content-type')) headers.set('content-type', 'application/json');
    if (!headers.has('accept')) headers.set('accept', 'application/json');
    const payload = typeof body === 'string' || body instanceof Uint8Array ? body : JSON.stringify(body);
    const res = await checkResponse(
      await this.send(url, { ...init, method: init.method ?? 'POST', headers, body: payload }),
      url,
    );
    const text = await res.text();
    if (text === '') return undefined as T;
    try {
      return JSON.parse(text) as T;
    } catch {
      throw new GatewayError({
        status: res.status,
        message: `the answer from ${url} is not JSON`,
        body: text.slice(0, MAX_ERROR_BODY),
        url,
        requestId: res.headers.get('x-request-id') ?? undefined,
      });
    }
  }

  private send(url: string, init: RequestInit): Promise<Response> {
    const headers = new Headers(this.extraHeaders);
    new Headers(init.headers).forEach((v, k) => headers.set(k, v));
    headers.set('authorization', `ApiKey ${this.apiKey}`);
    let signal = init.signal ?? undefined;
    if (this.timeoutMs !== undefined) {
      const t = AbortSignal.timeout(this.timeoutMs);
      signal = signal ? AbortSignal.any([signal, t]) : t;
    }
    return this.fetchImpl(url, { ...init, headers, signal });
  }

  private urls() {
    return deploymentUrls(this.gatewayUrl, this.project, this.deployment, this.kind, this.modelName, this.protocol);
  }

  private describe(): string {
    return `deployment ${this.project}/${this.deployment}`;
  }

  /** Never shows the key. */
  toJSON(): Record<string, unknown> {
    return {
      gatewayUrl: this.gatewayUrl,
      project: this.project,
      deployment: this.deployment,
      type: this.type,
      modelServer: this.modelServer,
      modelName: this.modelName,
    };
  }
}
