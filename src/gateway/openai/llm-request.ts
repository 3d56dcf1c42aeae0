// What an LLM request adds to its exchange: the body read for `model`, the prompt's estimate and key, the usage asked
// for on the client's behalf, the body's rewrite for a fallback. Made only for LLM routes and the base URL.
import type { ApiKeyRecord, Route, RouteTable } from '../../routing/types.js';
import { gatewayError, type GatewayError } from '../http/errors.js';
import { modelId, modelRetrieve, modelsList, selectModel, servedModel } from './by-model.js';
import { formModel, isFormData, withFormModel, type FormModel } from './form-model.js';
import { editLlmBody, estimatePrompt, llmMembers, modelForbidden, modelValue, type LlmMembers } from './llm-body.js';
import { promptKey } from './prefix.js';

type PromptKey = NonNullable<ReturnType<typeof promptKey>>;

/** A request on the base URL as admission read it (admit/pipeline.ts's ByModel). */
export interface BaseUrlRequest {
  key: ApiKeyRecord;
  rest: string;
  modelId?: string;
  /** The deployment a `model` in the query names: the body's must agree. */
  queryRoute?: Route;
}

/** A request on a deployment's own URL as admission read it (admit/pipeline.ts's Accepted). */
export interface OwnUrlRequest {
  route: Route;
  key: ApiKeyRecord;
  upstreamPath: string;
  check: string;
}

export class LlmRequest {
  /** Usage the gateway asked for and the client did not: taken out of the answer. */
  stripUsage = false;
  /** Prompt tokens guessed from the body, charged when the answer reports no usage. */
  promptEstimate = 0;
  prefix: PromptKey | undefined;
  /** The body goes on decoded: its Content-Encoding no longer applies. */
  decoded = false;
  /** The decoded JSON body and its members, kept while a fallback may need the body with its own `model`. */
  private plain: Buffer | undefined;
  private members: LlmMembers | undefined;
  private path = '';
  private form: FormModel | undefined;
  private encoded = false;

  /** Kept for a fallback: its buffers stay reserved. */
  get keepsBody(): boolean {
    return this.plain !== undefined;
  }

  /** `GET /openai/v1/models[/<id>]`: the JSON answer or the refusal; undefined for any other base URL request. */
  models(table: RouteTable, base: BaseUrlRequest, method: string): string | GatewayError | undefined {
    if (base.modelId === undefined && base.rest !== '/v1/models' && base.rest !== '/v1/models/') return undefined;
    if (method !== 'GET' && method !== 'HEAD') {
      return gatewayError('method_not_allowed', `${method} is not allowed on /openai/v1/models; use GET`, {
        allow: 'GET, HEAD',
      });
    }
    return base.modelId !== undefined ? modelRetrieve(table, base.key, base.modelId) : modelsList(table, base.key);
  }

  /** A binary upload (not JSON, not a form) cannot name its deployment by `model`. */
  unroutable(contentType: string | undefined, binary: boolean): GatewayError | undefined {
    if (!binary || isFormData(contentType)) return undefined;
    return gatewayError(
      'invalid_body',
      `a ${contentType} upload cannot be routed by "model" through /openai/v1: send it to the deployment's own URL (/v1/<project>/<deployment>/v1/...)`,
    );
  }

  /** Else the route's kind check applies. */
  reads(own: OwnUrlRequest | undefined, plain: Buffer): boolean {
    return !own || (own.check === 'json' && plain.length > 0) || own.check === 'form';
  }

  /** The base URL: the deployment the body's `model` names. */
  route(table: RouteTable, base: BaseUrlRequest, contentType: string | undefined, plain: Buffer): Route | GatewayError {
    if (isFormData(contentType)) {
      const m = formModel(plain, contentType!);
      if (m instanceof Error) return m;
      this.form = m;
      return selectModel(table, base.key, m?.value);
    }
    if (plain.length === 0) return selectModel(table, base.key, undefined);
    // The spelling of "model" is checked before it picks a deployment: a "MODEL" member could name another.
    const members = llmMembers(plain);
    if (members instanceof Error) return members;
    if (!members.object) return gatewayError('invalid_body', 'the request body must be a JSON object with a "model"');
    this.members = members;
    return selectModel(table, base.key, modelValue(plain, members));
  }

  /** The body with `model` set to `route`'s served name (llm-body.ts's edits). */
  routed(base: BaseUrlRequest, route: Route, wire: Buffer, plain: Buffer): Buffer | GatewayError {
    if (base.queryRoute && base.queryRoute !== route) {
      return gatewayError(
        'invalid_body',
        `the query's model names "${modelId(base.queryRoute)}" and the body's "${modelId(route)}": name one model`,
      );
    }
    this.decoded = this.encoded = wire !== plain;
    const served = servedModel(route);
    if (this.members === undefined) return withFormModel(plain, this.form as FormModel, served);
    const members = this.members;
    const edited = editLlmBody(plain, members, base.rest, served);
    this.stripUsage = edited.stripUsage;
    this.promptEstimate = edited.promptEstimate;
    if (route.balancing.policy === 'llm') this.prefix = promptKey(plain, members, served);
    if (route.fallbacks) this.keep(plain, base.rest);
    else this.members = undefined;
    return edited.body;
  }

  /** A deployment's own URL: the body goes as sent unless `model` names another deployment's on a shared backend. */
  checked(
    table: RouteTable,
    own: OwnUrlRequest,
    contentType: string,
    wire: Buffer,
    plain: Buffer,
  ): GatewayError | undefined {
    const { route, key } = own;
    if (own.check === 'form') {
      const m = formModel(plain, contentType);
      if (m instanceof Error) return m;
      return m ? modelForbidden(table, route, m.value, key) : undefined;
    }
    // Scanned, not parsed (http/json-scan.ts): a tree could cost 20 times the body.
    const members = llmMembers(plain);
    if (members instanceof Error) return members;
    if (!members.object) return undefined;
    const forbidden = modelForbidden(table, route, modelValue(plain, members), key);
    if (forbidden) return forbidden;
    this.promptEstimate = estimatePrompt(plain, members);
    if (route.balancing.policy === 'llm') this.prefix = promptKey(plain, members, servedModel(route));
    if (route.fallbacks) {
      const q = own.upstreamPath.indexOf('?');
      this.members = members;
      this.encoded = wire !== plain;
      this.keep(plain, q === -1 ? own.upstreamPath : own.upstreamPath.slice(0, q));
    }
    return undefined;
  }

  /** The kept body with `model` naming `to`'s served model. */
  forFallback(to: Route): Buffer | undefined {
    const { plain, members } = this;
    if (!plain || !members) return undefined;
    const served = servedModel(to);
    const edited = editLlmBody(plain, members, this.path, served);
    this.decoded = this.encoded;
    this.stripUsage = edited.stripUsage;
    if (to.balancing.policy === 'llm') this.prefix = promptKey(plain, members, served);
    return edited.body;
  }

  /** The answer has started: no fallback can follow, the kept body goes. */
  letGo(): void {
    this.plain = undefined;
    this.members = undefined;
    this.form = undefined;
  }

  private keep(plain: Buffer, path: string): void {
    this.plain = plain;
    this.path = path;
  }
}
