// Every error the gateway itself answers: a stable code, an HTTP status, and one renderer per route dialect.

export type Dialect = 'openai' | 'kserve';

export type ErrorCode =
  | 'bad_path'
  | 'bad_request'
  | 'request_timeout'
  | 'headers_too_large'
  | 'invalid_json'
  | 'invalid_body'
  | 'missing_api_key'
  | 'invalid_api_key'
  | 'expired_api_key'
  | 'project_forbidden'
  | 'not_found'
  | 'model_not_found'
  | 'model_forbidden'
  | 'unknown_verb'
  | 'method_not_allowed'
  | 'body_too_large'
  | 'rate_limit_exceeded'
  | 'insufficient_quota'
  | 'overloaded'
  | 'limits_unavailable'
  | 'server_busy'
  | 'unsupported_media_type'
  | 'backend_unavailable'
  | 'backend_error'
  | 'no_ready_endpoint'
  | 'backend_timeout'
  | 'shutting_down'
  | 'internal_error'
  | 'expectation_failed'
  | 'unsupported_transfer_coding';

const STATUS: Record<ErrorCode, number> = {
  bad_path: 400,
  bad_request: 400,
  request_timeout: 408,
  headers_too_large: 431,
  invalid_json: 400,
  invalid_body: 400,
  missing_api_key: 401,
  invalid_api_key: 401,
  expired_api_key: 401,
  project_forbidden: 403,
  not_found: 404,
  model_not_found: 404,
  model_forbidden: 403,
  unknown_verb: 404,
  method_not_allowed: 405,
  body_too_large: 413,
  rate_limit_exceeded: 429,
  insufficient_quota: 429,
  overloaded: 503,
  limits_unavailable: 503,
  server_busy: 503,
  unsupported_media_type: 415,
  backend_unavailable: 502,
  backend_error: 502,
  no_ready_endpoint: 503,
  backend_timeout: 504,
  shutting_down: 503,
  internal_error: 500,
  expectation_failed: 417,
  unsupported_transfer_coding: 501,
};

/** OpenAI's error `type` values, so that SDKs classify the error as they would OpenAI's own. */
const OPENAI_TYPE: Record<number, string> = {
  400: 'invalid_request_error',
  401: 'authentication_error',
  403: 'permission_error',
  404: 'not_found_error',
  405: 'invalid_request_error',
  408: 'invalid_request_error',
  413: 'invalid_request_error',
  415: 'invalid_request_error',
  417: 'invalid_request_error',
  429: 'rate_limit_error',
  431: 'invalid_request_error',
  501: 'invalid_request_error',
};

/** Codes whose OpenAI `type` is the code itself, as OpenAI answers them (an exhausted quota). */
const OPENAI_OWN_TYPE: ReadonlySet<ErrorCode> = new Set(['insufficient_quota']);

export class GatewayError extends Error {
  readonly status: number;
  constructor(
    readonly code: ErrorCode,
    message: string,
    /** Extra response headers (WWW-Authenticate, Retry-After, Allow). */
    readonly headers: Record<string, string> = {},
    /** Another status than the code's (`overloaded`: 429 for a sheddable request, 503 past a queue's bounds). */
    status?: number,
  ) {
    // A refusal is an answer, not a fault: no stack trace (its capture was ~3.5 µs of a 401's ~4.8, never read).
    const limit = Error.stackTraceLimit;
    Error.stackTraceLimit = 0;
    super(message);
    Error.stackTraceLimit = limit;
    this.status = status ?? STATUS[code];
  }
}

export function gatewayError(
  code: ErrorCode,
  message: string,
  headers?: Record<string, string>,
  status?: number,
): GatewayError {
  return new GatewayError(code, message, headers, status);
}

/** The OpenAI error `type` of a gateway error, as OpenAI would give it. */
export function openaiErrorType(err: GatewayError): string {
  if (OPENAI_OWN_TYPE.has(err.code)) return err.code;
  return OPENAI_TYPE[err.status] ?? (err.status >= 500 ? 'api_error' : 'invalid_request_error');
}

/** The JSON body of an error in the dialect of the route. */
export function renderError(err: GatewayError, dialect: Dialect): string {
  if (dialect === 'openai') {
    const type = openaiErrorType(err);
    return JSON.stringify({ error: { message: err.message, type, code: err.code, param: null } });
  }
  return JSON.stringify({ error: err.message });
}
