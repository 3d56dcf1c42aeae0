// Properties (fast-check) of the byte-exact JSON edits: for any JSON object body — arbitrary whitespace, unicode and
// escaped member names, any number spelling, repeated names — objectLayout (src/gateway/openai/json-members.ts) finds
// the members JSON.parse reads, and llmMembers/editLlmBody (src/gateway/openai/llm-body.ts) refuse exactly the
// ambiguous spellings and change nothing but `model`, `stream` and `stream_options`.
import { describe, expect, test } from '@jest/globals';
import fc from 'fast-check';
import { memberSpan, objectLayout } from '../../../src/gateway/openai/json-members.js';
import { editLlmBody, llmMembers } from '../../../src/gateway/openai/llm-body.js';

const RUNS = 200;

/** A value written as these exact bytes (number spellings JSON.stringify never gives). */
class Raw {
  constructor(readonly text: string) {}
}
type Value = Raw | null | boolean | number | string | Value[] | { [k: string]: Value };

/** A stream of choices for how to write things, cycled (fast-check shrinks it along with the value). */
class Tape {
  private i = 0;
  constructor(private readonly t: number[]) {}
  pick(n: number): number {
    return this.t.length === 0 ? 0 : this.t[this.i++ % this.t.length] % n;
  }
}

const SPACE = [' ', '\t', '\n', '\r'];
const SHORT: Record<string, string> = {
  '"': '\\"',
  '\\': '\\\\',
  '/': '\\/',
  '\b': '\\b',
  '\f': '\\f',
  '\n': '\\n',
  '\r': '\\r',
  '\t': '\\t',
};

function ws(t: Tape): string {
  let s = '';
  for (let n = t.pick(6) - 3; n > 0; n--) s += SPACE[t.pick(4)];
  return s;
}

function u4(code: number, t: Tape): string {
  const h = code.toString(16).padStart(4, '0');
  return `\\u${t.pick(2) ? h.toUpperCase() : h}`;
}

/** A JSON string for `s`, each character written plainly, as a short escape, or as \uXXXX (pairs for astral ones). */
function str(s: string, t: Tape): string {
  let out = '"';
  for (const ch of s) {
    const cp = ch.codePointAt(0)!;
    const mustEscape = ch === '"' || ch === '\\' || cp < 0x20;
    const how = t.pick(4);
    if (how === 0 && SHORT[ch]) out += SHORT[ch];
    else if (how === 1 || (mustEscape && !SHORT[ch])) {
      out += cp > 0xffff ? u4(ch.charCodeAt(0), t) + u4(ch.charCodeAt(1), t) : u4(cp, t);
    } else out += mustEscape ? SHORT[ch] : ch;
  }
  return `${out}"`;
}

function num(n: number, t: Tape): string {
  const plain = JSON.stringify(n);
  switch (t.pick(4)) {
    case 1:
      return n.toExponential();
    case 2:
      return n.toExponential().toUpperCase();
    case 3:
      return Number.isInteger(n) && !plain.includes('e') ? `${plain}.0` : plain;
    default:
      return plain;
  }
}

function render(v: Value, t: Tape): string {
  if (v instanceof Raw) return v.text;
  if (v === null || typeof v === 'boolean') return String(v);
  if (typeof v === 'number') return num(v, t);
  if (typeof v === 'string') return str(v, t);
  if (Array.isArray(v)) return `[${ws(t)}${v.map((x) => render(x, t)).join(`${ws(t)},${ws(t)}`)}${ws(t)}]`;
  const members = Object.entries(v).map(([k, x]) => `${str(k, t)}${ws(t)}:${ws(t)}${render(x, t)}`);
  // Now and then a name written twice (JSON.parse keeps the last).
  if (members.length && t.pick(5) === 0) members.unshift(members[t.pick(members.length)].replace(/:.*$/s, ':null'));
  return `{${ws(t)}${members.join(`${ws(t)},${ws(t)}`)}${ws(t)}}`;
}

