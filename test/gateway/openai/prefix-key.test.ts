// The prefix key read from the body's bytes (src/gateway/openai/prefix.ts) is the key the gateway computed from the
// parsed body before (the reference below, as it was), for any chat or completions body however it is spaced or
// escaped; and it reads only what the key needs: a 24 MiB image part or 15 MiB of tools are never stringified or
// parsed whole (SPEC §12: a pick costs a few microseconds).
import { afterEach, describe, expect, jest, test } from '@jest/globals';
import fc from 'fast-check';
import { FNV_OFFSET } from '../../../src/gateway/forward/targets.js';
import { llmMembers } from '../../../src/gateway/openai/llm-body.js';
import { fold, prefixKey, promptKey, type PromptKey } from '../../../src/gateway/openai/prefix.js';

/** A message as the reference keys read it: `role:` and its text (or parts), cut to `room` characters. */
function messageText(m: unknown, room: number): string {
  if (typeof m !== 'object' || m === null) return '';
  const o = m as Record<string, unknown>;
  let out = `${typeof o.role === 'string' ? o.role : ''}:`;
  const c = o.content;
  if (typeof c === 'string') out += c.slice(0, room);
  else if (Array.isArray(c)) {
    for (const part of c) {
      if (out.length >= room) break;
      const p = part as Record<string, unknown> | null;
      if (p && typeof p.text === 'string') out += p.text.slice(0, room - out.length);
      else out += JSON.stringify(part).slice(0, room - out.length);
    }
  }
  return `${out}\n`.slice(0, room);
}

/** The prefix key as computed from JSON.parse's tree until the body was read as bytes. */
function referenceKey(doc: Record<string, unknown>, model: string): number | undefined {
  const BOUNDS = [2048, 1024, 512, 256, 128];
  const MAX = 2048;
  let text = `${model}\n`;
  if (Array.isArray(doc.tools) && doc.tools.length) text += JSON.stringify(doc.tools).slice(0, MAX) + '\n';
  const messages = doc.messages;
  let body = '';
  if (Array.isArray(messages) && messages.length) {
    const upTo = messages.length > 1 ? messages.length - 1 : 1;
    for (let i = 0; i < upTo && body.length < MAX; i++) body += messageText(messages[i], MAX - body.length);
  } else if (typeof doc.prompt === 'string') {
    body = doc.prompt.slice(0, MAX);
  } else if (Array.isArray(doc.prompt) && typeof doc.prompt[0] === 'string') {
    body = (doc.prompt[0] as string).slice(0, MAX);
  } else {
    return undefined;
  }
  const cut = BOUNDS.find((b) => body.length >= b) ?? body.length;
  return fold(body, 0, cut, fold(text, 0, text.length, FNV_OFFSET));
}

/** The conversation key (promptKey) from JSON.parse's tree, as the bytes were read before it was hashed as read. */
function referencePromptKey(doc: Record<string, unknown>, model: string): PromptKey | undefined {
  const messages = doc.messages;
  if (!Array.isArray(messages) || messages.length < 2) {
    const hash = referenceKey(doc, model);
    return hash === undefined ? undefined : { hash, rule: 'prefix' };
  }
  const [BOUNDS, MAX, AFTER] = [[2048, 1024, 512, 256, 128], 2048, 512];
  let text = `${model}\n`;
  if (Array.isArray(doc.tools) && doc.tools.length) text += JSON.stringify(doc.tools).slice(0, MAX) + '\n';
  let [body, after, system] = ['', '', -1];
  for (let i = 0; i < messages.length - 1 && i < 1024; i++) {
    const t = messageText(messages[i], Math.max(MAX - body.length, AFTER - after.length));
    if (system === -1 && !t.startsWith('system:') && !t.startsWith('developer:')) system = body.length;
    if (body.length < MAX) body += t.slice(0, MAX - body.length);
    if (system !== -1 && after.length < AFTER) after += t.slice(0, AFTER - after.length);
    if (body.length >= MAX && system !== -1 && after.length >= AFTER) break;
  }
  const head = fold(text, 0, text.length, FNV_OFFSET);
  const cut = BOUNDS.find((b) => body.length >= b) ?? body.length;
  if (system === -1 || after === '') return { hash: fold(body, 0, cut, head), rule: 'prefix' };
  return { hash: fold(after, 0, after.length, fold(body, 0, system, head) ^ 1), rule: 'conversation' };
}

function keyOf(raw: Buffer, model = 'm'): number | undefined {
  const members = llmMembers(raw);
  if (members instanceof Error) throw members;
  return prefixKey(raw, members, model);
}

