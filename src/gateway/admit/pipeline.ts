// Admission: the one ordered decision about a request before its body is read, used alike by plain requests and
// websocket upgrades. The order (docs/gateway.md draws it):
//
//   1. head      framing and Host problems found while reading the head
//   2. method    Expect other than 100-continue (417), TRACE/TRACK (405)
//   3. preflight a CORS preflight is answered here, before any key is asked for
//   4. route     where the path points (legacy Host, /v1/<project>/<deployment>, the OpenAI base URL)
//   5. key       missing, malformed, unknown or expired: 401, counted against the client address;
//   6. throttle  past the failed-authentication limit that failure is 429 instead (a valid key is always served)
//   7. grant     the key's projects: 403; then an unknown deployment: 404
//   8. kind      the deployment kind's rules: suffix and verb (404/405/415), websockets only where a kind takes them
//   9. limits    per second per key, then the key's and project's budgets (SPEC §14), then per minute per key and
//                per deployment (sync in process, a promise with Redis)
//
// The result is an accepted request (the headers its answer gets, the token charge) or a refusal whose metrics are
// already counted. A request on the OpenAI base URL is accepted with its deployment still open: `admitModel` finishes
// it (grant by model, limits) once its `model` is read.
import type { ApiKeyRecord, Route, RouteTable } from '../../routing/types.js';
import type { AuthFailureLimiter } from '../../limits/auth-failures.js';
import type { PerSecondLimiter } from '../../limits/per-second.js';
import { keyCharge, type Charge, type LimitDecision, type PerMinuteLimits } from '../../limits/per-minute.js';
import type { BucketSpec } from '../../limits/buckets.js';
import type { BudgetCharge, BudgetDecision, Budgets } from '../../limits/budgets.js';
import { grantsProject } from '../../routing/names.js';
import { authError, parseAuthorization, verifyKey, type AuthFailure } from './auth.js';
import { ALLOWED_METHODS, preflightHeaderList, responseCorsList, type CorsPolicy } from './cors.js';
import { checkSuffix, type BodyCheck } from './kind-rules.js';
import { guessDialect, locate } from './route.js';
import { gatewayError, type Dialect, type GatewayError } from '../http/errors.js';
import { HIDDEN, selectModel, servedModel } from '../openai/by-model.js';
import { modelForbidden } from '../openai/llm-body.js';
import { copyWith } from '../../same-shape.js';

/** What admission reads of a request: plain data from its head. */
export interface RequestFacts {
  method: string;
  /** The request target as sent. */
  url: string;
  /** The routing authority (an absolute-form target's, else the Host header's). */
  host: string | undefined;
  authorization: string | string[] | undefined;
  contentType: string | undefined;
  now: number;
  /** The address failed authentications count against (the peer, or the trusted X-Forwarded-For hop). */
  client?: string;
  origin?: string;
  /** An OPTIONS with Origin and Access-Control-Request-Method: a CORS preflight. */
  preflight?: boolean;
  acrHeaders?: string;
  /** A framing or Host problem found while reading the head (readHead/headProblem). */
  headProblem?: GatewayError;
  /** An Expect header other than 100-continue. */
  expectation?: string;
  /** A websocket upgrade. */
  upgrade?: boolean;
}

/** The services admission asks, and the counters it sets. */
export interface AdmitContext {
  table: RouteTable;
  cors: CorsPolicy;
  perSecond: PerSecondLimiter;
  perMinute: PerMinuteLimits;
  /** Budgets per key and project (SPEC §14); unset: none. */
  budgets?: Budgets;
  authFailures: AuthFailureLimiter;
  counters: AdmissionCounters;
}

export interface AdmissionCounters {
  authFailure(reason: AuthFailure | 'forbidden'): void;
  rateLimited(labels: RateLimitedLabels): void;
}

export interface RateLimitedLabels {
  scope: 'key' | 'deployment' | 'client' | 'project';
  kind: 'requests' | 'tokens' | 'auth_failures' | 'cost';
  reason: 'per_second' | 'per_minute' | 'failed_auth' | 'budget';
}

