// The JSON scanner of request bodies (src/gateway/http/json-scan.ts) agrees with JSON.parse: it accepts exactly the
// texts JSON.parse accepts, finds the top-level members JSON.parse keeps, and its readers give what JSON.parse and
// JSON.stringify would, reading only as far as they are asked.
import { describe, expect, test } from '@jest/globals';
import fc from 'fast-check';
import {
  compactLength,
  eachElement,
  memberOf,
  nameFilter,
  scanJson,
  stringifyPrefix,
  stringPrefix,
  type ScannedJson,
} from '../../../src/gateway/http/json-scan.js';
import { GatewayError } from '../../../src/gateway/http/errors.js';

const accepts = (text: string): boolean => {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
};
const scan = (b: Buffer, names: string[] = []): ScannedJson | GatewayError =>
  scanJson(
    b,
    nameFilter(names, (n) => names.includes(n)),
  );

// Texts near JSON: valid documents with a byte inserted, dropped or changed, and the classic traps.
const TOKENS = ['{', '}', '[', ']', ',', ':', '"', '\\', 'u', '0', '-', '.', 'e', '+', ' ', '\n', 't', 'n', '\u0001'];
const nearJson = fc
  .tuple(fc.json({ maxDepth: 4 }), fc.nat(), fc.constantFrom(...TOKENS), fc.nat(2))
  .map(([text, at, tok, how]) => {
    const p = at % (text.length + 1);
    if (how === 0) return text.slice(0, p) + tok + text.slice(p);
    if (how === 1) return text.slice(0, p) + text.slice(p + 1);
    return text.slice(0, p) + tok + text.slice(p + 1);
  });
const TRAPS = [
  '',
  ' ',
  '01',
  '-',
  '-0',
  '1.',
  '.5',
  '1e',
  '1e+',
  '1E-2',
  '+1',
  'tru',
  'true ',
  'nul',
  'nullx',
  '"\\u12"',
  '"\\u12G4"',
  '"\\x"',
  '"a\tb"',
  '"\u007f"',
  '\ufeff{}',
  '{"a":1,}',
  '[1,]',
  '[,1]',
  '{"a" 1}',
  '{1:2}',
  '{"a":1}}',
  '[[[]]',
  '[]]',
  '"\\ud800"',
  '{"a":"\\"}"}',
  '[1e400, -1e-400, 12345678901234567890]',
];

describe('validity agrees with JSON.parse', () => {
  test.each(TRAPS.map((t) => [t]))('%j', (text) => {
    expect(!(scan(Buffer.from(text)) instanceof GatewayError)).toBe(accepts(text));
  });

  test('any document, and any document with one byte inserted, dropped or changed', () => {
    fc.assert(
      fc.property(fc.oneof(fc.json({ maxDepth: 5 }), nearJson), (text) => {
        const r = scan(Buffer.from(text, 'utf8'));
        expect({ text, ok: !(r instanceof GatewayError) }).toEqual({ text, ok: accepts(text) });
        if (r instanceof GatewayError) expect(r.code).toBe('invalid_json');
      }),
      { numRuns: 2000 },
    );
  });

  test('invalid UTF-8 inside a string is accepted (JSON.parse reads it as U+FFFD), outside one it is not', () => {
    expect(scan(Buffer.from([0x22, 0xc3, 0x28, 0xff, 0x22]))).not.toBeInstanceOf(GatewayError);
    expect(scan(Buffer.from([0x5b, 0xff, 0x5d]))).toBeInstanceOf(GatewayError);
  });

  test('nesting is read without recursion: a million levels, and a million unclosed ones', () => {
    const deep = '['.repeat(1_000_000) + ']'.repeat(1_000_000);
    expect(scan(Buffer.from(deep))).not.toBeInstanceOf(GatewayError);
    expect(scan(Buffer.from('['.repeat(1_000_000)))).toBeInstanceOf(GatewayError);
    expect(scan(Buffer.from('{"a":'.repeat(100_000) + '1' + '}'.repeat(100_000)))).not.toBeInstanceOf(GatewayError);
  });

  test('each level remembers whether it is an object or an array, from one scan to the next, past 256 levels too', () => {
    // Levels alternate object and array in `shape` (a string of 'o' and 'a'); `wrong` closes one level with the
    // other kind's bracket. Scans of other shapes run in between, so a level left marked by an earlier scan shows.
    const text = (shape: string, wrong = -1): string => {
      const open = [...shape].map((k) => (k === 'o' ? '{"k":' : '[1,')).join('');
      const close = [...shape]
        .reverse()
        .map((k, i) => ((k === 'o') !== (i === wrong) ? '}' : ']'))
        .join('');
      return `${open}2${close}`;
    };
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.array(fc.constantFrom('o', 'a'), { minLength: 1, maxLength: 600 }), fc.nat(700)), {
          minLength: 1,
          maxLength: 4,
        }),
        (runs) => {
          for (const [levels, wrong] of runs) {
            const t = text(levels.join(''), wrong < levels.length ? wrong : -1);
            expect(scan(Buffer.from(t)) instanceof GatewayError).toBe(!accepts(t));
          }
        },
      ),
      { numRuns: 200 },
    );
  });
});

