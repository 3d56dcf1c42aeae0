// The whole pre-forwarding decision for one request, as a plain function of request data, the table and the clock:
// which route, is the key good, may it use the project, is the suffix offered.
import type { ApiKeyRecord, Route, RouteTable } from '../../routing/types.js';
import { authError, grantsProject, parseAuthorization, verifyKey, type AuthFailure } from './auth.js';
import { gatewayError, type Dialect, type GatewayError } from '../http/errors.js';
import { BASE_SEGMENTS } from '../openai/by-model.js';
import { joinPath, parseTarget, type RequestTarget } from '../http/path.js';
import { checkSuffix, dialectOf, type BodyCheck } from './kind-rules.js';

export interface RequestFacts {
  method: string;
  url: string;
  host: string | undefined;
  authorization: string | string[] | undefined;
  contentType: string | undefined;
  now: number;
}

export interface Accepted {
  ok: true;
  byModel?: undefined;
  route: Route;
  key: ApiKeyRecord;
  /** Path and query to send upstream (prefix stripped; backend path prefix not yet added). */
  upstreamPath: string;
  check: BodyCheck;
  dialect: Dialect;
  /** Project name as the path wrote it (or the route's, for host routing). */
  project: string;
}

/**
 * A request on the one OpenAI base URL (SPEC §9), key checked: its deployment is named by the body's `model`, so the
 * route is chosen once the body is read (openai-base.ts), or the gateway answers itself (`/models`).
 */
export interface ByModel {
  ok: true;
  byModel: true;
  route?: undefined;
  key: ApiKeyRecord;
  /** The OpenAI path as a deployment URL would forward it: "/v1/chat/completions". */
  rest: string;
  /** "?..." or "". */
  search: string;
  dialect: 'openai';
  /** `GET /openai/v1/models/<id>`: the model id asked for (it may hold an encoded "/"). */
  modelId?: string;
}

export interface Refused {
  ok: false;
  error: GatewayError;
  dialect: Dialect;
  route?: Route;
  /** Set for 401s, for the auth-failure metric. */
  authFailure?: AuthFailure;
  /** For 403s and later refusals: the key that was accepted. */
  key?: ApiKeyRecord;
}

/** Lower-cased host without port; undefined when absent. */
export function hostOnly(host: string | undefined): string | undefined {
  if (!host) return undefined;
  let h = host.trim().toLowerCase();
  if (h.startsWith('[')) return h.slice(0, h.indexOf(']') + 1);
  const colon = h.indexOf(':');
  if (colon !== -1) h = h.slice(0, colon);
  return h.endsWith('.') ? h.slice(0, -1) : h;
}

const MODELS_PREFIX = '/openai/v1/models/';

