// CORS decisions (SPEC §5): which origins are allowed and which headers preflights and responses carry.
import { describe, expect, test } from '@jest/globals';
import { parseConfig } from '../../../src/config/load.js';
import {
  allowedOrigin,
  corsPolicy,
  isPreflight,
  preflightHeaders,
  responseCorsHeaders,
} from '../../../src/gateway/admit/cors.js';
import { runtime } from '../../support/units.js';

const policy = (allowedOrigins: string[], extra: Record<string, unknown> = {}) =>
  corsPolicy(parseConfig({ cors: { allowedOrigins, ...extra } }, runtime).cors);

const listed = policy(['https://app.example.com', 'http://localhost:3000', 'https://*.example.com']);
const star = policy(['*']);
const none = policy([]);

describe('allowedOrigin', () => {
  test.each([
    ['an exact origin', 'https://app.example.com', 'https://app.example.com'],
    ['an exact origin with a port', 'http://localhost:3000', 'http://localhost:3000'],
    ['a subdomain of a wildcard', 'https://a.example.com', 'https://a.example.com'],
    ['the bare wildcard domain', 'https://example.com', undefined],
    ['a wildcard subdomain over http', 'http://a.example.com', undefined],
    ['a look-alike suffix', 'https://a.example.com.evil.com', undefined],
    ['a look-alike without the dot', 'https://evilexample.com', undefined],
    ['a wildcard subdomain on another port', 'https://a.example.com:8443', undefined],
    ['the exact origin on another port', 'http://localhost:3001', undefined],
    ['the exact origin over another scheme', 'http://app.example.com', undefined],
    ['an unlisted origin', 'https://evil.com', undefined],
    ['the null origin', 'null', undefined],
    ['no origin', undefined, undefined],
  ])('%s (%s) → %s', (_what, origin, allowed) => {
    expect(allowedOrigin(listed, origin)).toBe(allowed);
  });

  test.each(['https://anything.test', 'http://localhost:1234', 'null'])('"*" allows %s and answers "*"', (origin) => {
    expect(allowedOrigin(star, origin)).toBe('*');
  });

  test('with "*" and exact origins, a listed origin is echoed', () => {
    const mixed = policy(['*', 'https://app.example.com']);
    expect(allowedOrigin(mixed, 'https://app.example.com')).toBe('https://app.example.com');
    expect(allowedOrigin(mixed, 'https://other.test')).toBe('*');
  });

  test('an empty list allows nothing', () => {
    expect(allowedOrigin(none, 'https://app.example.com')).toBeUndefined();
  });
});

describe('isPreflight', () => {
  test.each([
    ['OPTIONS', { origin: 'https://a.test', 'access-control-request-method': 'POST' }, true],
    ['OPTIONS', { origin: 'https://a.test' }, false],
    ['OPTIONS', { 'access-control-request-method': 'POST' }, false],
    ['POST', { origin: 'https://a.test', 'access-control-request-method': 'POST' }, false],
    ['GET', {}, false],
  ])('%s %j → %s', (method, headers, yes) => {
    expect(isPreflight(method, headers)).toBe(yes);
  });
});

