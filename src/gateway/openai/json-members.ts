// JSON's top-level members in raw bytes, edited byte-exactly: the rest stays as sent, which re-serialising would not
// keep (big integers, duplicate keys, -0). The skips do not validate JSON; they never read past `end`.

export interface MemberSpan {
  /** The member's name, decoded. */
  name: string;
  /** Byte offsets of its value: [start, end). */
  start: number;
  end: number;
}

export interface ObjectLayout {
  members: MemberSpan[];
  /** Byte offset of the object's closing brace. */
  close: number;
}

/** JSON's structural bytes (shared with the usage scanner of usage-meter.ts). */
export const QUOTE = 0x22;
export const BACKSLASH = 0x5c;
export const OPEN_BRACE = 0x7b;
export const CLOSE_BRACE = 0x7d;
export const OPEN_BRACKET = 0x5b;
export const CLOSE_BRACKET = 0x5d;
export const COMMA = 0x2c;
export const COLON = 0x3a;

export function isSpace(c: number): boolean {
  return c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;
}

/** The first offset at or after `i` (and before `end`) that is not white space. */
export function skipSpace(b: Buffer, i: number, end = b.length): number {
  while (i < end && isSpace(b[i])) i++;
  return i;
}

/** `b[i]` is a quote: the offset just after the string's closing quote (`end` at most). */
function skipString(b: Buffer, i: number, end: number): number {
  i++;
  while (i < end) {
    const c = b[i];
    if (c === BACKSLASH) i += 2;
    else if (c === QUOTE) return i + 1;
    else i++;
  }
  return Math.min(i, end);
}

/** The offset just after the value starting at `i` (`end` at most: a value cut there ends there). */
export function skipValue(b: Buffer, i: number, end = b.length): number {
  const c = b[i];
  if (c === QUOTE) return skipString(b, i, end);
  if (c === OPEN_BRACE || c === OPEN_BRACKET) {
    let depth = 0;
    while (i < end) {
      const ch = b[i];
      if (ch === QUOTE) {
        i = skipString(b, i, end);
        continue;
      }
      if (ch === OPEN_BRACE || ch === OPEN_BRACKET) depth++;
      else if (ch === CLOSE_BRACE || ch === CLOSE_BRACKET) {
        depth--;
        if (depth === 0) return i + 1;
      }
      i++;
    }
    return i;
  }
  while (i < end) {
    const ch = b[i];
    if (ch === COMMA || ch === CLOSE_BRACE || ch === CLOSE_BRACKET || isSpace(ch)) break;
    i++;
  }
  return i;
}

/** The top-level members of a body that JSON.parse accepted as an object; undefined when it is not an object. */
export function objectLayout(b: Buffer): ObjectLayout | undefined {
  let i = skipSpace(b, 0);
  if (b[i] !== OPEN_BRACE) return undefined;
  i = skipSpace(b, i + 1);
  const members: MemberSpan[] = [];
  while (i < b.length && b[i] !== CLOSE_BRACE) {
    const keyStart = i;
    i = skipString(b, i, b.length);
    const raw = b.toString('utf8', keyStart, i);
    const name = raw.includes('\\') ? (JSON.parse(raw) as string) : raw.slice(1, -1);
    i = skipSpace(b, i);
    if (b[i] !== COLON) return undefined;
    i = skipSpace(b, i + 1);
    const start = i;
    i = skipValue(b, i);
    members.push({ name, start, end: i });
    i = skipSpace(b, i);
    if (b[i] === COMMA) i = skipSpace(b, i + 1);
  }
  if (b[i] !== CLOSE_BRACE) return undefined;
  return { members, close: i };
}

/** The span of the member JSON.parse would take (the last one of that name). */
export function memberSpan(layout: ObjectLayout, name: string): MemberSpan | undefined {
  for (let i = layout.members.length - 1; i >= 0; i--) if (layout.members[i].name === name) return layout.members[i];
  return undefined;
}

/** `b` with [start, end) replaced by `text`. */
export function replaceSpan(b: Buffer, start: number, end: number, text: string): Buffer {
  return Buffer.concat([b.subarray(0, start), Buffer.from(text, 'utf8'), b.subarray(end)]);
}

/** `b` with `"name": <valueJson>` added as the object's last member. */
export function appendMember(b: Buffer, layout: ObjectLayout, name: string, valueJson: string): Buffer {
  const member = `${layout.members.length ? ',' : ''}${JSON.stringify(name)}:${valueJson}`;
  return replaceSpan(b, layout.close, layout.close, member);
}
