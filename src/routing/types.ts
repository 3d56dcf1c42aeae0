// The neutral data every route source emits (Snapshot) and the route table the builder makes of it.
// Plain data only: no clients, no sockets, no clocks.

export const API_GROUP = 'serving.servegate.dev';
export const API_VERSION = `${API_GROUP}/v1alpha1`;
export const KIND = 'ServingDeployment';
export const KEY_LABEL = `${API_GROUP}/api-key`;

import type { ModelServer, RouteKind } from './kinds.js';
export type { DeploymentType, ModelServer, RouteKind } from './kinds.js';

export interface ObjectMeta {
  name: string;
  namespace: string;
  uid?: string;
  generation?: number;
  resourceVersion?: string;
  /** RFC 3339; missing sorts last. */
  creationTimestamp?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

/** A ServingDeployment as read from the API server or a manifest file. `spec` is unvalidated. */
export interface ServingDeploymentResource {
  apiVersion: string;
  kind: 'ServingDeployment';
  metadata: ObjectMeta;
  spec: unknown;
  /** The status as last read from the API server (the controller compares before writing). */
  status?: unknown;
  /** Where it came from, for messages: "examples/iris.yaml#2" or "kubernetes". */
  origin?: string;
}

/** A KServe InferenceService (serving.kserve.io/v1beta1), reduced to what routing needs. */
export interface InferenceServiceResource {
  apiVersion: string;
  kind: 'InferenceService';
  metadata: ObjectMeta;
  spec: unknown;
  /** KServe's status: its `Ready` condition gates the route (SPEC §10). */
  status?: unknown;
  origin?: string;
}

/** A Secret carrying the API-key label; `data` already base64-decoded and merged with stringData. */
export interface KeySecretResource {
  metadata: ObjectMeta;
  data: Record<string, string>;
  origin?: string;
}

export interface ServicePortInfo {
  name?: string;
  port: number;
  targetPort?: number | string;
  protocol?: string;
}

export interface ServiceResource {
  metadata: ObjectMeta;
  ports: ServicePortInfo[];
  /** spec.type; only ExternalName matters to routing (Knative's serverless predictors). */
  type?: string;
  /** spec.externalName of an ExternalName Service. */
  externalName?: string;
  /** Any EndpointSlice lists a ready address (undefined: unknown); flips only none↔some, so churn rebuilds nothing. */
  readyEndpoints?: boolean;
}

/** Everything a source knows at one moment. The files source leaves `services` undefined (no cluster). */
export interface Snapshot {
  source: 'files' | 'kubernetes';
  deployments: ServingDeploymentResource[];
  inferenceServices: InferenceServiceResource[];
  keySecrets: KeySecretResource[];
  /** Present only when the source can see Services; then a missing backend Service is BackendNotFound. */
  services?: ServiceResource[];
  /** Problems found while reading (bad YAML, unknown kinds) with the place they were found. */
  readErrors?: ReadError[];
}

export interface ReadError {
  origin: string;
  message: string;
}

/** Where a route's traffic goes. */
export type Backend =
  | { kind: 'url'; url: string }
  /** Files source: the endpoints of one backend (SPEC §12), picked per request like a Service's ready endpoints. */
  | { kind: 'urls'; urls: readonly string[] }
  | {
      kind: 'service';
      namespace: string;
      service: string;
      /** The Service port number as written in the spec. */
      port: number;
      /** The Service port's name, used to find the endpoint port in EndpointSlices. */
      portName?: string;
      /** targetPort when it is a number: the endpoint port when slices carry no name. */
      targetPort?: number | string;
      /**
       * An ExternalName Service (Knative serverless): requests go to this name on `port`, with the Host
       * `<service>.<namespace>.svc.cluster.local`, and no EndpointSlices are consulted.
       */
      externalName?: string;
    };

/** The upstream protocol of a predictive route: V1 (`:predict`) or the Open Inference Protocol (V2). */
export type PredictProtocol = 'v1' | 'v2';

export interface Canary {
  backend: Backend;
  /** 0-100: the share of requests sent to the canary. */
  percent: number;
}

export interface Route {
  /** "namespace/name" of the resource; stable identity. */
  id: string;
  namespace: string;
  name: string;
  resourceKind: 'ServingDeployment' | 'InferenceService';
  project: string;
  deployment: string;
  kind: RouteKind;
  modelServer?: ModelServer;
  /** Predictive: the `<name>` of `/v1/models/<name>:<verb>`; LLM: `spec.modelName`, the name the server serves. */
  modelName?: string;
  /** Predictive routes: the verbs offered (`predict`, `classify`, `regress`). */
  verbs: readonly string[];
  backend: Backend;
  timeoutMs: number;
  hostname?: string;
  /** spec.limits: requests and tokens per minute across every key (SPEC §9). */
  limits?: PerMinuteLimits;
  /** Predictive routes: V1 or V2 (Open Inference Protocol) routes; undefined = v1. */
  protocol?: PredictProtocol;
  /** spec.backend.path: put before every forwarded path ("/openai" for KServe's Hugging Face server). */
  pathPrefix?: string;
  /** spec.scaleFromZero.holdSeconds in ms: requests wait this long for a first ready endpoint (0/undefined = off). */
  holdMs?: number;
  /** spec.canary: a share of the traffic to a second backend. */
  canary?: Canary;
  /** Set when the resource itself says it is not ready (an InferenceService's Ready condition): why. */
  notReady?: string;
  /** spec.balancing: how an endpoint is picked among the backend's ready endpoints (SPEC §12). */
  balancing: Balancing;
  /** spec.fallbacks: deployments tried in order when this one fails before answering, as "<project>/<deployment>". */
  fallbacks?: readonly string[];
  /** spec.pricing: what its tokens cost, per million (SPEC §14 budgets); unset = 0. */
  pricing?: { inputPerMillion: number; outputPerMillion: number };
  /** spec.priority: of requests whose key names none, while the deployment is saturated (SPEC §14). */
  priority?: Priority;
}

/** Who goes first into a saturated deployment (SPEC §14): the inference extension's criticality. */
export type Priority = 'critical' | 'standard' | 'sheddable';

/** A budget of a key Secret (SPEC §14): a limit of tokens and/or cost over a period. */
export interface KeyBudget {
  tokens?: number;
  cost?: number;
  period: { kind: 'day' } | { kind: 'month' } | { kind: 'rolling'; ms: number; text?: string };
}

export type BalancingPolicy = 'llm' | 'least-request' | 'round-robin';

export interface Balancing {
  policy: BalancingPolicy;
  /** Where each endpoint serves its metrics (llm policy): path, and port (0 = the serving port). */
  metricsPath: string;
  metricsPort: number;
}

export interface PerMinuteLimits {
  requestsPerMinute?: number;
  tokensPerMinute?: number;
}

export interface ApiKeyRecord {
  /**
   * The key's display name, unique among keys: the Secret's name, or "<namespace>/<name>" outside the keys namespace
   * so that two Secrets of one name never merge. Sent as x-servegate-key; the `key` of logs and metrics.
   */
  name: string;
  /** The Secret's namespace. */
  namespace: string;
  /** metadata.name: with `namespace`, what limit buckets are keyed by; optional only for hand-made records (tests). */
  secretName?: string;
  prefix: string;
  /** 32 bytes: SHA-256 of "<prefix>.<secret>". */
  sha256: Buffer;
  /** '*' or the granted project names (namespace form, for comparison). */
  projects: '*' | ReadonlySet<string>;
  /** epoch ms; undefined = never expires. */
  expiresAt?: number;
  /** Set when the Secret lives outside the keys namespace: it may grant routes of this namespace only. */
  scopeNamespace?: string;
  /** The Secret's rpm/tpm fields; a missing one falls back to limits.perKey (SPEC §9). */
  limits?: PerMinuteLimits;
  /** The Secret's budgetTokens/budgetCost/budgetPeriod (SPEC §14). */
  budget?: KeyBudget;
  /** The Secret's `tenant`: keys naming one tenant share one fair share of a saturated deployment. */
  tenant?: string;
  /** The Secret's `priority`: else the deployment's. */
  priority?: Priority;
  /** The Secret's `weight` (default 1): its tenant's share against others'. */
  weight?: number;
}

export interface RouteTable {
  /** "<project form>/<deployment>" → route; both the written and the namespace form of each project. */
  readonly byPath: ReadonlyMap<string, Route>;
  /** lower-case hostname → route (legacy host routing). */
  readonly byHost: ReadonlyMap<string, Route>;
  /** key prefix → key records (normally one). */
  readonly keys: ReadonlyMap<string, readonly ApiKeyRecord[]>;
  /** Routes, oldest first (creationTimestamp, then namespace/name): a deterministic order. */
  readonly routes: readonly Route[];
  /** Content hash: equal hashes mean an identical table (rebuilds with the same hash are skipped). */
  readonly hash: string;
  /** Legacy hostnames end in this domain (an unknown one is answered as such). */
  readonly serverlessDomain: string;
}

export type ReadyReason =
  | 'Routed'
  | 'InvalidSpec'
  | 'Conflict'
  | 'BackendNotFound'
  /** Served, no ready endpoint now, requests are held while it scales up (Ready=True). */
  | 'ScaledToZero'
  /** Served, but no ready endpoint and no hold: requests get 503 (Ready=False). */
  | 'NoReadyEndpoints'
  /** An InferenceService whose own Ready condition is not True: requests get 503 (Ready=False). */
  | 'InferenceServiceNotReady';

/** What the controller writes to a resource's status, minus the clock (lastTransitionTime). */
export interface DeploymentStatus {
  id: string;
  namespace: string;
  name: string;
  resourceKind: 'ServingDeployment' | 'InferenceService';
  generation?: number;
  url?: string;
  inferenceUrl?: string;
  openaiUrl?: string;
  endpointUrl?: string;
  hostname?: string;
  ready: boolean;
  /** In the route table (true also for NoReadyEndpoints and InferenceServiceNotReady, which answer 503). */
  routed?: boolean;
  reason: ReadyReason;
  message: string;
  /** Why no hostname was given, when none was. */
  hostnameMessage?: string;
}

export interface KeyProblem {
  id: string;
  origin?: string;
  message: string;
}

/** What the builder needs besides the snapshot (buildOptionsOf in build.ts makes them from the configuration). */
export interface BuildOptions {
  publicUrl: string;
  serverlessDomain: string;
  keysNamespace: string;
  /** auth.projectNamespaceKeys: a key Secret in a project's namespace may grant that project (default false). */
  projectNamespaceKeys?: boolean;
  /** Default upstream time to response headers. */
  defaultTimeoutMs: number;
  /** limits.scaleFromZeroHoldSeconds in ms: the hold of deployments that do not set their own (0 = off). */
  scaleFromZeroHoldMs?: number;
}

export interface BuildResult {
  table: RouteTable;
  statuses: DeploymentStatus[];
  keyProblems: KeyProblem[];
}