// Bodies as clients send them: text of every length around the cut boundaries, any Unicode, parts of every kind.
const text = fc.oneof(
  fc.string({ unit: 'binary', maxLength: 40 }),
  fc.string({ unit: 'grapheme', minLength: 100, maxLength: 700 }),
  fc.nat(3000).map((n) => 'ab\u00e9"\\\n😀'.repeat(Math.ceil(n / 8)).slice(0, n)),
  // ASCII text (hashed from the bytes as they are), and ASCII with one character that is not, or an escape, anywhere.
  fc.nat(3000).map((n) => 'Answer briefly and cite the policy. '.repeat(Math.ceil(n / 36)).slice(0, n)),
  fc.tuple(fc.nat(3000), fc.nat(3000), fc.constantFrom('\u00e9', '"', '\\', '\n', '😀', '\u007f')).map(([n, k, c]) => {
    const s = 'line 7: job exited with status 1. '.repeat(Math.ceil(n / 34)).slice(0, n);
    return s.slice(0, k) + c + s.slice(k);
  }),
);
const scalar = fc.oneof(
  fc.integer(),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  fc.boolean(),
  fc.constant(null),
);
const part = fc.oneof(
  fc.record({ type: fc.constant('text'), text }),
  fc.record({ type: fc.constant('image_url'), image_url: fc.record({ url: text, detail: fc.constant('low') }) }),
  fc.record({ type: fc.constant('input_audio'), input_audio: fc.record({ data: text, format: fc.constant('wav') }) }),
  text,
  scalar,
  fc.array(scalar, { maxLength: 3 }),
);
// The usual roles (read without decoding), names that start or end like them, and any other string.
const role = fc.oneof(
  fc.constantFrom('system', 'user', 'assistant', 'tool', 'developer'),
  fc.constantFrom('systems', 'syste', 'users', 'Tool', 'developer\n', 'tool"', ''),
  fc.string({ maxLength: 12 }),
);
const message = fc.oneof(
  { weight: 5, arbitrary: fc.record({ role, content: text }) },
  {
    weight: 3,
    arbitrary: fc.record({ role: fc.constantFrom('user', 'assistant'), content: fc.array(part, { maxLength: 4 }) }),
  },
  { weight: 1, arbitrary: fc.record({ content: fc.oneof(text, scalar) }, { requiredKeys: [] }) },
  { weight: 1, arbitrary: fc.oneof(scalar, text, fc.array(scalar, { maxLength: 2 })) },
);
const tool = fc.record({
  type: fc.constant('function'),
  function: fc.record({
    name: fc.string({ maxLength: 12 }),
    description: text,
    parameters: fc.record({
      type: fc.constant('object'),
      properties: fc.dictionary(
        fc.string({ maxLength: 6 }).filter((k) => !/^(0|[1-9]\d*)$/.test(k)),
        fc.record({ type: fc.constantFrom('string', 'number') }),
        { maxKeys: 3 },
      ),
    }),
  }),
});
const doc = fc.oneof(
  fc.record(
    {
      model: fc.constant('x'),
      messages: fc.array(message, { maxLength: 6 }),
      tools: fc.array(tool, { maxLength: 3 }),
      stream: fc.boolean(),
    },
    { requiredKeys: ['model', 'messages'] },
  ),
  fc.record({ model: fc.constant('x'), prompt: fc.oneof(text, fc.array(text, { maxLength: 2 }), scalar) }),
  fc.record({ model: fc.constant('x'), input: text }),
);

// Conversations: a system part of any length (none, one or more system or developer messages), then turns.
const conversationDoc = fc.record(
  {
    model: fc.constant('x'),
    messages: fc
      .tuple(
        fc.array(fc.record({ role: fc.constantFrom('system', 'developer'), content: text }), { maxLength: 3 }),
        fc.array(message, { minLength: 1, maxLength: 8 }),
      )
      .map(([system, turns]) => [...system, ...turns]),
    tools: fc.array(tool, { maxLength: 2 }),
  },
  { requiredKeys: ['model', 'messages'] },
);

