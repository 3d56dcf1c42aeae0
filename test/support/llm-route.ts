// An `llm` deployment's route over fixed backend URLs, and endpoint figures set by hand: what the picker tests build
// a TargetPicker from (picker, prefix-affinity, scrape).
import { EndpointStats, type Scraped } from '../../src/gateway/forward/endpoint-stats.js';
import type { Backend, Balancing, Route } from '../../src/routing/types.js';

/** demo/chat as an `llm` ServingDeployment over `urls`, balanced by `policy`. */
export function llmRoute(urls: readonly string[], policy: Balancing['policy'] = 'llm'): Route {
  return {
    id: 'demo/chat',
    namespace: 'demo',
    name: 'chat',
    resourceKind: 'ServingDeployment',
    project: 'demo',
    deployment: 'chat',
    kind: 'llm',
    modelServer: 'llm',
    verbs: [],
    backend: { kind: 'urls', urls: [...urls] } as Backend,
    timeoutMs: 1000,
    balancing: { policy, metricsPath: '/metrics', metricsPort: 0 },
  };
}

/** Endpoint stats whose fresh figures are whatever the test puts in `figures`. */
export class FixedStats extends EndpointStats {
  figures = new Map<string, Scraped>();
  constructor() {
    super({ scrapeIntervalMs: 1000, staleAfterMs: 1000 });
  }
  override fresh(origin: string): Scraped | undefined {
    return this.figures.get(origin);
  }
}