/** A request for one deployment, admitted. */
export interface Accepted {
  ok: true;
  kind: 'route';
  route: Route;
  key: ApiKeyRecord;
  /** Path and query to send upstream (prefix stripped; the backend's own path prefix not yet added). */
  upstreamPath: string;
  check: BodyCheck;
  dialect: Dialect;
  /** Project name as the path wrote it (or the route's, for host routing). */
  project: string;
  /** Headers every answer to this request carries: CORS, `x-ratelimit-*`. Flat [name, value, ...]. */
  headers: string[];
  /** The token buckets passed, charged with the tokens the answer reports. */
  charge: Charge | undefined;
  /** The budgets passed (SPEC §14), charged with the answer's tokens and their cost. */
  budget?: BudgetCharge;
}

/** A request on the OpenAI base URL, key checked: `model` (in the body) names the deployment. */
export interface ByModel {
  ok: true;
  kind: 'by-model';
  key: ApiKeyRecord;
  /** The OpenAI path as a deployment URL would forward it: "/v1/chat/completions". */
  rest: string;
  /** "?..." or "". */
  search: string;
  dialect: 'openai';
  /** `GET /openai/v1/models/<id>`: the model id asked for (it may hold an encoded "/"). */
  modelId?: string;
  /** The deployment a `model` in the query names (`search` then carries its served name): the body must agree. */
  queryRoute?: Route;
  headers: string[];
  /** The key's token buckets passed (its per-minute limits are checked before the body is read). */
  charge: Charge | undefined;
}

/** A CORS preflight: answered 204 with these headers. */
export interface Preflight {
  ok: true;
  kind: 'preflight';
  headers: string[];
}

export interface Refused {
  ok: false;
  kind: 'refused';
  error: GatewayError;
  dialect: Dialect;
  /** As far as admission got: for the metric and the log line. */
  route?: Route;
  key?: ApiKeyRecord;
  /** The connection closes after the answer (the request itself cannot be trusted). */
  close: boolean;
  headers: string[];
}

export type Admission = Accepted | ByModel | Preflight | Refused;

const NO_HEADERS: string[] = [];

/** The dialect of an answer given before the target is located: from the target alone (its path only when the head,
 * its Host included, cannot be trusted). */
const early = (facts: RequestFacts, ctx: AdmitContext): Dialect =>
  guessDialect(facts.url, facts.headProblem ? undefined : facts.host, ctx.table.serverlessDomain);

