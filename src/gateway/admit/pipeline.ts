// Admission: the decision about a request before its body is read, for plain requests and websocket upgrades alike,
// in the order docs/gateway.md draws; admit() calls one function per step:
//
//   1-2. head, method  headAndMethod  framing and Host problems (400/431), Expect other than 100-continue (417),
//                                     TRACE/TRACK (405)
//   3.   preflight     preflight      a CORS preflight is answered here, before any key is asked for
//   4.   route         locate         where the path points (legacy Host, /v1/<project>/<deployment>, /openai/v1)
//   5-6. key, throttle authenticate   missing, malformed, unknown or expired: 401, counted against the client address;
//                                     past the failed-authentication limit 429 instead (a valid key is always served)
//   7.   grant         grantedRoute   the key's projects: 403; then an unknown deployment: 404
//   8.   kind          kindRules      suffix and verb (404/405/415), websockets only where a kind takes them
//   9.   limits        limit          per second per key, the key's and project's budgets (SPEC §14), per minute per
//                                     key and deployment (sync in process, a promise with Redis)
//
// The result is an accepted request (the headers its answer gets, the token charge) or a refusal (made by `refusal`)
// whose metrics are already counted. On the OpenAI base URL (onBaseUrl) the request is accepted with its deployment
// still open: `admitModel` finishes it (grant by model, limits) once its `model` is read.
import type { ApiKeyRecord, Route, RouteTable } from '../../routing/types.js';
import type { AuthFailureLimiter } from '../../limits/auth-failures.js';
import type { PerSecondLimiter } from '../../limits/per-second.js';
import { keyCharge, type Charge, type LimitDecision, type PerMinuteLimits } from '../../limits/per-minute.js';
import type { BucketSpec } from '../../limits/buckets.js';
import type { BudgetCharge, BudgetDecision, Budgets, BudgetSpec } from '../../limits/budgets.js';
import { grantsProject } from '../../routing/names.js';
import { authError, parseAuthorization, verifyKey, type AuthFailure } from './auth.js';
import { ALLOWED_METHODS, preflightHeaderList, responseCorsList, type CorsPolicy } from './cors.js';
import { checkSuffix, type BodyCheck } from './kind-rules.js';
import { guessDialect, locate, type Located, type OnBaseUrl } from './route.js';
import { gatewayError, type Dialect, type GatewayError } from '../http/errors.js';
import { headerValue, setHeader } from '../http/headers.js';
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
  const untrusted = headAndMethod(facts, ctx);
  if (untrusted) return untrusted;
  if (facts.preflight && !facts.upgrade) return preflight(facts, ctx);
  // From here on every answer carries the CORS headers.
  const cors = responseCorsList(ctx.cors, facts.origin) ?? NO_HEADERS;
  const at = locate(facts.url, facts.host, ctx.table);
  if (at.at === 'bad-path') return refusal(at.error, at.dialect, cors);
  const key = authenticate(facts, ctx);
  if (key instanceof Error) return refusal(key, at.dialect, cors, at.at === 'deployment' ? at.route : undefined);
  if (at.at === 'openai') return onBaseUrl(at, key, facts, ctx, cors);
  const route = grantedRoute(at, key, ctx);
  // Not told in the route's dialect: whether a deployment of another project exists, and what it serves (SPEC §9).
  if (route instanceof Error) return refusal(route, early(facts, ctx), cors, at.route, key);
  // grantedRoute refused a path without the deployment form, so `rest` is set.
  const rest = at.rest!;
  const check = kindRules(route, rest, at.search, facts, key, ctx);
  if (check instanceof Error) return refusal(check, at.dialect, cors, route, key);
  return limit(
    {
      ok: true,
      kind: 'route',
      route,
      key,
      upstreamPath: rest + at.search,
      check,
      dialect: at.dialect,
      project: at.project!,
      headers: cors,
      charge: undefined,
    },
    ctx,
    facts.now,
  );
}

/**
 * Steps 1-2: a head or method after which nothing can be trusted is refused first, in the dialect its target reads as
 * (an OpenAI SDK shows only an OpenAI error's message), with an allowed origin's CORS headers (SPEC §5: a page can read
 * its 431). Undefined: the head and method are fine.
 */
function headAndMethod(facts: RequestFacts, ctx: AdmitContext): Refused | undefined {
  let error: GatewayError;
  // A head that cannot be trusted, or a body sent on terms the gateway does not keep: the connection closes after.
  let close = true;
  if (facts.headProblem) error = facts.headProblem;
  else if (facts.expectation !== undefined)
    error = gatewayError('expectation_failed', `Expect: ${facts.expectation} is not supported (only 100-continue)`);
  else if (facts.method === 'TRACE' || facts.method === 'TRACK') {
    // TRACE would reflect the request (cookies included) back: never forwarded.
    error = gatewayError('method_not_allowed', `${facts.method} is not allowed`, { allow: ALLOWED_METHODS });
    close = false;
  } else return undefined;
  const cors = responseCorsList(ctx.cors, facts.origin) ?? NO_HEADERS;
  return refusal(error, early(facts, ctx), cors, undefined, undefined, close);
}

