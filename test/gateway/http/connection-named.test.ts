// removeConnectionNamed (src/gateway/http/headers.ts) against an oracle written here: the lines a Connection value
// names (RFC 9110 §7.6.1: comma-separated, any case, optional whitespace) leave the list, except the kept names. A
// value of one token takes a path of its own (no split, no Set), so single tokens are generated as often as lists.
import { describe, expect, test } from '@jest/globals';
import fc from 'fast-check';
import { removeConnectionNamed } from '../../../src/gateway/http/headers.js';

const FRAMING = new Set(['content-length', 'content-type']);

/** The oracle: a token is what lies between commas, trimmed of HTTP whitespace, compared without case. */
function expected(list: readonly string[], connection: string, keep?: ReadonlySet<string>): string[] {
  const tokens = connection.split(',').map((t) => t.replace(/^[ \t]+|[ \t]+$/g, '').toLowerCase());
  const out: string[] = [];
  for (let i = 0; i < list.length; i += 2)
    if (!tokens.includes(list[i]) || keep?.has(list[i])) out.push(list[i], list[i + 1]);
  return out;
}

const NAMES = ['keep-alive', 'close', 'x-hop', 'content-length', 'content-type', 'te', 'upgrade', 'x-model'];
const name = fc.constantFrom(...NAMES);
/** A name as a sender may spell it in Connection: any case, with spaces or tabs around it. */
const spelled = fc
  .tuple(name, fc.constantFrom('', ' ', '\t', '  '), fc.constantFrom('', ' ', '\t'), fc.boolean())
  .map(([n, before, after, upper]) => `${before}${upper ? n.toUpperCase() : n}${after}`);
const value = fc.oneof(
  spelled,
  fc.array(spelled, { minLength: 2, maxLength: 4 }).map((t) => t.join(',')),
);
const lines = fc.array(fc.tuple(name, fc.constantFrom('1', 'v')), { maxLength: 8 }).map((l) => l.flat());

describe('removeConnectionNamed', () => {
  test('takes out exactly the lines the value names, one token or a list, with and without kept names', () => {
    fc.assert(
      fc.property(lines, value, fc.boolean(), (list, connection, keepFraming) => {
        const keep = keepFraming ? FRAMING : undefined;
        const edited = [...list];
        removeConnectionNamed(edited, connection, keep);
        expect(edited).toEqual(expected(list, connection, keep));
      }),
      { numRuns: 3000 },
    );
  });

  test.each<[string, string[], string, boolean, string[]]>([
    [
      'keep-alive names no line sent',
      ['x-model', 'a', 'content-type', 'b'],
      'keep-alive',
      false,
      ['x-model', 'a', 'content-type', 'b'],
    ],
    [
      'one token in upper case, spaced, repeated lines',
      ['x-hop', '1', 'x-model', 'a', 'x-hop', '2'],
      ' X-HOP ',
      false,
      ['x-model', 'a'],
    ],
    [
      'a kept name stays',
      ['content-length', '2', 'x-hop', '1'],
      'Content-Length',
      true,
      ['content-length', '2', 'x-hop', '1'],
    ],
    ['close names a line called close', ['close', 'x', 'x-model', 'a'], 'close', false, ['x-model', 'a']],
  ])('%s', (_name, list, connection, keepFraming, out) => {
    const edited = [...list];
    removeConnectionNamed(edited, connection, keepFraming ? FRAMING : undefined);
    expect(edited).toEqual(out);
  });
});
