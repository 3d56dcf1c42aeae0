// The admission pipeline in unit tests: a context with the given table, limits off unless asked for, and counters
// that record what admission counted.
import { AuthFailureLimiter } from '../../src/limits/auth-failures.js';
import { MemoryLimitStore } from '../../src/limits/memory.js';
import { PerMinuteLimits } from '../../src/limits/per-minute.js';
import { PerSecondLimiter } from '../../src/limits/per-second.js';
import { corsPolicy } from '../../src/gateway/admit/cors.js';
import {
  admit,
  type Accepted,
  type Admission,
  type AdmitContext,
  type ByModel,
  type Preflight,
  type RateLimitedLabels,
  type Refused,
  type RequestFacts,
} from '../../src/gateway/admit/pipeline.js';
import type { RouteTable } from '../../src/routing/types.js';

export interface Counted {
  authFailures: string[];
  rateLimited: RateLimitedLabels[];
}

export interface AdmissionOptions {
  perSecond?: number;
  perMinute?: { requestsPerMinute: number; tokensPerMinute: number };
  maxFailures?: number;
  allowedOrigins?: string[];
  now?: () => number;
}

export function admissionContext(table: RouteTable, o: AdmissionOptions = {}): { ctx: AdmitContext; counted: Counted } {
  const counted: Counted = { authFailures: [], rateLimited: [] };
  const ctx: AdmitContext = {
    table,
    cors: corsPolicy({
      allowedOrigins: o.allowedOrigins ?? [],
      allowedHeaders: [],
      exposedHeaders: [],
      maxAgeSeconds: 600,
    }),
    perSecond: new PerSecondLimiter(o.perSecond ?? 0, 0),
    perMinute: new PerMinuteLimits(
      new MemoryLimitStore(o.now),
      o.perMinute ?? { requestsPerMinute: 0, tokensPerMinute: 0 },
    ),
    authFailures: new AuthFailureLimiter({ maxFailures: o.maxFailures ?? 0, windowSeconds: 60 }, o.now),
    counters: {
      authFailure: (reason) => counted.authFailures.push(reason),
      rateLimited: (labels) => counted.rateLimited.push(labels),
    },
  };
  return { ctx, counted };
}

/** admit() where every store answers at once (in process): the decision itself, never a promise. */
export function admitNow(facts: RequestFacts, ctx: AdmitContext): Admission {
  const a = admit(facts, ctx);
  if (a instanceof Promise) throw new Error('admission answered with a promise; the in-process store answers at once');
  return a;
}

export type { Accepted, Admission, ByModel, Preflight, Refused, RequestFacts };