/** Step 3: a preflight carries no key, so it is answered from the CORS settings alone. */
function preflight(facts: RequestFacts, ctx: AdmitContext): Preflight {
  return { ok: true, kind: 'preflight', headers: preflightHeaderList(ctx.cors, facts.origin, facts.acrHeaders) };
}

/**
 * Steps 5-6, the key: its record, or the refusal's error. A failure counts against the address; past the failed-auth
 * limit it is 429 instead of 401 (a valid key is served even from a throttled address: one NAT can hide many clients).
 */
function authenticate(facts: RequestFacts, ctx: AdmitContext): ApiKeyRecord | GatewayError {
  const auth = parseAuthorization(facts.authorization);
  const verified = 'failure' in auth ? auth : verifyKey(ctx.table.keys, auth.key, facts.now);
  if (!('failure' in verified)) return verified.record;
  ctx.counters.authFailure(verified.failure);
  return (facts.client !== undefined ? throttle(facts.client, ctx) : undefined) ?? authError(verified.failure);
}

/**
 * Step 7, the grant, then the deployment: the route `at` names, or the refusal's error. A key that does not grant the
 * project gets the same 403 whether the deployment exists or not.
 */
function grantedRoute(at: Located, key: ApiKeyRecord, ctx: AdmitContext): Route | GatewayError {
  const route = at.route;
  // A legacy Host names its project, and the 403 names it as the Host wrote it (as /v1/<project>/... does the path's).
  const named = at.hostProject ?? at.project;
  if (at.hostProject !== undefined && !grantsProject(key, at.hostProject, route?.namespace))
    return projectForbidden(key, named, ctx);
  // A legacy Host that names no deployment falls back to the path, for deployments the key may use only: for one it
  // may not, the answer is the unknown host's 404, as when the path names nothing (a 403 would tell that it exists).
  const unknownHost =
    at.unknownHost ??
    (at.hostFallback !== undefined && at.project !== undefined && !grantsProject(key, at.project, route?.namespace)
      ? at.hostFallback
      : undefined);
  if (unknownHost !== undefined)
    return gatewayError(
      'not_found',
      `no deployment is served at host "${unknownHost}": legacy hostnames are <deployment>.<project>.${ctx.table.serverlessDomain} of a deployment that is served`,
    );
  if (at.project === undefined || at.rest === undefined)
    return gatewayError(
      'not_found',
      'no deployment at this path: deployments are served at /v1/<project>/<deployment>/...',
    );
  if (!grantsProject(key, at.project, route?.namespace)) return projectForbidden(key, named, ctx);
  return route ?? gatewayError('not_found', `deployment "${at.deployment}" not found in project "${at.project}"`);
}

function projectForbidden(key: ApiKeyRecord, project: string | undefined, ctx: AdmitContext): GatewayError {
  ctx.counters.authFailure('forbidden');
  return gatewayError('project_forbidden', `API key "${key.name}" does not grant access to project "${project}"`);
}

/** Step 8, the kind's rules: how the body is to be checked, or the refusal's error. */
function kindRules(
  route: Route,
  rest: string,
  search: string,
  facts: RequestFacts,
  key: ApiKeyRecord,
  ctx: AdmitContext,
): BodyCheck | GatewayError {
  const suffix = checkSuffix(route, facts.method, rest, facts.contentType);
  if (!('check' in suffix)) return suffix;
  if (facts.upgrade && route.kind === 'predictive')
    return gatewayError('not_found', 'predictive deployments do not accept upgrade (websocket) requests');
  // A `model` in the query (a realtime websocket's, or any request's) is checked like a body's: naming another
  // deployment's model on a shared backend is 403.
  if (route.kind === 'llm' && search.length > 1 && hasModelParam(search)) {
    for (const m of new URLSearchParams(search).getAll('model')) {
      const forbidden = modelForbidden(ctx.table, route, m, key);
      if (forbidden) {
        ctx.counters.authFailure('forbidden');
        return forbidden;
      }
    }
  }
  return suffix.check;
}

/**
 * Steps 7-9 on the OpenAI base URL, where `model` names the deployment: in the body, read later (admitModel finishes
 * the admission then), or in the query. The key's buckets are taken now, before the body is read or decoded.
 */
