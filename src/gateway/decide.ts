// The whole pre-forwarding decision for one request, as a plain function of request data, the table and the clock:
// which route, is the key good, may it use the project, is the suffix offered.
import type { ApiKeyRecord, Route, RouteTable } from '../routing/types.js';
import { authError, grantsProject, parseAuthorization, verifyKey, type AuthFailure } from './auth.js';
import { gatewayError, type Dialect, type GatewayError } from './errors.js';
import { joinPath, parseTarget } from './path.js';
import { checkSuffix, dialectOf, type BodyCheck } from './protocol.js';

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
  route: Route;
  key: ApiKeyRecord;
  /** Path and query to send upstream (prefix stripped; backend path prefix not yet added). */
  upstreamPath: string;
  check: BodyCheck;
  dialect: Dialect;
  /** Project name as the path wrote it (or the route's, for host routing). */
  project: string;
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

export function decide(req: RequestFacts, table: RouteTable): Accepted | Refused {
  const target = parseTarget(req.url);
  if (!('segments' in target)) return { ok: false, error: target, dialect: 'kserve' };

  // Legacy host routing first: its paths (/v1/models/...) would otherwise read as /v1/<project>/<deployment>.
  const h = hostOnly(req.host);
  let route = h ? table.byHost.get(h) : undefined;
  let rest: string | undefined;
  let project: string | undefined;
  if (route) {
    rest = joinPath(target.segments);
    project = route.project;
  } else {
    const s = target.segments;
    if (s.length >= 3 && s[0] === 'v1' && s[1] !== '' && s[2] !== '') {
      project = s[1];
      route = table.byPath.get(`${s[1]}/${s[2]}`);
      rest = joinPath(s, 3);
    }
  }
  const dialect = dialectOf(route, rest);

  const auth = parseAuthorization(req.authorization);
  if ('failure' in auth) return { ok: false, error: authError(auth.failure), dialect, route, authFailure: auth.failure };
  const verified = verifyKey(table.keys, auth.key, req.now);
  if ('failure' in verified) return { ok: false, error: authError(verified.failure), dialect, route, authFailure: verified.failure };
  const key = verified.record;

  if (project === undefined || rest === undefined) {
    return {
      ok: false,
      dialect,
      key,
      error: gatewayError('not_found', 'no deployment at this path: deployments are served at /v1/<project>/<deployment>/...'),
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
    return { ok: false, dialect, key, error: gatewayError('not_found', `deployment "${deployment}" not found in project "${project}"`) };
  }
  const suffix = checkSuffix(route, req.method, rest, req.contentType);
  if (!('check' in suffix)) return { ok: false, error: suffix, dialect, route, key };
  return { ok: true, route, key, upstreamPath: rest + target.search, check: suffix.check, dialect, project };
}
