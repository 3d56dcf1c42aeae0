// Headers sent upstream and back (SPEC §3), error statuses and bodies (SPEC §6), the per-key rate limiter.
import type { IncomingMessage } from 'node:http';
import { describe, expect, test } from '@jest/globals';
import { gatewayError, renderError, type ErrorCode } from '../../../src/gateway/http/errors.js';
import {
  clientRequestId,
  downstreamHeaders,
  upstreamHeaders,
  type UpstreamContext,
} from '../../../src/gateway/http/headers.js';
import { readHead } from '../../../src/gateway/http/request-head.js';

const ctx: Omit<UpstreamContext, 'trustForwarded'> = {
  clientIp: '10.1.2.3',
  proto: 'http',
  requestId: 'req-1',
  project: 'fraud_detection',
  deployment: 'fraud',
  keyName: 'apikey-ci-bot',
  backendAuthority: '127.0.0.1:8081',
};

type Lines = Record<string, string | string[]>;

/** Header lines as a client sends them → the header object the backend gets (repeated names as arrays). */
function up(
  h: Lines,
  over: Partial<UpstreamContext> & { forwardUnderscore?: boolean; url?: string } = {},
): Record<string, string | string[]> {
  const rawHeaders: string[] = [];
  if (!('host' in h)) rawHeaders.push('Host', 'models.example.com');
  for (const [k, v] of Object.entries(h)) for (const one of Array.isArray(v) ? v : [v]) rawHeaders.push(k, one);
  const trustForwarded = over.trustForwarded ?? false;
  const head = readHead({ method: 'POST', url: over.url ?? '/', rawHeaders } as unknown as IncomingMessage, {
    trustForwarded,
    forwardUnderscore: over.forwardUnderscore ?? false,
  });
  return toObject(upstreamHeaders(head, { ...ctx, trustForwarded, ...over }));
}

function toObject(list: readonly string[]): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (let i = 0; i < list.length; i += 2) {
    const [k, v] = [list[i], list[i + 1]];
    const prev = out[k];
    out[k] = prev === undefined ? v : [...(Array.isArray(prev) ? prev : [prev]), v];
  }
  return out;
}

