// downstreamHeaders (src/gateway/http/headers.ts): the backend's response header lines as the client gets them. The
// x-servegate-* names are the gateway's own (x-servegate-variant on canaried deployments): a backend's are dropped,
// so that it cannot forge them. Below: the functions every flat header list of the gateway is edited with.
import { describe, expect, test } from '@jest/globals';
import {
  downstreamHeaders,
  headerIndex,
  headerValue,
  removeHeader,
  setHeader,
  withoutHeader,
} from '../../../src/gateway/http/headers.js';

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
      'lines named in Connection go, every Connection line and any case, except the framing and the type',
      lines(
        'Content-Type',
        'application/json',
        'Connection',
        'X-Hop-One, content-length',
        'Content-Length',
        '2',
        'x-hop-one',
        '1',
        'X-Model',
        'iris',
        'connection',
        ' CONTENT-TYPE ,x-hop-two',
        'X-Hop-Two',
        '2',
      ),
      false,
      ['content-type', 'application/json', 'content-length', '2', 'x-model', 'iris'],
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

describe('editing a flat header list', () => {
  const list = () => ['content-type', 'text/plain', 'X-Model', 'iris', 'content-length', '5', 'x-model', 'svm'];

  test.each<[string, string, string[]]>([
    [
      'every line of the name goes, in any case, the others keep their order',
      'X-MODEL',
      ['content-type', 'text/plain', 'content-length', '5'],
    ],
    ['a name not there leaves the list as it was', 'etag', list()],
    ["a name only a prefix of a line's name takes nothing", 'content', list()],
    ['a value equal to the name is not a name', 'text/plain', list()],
  ])('withoutHeader and removeHeader: %s', (_name, name, expected) => {
    const original = list();
    expect(withoutHeader(original, name)).toEqual(expected);
    expect(original).toEqual(list());
    const edited = list();
    removeHeader(edited, name);
    expect(edited).toEqual(expected);
  });

  test.each<[string, string, string, string[]]>([
    [
      'a name there: its first line takes the value where it stands, a later one goes',
      'x-model',
      'tree',
      ['content-type', 'text/plain', 'X-Model', 'tree', 'content-length', '5'],
    ],
    [
      'the name in another case still replaces',
      'Content-Length',
      '7',
      ['content-type', 'text/plain', 'X-Model', 'iris', 'content-length', '7', 'x-model', 'svm'],
    ],
    [
      'a name not there is appended',
      'etag',
      '"a"',
      ['content-type', 'text/plain', 'X-Model', 'iris', 'content-length', '5', 'x-model', 'svm', 'etag', '"a"'],
    ],
  ])('setHeader: %s', (_name, name, value, expected) => {
    const edited = list();
    setHeader(edited, name, value);
    expect(edited).toEqual(expected);
  });

  test('headerIndex and headerValue find the first line of a name in any case, never a value', () => {
    expect(headerIndex(list(), 'x-model')).toBe(2);
    expect(headerValue(list(), 'X-MODEL')).toBe('iris');
    expect(headerIndex(list(), 'text/plain')).toBe(-1);
    expect(headerValue(list(), 'etag')).toBeUndefined();
    expect(headerValue([], 'etag')).toBeUndefined();
  });

  test('names of the same length that differ by a non-letter are different names', () => {
    // Folding only A-Z: "[" (0x5b) and "{" (0x7b) differ by 0x20 as letters do, yet are not the same character.
    expect(headerIndex(['x-[', '1'], 'x-{')).toBe(-1);
    expect(headerIndex(['X-@', '1'], 'x-`')).toBe(-1);
  });
});