export function admit(facts: RequestFacts, ctx: AdmitContext): Admission | Promise<Admission> {
  // 1-2. The head and the method: nothing about such a request can be trusted. Answered in the dialect its target
  // reads as (an OpenAI SDK shows the message of an OpenAI error object only), with the CORS headers of an allowed
  // origin like every other answer (SPEC §5: a browser page that sent too many headers can read its 431).
  if (facts.headProblem || facts.expectation !== undefined || facts.method === 'TRACE' || facts.method === 'TRACK') {
    const cors = responseCorsList(ctx.cors, facts.origin) ?? NO_HEADERS;
    if (facts.headProblem) return refused(facts.headProblem, early(facts, ctx), cors, true);
    if (facts.expectation !== undefined) {
      return refused(
        gatewayError('expectation_failed', `Expect: ${facts.expectation} is not supported (only 100-continue)`),
        early(facts, ctx),
        cors,
        true,
      );
    }
    // TRACE would reflect the request (cookies included) back: never forwarded.
    return refused(
      gatewayError('method_not_allowed', `${facts.method} is not allowed`, { allow: ALLOWED_METHODS }),
      early(facts, ctx),
      cors,
    );
  }
  // 3. A preflight carries no key: answered from the CORS settings alone.
  if (facts.preflight && !facts.upgrade)
    return { ok: true, kind: 'preflight', headers: preflightHeaderList(ctx.cors, facts.origin, facts.acrHeaders) };

  // 4. Where it points. Every answer from here on carries the CORS headers.
  const cors = responseCorsList(ctx.cors, facts.origin) ?? NO_HEADERS;
  const at = locate(facts.url, facts.host, ctx.table);
  if (at.at === 'bad-path') return refused(at.error, at.dialect, cors);
  const route = at.at === 'deployment' ? at.route : undefined;

  // 5-6. The key. A failure counts against the address; past the failed-auth limit a failing request gets 429
  // instead of 401 (a valid key is served even from a throttled address: one NAT can hide many clients).
  const auth = parseAuthorization(facts.authorization);
  const verified = 'failure' in auth ? auth : verifyKey(ctx.table.keys, auth.key, facts.now);
  if ('failure' in verified) {
    ctx.counters.authFailure(verified.failure);
    const throttled = facts.client !== undefined ? throttle(facts.client, ctx) : undefined;
    const error = throttled ?? authError(verified.failure);
    return { ok: false, kind: 'refused', error, dialect: at.dialect, route, close: false, headers: cors };
  }
  const key = verified.record;

  if (at.at === 'openai') {
    if (at.modelId instanceof Error) return copyWith(refused(at.modelId, 'openai', cors), { key });
    const b: ByModel = {
      ok: true,
      kind: 'by-model',
      key,
      rest: at.rest,
      search: at.search,
      dialect: 'openai',
      modelId: at.modelId,
      headers: cors,
      charge: undefined,
    };
    // A websocket (the realtime API) names its model in the query: `?model=<project>/<deployment>`.
    if (facts.upgrade) return admitUpgradeByModel(b, ctx, facts.now, facts.client);
    // Any other request may name one in the query too: checked like the body's, and forwarded as the served name.
    if (b.search.length > 1 && hasModelParam(b.search)) {
      const q = queryModel(b, ctx, facts.client);
      if (q.kind === 'refused') return q;
      b.queryRoute = q.route;
      b.search = q.search;
    }
    // The key's buckets are taken now, before the body is read (or decoded); the deployment's wait for `model`.
    const error = ctx.perSecond.take(key, facts.now);
    if (error) {
      ctx.counters.rateLimited({ scope: 'key', kind: 'requests', reason: 'per_second' });
      return copyWith(refused(error, 'openai', cors), { key });
    }
    return perMinute(b, ctx.perMinute.specs(undefined, key), ctx);
  }

  // 7. The grant, then the deployment itself.
  const dialect = at.dialect;
  // A key that does not grant the deployment's project is refused in the dialect the target reads as
  // (`early(facts, ctx)`), never the route's: whether a deployment of another project exists, and what it serves, is
  // not told (SPEC §9).
  const refuse = (error: GatewayError, as: Dialect = dialect): Refused => ({
    ok: false,
    kind: 'refused',
    error,
    dialect: as,
    route,
    key,
    close: false,
    headers: cors,
  });
  // A legacy Host names its project: one the key does not grant gets the same 403 whether the deployment exists or
  // not, naming the project as the Host wrote it (as /v1/<project>/... does with the path's segment).
  const named = at.hostProject ?? at.project;
  if (at.hostProject !== undefined && !grantsProject(key, at.hostProject, route?.namespace)) {
    ctx.counters.authFailure('forbidden');
    return refuse(
      gatewayError('project_forbidden', `API key "${key.name}" does not grant access to project "${named}"`),
      early(facts, ctx),
    );
  }
  // A legacy Host that names no deployment falls back to the path, for deployments the key may use only: for one it
  // may not, the answer is the unknown host's 404, as when the path names nothing (a 403 would tell that it exists).
  const unknownHost =
    at.unknownHost ??
    (at.hostFallback !== undefined && at.project !== undefined && !grantsProject(key, at.project, route?.namespace)
      ? at.hostFallback
      : undefined);
  if (unknownHost !== undefined) {
    return refuse(
      gatewayError(
        'not_found',
        `no deployment is served at host "${unknownHost}": legacy hostnames are <deployment>.<project>.${ctx.table.serverlessDomain} of a deployment that is served`,
      ),
      early(facts, ctx),
    );
  }
  if (at.project === undefined || at.rest === undefined)
    return refuse(
      gatewayError('not_found', 'no deployment at this path: deployments are served at /v1/<project>/<deployment>/...'),
      early(facts, ctx),
    );
  if (!grantsProject(key, at.project, route?.namespace)) {
    ctx.counters.authFailure('forbidden');
    return refuse(
      gatewayError('project_forbidden', `API key "${key.name}" does not grant access to project "${named}"`),
      early(facts, ctx),
    );
  }
  if (!route)
    return refuse(
      gatewayError('not_found', `deployment "${at.deployment}" not found in project "${at.project}"`),
      early(facts, ctx),
    );

  // 8. The kind's rules.
  const suffix = checkSuffix(route, facts.method, at.rest, facts.contentType);
  if (!('check' in suffix)) return refuse(suffix);
  if (facts.upgrade && route.kind === 'predictive')
    return refuse(gatewayError('not_found', 'predictive deployments do not accept upgrade (websocket) requests'));

  // A `model` in the query (a realtime websocket's, or any request's) is checked like a body's: naming another
  // deployment's model on a shared backend is 403.
  if (route.kind === 'llm' && at.search.length > 1 && hasModelParam(at.search)) {
    for (const m of new URLSearchParams(at.search).getAll('model')) {
      const forbidden = modelForbidden(ctx.table, route, m, key);
      if (forbidden) {
        ctx.counters.authFailure('forbidden');
        return refuse(forbidden);
      }
    }
  }

  // 9. Limits.
  return limit(
    {
      ok: true,
      kind: 'route',
      route,
      key,
      upstreamPath: at.rest + at.search,
      check: suffix.check,
      dialect: at.dialect,
      project: at.project,
      headers: cors,
      charge: undefined,
    },
    ctx,
    facts.now,
  );
}