const raws = fc.constantFrom(
  ...[
    '-0',
    '0.0',
    '-0.0e-0',
    '1E400',
    '-1e-400',
    '12345678901234567890123',
    '1e+2',
    '0E0',
    '"\\ud800"',
    '"\\u0000"',
  ].map((s) => new Raw(s)),
);
const json = fc.jsonValue({ maxDepth: 3, stringUnit: 'binary' }) as fc.Arbitrary<Value>;
const flags = fc.constantFrom<Value>(
  true,
  false,
  0,
  1,
  2,
  'true',
  'yes',
  'No',
  ' TRUE ',
  'off',
  '1',
  '0',
  'maybe',
  '',
  null,
);
const streamOptions = fc.oneof(
  fc.record({ include_usage: flags }, { requiredKeys: [] }) as fc.Arbitrary<Value>,
  fc.record({ include_usage: flags, continuous_usage_stats: flags }) as fc.Arbitrary<Value>,
  // Spellings Go's decoder reads as include_usage (case, the long s), and one it does not.
  fc
    .tuple(fc.constantFrom('INCLUDE_USAGE', 'include_uſage', 'Include_Usage', 'include-usage'), flags)
    .map(([k, v]) => ({ [k]: v }) as Value),
  json,
);
const value = fc.oneof(json, json, raws, flags, fc.string({ unit: 'binary', maxLength: 6 }));
const name = fc.oneof(
  { arbitrary: fc.constantFrom('model', 'stream', 'stream_options'), weight: 4 },
  {
    arbitrary: fc.constantFrom(
      'messages',
      'prompt',
      'MODEL',
      'Stream',
      'stream_Options',
      'ſtream',
      'STREAM_OPTIONſ',
      'modeI',
      '__proto__',
      'modèle',
      '模型',
      '',
    ),
    weight: 2,
  },
  { arbitrary: fc.string({ unit: 'binary', maxLength: 6 }), weight: 2 },
  { arbitrary: fc.string({ maxLength: 4 }), weight: 1 },
);
const member = name.chain((k) =>
  (k === 'stream' ? fc.oneof(flags, value) : k === 'stream_options' ? streamOptions : value).map(
    (v) => [k, v] as [string, Value],
  ),
);

/** A JSON object body: its members (names may repeat) written with the tape's choices. */
const body = fc
  .record({ members: fc.array(member, { maxLength: 7 }), tape: fc.array(fc.nat(), { maxLength: 40 }) })
  .map(({ members, tape }) => {
    const t = new Tape(tape);
    const inner = members.map(([k, v]) => `${str(k, t)}${ws(t)}:${ws(t)}${render(v, t)}`).join(`${ws(t)},${ws(t)}`);
    const text = `${ws(t)}{${ws(t)}${inner}${ws(t)}}${ws(t)}`;
    return { raw: Buffer.from(text, 'utf8'), names: members.map(([k]) => k) };
  });

const own = (o: Record<string, unknown>, k: string): unknown => (Object.hasOwn(o, k) ? o[k] : undefined);
const parse = (b: Buffer): unknown => JSON.parse(b.toString('utf8'));
const isPlain = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const READ = ['model', 'stream', 'stream_options'];

// ---- the oracles, written from docs/llm.md (not taken from src) --------------------------------------------------------

/** `stream` as vLLM's request models read it: booleans, 1/0, and the flag words in any case. */
function streamFlag(v: unknown): boolean | undefined {
  if (v === true || v === 1) return true;
  if (v === false || v === 0) return false;
  if (typeof v !== 'string') return undefined;
  // Exactly the word: pydantic refuses " true " (a value that is no flag is left for the server to refuse).
  const word = v.toLowerCase();
  if (['true', '1', 'yes', 'on', 't', 'y'].includes(word)) return true;
  if (['false', '0', 'no', 'off', 'f', 'n'].includes(word)) return false;
  return undefined;
}

/** The routes whose streams the gateway asks for usage: chat completions and completions, on the base URL. */
const ASKS_USAGE = ['/v1/chat/completions', '/v1/completions'];

/**
 * Whether Go's JSON decoder takes member name `n` for `target` (an ASCII lower-case name): the same length, each
 * character equal under Unicode simple case folding, where besides upper case only the long s (ſ) folds to s and the
 * Kelvin sign to k.
 */
function goReadsAs(n: string, target: string): boolean {
  const chars = [...n];
  if (chars.length !== target.length) return false;
  return chars.every((c, i) => {
    const t = target[i];
    return c === t || c === t.toUpperCase() || (t === 's' && c === '\u017f') || (t === 'k' && c === '\u212a');
  });
}
const others = (o: Record<string, unknown>) => Object.fromEntries(Object.entries(o).filter(([k]) => !READ.includes(k)));

describe('objectLayout agrees with JSON.parse', () => {
  test('every member found, in order, names decoded; the last of a name holds the value JSON.parse keeps', () => {
    fc.assert(
      fc.property(body, ({ raw, names }) => {
        const doc = parse(raw) as Record<string, unknown>;
        const layout = objectLayout(raw);
        expect(layout).toBeDefined();
        const l = layout!;
        expect(l.members.map((m) => m.name)).toEqual(names);
        expect(raw[l.close]).toBe(0x7d);
        expect(
          raw
            .subarray(l.close + 1)
            .toString('latin1')
            .trim(),
        ).toBe('');
        for (const k of new Set(['model', 'stream', ...names])) {
          const span = memberSpan(l, k);
          if (!Object.hasOwn(doc, k)) {
            expect(span).toBeUndefined();
            continue;
          }
          expect(span).toBeDefined();
          expect({ k, v: parse(raw.subarray(span!.start, span!.end)) }).toEqual({ k, v: doc[k] });
        }
      }),
      { numRuns: RUNS },
    );
  });
});

