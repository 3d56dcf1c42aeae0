// What every exchange and upgrade of one data plane shares: read-only settings and the services they call. Built once
// by the data plane (listen/plane-context.ts).
import type { Logger } from '../../log.js';
import type { PerMinuteLimits } from '../../limits/per-minute.js';
import type { AccessLog } from '../../observe/access-log.js';
import type { Metrics } from '../../observe/metrics.js';
import type { Tracing } from '../../observe/tracing.js';
import type { RouteStore } from '../../routing/store.js';
import type { AdmitContext } from '../admit/pipeline.js';
import type { CorsPolicy } from '../admit/cors.js';
import type { DecodeBudget } from '../http/body-encoding.js';
import type { HeadOptions } from '../http/request-head.js';
import type { BodyBudget } from './body-budget.js';
import type { Pools } from './pools.js';
import type { HoldQueues } from './scale-from-zero.js';
import type { FairQueues } from './fair-queue.js';
import type { TargetPicker } from './targets.js';
import type { TunnelCounts } from './tunnels.js';

export interface PlaneContext {
  store: RouteStore;
  metrics: Metrics;
  logger: Logger;
  access: AccessLog | undefined;
  cors: CorsPolicy;
  /** The admission pipeline's services (its `table` is always the store's current one). */
  admission: AdmitContext;
  /** Per-minute limits: charged with the tokens an answer reports. */
  perMinute: PerMinuteLimits;
  picker: TargetPicker;
  pools: Pools;
  /** The drain (listen/drain.ts): once the gateway stops, every answer closes its connection. */
  drain: { readonly draining: boolean };
  head: HeadOptions;
  maxBody: number;
  /** Decoded size limit of a compressed body the gateway reads (never above maxBody). */
  maxDecoded: number;
  /** Compressed bodies are decoded a few at a time. */
  decoder: DecodeBudget;
  /** Request-body bytes held in memory, gateway-wide (limits.maxBufferedBodyBytes). */
  bodies: BodyBudget;
  /** Slowest average body rate over 10 s (bytes/s; 0 = off). */
  bodyMinRate: number;
  maxHeaders: number;
  streamIdleMs: number;
  bodyIdleMs: number;
  /** A websocket with no data either way for this long is closed. */
  websocketIdleMs: number;
  /** Open websockets per key and per client address. */
  tunnels: TunnelCounts;
  /** Set when tracing.otlpEndpoint is: a span per request (observe/tracing.ts). */
  tracing?: Tracing;
  /** Requests waiting for a first ready endpoint (scale from zero). */
  holds: HoldQueues;
  /** Requests waiting for room in a saturated LLM deployment (SPEC §14); unset: none wait. */
  queues?: FairQueues;
}
