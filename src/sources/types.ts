// The narrow interfaces every route source implements; the gateway and controller see only these.
import type { Backend, Snapshot } from '../routing/types.js';

export interface SourceHealth {
  /** True once the first full snapshot was delivered (every watched kind listed). */
  synced: boolean;
  /** ms since the source last confirmed it is current (watch event, bookmark or successful list); 0 = now. */
  stalenessMs: number;
  /** Human-readable problems (e.g. "watch servingdeployments: 500 from API server, retrying in 4s"). */
  problems: string[];
}

export interface RouteSource {
  /** Starts reading; calls onSnapshot with every new full snapshot. Resolves after the first one. */
  start(onSnapshot: (snapshot: Snapshot) => void): Promise<void>;
  stop(): Promise<void>;
  health(): SourceHealth;
}

export interface EndpointAddress {
  host: string;
  port: number;
}

/**
 * Ready endpoints of Service backends, kept apart from the route table so that endpoint churn
 * does not rebuild routes. Returns undefined when the source does not track endpoints (files source).
 */
export interface EndpointResolver {
  endpoints(backend: Extract<Backend, { kind: 'service' }>): readonly EndpointAddress[] | undefined;
  /** Calls `listener` whenever some Service's endpoints changed (held requests look again); returns the unsubscribe. */
  onEndpointsChanged?(listener: () => void): () => void;
}
