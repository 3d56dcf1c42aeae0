// The one admission step for plain requests and upgrades alike: decide() (route, key, project, verb) and then the
// per-key rate limit. A plain function of the request's facts, the table, the limiter and the clock.
import type { RouteTable } from '../../routing/types.js';
import { decide, type Accepted, type ByModel, type Refused, type RequestFacts } from './route.js';
import { gatewayError } from '../http/errors.js';
import type { RateLimiter } from '../../limits/per-second.js';

export type { Accepted, ByModel, Refused, RequestFacts };

export interface Refusal extends Refused {
  /** Label for servegate_auth_failures_total when the refusal is an authentication or authorisation one. */
  authMetric?: string;
}

export function admit(facts: RequestFacts, table: RouteTable, limiter: RateLimiter): Accepted | ByModel | Refusal {
  const d = decide(facts, table);
  if (!d.ok) {
    const authMetric = d.authFailure ?? (d.error.code === 'project_forbidden' ? 'forbidden' : undefined);
    return authMetric ? { ...d, authMetric } : d;
  }
  if (limiter.enabled) {
    const wait = limiter.take(`${d.key.namespace}/${d.key.name}`, facts.now);
    if (wait > 0) {
      return {
        ok: false,
        dialect: d.dialect,
        route: d.route,
        key: d.key,
        error: gatewayError(
          'rate_limit_exceeded',
          `rate limit of ${limiter.perSecond} requests/s for this API key exceeded`,
          { 'retry-after': String(wait) },
        ),
      };
    }
  }
  return d;
}