const NAMES = ['model', 'stream', 'tools', 'x'];
const key = fc.oneof(fc.constantFrom(...NAMES, 'mod\\u0065l'), fc.string({ maxLength: 4 }));
const body = fc.array(fc.tuple(key, fc.jsonValue({ maxDepth: 2 })), { maxLength: 6 }).map((members) => ({
  n: members.length,
  text: `{ ${members.map(([k, v]) => `${k === 'mod\\u0065l' ? `"${k}"` : JSON.stringify(k)} : ${JSON.stringify(v, null, 1)}`).join(' , ')} }`,
}));

describe('top-level members', () => {
  test('the wanted members are found in order, the last of a name holds the value JSON.parse keeps', () => {
    fc.assert(
      fc.property(body, ({ n, text }) => {
        const b = Buffer.from(text);
        const doc = JSON.parse(text) as Record<string, unknown>;
        const r = scan(b, NAMES);
        if (r instanceof GatewayError) throw r;
        expect(r.first).toBe(0x7b);
        expect(b[r.close]).toBe(0x7d);
        expect(r.count).toBe(n);
        for (const name of NAMES) {
          const spans = r.members.filter((m) => m.name === name);
          const last = spans[spans.length - 1];
          if (!Object.hasOwn(doc, name)) expect(last).toBeUndefined();
          else expect(JSON.parse(b.toString('utf8', last.start, last.end))).toEqual(doc[name]);
          const again = memberOf(b, b.indexOf('{'), name);
          expect(again && b.toString('utf8', again.start, again.end)).toEqual(
            last && b.toString('utf8', last.start, last.end),
          );
        }
      }),
      { numRuns: 500 },
    );
  });

  test('names that cannot be wanted are not decoded; a long escaped name still is', () => {
    const r = scan(Buffer.from('{"\\u006d\\u006f\\u0064\\u0065\\u006c":1,"modelmodel":2,"zzz":3}'), ['model']);
    if (r instanceof GatewayError) throw r;
    expect(r.members.map((m) => m.name)).toEqual(['model']);
    expect(r.count).toBe(3);
  });
});

// Values without integer-like member names (JSON.parse would move those first) and without repeated names.
const plainKey = fc.string({ unit: 'binary', maxLength: 5 }).filter((k) => !/^(0|[1-9]\d*)$/.test(k));
const value: fc.Arbitrary<unknown> = fc.letrec((tie) => ({
  v: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    fc.string({ unit: 'binary', maxLength: 30 }),
    fc.double({ noNaN: true }),
    fc.integer(),
    fc.constantFrom(true, false, null),
    fc.array(tie('v'), { maxLength: 4 }),
    fc.dictionary(plainKey, tie('v'), { maxKeys: 4 }),
  ),
})).v;

describe('readers', () => {
  test('stringifyPrefix gives the first characters of JSON.stringify(JSON.parse(text)), whatever the spacing', () => {
    fc.assert(
      fc.property(value, fc.nat(300), fc.constantFrom(0, 1, 2), (v, max, indent) => {
        const text = JSON.stringify(v, null, indent) ?? 'null';
        const b = Buffer.from(` ${text} `);
        expect(stringifyPrefix(b, 1, max)).toBe(JSON.stringify(JSON.parse(text)).slice(0, max));
        expect(compactLength(b, 1, b.length - 1)).toBe(Buffer.byteLength(JSON.stringify(JSON.parse(text))));
      }),
      { numRuns: 1000 },
    );
  });

  test('stringPrefix decodes escapes, surrogate pairs and raw UTF-8 as JSON.parse does, cut at any length', () => {
    const escaped = (s: string, t: number) =>
      [...s]
        .map((ch, i) =>
          (i + t) % 3 === 0
            ? JSON.stringify(ch).slice(1, -1)
            : ch === '"' || ch === '\\' || ch < ' '
              ? JSON.stringify(ch).slice(1, -1)
              : ch,
        )
        .join('');
    fc.assert(
      fc.property(fc.string({ unit: 'binary', maxLength: 40 }), fc.nat(50), fc.nat(2), (s, max, t) => {
        const raw = `"${escaped(s, t)}"`;
        const b = Buffer.from(raw, 'utf8');
        expect(stringPrefix(b, 0, max)).toBe((JSON.parse(raw) as string).slice(0, max));
      }),
      { numRuns: 1000 },
    );
    const u = Buffer.from('"\\ud83d\\ude00\\n\\/\\u00e9"');
    expect(stringPrefix(u, 0, 10)).toBe('😀\n/é');
  });

  test('eachElement visits elements in order and knows whether another follows; it stops when told', () => {
    const b = Buffer.from('[ 1 , [2,3] , {"a":"]"} , "x" ]');
    const seen: Array<[string, boolean]> = [];
    eachElement(b, 0, (at, more) => {
      seen.push([stringifyPrefix(b, at, 50), more()]);
      return true;
    });
    expect(seen).toEqual([
      ['1', true],
      ['[2,3]', true],
      ['{"a":"]"}', true],
      ['"x"', false],
    ]);
    let n = 0;
    eachElement(b, 0, () => ++n < 2);
    expect(n).toBe(2);
    eachElement(Buffer.from('[ ]'), 0, () => {
      throw new Error('no element');
    });
  });
});