describe('upstream headers', () => {
  test.each([
    'connection',
    'keep-alive',
    'proxy-connection',
    'te',
    'trailer',
    'transfer-encoding',
    'upgrade',
    'proxy-authorization',
  ])('hop-by-hop header %s is removed', (name) => {
    const out = up({ [name]: 'x', 'content-type': 'application/json' });
    expect(out[name]).toBeUndefined();
    expect(out['content-type']).toBe('application/json');
  });

  test('headers named in Connection are removed too', () => {
    const out = up({
      connection: 'keep-alive, X-Hop-One,x-hop-two',
      'x-hop-one': '1',
      'x-hop-two': '2',
      'x-kept': '3',
    });
    expect(out['x-hop-one']).toBeUndefined();
    expect(out['x-hop-two']).toBeUndefined();
    expect(out['x-kept']).toBe('3');
    expect(out.connection).toBeUndefined();
  });

  test.each(['authorization', 'expect'])('the client %s header is not forwarded', (name) => {
    expect(up({ [name]: 'ApiKey Rc0uebjeAbSzEyRH.secret-secret-secret-secret-secret' })[name]).toBeUndefined();
  });

  test('Host is the backend authority, not the client Host', () => {
    expect(up({ host: 'models.example.com' }).host).toBe('127.0.0.1:8081');
  });

  test('an absolute-form target names the authority: it is X-Forwarded-Host, not the Host header', () => {
    expect(up({ host: 'other.example' }, { url: 'http://models.example.com/v1/x' })['x-forwarded-host']).toBe(
      'models.example.com',
    );
  });

  test.each([
    'X_Servegate_Key',
    'x_servegate_project',
    'X_Forwarded_For',
    'x_real_ip',
    'X_Custom_Thing',
    'Proxy_Authorization',
    'x_request_id',
  ])('a header with "_" in its name (%s) is dropped by default', (name) => {
    const out = up({ [name]: 'evil' });
    expect(Object.keys(out).filter((k) => k.includes('_'))).toEqual([]);
    expect(JSON.stringify(out)).not.toContain('evil');
  });

  test('forwardUnderscoreHeaders passes "_" names on, except look-alikes of gateway-owned, forwarding and hop-by-hop headers', () => {
    const out = up(
      {
        X_Custom_Thing: 'a',
        X_Servegate_Key: 'evil',
        x_forwarded_for: 'evil',
        Proxy_Authorization: 'evil',
        x_request_id: 'evil',
      },
      { forwardUnderscore: true },
    );
    expect(out.x_custom_thing).toBe('a');
    expect(JSON.stringify(out)).not.toContain('evil');
  });

  test('x-servegate-* from the client are dropped; the gateway sets its own', () => {
    const out = up({ 'x-servegate-key': 'forged', 'x-servegate-project': 'other', 'x-servegate-admin': 'true' });
    expect(out['x-servegate-key']).toBe('apikey-ci-bot');
    expect(out['x-servegate-project']).toBe('fraud_detection');
    expect(out['x-servegate-admin']).toBeUndefined();
  });

  test('gateway headers are set: request id, project, key name, forwarding', () => {
    const out = up({});
    expect(out).toMatchObject({
      'x-request-id': 'req-1',
      'x-servegate-project': 'fraud_detection',
      'x-servegate-key': 'apikey-ci-bot',
      'x-forwarded-for': '10.1.2.3',
      'x-forwarded-proto': 'http',
      'x-forwarded-host': 'models.example.com',
    });
  });

  test('the key name is sent, never a secret', () => {
    const out = up({ authorization: 'ApiKey Rc0uebjeAbSzEyRH.secret-secret-secret-secret-secret' });
    expect(JSON.stringify(out)).not.toContain('secret-secret');
  });

  test('untrusted X-Forwarded-* from the client are replaced, Forwarded and X-Real-IP dropped', () => {
    const out = up({
      'x-forwarded-for': '6.6.6.6',
      'x-forwarded-proto': 'https',
      'x-forwarded-host': 'evil.example.com',
      'x-forwarded-port': '1',
      forwarded: 'for=6.6.6.6',
      'x-real-ip': '6.6.6.6',
    });
    expect(out['x-forwarded-for']).toBe('10.1.2.3');
    expect(out['x-forwarded-proto']).toBe('http');
    expect(out['x-forwarded-host']).toBe('models.example.com');
    expect(out['x-forwarded-port']).toBeUndefined();
    expect(out.forwarded).toBeUndefined();
    expect(out['x-real-ip']).toBeUndefined();
  });

  test('trusted X-Forwarded-For is appended to; trusted proto and host are kept', () => {
    const out = up(
      { 'x-forwarded-for': '1.1.1.1, 2.2.2.2', 'x-forwarded-proto': 'https', 'x-forwarded-host': 'public.example.com' },
      { trustForwarded: true },
    );
    expect(out['x-forwarded-for']).toBe('1.1.1.1, 2.2.2.2, 10.1.2.3');
    expect(out['x-forwarded-proto']).toBe('https');
    expect(out['x-forwarded-host']).toBe('public.example.com');
  });

  test('trusted but absent X-Forwarded-* are set by the gateway', () => {
    const out = up({}, { trustForwarded: true });
    expect(out['x-forwarded-for']).toBe('10.1.2.3');
    expect(out['x-forwarded-proto']).toBe('http');
  });

  test('end-to-end headers pass unchanged, repeated ones included', () => {
    const out = up({
      'content-type': 'application/json',
      accept: 'text/event-stream',
      'user-agent': 'openai/6',
      cookie: 'a=1',
      'x-custom': ['a', 'b'],
    });
    expect(out).toMatchObject({
      'content-type': 'application/json',
      accept: 'text/event-stream',
      'user-agent': 'openai/6',
      cookie: 'a=1',
      'x-custom': ['a', 'b'],
    });
  });

  test("content-length is the gateway's own when it knows it", () => {
    expect(up({ 'content-length': '999' }, { contentLength: 12 })['content-length']).toBe('12');
    expect(up({ 'content-length': '999' })['content-length']).toBeUndefined();
  });

  test("a websocket handshake's Sec-WebSocket lines pass; Connection and Upgrade are the upstream client's to write", () => {
    const out = up({ connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-key': 'k' });
    expect(out.connection).toBeUndefined();
    expect(out.upgrade).toBeUndefined();
    expect(out['sec-websocket-key']).toBe('k');
  });
});

describe('downstream headers', () => {
  // As undici hands them over: [name, value, ...] in the backend's spelling.
  const backend = [
    'Content-Type',
    'text/event-stream',
    'Connection',
    'keep-alive, x-hop',
    'Keep-Alive',
    'timeout=5',
    'Transfer-Encoding',
    'chunked',
    'X-Hop',
    '1',
    'Set-Cookie',
    'a=1',
    'Set-Cookie',
    'b=2',
    'Access-Control-Allow-Origin',
    '*',
    'Access-Control-Allow-Credentials',
    'true',
    'X-Model',
    'iris',
    'X-Request-Id',
    'the-backends-own',
  ].map((s) => Buffer.from(s));

  test("hop-by-hop headers (and those named in Connection) and the backend's x-request-id are stripped; framing is reported", () => {
    const out = downstreamHeaders(backend, false);
    expect(out.list).toEqual([
      'content-type',
      'text/event-stream',
      'set-cookie',
      'a=1',
      'set-cookie',
      'b=2',
      'access-control-allow-origin',
      '*',
      'access-control-allow-credentials',
      'true',
      'x-model',
      'iris',
    ]);
    expect(out).toMatchObject({ contentType: 'text/event-stream', cacheControl: false, chunked: true, length: false });
  });

  test.each([
    [true, undefined],
    [false, '*'],
  ])('stripCors=%s → backend access-control-allow-origin %s', (strip, value) => {
    const out = toObject(downstreamHeaders(backend, strip).list);
    expect(out['access-control-allow-origin']).toBe(value);
    expect(out['x-model']).toBe('iris');
  });
});

describe('clientRequestId', () => {
  test.each([
    ['abc-123', 'abc-123'],
    ['0b6c9c8e-5d0f-4a7b-9d7e-3f1f9b2d8a11', '0b6c9c8e-5d0f-4a7b-9d7e-3f1f9b2d8a11'],
    [undefined, undefined],
    ['', undefined],
    ['has space', undefined],
    ['x'.repeat(201), undefined],
    ['bad\nline', undefined],
    [['a', 'b'], undefined],
  ])('%j → %j', (value, kept) => {
    expect(clientRequestId(value)).toBe(kept);
  });
});

describe('errors (SPEC §6)', () => {
  test.each<[ErrorCode, number]>([
    ['bad_path', 400],
    ['invalid_json', 400],
    ['invalid_body', 400],
    ['missing_api_key', 401],
    ['invalid_api_key', 401],
    ['expired_api_key', 401],
    ['project_forbidden', 403],
    ['not_found', 404],
    ['unknown_verb', 404],
    ['body_too_large', 413],
    ['rate_limit_exceeded', 429],
    ['backend_unavailable', 502],
    ['backend_error', 502],
    ['no_ready_endpoint', 503],
    ['backend_timeout', 504],
  ])('%s → %i', (code, status) => {
    expect(gatewayError(code, 'm').status).toBe(status);
  });

  test('KServe dialect: {"error": "<message>"}', () => {
    expect(JSON.parse(renderError(gatewayError('not_found', 'deployment "x" not found'), 'kserve'))).toEqual({
      error: 'deployment "x" not found',
    });
  });

  test.each<[ErrorCode, string]>([
    ['invalid_json', 'invalid_request_error'],
    ['missing_api_key', 'authentication_error'],
    ['project_forbidden', 'permission_error'],
    ['not_found', 'not_found_error'],
    ['rate_limit_exceeded', 'rate_limit_error'],
    ['backend_error', 'api_error'],
    ['backend_timeout', 'api_error'],
  ])('OpenAI dialect for %s: {"error":{"message","type":"%s","code"}}', (code, type) => {
    const body = JSON.parse(renderError(gatewayError(code, 'something failed'), 'openai'));
    expect(body.error).toMatchObject({ message: 'something failed', type, code });
  });

  test('extra headers travel with the error', () => {
    expect(gatewayError('no_ready_endpoint', 'no endpoint', { 'retry-after': '1' }).headers).toEqual({
      'retry-after': '1',
    });
  });
});

describe('a refusal is a value, not a fault', () => {
  test('a GatewayError carries no stack frames (their capture cost more than the rest of a 401) and leaves the limit as it was', () => {
    const before = Error.stackTraceLimit;
    const err = gatewayError('missing_api_key', 'missing API key');
    expect(err).toBeInstanceOf(Error);
    expect(err.message).toBe('missing API key');
    expect(err.stack).toBe('Error: missing API key');
    expect(Error.stackTraceLimit).toBe(before);
    expect(new Error('x').stack).toMatch(/\n\s+at /);
  });
});
