// Header names are read in lower case (RFC 9110 §5.1: case-insensitive) whatever case the client sent them in; a name
// sent in lower case is used as it is.
import { describe, expect, test } from '@jest/globals';
import fc from 'fast-check';
import { lowerName } from '../../../src/gateway/http/request-head.js';

describe('lowerName', () => {
  test('equals toLowerCase for any name, ASCII or not', () => {
    fc.assert(
      fc.property(
        fc.oneof(
          fc.string({ unit: 'binary', maxLength: 20 }),
          fc.string({ unit: fc.constantFrom('a', 'Z', 'z', 'A', '-', '_', 'À', 'İ', 'ǅ', '\u0130'), maxLength: 20 }),
        ),
        (s) => expect(lowerName(s)).toBe(s.toLowerCase()),
      ),
      { numRuns: 2000 },
    );
  });

  test.each(['Content-Type', 'X-REQUEST-ID', 'authorizatioN', 'host', 'x-servegate-key'])('%s', (name) => {
    expect(lowerName(name)).toBe(name.toLowerCase());
  });
});
