// How upstream failures become the gateway's errors; shared by the request handler and the forwarding.
import type { Route } from '../../routing/types.js';
import { gatewayError, type GatewayError } from '../http/errors.js';

export const BODY_TOO_LARGE = 'SERVEGATE_BODY_TOO_LARGE';

/** A backend answer framed with codings the gateway does not decode (Transfer-Encoding: gzip, chunked). */
export class UnsupportedCoding extends Error {
  readonly code = 'SERVEGATE_UNSUPPORTED_CODING';
  constructor(readonly codings: string) {
    super(`the backend's answer has Transfer-Encoding "${codings.slice(0, 100)}"`);
  }
}

/** Errors from connecting: nothing reached the backend, so the request may be sent again. */
export const CONNECT_FAILURES = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'UND_ERR_CONNECT_TIMEOUT',
  'ECONNABORTED',
]);

export class ClientGone extends Error {
  constructor() {
    super('client closed the connection');
  }
}

/** `first`: on a fallback (SPEC §12), the deployment first admitted: its `timeoutSeconds` bounds the whole request. */
export function mapUpstreamError(code: string, route: Route, first?: Route): { error: GatewayError; cause: string } {
  const where = `deployment ${route.project}/${route.deployment}`;
  if (code === 'UND_ERR_HEADERS_TIMEOUT') {
    const within =
      first && first !== route
        ? `the request's ${first.timeoutMs / 1000}s (the timeoutSeconds of ${first.project}/${first.deployment}, its fallbacks included)`
        : `${route.timeoutMs / 1000}s`;
    return {
      cause: 'headers_timeout',
      error: gatewayError('backend_timeout', `${where} did not answer within ${within}`),
    };
  }
  if (CONNECT_FAILURES.has(code)) {
    return {
      cause: 'connect_refused',
      error: gatewayError('backend_unavailable', `${where}: the backend refused the connection (${code})`),
    };
  }
  if (code === 'SERVEGATE_UNSUPPORTED_CODING') {
    return {
      cause: 'bad_answer',
      error: gatewayError(
        'backend_error',
        `${where}: the backend's answer has a Transfer-Encoding other than chunked, which the gateway does not decode`,
      ),
    };
  }
  if (code.startsWith('HPE_') || code === 'UND_ERR_RES_CONTENT_LENGTH_MISMATCH') {
    // undici's parser refused the answer's framing (conflicting lengths, a bad header line, ...).
    return {
      cause: 'bad_answer',
      error: gatewayError('backend_error', `${where}: the backend's answer is malformed (${code})`),
    };
  }
  return {
    cause: 'reset',
    error: gatewayError(
      'backend_error',
      `${where}: the backend closed the connection before answering${code ? ` (${code})` : ''}`,
    ),
  };
}

export function tooLarge(max: number): GatewayError {
  return gatewayError('body_too_large', `request body is larger than the limit of ${max} bytes`);
}

/** 503 with Retry-After: not Ready (an InferenceService's condition), no ready endpoint, or held as long as it may. */
export function unavailable(route: Route, why: 'now' | 'hold_timeout' | 'hold_full' = 'now'): GatewayError {
  const where = `deployment ${route.project}/${route.deployment}`;
  const message =
    why === 'hold_timeout'
      ? `${where} had no ready endpoint within ${(route.holdMs ?? 0) / 1000}s (scale from zero); retry later`
      : why === 'hold_full'
        ? `${where} has no ready endpoint and its queue of waiting requests is full; retry later`
        : route.notReady
          ? `${where} is not ready: ${route.notReady}`
          : `${where} has no ready endpoint`;
  return gatewayError('no_ready_endpoint', message, { 'retry-after': '5' });
}