function onBaseUrl(
  at: OnBaseUrl,
  key: ApiKeyRecord,
  facts: RequestFacts,
  ctx: AdmitContext,
  cors: string[],
): Admission | Promise<Admission> {
  if (at.modelId instanceof Error) return refusal(at.modelId, 'openai', cors, undefined, key);
  const b: ByModel = {
    ok: true,
    kind: 'by-model',
    key,
    rest: at.rest,
    search: at.search,
    dialect: 'openai',
    modelId: at.modelId,
    queryRoute: undefined,
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
  const error = perSecond(key, facts.now, ctx);
  if (error) return refusal(error, 'openai', cors, undefined, key);
  return perMinute(b, ctx.perMinute.specs(undefined, key), ctx);
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
    return refusal(route, 'openai', b.headers, undefined, b.key);
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

/** Step 9, limits: the key's per-second bucket, then the budgets, then the per-minute buckets. */
function limit(
  a: Accepted,
  ctx: Pick<AdmitContext, 'perSecond' | 'perMinute' | 'counters' | 'budgets'>,
  now: number,
): Accepted | Refused | Promise<Accepted | Refused> {
  const error = perSecond(a.key, now, ctx);
  if (error) return refusal(error, a.dialect, a.headers, a.route, a.key);
  return andThen(budgets(a, ctx), (x) => perMinute(x, ctx.perMinute.specs(x.route, x.key), ctx));
}

/** Step 9, per second: the key's bucket; its 429 when empty (counted), else undefined. */
function perSecond(
  key: ApiKeyRecord,
  now: number,
  ctx: Pick<AdmitContext, 'perSecond' | 'counters'>,
): GatewayError | undefined {
  const error = ctx.perSecond.take(key, now);
  if (error) ctx.counters.rateLimited({ scope: 'key', kind: 'requests', reason: 'per_second' });
  return error;
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
      countBudgetRefusal(d.refusing, ctx);
      return refusal(d.error, a.dialect, a.headers, a.route, a.key);
    }
    const headers = a.headers.slice();
    for (const [k, v] of Object.entries(d.headers)) headers.push(k, v);
    return copyWith(a, { headers, budget: d.charge });
  };
  const d = ctx.budgets!.decide(specs);
  return d instanceof Promise ? d.then(apply) : apply(d);
}

function countBudgetRefusal(refusing: readonly BudgetSpec[], ctx: Pick<AdmitContext, 'counters'>): void {
  for (const s of refusing) {
    const kind = (s.limit.tokens ?? 0) > 0 ? ('tokens' as const) : ('cost' as const);
    ctx.counters.rateLimited({ scope: s.scope, kind, reason: 'budget' });
  }
}

/**
 * A request admitted a while ago whose turn in the fair queue came: its 429 insufficient_quota when a budget it passed
 * ran out while it waited (SPEC §14: the check is made before the body is forwarded, and a queue may hold a request
 * for maxWaitSeconds), counted as admission's refusals are; `headers`: the answer's lines so far, without the budget
 * figures of its admission (the refusal carries the new ones).
 */
export function budgetRunOut(
  a: Accepted | undefined,
  headers: readonly string[],
  ctx: Pick<AdmitContext, 'budgets' | 'counters'>,
): { error: GatewayError; headers: string[] } | undefined {
  const d = a?.budget && ctx.budgets?.runOut(a.budget);
  if (!d) return undefined;
  countBudgetRefusal(d.refusing, ctx);
  const kept: string[] = [];
  for (let i = 0; i < headers.length; i += 2)
    if (!headers[i].startsWith('x-servegate-budget-')) kept.push(headers[i], headers[i + 1]);
  return { error: d.error, headers: kept };
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
      return refusal(dec.error, a.dialect, a.headers, a.kind === 'route' ? a.route : undefined, a.key);
    }
    const charge =
      a.charge && dec.charge ? { tokens: [...a.charge.tokens, ...dec.charge.tokens] } : (a.charge ?? dec.charge);
    return copyWith(a, { headers: withRateHeaders(a.headers, dec.headers), charge }) as T;
  };
  return decision instanceof Promise ? decision.then(apply) : apply(decision);
}

/** Per kind, the x-ratelimit-* names: limit, remaining, reset. */
const RATE_HEADERS = ['requests', 'tokens'].map((kind) =>
  ['limit', 'remaining', 'reset'].map((p) => `x-ratelimit-${p}-${kind}`),
);

/** `list` with the rate-limit headers of `add`; where both report a kind, the one with less remaining stays. */
function withRateHeaders(list: readonly string[], add: Record<string, string>): string[] {
  const out = list.slice();
  for (const names of RATE_HEADERS) {
    const remaining = add[names[1]];
    if (remaining === undefined) continue;
    const mine = headerValue(out, names[1]);
    if (mine !== undefined && Number(mine) <= Number(remaining)) continue;
    for (const name of names) setHeader(out, name, add[name]);
  }
  return out;
}

/** A refusal: every one is made here, so that all have one shape (one hidden class where they are read). */
function refusal(
  error: GatewayError,
  dialect: Dialect,
  headers: string[],
  route?: Route,
  key?: ApiKeyRecord,
  close = false,
): Refused {
  return { ok: false, kind: 'refused', error, dialect, route, key, close, headers };
}
