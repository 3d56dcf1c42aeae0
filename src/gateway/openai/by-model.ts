// The one OpenAI base URL (SPEC §9): `<publicUrl>/openai/v1` reaches every LLM deployment a key is granted. The
// body's `model` ("<project>/<deployment>", or the bare deployment name when it is unambiguous among the key's
// projects) picks the deployment and is rewritten to the name the backend serves; `GET /openai/v1/models` lists what
// the key may use. Plain functions of the table, the key and the request body.
import { isObject } from '../../kube/objects.js';
import type { ApiKeyRecord, Route, RouteTable } from '../../routing/types.js';
import { grantsProject } from '../admit/auth.js';
import { gatewayError, type GatewayError } from '../http/errors.js';
import { appendMember, memberSpan, objectLayout, replaceSpan } from './json-members.js';

/** The path segments of the base URL. */
export const BASE_SEGMENTS = ['openai', 'v1'] as const;

/** OpenAI routes whose streams report usage only when `stream_options.include_usage` asks for it. */
const USAGE_OPTION_ROUTES = new Set(['/v1/chat/completions', '/v1/completions']);

/** Per table: LLM routes by deployment name (a request with a bare name looks up one list, not every route). */
const llmIndexes = new WeakMap<RouteTable, Map<string, Route[]>>();

function llmIndex(table: RouteTable): Map<string, Route[]> {
  let idx = llmIndexes.get(table);
  if (!idx) {
    idx = new Map();
    for (const r of table.routes) {
      if (r.kind !== 'llm') continue;
      const list = idx.get(r.deployment);
      if (list) list.push(r);
      else idx.set(r.deployment, [r]);
    }
    llmIndexes.set(table, idx);
  }
  return idx;
}

const granted = (key: ApiKeyRecord, r: Route): boolean => grantsProject(key, r.project, r.namespace);

/** The model id of a deployment on the base URL. */
export function modelId(r: Route): string {
  return `${r.project}/${r.deployment}`;
}

/** The name the backend serves: `spec.modelName`, else the deployment name. */
export function servedModel(r: Route): string {
  return r.modelName ?? r.deployment;
}

function modelObject(r: Route): Record<string, unknown> {
  return { id: modelId(r), object: 'model', created: 0, owned_by: r.project };
}

/** `GET /openai/v1/models`: OpenAI's list object, one entry per LLM deployment the key may use (oldest first). */
export function modelsList(table: RouteTable, key: ApiKeyRecord): string {
  const data: Record<string, unknown>[] = [];
  for (const r of table.routes) if (r.kind === 'llm' && granted(key, r)) data.push(modelObject(r));
  return JSON.stringify({ object: 'list', data });
}

/** `GET /openai/v1/models/<id>`: the model object, or the error selectModel gives. */
export function modelRetrieve(table: RouteTable, key: ApiKeyRecord, id: string): string | GatewayError {
  const r = selectModel(table, key, id);
  return r instanceof Error ? r : JSON.stringify(modelObject(r));
}

const LIST_HINT = 'GET /openai/v1/models lists the models this key may use';

/** The deployment a `model` value names, or the OpenAI-style error that says why there is none. */
export function selectModel(table: RouteTable, key: ApiKeyRecord, model: unknown): Route | GatewayError {
  if (model === undefined || model === null || model === '') {
    return gatewayError(
      'invalid_body',
      `you must provide a "model": "<project>/<deployment>" names the deployment (${LIST_HINT})`,
    );
  }
  if (typeof model !== 'string')
    return gatewayError(
      'invalid_body',
      `"model" must be a string "<project>/<deployment>", got ${JSON.stringify(model)}`,
    );
  const shown = JSON.stringify(model.length > 300 ? `${model.slice(0, 300)}...` : model);
  const slash = model.indexOf('/');
  if (slash !== -1) {
    const project = model.slice(0, slash);
    const deployment = model.slice(slash + 1);
    const route =
      project && deployment && !deployment.includes('/') ? table.byPath.get(`${project}/${deployment}`) : undefined;
    // As on the deployment URLs: a project the key does not grant is 403 whether or not the deployment exists.
    if (project && !grantsProject(key, project, route?.namespace)) {
      return gatewayError(
        'model_forbidden',
        `API key "${key.name}" may not use model ${shown}: it does not grant project "${project}"`,
      );
    }
    if (!route || route.kind !== 'llm')
      return gatewayError('model_not_found', `the model ${shown} does not exist (${LIST_HINT})`);
    return route;
  }
  const named = llmIndex(table).get(model) ?? [];
  const mine = named.filter((r) => granted(key, r));
  if (mine.length === 1) return mine[0];
  if (mine.length > 1) {
    const ids = mine.map((r) => `"${modelId(r)}"`).join(', ');
    return gatewayError('invalid_body', `the model ${shown} is ambiguous: it names ${ids}; use one of those`);
  }
  if (named.length > 0) return gatewayError('model_forbidden', `API key "${key.name}" may not use model ${shown}`);
  return gatewayError('model_not_found', `the model ${shown} does not exist (${LIST_HINT})`);
}

export interface PreparedBody {
  route: Route;
  body: Buffer;
  /** The gateway asked the backend for a usage chunk the client did not ask for: it is taken out of the stream. */
  stripUsage: boolean;
}

/**
 * A JSON body sent to the base URL: the deployment its `model` names, and the body to forward — `model` rewritten
 * to the served name, and `stream_options.include_usage` added to a streamed (chat) completion that lacks it, so
 * that its tokens are counted. Only those bytes change; the rest is forwarded as sent.
 */
export function prepareBody(
  table: RouteTable,
  d: { key: ApiKeyRecord; rest: string },
  raw: Buffer,
): PreparedBody | GatewayError {
  if (raw.length === 0) return selectModel(table, d.key, undefined) as GatewayError;
  let doc: unknown;
  try {
    doc = JSON.parse(raw.toString('utf8'));
  } catch (err) {
    return gatewayError('invalid_json', `request body is not valid JSON: ${(err as Error).message}`);
  }
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) {
    return gatewayError('invalid_body', 'the request body must be a JSON object with a "model"');
  }
  const o = doc as Record<string, unknown>;
  // Two "model" members: the gateway would route by the last (as JSON.parse reads it) while a backend that keeps the
  // first would serve another model under this key's grant. Ambiguous bodies are refused.
  if (objectLayout(raw)!.members.filter((m) => m.name === 'model').length > 1) {
    return gatewayError('invalid_body', 'the request body has more than one "model" member; send exactly one');
  }
  const route = selectModel(table, d.key, o.model);
  if (route instanceof Error) return route;
  let body = raw;
  const served = servedModel(route);
  if (o.model !== served) {
    const span = memberSpan(objectLayout(body)!, 'model')!;
    body = replaceSpan(body, span.start, span.end, JSON.stringify(served));
  }
  let stripUsage = false;
  const so = o.stream_options;
  const asked = isObject(so) && so.include_usage === true;
  if (
    o.stream === true &&
    !asked &&
    USAGE_OPTION_ROUTES.has(d.rest) &&
    (so === undefined || so === null || isObject(so))
  ) {
    const layout = objectLayout(body)!;
    const value = JSON.stringify({ ...(isObject(so) ? so : {}), include_usage: true });
    const span = so === undefined ? undefined : memberSpan(layout, 'stream_options');
    body = span ? replaceSpan(body, span.start, span.end, value) : appendMember(body, layout, 'stream_options', value);
    stripUsage = true;
  }
  return { route, body, stripUsage };
}