/**
 * The OpenAI base URL once `model` has named the deployment (read from the body): the request passes that
 * deployment's per-minute limits (the key's buckets were taken at admission). `search`: the query to forward.
 */
export function admitModel(
  b: ByModel,
  route: Route,
  search: string,
  ctx: Pick<AdmitContext, 'perMinute' | 'counters' | 'budgets'>,
): Accepted | Refused | Promise<Accepted | Refused> {
  return andThen(budgets(byModelAccepted(b, route, search), ctx), (a) =>
    perMinute(a, ctx.perMinute.specs(route, undefined), ctx),
  );
}

/**
 * A fallback deployment (SPEC §12) taking over an admitted request: it passes that deployment's per-minute limits as a
 * direct call would (its request bucket is taken, its 429 is the refusal). The key's buckets were taken at admission;
 * the token charge keeps the key's buckets and moves from the deployment that failed to this one (it did not
 * generate the tokens). `headers`: the answer's header lines so far, which get this deployment's rate-limit figures.
 */
export function admitFallback(
  a: Accepted,
  to: Route,
  headers: string[],
  ctx: Pick<AdmitContext, 'perMinute' | 'counters'>,
): Accepted | Refused | Promise<Accepted | Refused> {
  const charge = keyCharge(a.charge);
  return perMinute(copyWith(a, { route: to, headers, charge }), ctx.perMinute.specs(to, undefined), ctx);
}

function byModelAccepted(b: ByModel, route: Route, search: string): Accepted {
  return {
    ok: true,
    kind: 'route',
    route,
    key: b.key,
    upstreamPath: b.rest + search,
    check: 'json',
    dialect: 'openai',
    project: route.project,
    headers: b.headers,
    charge: b.charge,
  };
}

/**
 * A `model` the key may not use: counted as a failed authorisation; a bare name hidden as not found also counts toward
 * the failed-auth throttle of the address (SPEC §9), since guessing names is what the throttle slows.
 */