describe('preflight headers', () => {
  test.each([
    ['an exact origin', listed, 'https://app.example.com'],
    ['a wildcard origin', listed, 'https://a.example.com'],
  ])('%s: echoed with credentials, Vary: Origin, methods, max-age and the usual headers', (_what, p, origin) => {
    const h = preflightHeaders(p, origin, undefined);
    expect(h['access-control-allow-origin']).toBe(origin);
    expect(h['access-control-allow-credentials']).toBe('true');
    expect(h.vary).toMatch(/(^|,\s*)Origin(,|$)/);
    expect(h['access-control-max-age']).toBe('600');
    const methods = h['access-control-allow-methods'].split(/,\s*/);
    expect(methods).toEqual(expect.arrayContaining(['GET', 'POST', 'PUT', 'DELETE']));
    const allowed = h['access-control-allow-headers'].toLowerCase().split(/,\s*/);
    expect(allowed).toEqual(expect.arrayContaining(['authorization', 'content-type']));
  });

  test('headers the browser asks for are allowed too', () => {
    const h = preflightHeaders(listed, 'https://app.example.com', 'X-Custom, content-type, OpenAI-Beta');
    const allowed = h['access-control-allow-headers'].toLowerCase().split(/,\s*/);
    expect(allowed).toEqual(expect.arrayContaining(['authorization', 'content-type', 'x-custom', 'openai-beta']));
  });

  test('configured allowedHeaders replace the echo but keep authorization and content-type', () => {
    const p = policy(['https://app.example.com'], { allowedHeaders: ['X-Team'] });
    const allowed = preflightHeaders(p, 'https://app.example.com', 'x-other')['access-control-allow-headers'].split(
      /,\s*/,
    );
    expect(allowed).toEqual(expect.arrayContaining(['authorization', 'content-type', 'x-team']));
    expect(allowed).not.toContain('x-other');
  });

  test('the configured max age is sent', () => {
    expect(
      preflightHeaders(policy(['*'], { maxAgeSeconds: 120 }), 'https://a.test', undefined)['access-control-max-age'],
    ).toBe('120');
  });

  test('"*": answered with "*" and no credentials', () => {
    const h = preflightHeaders(star, 'https://a.test', 'authorization');
    expect(h['access-control-allow-origin']).toBe('*');
    expect(h['access-control-allow-credentials']).toBeUndefined();
    expect(h['access-control-allow-headers'].toLowerCase()).toContain('authorization');
  });

  test.each([
    ['a disallowed origin', listed, 'https://evil.com'],
    ['a look-alike origin', listed, 'https://a.example.com.evil.com'],
    ['an empty list', none, 'https://app.example.com'],
  ])('%s gets no CORS allow headers', (_what, p, origin) => {
    const h = preflightHeaders(p, origin, 'authorization');
    for (const k of Object.keys(h)) expect(k.startsWith('access-control-')).toBe(false);
  });

  test('an empty list adds no headers at all', () => {
    expect(preflightHeaders(none, 'https://app.example.com', 'authorization')).toEqual({});
  });
});

describe('actual response headers', () => {
  test.each([
    ['an exact origin', 'https://app.example.com'],
    ['a wildcard origin', 'https://a.example.com'],
  ])('%s: echoed with credentials and Vary: Origin', (_what, origin) => {
    const h = responseCorsHeaders(listed, origin)!;
    expect(h['access-control-allow-origin']).toBe(origin);
    expect(h['access-control-allow-credentials']).toBe('true');
    expect(h.vary).toBe('Origin');
  });

  test('"*": "*" without credentials', () => {
    const h = responseCorsHeaders(star, 'https://a.test')!;
    expect(h['access-control-allow-origin']).toBe('*');
    expect(h['access-control-allow-credentials']).toBeUndefined();
  });

  test('"*": the same "*" answer when the request has no Origin', () => {
    const h = responseCorsHeaders(star, undefined)!;
    expect(h['access-control-allow-origin']).toBe('*');
    expect(h['access-control-allow-credentials']).toBeUndefined();
    expect(responseCorsHeaders(listed, undefined)?.['access-control-allow-origin']).toBeUndefined();
  });

  test.each([
    ['a disallowed origin', 'https://evil.com'],
    ['no origin', undefined],
  ])('%s gets no allow-origin (only Vary: Origin)', (_what, origin) => {
    const h = responseCorsHeaders(listed, origin) ?? {};
    expect(h['access-control-allow-origin']).toBeUndefined();
    expect(h['access-control-allow-credentials']).toBeUndefined();
    expect(h.vary).toBe('Origin');
  });

  test('an empty list adds no headers at all', () => {
    expect(responseCorsHeaders(none, 'https://app.example.com')).toBeUndefined();
    expect(responseCorsHeaders(none, undefined)).toBeUndefined();
  });

  test('a browser can read the request id and the auth challenge of a gateway error', () => {
    const exposed = responseCorsHeaders(listed, 'https://app.example.com')!['access-control-expose-headers'].split(
      /,\s*/,
    );
    expect(exposed).toEqual(expect.arrayContaining(['x-request-id', 'www-authenticate']));
  });
});
