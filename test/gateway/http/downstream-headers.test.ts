// downstreamHeaders (src/gateway/http/headers.ts): the backend's response header lines as the client gets them. The
// x-servegate-* names are the gateway's own (x-servegate-variant on canaried deployments): a backend's are dropped,
// so that it cannot forge them.
import { describe, expect, test } from '@jest/globals';
import { downstreamHeaders } from '../../../src/gateway/http/headers.js';

const lines = (...s: string[]) => s.map((x) => Buffer.from(x));

describe('downstreamHeaders', () => {
  test.each<[string, Buffer[], boolean, string[]]>([
    [
      "a backend's x-servegate-variant is dropped",
      lines('Content-Type', 'application/json', 'X-Servegate-Variant', 'canary', 'X-Model', 'iris'),
      false,
      ['content-type', 'application/json', 'x-model', 'iris'],
    ],
    [
      'every x-servegate-* name, in any case, repeated',
      lines(
        'x-servegate-variant',
        'stable',
        'X-SERVEGATE-PROJECT',
        'p',
        'x-servegate-deployment',
        'd',
        'x-servegate-key',
        'k',
        'X-ServeGate-Anything',
        '1',
        'x-servegate-variant',
        'canary',
        'content-length',
        '2',
      ),
      false,
      ['content-length', '2'],
    ],
    [
      'and their "_" look-alikes (a proxy or CGI-style reader may take "_" for "-")',
      lines('X_Servegate_Variant', 'canary', 'x-servegate_variant', 'canary', 'x_servegate-key', 'k', 'x_model', 'm'),
      false,
      ['x_model', 'm'],
    ],
    [
      'names that only look alike pass',
      lines('x-servegate', 'a', 'x-servegatevariant', 'b', 'servegate-variant', 'c', 'x-served-by', 'd'),
      false,
      ['x-servegate', 'a', 'x-servegatevariant', 'b', 'servegate-variant', 'c', 'x-served-by', 'd'],
    ],
    [
      'with the CORS strip, hop-by-hop and x-request-id removal as before',
      lines(
        'Connection',
        'keep-alive, X-Hop',
        'X-Hop',
        'h',
        'Transfer-Encoding',
        'chunked',
        'Access-Control-Allow-Origin',
        '*',
        'X-Request-Id',
        'theirs',
        'x-servegate-variant',
        'canary',
        'Cache-Control',
        'no-store',
        'Content-Type',
        'text/event-stream',
      ),
      true,
      ['cache-control', 'no-store', 'content-type', 'text/event-stream'],
    ],
    [
      'a backend x-servegate-* header does not count as content-type etc., and leaves framing alone',
      lines('x-servegate-variant', 'v', 'Content-Length', '10'),
      false,
      ['content-length', '10'],
    ],
  ])('%s', (_name, raw, stripCors, expected) => {
    expect(downstreamHeaders(raw, stripCors).list).toEqual(expected);
  });

  test('plain strings (undici may give either) are read the same', () => {
    const out = downstreamHeaders(['X-Servegate-Variant', 'canary', 'Content-Type', 'application/json'], false);
    expect(out.list).toEqual(['content-type', 'application/json']);
    expect(out).toMatchObject({ contentType: 'application/json', cacheControl: false, length: false, chunked: false });
  });
});