export function modelRefused(
  error: GatewayError,
  client: string | undefined,
  ctx: Pick<AdmitContext, 'authFailures' | 'counters'>,
): void {
  if (error.code === 'model_forbidden') ctx.counters.authFailure('forbidden');
  else if (HIDDEN.has(error)) {
    ctx.counters.authFailure('forbidden');
    if (client !== undefined) ctx.authFailures.failed(client);
  }
}

/** A websocket on the OpenAI base URL (the realtime API): `?model=` names the deployment and is rewritten like a body's. */
function admitUpgradeByModel(
  b: ByModel,
  ctx: AdmitContext,
  now: number,
  client: string | undefined,
): Accepted | Refused | Promise<Accepted | Refused> {
  const q = queryModel(b, ctx, client);
  if (q.kind === 'refused') return q;
  return limit(byModelAccepted(b, q.route, q.search), ctx, now);
}

/** Whether a query ("?...") may hold a `model` parameter (a cheap test before URLSearchParams; "%6D" spells "m"). */
function hasModelParam(search: string): boolean {
  return /(?:^\?|&)(?:m|%6d)/i.test(search);
}

/**
 * The deployment the query's `model` names on the OpenAI base URL (every `model` parameter must name the same one),
 * and the query with it as the served name; or the refusal selectModel gives.
 */
function queryModel(
  b: ByModel,
  ctx: Pick<AdmitContext, 'table' | 'authFailures' | 'counters'>,
  client: string | undefined,
): { kind: 'model'; route: Route; search: string } | Refused {
  const params = new URLSearchParams(b.search);
  const all = params.getAll('model');
  let route: Route | GatewayError = selectModel(ctx.table, b.key, all[0]);
  for (let i = 1; i < all.length && !(route instanceof Error); i++) {
    const other = selectModel(ctx.table, b.key, all[i]);
    if (other instanceof Error || other !== route)
      route = other instanceof Error ? other : gatewayError('invalid_body', 'the query names two different models');
  }
  if (route instanceof Error) {
    modelRefused(route, client, ctx);
    return copyWith(refused(route, 'openai', b.headers), { key: b.key });
  }
  params.set('model', servedModel(route));
  return { kind: 'model', route, search: `?${params.toString()}` };
}

/**
 * Records a failed authentication from `client`; when the address is past the failed-auth limit, the 429 it gets
 * instead of a 401 (counted in servegate_rate_limited_total).
 */
function throttle(client: string, ctx: Pick<AdmitContext, 'authFailures' | 'counters'>): GatewayError | undefined {
  if (!ctx.authFailures.enabled) return undefined;
  const blocked = ctx.authFailures.blockedFor(client);
  ctx.authFailures.failed(client);
  if (blocked <= 0) return undefined;
  ctx.counters.rateLimited({ scope: 'client', kind: 'auth_failures', reason: 'failed_auth' });
  const s = Math.ceil(blocked / 1000);
  return gatewayError('rate_limit_exceeded', `too many failed authentications from ${client}; retry after ${s} s`, {
    'retry-after': String(s),
  });
}

/** Step 9: the per-second bucket of the key, then the per-minute buckets. */
function limit(
  a: Accepted,
  ctx: Pick<AdmitContext, 'perSecond' | 'perMinute' | 'counters' | 'budgets'>,
  now: number,
): Accepted | Refused | Promise<Accepted | Refused> {
  const error = ctx.perSecond.take(a.key, now);
  if (error) {
    ctx.counters.rateLimited({ scope: 'key', kind: 'requests', reason: 'per_second' });
    return {
      ok: false,
      kind: 'refused',
      error,
      dialect: a.dialect,
      route: a.route,
      key: a.key,
      close: false,
      headers: a.headers,
    };
  }
  return andThen(budgets(a, ctx), (x) => perMinute(x, ctx.perMinute.specs(x.route, x.key), ctx));
}

/** `f` of an accepted request, now or when `a` settles; a refusal goes through as it is. */
function andThen(
  a: Accepted | Refused | Promise<Accepted | Refused>,
  f: (a: Accepted) => Accepted | Refused | Promise<Accepted | Refused>,
): Accepted | Refused | Promise<Accepted | Refused> {
  if (a instanceof Promise) return a.then((x) => (x.ok ? f(x) : x));
  return a.ok ? f(a) : a;
}