describe('llmMembers and editLlmBody', () => {
  const paths = fc.constantFrom('/v1/chat/completions', '/v1/completions', '/v1/embeddings', '/v1/responses');
  const served = fc.option(fc.string({ unit: 'binary', maxLength: 8 }), { nil: undefined });

  test('refused exactly when a read member is misspelled or repeated; else only model/stream/stream_options change', () => {
    fc.assert(
      fc.property(body, paths, served, ({ raw, names }, path, servedModel) => {
        const doc = parse(raw) as Record<string, unknown>;
        const members = llmMembers(raw);
        // Names as Go's decoder reads them: a variant or a repeat of a read member is refused, at the top level and
        // for include_usage inside the one stream_options object.
        const variant = (list: string[], read: string[]) =>
          list.some((n) => read.some((r) => n !== r && goReadsAs(n, r))) ||
          read.some((r) => list.filter((n) => n === r).length > 1);
        let ambiguous = variant(names, READ);
        if (!ambiguous) {
          const so = objectLayout(raw)!.members.find((m) => m.name === 'stream_options');
          const inner = so && raw[so.start] === 0x7b ? objectLayout(raw.subarray(so.start, so.end)) : undefined;
          if (inner)
            ambiguous = variant(
              inner.members.map((m) => m.name),
              ['include_usage'],
            );
        }
        expect(members instanceof Error).toBe(ambiguous);
        if (members instanceof Error) return;

        const out = editLlmBody(raw, members, path, servedModel);
        if (!out.changed) expect(out.body).toBe(raw);
        const edited = parse(out.body) as Record<string, unknown>;

        if (servedModel !== undefined) expect(edited.model).toBe(servedModel);
        else expect(own(edited, 'model')).toEqual(own(doc, 'model'));

        const stream = streamFlag(own(doc, 'stream'));
        if (stream !== undefined) expect(edited.stream).toBe(stream);
        else expect(own(edited, 'stream')).toEqual(own(doc, 'stream'));
        expect(out.stream).toBe(stream === true);

        const so = own(doc, 'stream_options');
        const ask =
          stream === true &&
          ASKS_USAGE.includes(path) &&
          (so === undefined || so === null || isPlain(so)) &&
          streamFlag(isPlain(so) ? own(so, 'include_usage') : undefined) !== true;
        expect(out.stripUsage).toBe(ask);
        if (ask) {
          const eso = edited.stream_options as Record<string, unknown>;
          expect(eso.include_usage).toBe(true);
          expect(others({ ...eso, include_usage: undefined })).toEqual(
            others({ ...(isPlain(so) ? so : {}), include_usage: undefined }),
          );
        } else expect(own(edited, 'stream_options')).toEqual(so);

        expect(others(edited)).toEqual(others(doc));
        // Byte for byte: the other members are written as the client wrote them, in the same order.
        const text = (b: Buffer) =>
          objectLayout(b)!
            .members.filter((m) => !READ.includes(m.name))
            .map((m) => [m.name, b.toString('utf8', m.start, m.end)]);
        expect(text(out.body)).toEqual(text(raw));
      }),
      { numRuns: RUNS },
    );
  });
});

describe('the stream flag, word by word', () => {
  // Every flag the generator draws from, and more, each alone in a body: what the property meets only now and then.
  const values: unknown[] = [
    ...['true', 'false', 'yes', 'no', 'on', 'off', 't', 'f', 'y', 'n', '1', '0'].flatMap((w) => [w, w.toUpperCase()]),
    'On',
    'Yes',
    ' TRUE ',
    ' true',
    'false ',
    '\ttrue',
    'maybe',
    '',
    true,
    false,
    1,
    0,
    2,
    null,
    [],
    {},
  ];
  test.each(values.map((v) => [JSON.stringify(v), v]))('"stream": %s', (_shown, v) => {
    const raw = Buffer.from(JSON.stringify({ model: 'm', stream: v }));
    const members = llmMembers(raw);
    expect(members instanceof Error).toBe(false);
    if (members instanceof Error) return;
    const out = editLlmBody(raw, members, '/v1/chat/completions', undefined);
    const flag = streamFlag(v);
    expect(out.stream).toBe(flag === true);
    // A flag is written back as a JSON boolean; what is no flag reaches the server as sent, for it to refuse.
    expect((parse(out.body) as Record<string, unknown>).stream).toEqual(flag ?? v);
  });
});
