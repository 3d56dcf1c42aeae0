// What each kind of deployment accepts (SPEC §3): suffixes, methods, body shapes; and the error dialect of a route.
import type { Route } from '../../routing/types.js';
import { gatewayError, type Dialect, type GatewayError } from '../http/errors.js';
import { nameFilter, scanJson, type MemberSpan } from '../http/json-scan.js';
import { isFormData } from '../openai/form-model.js';

/** How the request body must be checked before it is forwarded. */
/** `form`: an LLM route's multipart/form-data upload, whose `model` field is checked. */
export type BodyCheck = 'none' | 'predict' | 'classify' | 'regress' | 'json' | 'infer' | 'form';

const PREDICTIVE_VERB = /^\/v1\/models\/([^/:]+):([A-Za-z]+)$/;
const PREDICTIVE_META = /^\/v1\/models\/([^/:]+)\/?$/;

/** Decides whether the suffix (path after the deployment prefix) is one the deployment's server offers. */
export function checkSuffix(
  route: Route,
  method: string,
  rest: string,
  contentType: string | undefined,
): { check: BodyCheck } | GatewayError {
  switch (route.kind) {
    case 'python':
      return { check: 'none' };
    case 'llm': {
      if (!rest.startsWith('/v1/')) {
        return gatewayError(
          'not_found',
          `no route ${method} ${rest}: LLM deployments serve the OpenAI API under ${'/v1/'} (e.g. /v1/chat/completions, /v1/completions, /v1/models)`,
        );
      }
      // A form upload names its model in a form field, read before it goes on (openai/form-model.ts).
      return { check: isFormData(contentType) ? 'form' : isBinaryContentType(contentType) ? 'none' : 'json' };
    }
    case 'predictive': {
      if (route.protocol === 'v2') return checkV2(route, method, rest, contentType);
      // Matched without a match array or substrings for the path a client uses every time (/v1/models/<name>:<verb>,
      // the name not percent-encoded); the refusals take the pieces out.
      if (PREDICTIVE_VERB.test(rest)) {
        const colon = rest.indexOf(':', MODELS.length);
        const pct = rest.indexOf('%', MODELS.length);
        const plain = pct === -1 || pct > colon;
        const served = route.modelName;
        const sameName = plain
          ? served !== undefined && colon - MODELS.length === served.length && rest.startsWith(served, MODELS.length)
          : safeDecode(rest.slice(MODELS.length, colon)) === served;
        if (!sameName) {
          const name = safeDecode(rest.slice(MODELS.length, colon));
          return gatewayError(
            'not_found',
            `model "${name}" is not served here: this deployment serves model "${served}" at /v1/models/${served}:<verb> (${offeredVerbs(route)})`,
          );
        }
        const verb = verbAt(route.verbs, rest, colon + 1);
        if (verb === undefined) {
          return gatewayError(
            'unknown_verb',
            `verb ":${rest.slice(colon + 1)}" is not offered by the ${serverName(route)} model server; it offers ${offeredVerbs(route)}`,
          );
        }
        if (method !== 'POST') {
          return gatewayError('method_not_allowed', `${method} is not allowed on :${verb}; use POST`, {
            allow: 'POST',
          });
        }
        return checkOf(verb);
      }
      const meta = PREDICTIVE_META.exec(rest);
      if (meta && safeDecode(meta[1]) === route.modelName && (method === 'GET' || method === 'HEAD'))
        return { check: 'none' };
      return gatewayError(
        'not_found',
        `no route ${method} ${rest}: this ${serverName(route)} deployment accepts POST /v1/models/${route.modelName}:<verb> with ${offeredVerbs(route)}`,
      );
    }
  }
}

const MODELS = '/v1/models/';

/** The texts of the refusals, built only for a refusal. */
const offeredVerbs = (route: Route): string => route.verbs.map((v) => `:${v}`).join(', ');
const serverName = (route: Route): string => route.modelServer ?? 'model';

/** The verb of `verbs` that `rest` ends with from `at` on, compared in place. */
function verbAt(verbs: readonly string[], rest: string, at: number): string | undefined {
  for (const v of verbs) if (v.length === rest.length - at && rest.startsWith(v, at)) return v;
  return undefined;
}

/** One result object per verb (the verbs are the routes', a handful), not one per request. */
const CHECKS = new Map<string, { check: BodyCheck }>();
function checkOf(verb: string): { check: BodyCheck } {
  let c = CHECKS.get(verb);
  if (c === undefined) CHECKS.set(verb, (c = Object.freeze({ check: verb as BodyCheck })));
  return c;
}

// The Open Inference Protocol's REST routes (SPEC §10): model paths, with an optional /versions/<v>.
const V2_MODEL = /^\/v2\/models\/([^/]+)(?:\/versions\/([^/]+))?(\/infer|\/ready)?\/?$/;
const V2_SERVER = /^\/v2(?:\/health\/(?:live|ready))?\/?$/;