/**
 * Step 9, budgets (SPEC §14): the key's and the project's, checked before the body is forwarded (what was spent must
 * be below each budget); refused: 429 insufficient_quota with the x-servegate-budget-* headers. Checked before the
 * per-minute windows, so that a request refused for its budget takes no request from them.
 */
function budgets(
  a: Accepted,
  ctx: Pick<AdmitContext, 'budgets' | 'counters'>,
): Accepted | Refused | Promise<Accepted | Refused> {
  const specs = ctx.budgets?.specs(a.route.project, a.key);
  if (!specs || specs.length === 0) return a;
  const apply = (d: BudgetDecision): Accepted | Refused => {
    if (!d.ok) {
      for (const s of d.refusing) {
        const kind = (s.limit.tokens ?? 0) > 0 ? ('tokens' as const) : ('cost' as const);
        ctx.counters.rateLimited({ scope: s.scope, kind, reason: 'budget' });
      }
      return {
        ok: false,
        kind: 'refused',
        error: d.error,
        dialect: a.dialect,
        route: a.route,
        key: a.key,
        close: false,
        headers: a.headers,
      };
    }
    const headers = a.headers.slice();
    for (const [k, v] of Object.entries(d.headers)) headers.push(k, v);
    return copyWith(a, { headers, budget: d.charge });
  };
  const d = ctx.budgets!.decide(specs);
  return d instanceof Promise ? d.then(apply) : apply(d);
}

/**
 * Step 9, per minute: the buckets of `specs`. What passes keeps the headers and token charge it had (the OpenAI base
 * URL checks the key's buckets before the body, the deployment's after): the x-ratelimit-* headers then report, per
 * kind, the bucket with the least left.
 */
function perMinute<T extends Accepted | ByModel>(
  a: T,
  specs: BucketSpec[],
  ctx: Pick<AdmitContext, 'perMinute' | 'counters'>,
): T | Refused | Promise<T | Refused> {
  if (specs.length === 0) return a;
  const decision = ctx.perMinute.decide(specs);
  const apply = (dec: LimitDecision): T | Refused => {
    if (!dec.ok) {
      for (const s of dec.spent) ctx.counters.rateLimited(copyWith(s, { reason: 'per_minute' as const }));
      return {
        ok: false,
        kind: 'refused',
        error: dec.error,
        dialect: a.dialect,
        route: a.kind === 'route' ? a.route : undefined,
        key: a.key,
        close: false,
        headers: a.headers,
      };
    }
    const charge =
      a.charge && dec.charge ? { tokens: [...a.charge.tokens, ...dec.charge.tokens] } : (a.charge ?? dec.charge);
    return copyWith(a, { headers: withRateHeaders(a.headers, dec.headers), charge }) as T;
  };
  return decision instanceof Promise ? decision.then(apply) : apply(decision);
}

/** `list` with the rate-limit headers of `add`; where both report a kind, the one with less remaining stays. */
function withRateHeaders(list: readonly string[], add: Record<string, string>): string[] {
  const out = list.slice();
  for (const kind of ['requests', 'tokens']) {
    const remaining = add[`x-ratelimit-remaining-${kind}`];
    if (remaining === undefined) continue;
    const at = out.indexOf(`x-ratelimit-remaining-${kind}`);
    if (at !== -1 && Number(out[at + 1]) <= Number(remaining)) continue;
    for (const part of ['limit', 'remaining', 'reset']) {
      const name = `x-ratelimit-${part}-${kind}`;
      const i = out.indexOf(name);
      if (i !== -1) out[i + 1] = add[name];
      else out.push(name, add[name]);
    }
  }
  return out;
}

function refused(error: GatewayError, dialect: Dialect, headers: string[], close = false): Refused {
  return { ok: false, kind: 'refused', error, dialect, close, headers };
}