export function decide(req: RequestFacts, table: RouteTable): Accepted | ByModel | Refused {
  // Legacy host routing first: its paths (/v1/models/...) would otherwise read as /v1/<project>/<deployment>.
  const h = hostOnly(req.host);
  let route = h ? table.byHost.get(h) : undefined;
  // `GET /openai/v1/models/<project>%2F<deployment>` (how SDKs spell a model id with "/"): answered by the gateway
  // itself, never forwarded, so the encoded "/" that parseTarget refuses is read here.
  if (!route && req.url.startsWith(MODELS_PREFIX)) return byModel(req, table, undefined, modelIdOf(req.url));
  const target = parseTarget(req.url);
  if (!('segments' in target)) return { ok: false, error: target, dialect: 'kserve' };

  let rest: string | undefined;
  let project: string | undefined;
  if (route) {
    rest = joinPath(target.segments);
    project = route.project;
  } else {
    const s = target.segments;
    if (s.length >= 2 && s[0] === BASE_SEGMENTS[0] && s[1] === BASE_SEGMENTS[1]) return byModel(req, table, target);
    if (s.length >= 3 && s[0] === 'v1' && s[1] !== '' && s[2] !== '') {
      project = s[1];
      route = table.byPath.get(`${s[1]}/${s[2]}`);
      rest = joinPath(s, 3);
    }
  }
  // A Host under the serverless domain that no deployment holds, and a path that is no deployment's either: a legacy
  // call to a deployment that is not served (its path, /v1/models/<name>:predict, must not be read as project "models").
  const unknownHost =
    !route && h !== undefined && table.serverlessDomain !== '' && h.endsWith(`.${table.serverlessDomain}`);
  const dialect = dialectOf(route, rest);

  const auth = parseAuthorization(req.authorization);
  if ('failure' in auth)
    return { ok: false, error: authError(auth.failure), dialect, route, authFailure: auth.failure };
  const verified = verifyKey(table.keys, auth.key, req.now);
  if ('failure' in verified)
    return { ok: false, error: authError(verified.failure), dialect, route, authFailure: verified.failure };
  const key = verified.record;

  if (unknownHost) {
    return {
      ok: false,
      dialect,
      key,
      error: gatewayError(
        'not_found',
        `no deployment is served at host "${h}": legacy hostnames are <deployment>.<project>.${table.serverlessDomain} of a deployment that is served`,
      ),
    };
  }
  if (project === undefined || rest === undefined) {
    return {
      ok: false,
      dialect,
      key,
      error: gatewayError(
        'not_found',
        'no deployment at this path: deployments are served at /v1/<project>/<deployment>/...',
      ),
    };
  }
  if (!grantsProject(key, project, route?.namespace)) {
    return {
      ok: false,
      dialect,
      route,
      key,
      error: gatewayError('project_forbidden', `API key "${key.name}" does not grant access to project "${project}"`),
    };
  }
  if (!route) {
    const deployment = target.segments[2];
    return {
      ok: false,
      dialect,
      key,
      error: gatewayError('not_found', `deployment "${deployment}" not found in project "${project}"`),
    };
  }
  const suffix = checkSuffix(route, req.method, rest, req.contentType);
  if (!('check' in suffix)) return { ok: false, error: suffix, dialect, route, key };
  return { ok: true, route, key, upstreamPath: rest + target.search, check: suffix.check, dialect, project };
}

/** The base URL: the key is checked here as anywhere; the deployment is chosen later, by `model`. */
function byModel(
  req: RequestFacts,
  table: RouteTable,
  target: RequestTarget | undefined,
  modelId?: string | GatewayError,
): ByModel | Refused {
  const auth = parseAuthorization(req.authorization);
  if ('failure' in auth)
    return { ok: false, error: authError(auth.failure), dialect: 'openai', authFailure: auth.failure };
  const verified = verifyKey(table.keys, auth.key, req.now);
  if ('failure' in verified)
    return { ok: false, error: authError(verified.failure), dialect: 'openai', authFailure: verified.failure };
  const key = verified.record;
  if (modelId instanceof Error) return { ok: false, error: modelId, dialect: 'openai', key };
  if (modelId === '') return { ok: true, byModel: true, key, rest: '/v1/models', search: '', dialect: 'openai' };
  if (modelId !== undefined)
    return { ok: true, byModel: true, key, rest: '/v1/models', search: '', dialect: 'openai', modelId };
  return {
    ok: true,
    byModel: true,
    key,
    rest: joinPath(target!.segments, 1),
    search: target!.search,
    dialect: 'openai',
  };
}

/** The model id in `/openai/v1/models/<id>[?...]`, percent-decoded. */
function modelIdOf(url: string): string | GatewayError {
  const q = url.indexOf('?');
  const raw = url.slice(MODELS_PREFIX.length, q === -1 ? undefined : q);
  let id: string;
  try {
    id = decodeURIComponent(raw);
  } catch {
    return gatewayError('bad_path', 'the path has an invalid percent-encoding');
  }
  // eslint-disable-next-line no-control-regex -- control characters are exactly what is refused here
  if (/[\x00-\x20\x7f]/.test(id))
    return gatewayError('bad_path', 'control characters or spaces are not allowed in the path');
  return id;
}