function checkV2(
  route: Route,
  method: string,
  rest: string,
  contentType: string | undefined,
): { check: BodyCheck } | GatewayError {
  const name = route.modelName ?? '<model>';
  const offered = (): string =>
    `POST /v2/models/${name}/infer, GET /v2/models/${name}, GET /v2/models/${name}/ready, GET /v2/health/live, GET /v2/health/ready`;
  const m = V2_MODEL.exec(rest);
  const get = method === 'GET' || method === 'HEAD';
  if (m) {
    const asked = safeDecode(m[1]);
    if (route.modelName !== undefined && asked !== route.modelName) {
      return gatewayError(
        'not_found',
        `model "${asked}" is not served here: this deployment serves model "${route.modelName}" (${offered()})`,
      );
    }
    if (m[3] === '/infer') {
      if (method !== 'POST')
        return gatewayError('method_not_allowed', `${method} is not allowed on /infer; use POST`, { allow: 'POST' });
      // The binary tensor extension sends a JSON header then raw bytes (application/octet-stream): passed on as it is.
      return { check: isBinaryContentType(contentType) ? 'none' : 'infer' };
    }
    if (get) return { check: 'none' };
    return gatewayError('method_not_allowed', `${method} is not allowed on ${rest}; use GET`, { allow: 'GET, HEAD' });
  }
  if (V2_SERVER.test(rest)) {
    if (get) return { check: 'none' };
    return gatewayError('method_not_allowed', `${method} is not allowed on ${rest}; use GET`, { allow: 'GET, HEAD' });
  }
  return gatewayError(
    'not_found',
    `no route ${method} ${rest}: this deployment speaks the Open Inference Protocol (V2): ${offered()}`,
  );
}

function safeDecode(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

/** Uploads the OpenAI API takes as they are (files, audio, images); every other LLM body must be JSON. */
export function isBinaryContentType(ct: string | undefined): boolean {
  if (!ct) return false;
  const base = ct.split(';', 1)[0].trim().toLowerCase();
  return (
    base.startsWith('multipart/') ||
    base === 'application/octet-stream' ||
    base.startsWith('audio/') ||
    base.startsWith('image/') ||
    base.startsWith('video/')
  );
}

const PREDICTIVE_MEMBERS = ['instances', 'inputs', 'examples'];
const PREDICTIVE_NAMES = nameFilter(PREDICTIVE_MEMBERS, (n) => PREDICTIVE_MEMBERS.includes(n));

/** JSON.parse's reading: the last member of a name holds the value. */
function lastMember(members: readonly MemberSpan[], name: string): MemberSpan | undefined {
  for (let i = members.length - 1; i >= 0; i--) if (members[i].name === name) return members[i];
  return undefined;
}

const isArray = (body: Buffer, m: MemberSpan | undefined): boolean => m !== undefined && body[m.start] === 0x5b;

/** Validates a buffered body; undefined when it may be forwarded. */
export function validateBody(check: BodyCheck, body: Buffer): GatewayError | undefined {
  if (check === 'none' || check === 'form') return undefined;
  if (check === 'json' && body.length === 0) return undefined;
  // Scanned, not parsed (http/json-scan.ts): a parsed tree could cost 20 times the body.
  const doc = scanJson(body, check === 'json' ? undefined : PREDICTIVE_NAMES);
  if (doc instanceof Error) return doc;
  if (check === 'json') return undefined;
  const members = doc.members;
  if (check === 'infer') {
    if (doc.first !== 0x7b || !isArray(body, lastMember(members, 'inputs')))
      return gatewayError('invalid_body', 'a V2 /infer body must be a JSON object with an "inputs" array');
    return undefined;
  }
  if (doc.first !== 0x7b) {
    return gatewayError('invalid_body', 'request body must be a JSON object with "instances" or "inputs"');
  }
  const inputs = lastMember(members, 'inputs');
  const hasInstances = isArray(body, lastMember(members, 'instances'));
  const hasInputs = inputs !== undefined && body[inputs.start] !== 0x6e; // TF Serving's columnar format allows a scalar, list or object
  const hasExamples = isArray(body, lastMember(members, 'examples'));
  if (check === 'predict' && !hasInstances && !hasInputs) {
    return gatewayError('invalid_body', 'a :predict body needs "instances" (a list) or "inputs"');
  }
  if ((check === 'classify' || check === 'regress') && !hasInstances && !hasInputs && !hasExamples) {
    return gatewayError('invalid_body', `a :${check} body needs "examples", "instances" (a list) or "inputs"`);
  }
  return undefined;
}

/** The error dialect of a request: OpenAI's error object on OpenAI routes, KServe's elsewhere. */
export function dialectOf(route: Route | undefined, rest: string | undefined): Dialect {
  if (route) return route.kind === 'llm' ? 'openai' : 'kserve';
  // Unknown deployment: guess from the suffix so an OpenAI SDK still shows the message.
  return rest !== undefined && rest.startsWith('/v1/') && !rest.includes(':') ? 'openai' : 'kserve';
}