/** JSON text of `d`, indented or not, with every non-ASCII character as \uXXXX or not (Python's json.dumps). */
function written(d: unknown, indent: number, ascii: boolean): string {
  const w = JSON.stringify(d, null, indent);
  return ascii ? w.replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`) : w;
}

describe('the prefix key read from the bytes is the key of the parsed body', () => {
  test('any chat or completions body, compact or indented, with or without \\u escapes', () => {
    fc.assert(
      fc.property(doc, fc.constantFrom(0, 2), fc.boolean(), (d, indent, ascii) => {
        let written = JSON.stringify(d, null, indent);
        // Every non-ASCII character as \uXXXX, as Python's json.dumps writes it by default.
        if (ascii)
          written = written.replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
        const raw = Buffer.from(written, 'utf8');
        expect(keyOf(raw)).toBe(referenceKey(JSON.parse(written) as Record<string, unknown>, 'm'));
      }),
      { numRuns: 600 },
    );
  });

  test('the conversation key too: any chat body, the history hashed as it is read', () => {
    fc.assert(
      fc.property(fc.oneof(conversationDoc, doc), fc.constantFrom(0, 2), fc.boolean(), (d, indent, ascii) => {
        const w = written(d, indent, ascii);
        const raw = Buffer.from(w, 'utf8');
        const members = llmMembers(raw);
        if (members instanceof Error) throw members;
        expect(promptKey(raw, members, 'm')).toEqual(referencePromptKey(JSON.parse(w) as Record<string, unknown>, 'm'));
      }),
      { numRuns: 600 },
    );
  });

  test('member names and roles written with escapes, repeated members: the message JSON.parse reads', () => {
    const plain =
      '{"model":"x","messages":[{"role":"system","content":"s"},{"role":"user","content":"q"},{"role":"assistant","content":"a"},"last"]}';
    const bodies = [
      plain.replace('"content":"q"', '"cont\\u0065nt":"q"'),
      plain.replace('{"role":"user"', '{"r\\u006fle":"user"'),
      plain.replace('"role":"assistant"', '"role":"assist\\u0061nt"'),
      plain.replace('"content":"q"', '"content":"x","content":"q"'),
      plain.replace('"content":"q"', '"content":"q","conten":"x"'),
      plain.replace('"content":"s"', '"role":"user","content":"s","role":"system"'),
    ];
    for (const body of bodies) {
      const raw = Buffer.from(body);
      const members = llmMembers(raw);
      if (members instanceof Error) throw members;
      const expected = referencePromptKey(JSON.parse(body) as Record<string, unknown>, 'm');
      expect(expected).toEqual(referencePromptKey(JSON.parse(plain) as Record<string, unknown>, 'm'));
      expect(promptKey(raw, members, 'm')).toEqual(expected);
    }
  });

  test('a role written with escapes is the role it decodes to', () => {
    const plain = '{"model":"x","messages":[{"role":"system","content":"s"},{"role":"user","content":"q"},"last"]}';
    const escaped = plain.replace('"system"', '"\\u0073ystem"').replace('"user"', '"us\\u0065r"');
    expect(escaped).not.toBe(plain);
    expect(keyOf(Buffer.from(escaped))).toBe(keyOf(Buffer.from(plain)));
    expect(keyOf(Buffer.from(plain.replace('"system"', '"systems"')))).not.toBe(keyOf(Buffer.from(plain)));
  });

  test('repeated members: the last one counts, as JSON.parse reads it', () => {
    const raw = Buffer.from(
      '{"messages":"x","model":"x","messages":[{"role":"user","content":"a","role":"system","content":[{"text":"t","text":"u"}]},{"role":"user","content":"q"}]}',
    );
    expect(keyOf(raw)).toBe(referenceKey(JSON.parse(raw.toString()) as Record<string, unknown>, 'm'));
  });
});

describe('the prefix key reads only what it needs', () => {
  afterEach(() => {
    jest.restoreAllMocks();
  });

  test('a 24 MiB image part and 15 MiB of tools: nothing of more than a few KiB is stringified or parsed', () => {
    const image = `data:image/png;base64,${'A'.repeat(24 * 1024 * 1024)}`;
    const tools = Array.from({ length: 40_000 }, (_, i) => ({
      type: 'function',
      function: { name: `f${i}`, description: 'd'.repeat(360), parameters: { type: 'object' } },
    }));
    const raw = Buffer.from(
      JSON.stringify({
        model: 'x',
        tools,
        messages: [
          {
            role: 'user',
            content: [
              { type: 'image_url', image_url: { url: image } },
              { type: 'text', text: 'what?' },
            ],
          },
          { role: 'user', content: 'and?' },
        ],
      }),
    );
    expect(raw.length).toBeGreaterThan(39 * 1024 * 1024);
    const members = llmMembers(raw);
    if (members instanceof Error) throw members;
    const stringify = jest.spyOn(JSON, 'stringify');
    const parse = jest.spyOn(JSON, 'parse');
    const toString = jest.spyOn(Buffer.prototype, 'toString');
    const key = prefixKey(raw, members, 'm');
    const longest = (calls: unknown[][], size: (args: unknown[]) => number) => Math.max(0, ...calls.map(size));
    const sizes = {
      stringify: longest(
        stringify.mock.results.map((r) => [r.value]),
        ([v]) => String(v ?? '').length,
      ),
      parse: longest(parse.mock.calls, ([s]) => String(s).length),
      toString: longest(
        toString.mock.results.map((r) => [r.value]),
        ([v]) => String(v ?? '').length,
      ),
    };
    jest.restoreAllMocks();
    expect(sizes.stringify).toBeLessThanOrEqual(8192);
    expect(sizes.parse).toBeLessThanOrEqual(8192);
    expect(sizes.toString).toBeLessThanOrEqual(8192);
    // And it is the key of the parsed body.
    expect(key).toBe(referenceKey(JSON.parse(raw.toString()) as Record<string, unknown>, 'm'));
  });

  test('at most 1,024 messages are walked: a million that add nothing to the key are not read to the end', () => {
    const filler = (n: number) => Array.from({ length: n }, () => '');
    const late = (n: number) =>
      Buffer.from(JSON.stringify({ model: 'x', messages: [...filler(n), { role: 'user', content: 'late' }, 'last'] }));
    // Within the bound the message counts (as it always did); past it, nothing after the bound is read.
    expect(keyOf(late(1000))).toBe(referenceKey(JSON.parse(late(1000).toString()) as Record<string, unknown>, 'm'));
    expect(keyOf(late(1000))).not.toBe(keyOf(Buffer.from('{"messages":["",""]}')));
    expect(keyOf(late(1_000_000))).toBe(keyOf(Buffer.from('{"messages":["",""]}')));
  });
});
