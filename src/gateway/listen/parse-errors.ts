// The answer to a request Node's parser failed on ('clientError'): which error, in the dialect the request's target
// reads as, with the CORS headers of its allowed Origin, when the bytes Node failed on start with the request line.
// No request object exists, so the target and Origin are read from those bytes.
import { maxHeaderSize } from 'node:http';
import { responseCorsList, type CorsPolicy } from '../admit/cors.js';
import { guessDialect } from '../admit/route.js';
import { gatewayError, type Dialect, type GatewayError } from '../http/errors.js';

/** Errors of the peer's socket itself: nothing can be answered. */
const SOCKET_ERRORS = new Set(['ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'ECONNABORTED', 'ERR_STREAM_DESTROYED']);

const ORIGIN_LINE = /\r\norigin:[ \t]*([^\r\n]{1,2048})/i;
const REQUEST_LINE = /^[A-Z]{1,20} (\/[^\s]{0,8000}) HTTP\/1\.[01]\r?\n/;

export interface ParseErrorAnswer {
  error: GatewayError;
  dialect: Dialect;
  /** The CORS headers of the request's Origin, when the policy allows it. */
  headers: readonly string[];
}

/** The answer to `err`; undefined when the socket itself failed (nothing can be answered). */
export function parseErrorAnswer(
  err: NodeJS.ErrnoException,
  cors: CorsPolicy,
  headersTimeoutSeconds: number,
): ParseErrorAnswer | undefined {
  const code = err.code ?? '';
  if (SOCKET_ERRORS.has(code)) return undefined;
  const reason = (err as { reason?: string }).reason;
  const error =
    code === 'HPE_HEADER_OVERFLOW'
      ? gatewayError(
          'headers_too_large',
          `request line and headers are larger than the limit of ${Math.round(maxHeaderSize / 1024)} KB`,
        )
      : code === 'ERR_HTTP_REQUEST_TIMEOUT'
        ? gatewayError('request_timeout', `request headers not received within ${headersTimeoutSeconds}s`)
        : gatewayError(
            'bad_request',
            `malformed HTTP request (${code || 'parse error'}${reason ? `: ${reason}` : ''})`,
          );
  const packet = (err as { rawPacket?: unknown }).rawPacket;
  const target = requestTargetOf(packet);
  if (target === undefined) return { error, dialect: 'kserve', headers: [] };
  const origin = originOf(packet as Buffer);
  const headers = (origin !== undefined && responseCorsList(cors, origin)) || [];
  return { error, dialect: guessDialect(target, undefined, ''), headers };
}

/** The target of the request line that starts `packet` (the bytes Node's parser failed on), if it does. */
function requestTargetOf(packet: unknown): string | undefined {
  if (!Buffer.isBuffer(packet)) return undefined;
  const m = REQUEST_LINE.exec(packet.toString('latin1', 0, Math.min(packet.length, 8192)));
  return m?.[1];
}

/** The first Origin header line's value in the head that starts `packet` (looked for in its first 16 KB). */
function originOf(packet: Buffer): string | undefined {
  const head = packet.toString('latin1', 0, Math.min(packet.length, 16_384));
  const end = head.indexOf('\r\n\r\n');
  const m = ORIGIN_LINE.exec(end === -1 ? head : head.slice(0, end));
  return m?.[1].trim();
}
