// Where a request points before its key is known (route by legacy Host or /v1/<project>/<deployment>, the rest of
// the path, the OpenAI base URL, the error dialect): a plain function of the target, the Host and the table.
import type { Route, RouteTable } from '../../routing/types.js';
import { gatewayError, type Dialect, type GatewayError } from '../http/errors.js';
import { BASE_SEGMENTS } from '../openai/by-model.js';
import { joinPath, parseTarget } from '../http/path.js';
import { dialectOf } from './kind-rules.js';

/** The path names a deployment (found or not) or a legacy host. */
export interface Located {
  at: 'deployment';
  route: Route | undefined;
  /** Project as the path wrote it (or the route's, for host routing); undefined: no /v1/<project>/<deployment> form. */
  project: string | undefined;
  /** Deployment segment as the path wrote it. */
  deployment: string | undefined;
  /** Path after the deployment prefix (undefined when the path has no deployment form). */
  rest: string | undefined;
  /** "?..." or "". */
  search: string;
  dialect: Dialect;
  /** A Host under the serverless domain that no deployment holds. */
  unknownHost: string | undefined;
  /** The project label of a Host under the serverless domain (`<deployment>.<project>.<domain>`), found or not. */
  hostProject: string | undefined;
  /** A legacy-form Host that no deployment holds, while the path found a deployment (path routing as a fallback). */
  hostFallback: string | undefined;
}

/** The OpenAI base URL shared by all deployments: the deployment is named later, by `model`. */
export interface OnBaseUrl {
  at: 'openai';
  /** The OpenAI path as a deployment URL would forward it: "/v1/chat/completions". */
  rest: string;
  search: string;
  dialect: 'openai';
  /** `GET /openai/v1/models/<id>`: the id asked for ('' for the list), or the error of a bad id. */
  modelId?: string | GatewayError;
}

export interface BadPath {
  at: 'bad-path';
  error: GatewayError;
  dialect: Dialect;
}

export type Location = Located | OnBaseUrl | BadPath;

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

/**
 * The error dialect from the target alone (`/openai/v1/...` and a deployment's `/v1/...` rest are OpenAI's), for
 * answers before the key is known to grant the deployment: they must not tell whether it exists or what it serves.
 */
export function guessDialect(url: string, host: string | undefined, serverlessDomain: string): Dialect {
  const q = url.indexOf('?');
  const path = q === -1 ? url : url.slice(0, q);
  if (path === '/openai/v1' || path.startsWith('/openai/v1/')) return 'openai';
  if (underDomain(hostOnly(host), serverlessDomain)) return dialectOf(undefined, path);
  if (!path.startsWith('/v1/')) return 'kserve';
  const afterProject = path.indexOf('/', 4);
  const afterDeployment = afterProject === -1 ? -1 : path.indexOf('/', afterProject + 1);
  return afterDeployment === -1 ? 'kserve' : dialectOf(undefined, path.slice(afterDeployment));
}

/** `h` is a name under the serverless domain (`<...>.<domain>`); no string is made to tell. */
function underDomain(h: string | undefined, domain: string): h is string {
  return (
    h !== undefined &&
    domain !== '' &&
    h.length > domain.length + 1 &&
    h.charCodeAt(h.length - domain.length - 1) === 46 /* . */ &&
    h.endsWith(domain)
  );
}

/** The project label of a legacy hostname `<deployment>.<project>.<domain>` (undefined: not of that form). */
function hostProjectOf(h: string | undefined, serverlessDomain: string): string | undefined {
  if (!underDomain(h, serverlessDomain)) return undefined;
  const labels = h.slice(0, h.length - serverlessDomain.length - 1).split('.');
  return labels.length === 2 && labels[0] !== '' && labels[1] !== '' ? labels[1] : undefined;
}

export function locate(url: string, host: string | undefined, table: RouteTable): Location {
  // Legacy host routing first: its paths (/v1/models/...) would otherwise read as /v1/<project>/<deployment>.
  const h = hostOnly(host);
  let route = h ? table.byHost.get(h) : undefined;
  const viaHost = route !== undefined;
  // `GET /openai/v1/models/<project>%2F<deployment>` (how SDKs spell a model id with "/"): answered by the gateway
  // itself, never forwarded, so the encoded "/" that parseTarget refuses is read here.
  if (!route && url.startsWith(MODELS_PREFIX)) {
    const id = modelIdOf(url);
    return { at: 'openai', rest: '/v1/models', search: '', dialect: 'openai', modelId: id === '' ? undefined : id };
  }
  const target = parseTarget(url);
  if (!('segments' in target))
    return { at: 'bad-path', error: target, dialect: guessDialect(url, host, table.serverlessDomain) };

  let rest: string | undefined;
  let project: string | undefined;
  let deployment: string | undefined;
  if (route) {
    rest = joinPath(target.segments);
    project = route.project;
    deployment = route.deployment;
  } else {
    const s = target.segments;
    if (s.length >= 2 && s[0] === BASE_SEGMENTS[0] && s[1] === BASE_SEGMENTS[1])
      return { at: 'openai', rest: joinPath(s, 1), search: target.search, dialect: 'openai' };
    if (s.length >= 3 && s[0] === 'v1' && s[1] !== '' && s[2] !== '') {
      project = s[1];
      deployment = s[2];
      route = table.byPath.get(`${s[1]}/${s[2]}`);
      rest = joinPath(s, 3);
    }
  }
  // A Host under the serverless domain that no deployment holds, and a path that is no deployment's either: a legacy
  // call to a deployment that is not served (its path, /v1/models/<name>:predict, must not be read as project "models").
  const unknownHost = !route && underDomain(h, table.serverlessDomain) ? h : undefined;
  // The Host's project label, read only for a Host under the serverless domain (never for a path-routed request's).
  const hostProject = underDomain(h, table.serverlessDomain) ? hostProjectOf(h, table.serverlessDomain) : undefined;
  return {
    at: 'deployment',
    route,
    project,
    deployment,
    rest,
    search: target.search,
    dialect: dialectOf(route, rest),
    unknownHost,
    hostProject: viaHost || unknownHost !== undefined ? hostProject : undefined,
    hostFallback: !viaHost && route && hostProject !== undefined ? h : undefined,
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
