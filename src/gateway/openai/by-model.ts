// The OpenAI base URL shared by all LLM deployments (SPEC §9), `<publicUrl>/openai/v1`: the body's `model`
// (`<project>/<deployment>`, or a bare name unambiguous among the key's projects) picks the deployment.
import type { ApiKeyRecord, Route, RouteTable } from '../../routing/types.js';
import { grantsProject } from '../../routing/names.js';
import { gatewayError, type GatewayError } from '../http/errors.js';
import { editLlmBody, llmMembers, modelValue, type LlmBody, type LlmMembers } from './llm-body.js';
import { copyWith } from '../../same-shape.js';

/** The path segments of the base URL. */
export const BASE_SEGMENTS = ['openai', 'v1'] as const;

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
  const notFound = gatewayError('model_not_found', `the model ${shown} does not exist (${LIST_HINT})`);
  // A bare name that only projects the key does not grant have: answered exactly like an unknown one, so that no
  // answer tells which other projects exist; marked, so that it counts as a failed authorisation.
  if (named.length > 0) HIDDEN.add(notFound);
  return notFound;
}

/** Not-found answers that hide a model the key is not granted (they count toward the failed-auth throttle). */
export const HIDDEN = new WeakSet<GatewayError>();

export interface PreparedBody extends LlmBody {
  route: Route;
  /** Where the members the gateway reads are in the body (before the edits). */
  members: LlmMembers;
}

/** A JSON body sent to the base URL: the deployment its `model` names, and the body edited by llm-body.ts. */
export function prepareBody(
  table: RouteTable,
  d: { key: ApiKeyRecord; rest: string },
  raw: Buffer,
): PreparedBody | GatewayError {
  if (raw.length === 0) return selectModel(table, d.key, undefined) as GatewayError;
  // The spelling of "model" is checked before it picks a deployment: a "MODEL" member could name another.
  const members = llmMembers(raw);
  if (members instanceof Error) return members;
  if (!members.object) return gatewayError('invalid_body', 'the request body must be a JSON object with a "model"');
  const route = selectModel(table, d.key, modelValue(raw, members));
  if (route instanceof Error) return route;
  return copyWith(editLlmBody(raw, members, d.rest, servedModel(route)), { route, members });
}
