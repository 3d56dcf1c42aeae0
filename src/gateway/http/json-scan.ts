// JSON bodies checked without a tree: one linear pass validates as JSON.parse would and notes the wanted top-level
// members. A tree costs up to ~22 times the body in heap (`{},` repeated): a body under the limit could take the
// process down (docs/decisions.md, "JSON bodies are scanned, not parsed").
import { gatewayError, type GatewayError } from './errors.js';

export interface MemberSpan {
  /** The member's name, decoded. */
  name: string;
  /** Byte offsets of its value: [start, end). */
  start: number;
  end: number;
}

/** Which member names a scan keeps (it only decodes names that may pass). */
export interface NameFilter {
  /** The first byte of a name (after its quote) that may start a wanted name. */
  first: Uint8Array;
  /** Longest raw name (between its quotes) that may decode to a wanted name. */
  maxRaw: number;
  test(name: string): boolean;
}

/** A filter for `names` (as decoded; `extra` decides), reading names of at most 6 bytes a character (\uXXXX). */
export function nameFilter(names: readonly string[], test: (name: string) => boolean): NameFilter {
  const first = new Uint8Array(256);
  first[0x5c] = 1; // an escape
  for (let c = 0x80; c < 256; c++) first[c] = 1; // a character case folding may turn into a letter (ſ, K)
  let longest = 0;
  for (const n of names) {
    first[n.toLowerCase().charCodeAt(0)] = 1;
    first[n.toUpperCase().charCodeAt(0)] = 1;
    longest = Math.max(longest, n.length);
  }
  return { first, maxRaw: longest * 6, test };
}

export interface ScannedJson {
  /** The first byte of the top-level value (`{` for an object). */
  first: number;
  /** Top-level object: the members the filter kept, in order (a repeated name appears each time). */
  members: MemberSpan[];
  /** Top-level object: how many members it has, and the offset of its closing brace. */
  count: number;
  close: number;
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACKET = 0x5d;
const COMMA = 0x2c;
const COLON = 0x3a;

/** 1: JSON white space. */
const SPACE = new Uint8Array(256);
for (const c of [0x20, 0x0a, 0x0d, 0x09]) SPACE[c] = 1;
/** 1: a byte that may follow a backslash (u is checked apart). */
const ESCAPE = new Uint8Array(256);
for (const c of '"\\/bfnrt') ESCAPE[c.charCodeAt(0)] = 1;
/** 1: a hex digit. */
const HEX = new Uint8Array(256);
for (const c of '0123456789abcdefABCDEF') HEX[c.charCodeAt(0)] = 1;
const isDigit = (c: number): boolean => c >= 0x30 && c <= 0x39;

function skipSpace(b: Buffer, i: number): number {
  while (i < b.length && SPACE[b[i]] === 1) i++;
  return i;
}

function describe(b: Buffer, i: number): string {
  if (i >= b.length) return 'the body ends in the middle of a value';
  const c = b[i];
  const shown = c >= 0x20 && c < 0x7f ? `"${String.fromCharCode(c)}"` : `byte 0x${c.toString(16).padStart(2, '0')}`;
  return `unexpected ${shown} at byte ${i}`;
}

/** Set by scanString: the string just scanned holds an escape. */
let escaped = false;

/** `b[i]` is a quote: the offset after the closing quote, or -1 (`escaped` tells whether there was an escape). */
function scanString(b: Buffer, i: number): number {
  const n = b.length;
  escaped = false;
  i++;
  while (i < n) {
    const c = b[i];
    if (c === QUOTE) return i + 1;
    if (c === BACKSLASH) {
      escaped = true;
      const e = b[i + 1];
      if (e === 0x75) {
        if (i + 5 >= n || !HEX[b[i + 2]] || !HEX[b[i + 3]] || !HEX[b[i + 4]] || !HEX[b[i + 5]]) return -1;
        i += 6;
      } else if (ESCAPE[e] === 1) i += 2;
      else return -1;
    } else if (c < 0x20) return -1;
    else i++;
  }
  return -1;
}

/** `b[i]` starts a number: the offset after it, or -1. */
function scanNumber(b: Buffer, i: number): number {
  if (b[i] === 0x2d) i++;
  if (b[i] === 0x30) i++;
  else if (b[i] >= 0x31 && b[i] <= 0x39) while (isDigit(b[++i]));
  else return -1;
  if (b[i] === 0x2e) {
    if (!isDigit(b[++i])) return -1;
    while (isDigit(b[++i]));
  }
  if (b[i] === 0x65 || b[i] === 0x45) {
    i++;
    if (b[i] === 0x2b || b[i] === 0x2d) i++;
    if (!isDigit(b[i])) return -1;
    while (isDigit(b[++i]));
  }
  return i;
}

const LITERALS: Record<number, Buffer> = {
  0x74: Buffer.from('true'),
  0x66: Buffer.from('false'),
  0x6e: Buffer.from('null'),
};

/** Whether b[from, to) holds a backslash (a short run: a member name no longer than a few dozen bytes). */
function hasBackslash(b: Buffer, from: number, to: number): boolean {
  for (let k = from; k < to; k++) if (b[k] === BACKSLASH) return true;
  return false;
}

/** The name between the quotes of [start, end) (a validated string), decoded as JSON.parse decodes it. */
function nameAt(b: Buffer, start: number, end: number, hasEscape: boolean): string {
  return hasEscape ? (JSON.parse(b.toString('utf8', start, end)) as string) : b.toString('utf8', start + 1, end - 1);
}

/** The nesting stack of 256 levels that scans share (one typed array and its buffer less to allocate per body). */
const STACK = new Int32Array(8);

/** Marks level `depth` an object or an array in `stack`; returns `stack`, or a grown copy when it was full. */
function pushLevel(stack: Int32Array, depth: number, object: boolean): Int32Array {
  let s = stack;
  if (depth >> 5 >= s.length) {
    s = new Int32Array(s.length * 2);
    s.set(stack);
  }
  if (object) s[depth >> 5] |= 1 << (depth & 31);
  else s[depth >> 5] &= ~(1 << (depth & 31));
  return s;
}

/** Validates `b` as JSON.parse would and notes the top-level members `keep` wants; the 400 says where it stops. */
export function scanJson(b: Buffer, keep?: NameFilter): ScannedJson | GatewayError {
  const n = b.length;
  let i = skipSpace(b, 0);
  const out: ScannedJson = { first: b[i], members: [], count: 0, close: -1 };
  if (i === n) return notJson('the body is empty');
  // The nesting stack, a bit a level: 1 for an object, 0 for an array. Each level's bit is set when it opens, so the
  // shared one needs no clearing (a scan runs to its end before another starts); a deeper body grows its own copy.
  let stack: Int32Array = STACK;
  let depth = 0;
  let pending: MemberSpan | undefined;
  // 0: a value starts at i; 1: a value ended at i; 2: a member name starts at i (after `{` or `,` in an object).
  let mode = 0;
  for (;;) {
    if (mode === 0) {
      const c = b[i];
      if (c === OPEN_BRACE) {
        stack = pushLevel(stack, depth++, true);
        i = skipSpace(b, i + 1);
        if (b[i] === CLOSE_BRACE) {
          depth--;
          if (depth === 0) out.close = i;
          i++;
          mode = 1;
        } else mode = 2;
        continue;
      }
      if (c === OPEN_BRACKET) {
        stack = pushLevel(stack, depth++, false);
        i = skipSpace(b, i + 1);
        if (b[i] === CLOSE_BRACKET) {
          depth--;
          i++;
          mode = 1;
        }
        continue;
      }
      let end: number;
      if (c === QUOTE) end = scanString(b, i);
      else if (c === 0x2d || isDigit(c)) end = scanNumber(b, i);
      else {
        const lit = LITERALS[c];
        const fits = lit !== undefined && i + lit.length <= n;
        end = fits && b.compare(lit, 0, lit.length, i, i + lit.length) === 0 ? i + lit.length : -1;
      }
      if (end === -1) return notJson(c === QUOTE ? `a string at byte ${i} is not valid JSON` : describe(b, i));
      i = end;
      mode = 1;
      continue;
    }
    if (mode === 1) {
      if (depth === 1 && pending) {
        pending.end = i;
        pending = undefined;
      }
      i = skipSpace(b, i);
      if (depth === 0) {
        if (i !== n) return notJson(describe(b, i));
        return out;
      }
      const c = b[i];
      const obj = (stack[(depth - 1) >> 5] & (1 << ((depth - 1) & 31))) !== 0;
      if (c === COMMA) {
        i = skipSpace(b, i + 1);
        mode = obj ? 2 : 0;
        continue;
      }
      if (c === (obj ? CLOSE_BRACE : CLOSE_BRACKET)) {
        depth--;
        if (depth === 0 && obj) out.close = i;
        i++;
        continue;
      }
      return notJson(describe(b, i));
    }
    // A member: "name" : value
    if (b[i] !== QUOTE) return notJson(describe(b, i));
    const nameStart = i;
    i = scanString(b, i);
    if (i === -1) return notJson(`a member name at byte ${nameStart} is not valid JSON`);
    const nameEnd = i;
    i = skipSpace(b, i);
    if (b[i] !== COLON) return notJson(describe(b, i));
    i = skipSpace(b, i + 1);
    if (depth === 1) {
      out.count++;
      if (keep && nameEnd - nameStart - 2 <= keep.maxRaw && keep.first[b[nameStart + 1]] === 1) {
        const name = nameAt(b, nameStart, nameEnd, escaped);
        if (keep.test(name)) {
          pending = { name, start: i, end: i };
          out.members.push(pending);
        }
      }
    }
    mode = 0;
  }
}

function notJson(why: string): GatewayError {
  return gatewayError('invalid_json', `request body is not valid JSON: ${why}`);
}

// Readers of a body scanJson accepted: they trust its structure and read only as far as they are asked to.

/** `b[i]` is a quote of a valid string: the offset after its closing quote (a quote search, not a byte loop). */
export function skipString(b: Buffer, i: number): number {
  for (;;) {
    const q = b.indexOf(QUOTE, i + 1);
    if (q === -1) return b.length;
    let k = q - 1;
    while (b[k] === BACKSLASH) k--;
    i = q;
    if ((q - 1 - k) % 2 === 0) return q + 1;
  }
}

/** The offset after the valid value starting at `i`. */
export function skipValue(b: Buffer, i: number): number {
  const c = b[i];
  if (c === QUOTE) return skipString(b, i);
  if (c === OPEN_BRACE || c === OPEN_BRACKET) {
    let depth = 0;
    for (;;) {
      const ch = b[i];
      if (ch === QUOTE) {
        i = skipString(b, i);
        continue;
      }
      if (ch === OPEN_BRACE || ch === OPEN_BRACKET) depth++;
      else if (ch === CLOSE_BRACE || ch === CLOSE_BRACKET) {
        if (--depth === 0) return i + 1;
      }
      i++;
    }
  }
  while (i < b.length) {
    const ch = b[i];
    if (ch === COMMA || ch === CLOSE_BRACE || ch === CLOSE_BRACKET || SPACE[ch] === 1) break;
    i++;
  }
  return i;
}

/** The last member of the valid object at `start` whose name `want` accepts, per accepted name; and the count. */
export function objectMembers(
  b: Buffer,
  start: number,
  want: (name: string) => boolean,
  maxRaw: number,
): { members: MemberSpan[]; count: number; close: number } {
  const members: MemberSpan[] = [];
  let count = 0;
  let i = skipSpace(b, start + 1);
  while (b[i] !== CLOSE_BRACE) {
    const nameStart = i;
    i = skipString(b, i);
    let name: string | undefined;
    if (i - nameStart - 2 <= maxRaw) name = nameAt(b, nameStart, i, hasBackslash(b, nameStart + 1, i - 1));
    i = skipSpace(b, i);
    i = skipSpace(b, i + 1); // the colon
    const vstart = i;
    i = skipValue(b, i);
    count++;
    if (name !== undefined && want(name)) members.push({ name, start: vstart, end: i });
    i = skipSpace(b, i);
    if (b[i] === COMMA) i = skipSpace(b, i + 1);
  }
  return { members, count, close: i };
}

/** The last member named `name` of the valid object at `start` (as JSON.parse keeps it). */
export function memberOf(b: Buffer, start: number, name: string): MemberSpan | undefined {
  const { members } = objectMembers(b, start, (n) => n === name, name.length * 6);
  return members[members.length - 1];
}

/** Calls `each` with each element's start in the valid array at `start` (and whether more follow) until it says no. */
export function eachElement(b: Buffer, start: number, each: (at: number, more: () => boolean) => boolean): void {
  let i = skipSpace(b, start + 1);
  while (b[i] !== CLOSE_BRACKET) {
    const at = i;
    let next = -1;
    const more = (): boolean => {
      if (next === -1) next = skipSpace(b, skipValue(b, at));
      return b[next] === COMMA;
    };
    if (!each(at, more)) return;
    more();
    i = b[next] === COMMA ? skipSpace(b, next + 1) : next;
  }
}

const SHORT_ESCAPES: Record<number, string> = {
  0x22: '"',
  0x5c: '\\',
  0x2f: '/',
  0x62: '\b',
  0x66: '\f',
  0x6e: '\n',
  0x72: '\r',
  0x74: '\t',
};

/** The first `max` UTF-16 units of the valid string at `i`, decoded; reads about `max` bytes, never the rest. */
export function stringPrefix(b: Buffer, i: number, max: number): string {
  let out = '';
  let j = i + 1;
  while (out.length < max) {
    // A run without escapes: each unit still wanted takes at least one byte, so this many bytes hold enough of them
    // or end in the middle of the text (then cut at a character's first byte, and read on).
    const limit = Math.min(b.length, j + (max - out.length) + 3);
    const run = b.subarray(j, limit);
    let k = run.indexOf(QUOTE);
    const bs = run.indexOf(BACKSLASH);
    if (bs !== -1 && (k === -1 || bs < k)) k = bs;
    if (k === -1) {
      k = limit;
      if (k < b.length) while (k > j && (b[k] & 0xc0) === 0x80) k--;
    } else k += j;
    out += b.toString('utf8', j, k);
    if (b[k] === QUOTE || k >= b.length) break;
    if (b[k] !== BACKSLASH) {
      j = k;
      continue;
    }
    const e = b[k + 1];
    if (e === 0x75) {
      out += String.fromCharCode(parseInt(b.toString('latin1', k + 2, k + 6), 16));
      j = k + 6;
    } else {
      out += SHORT_ESCAPES[e];
      j = k + 2;
    }
  }
  return out.length > max ? out.slice(0, max) : out;
}

/** The whole valid string [start, end), decoded. */
export function stringValue(b: Buffer, start: number, end: number): string {
  return JSON.parse(b.toString('utf8', start, end)) as string;
}

/** The bytes of the valid value [start, end) but the white space between its tokens (JSON.stringify's length). */
export function compactLength(b: Buffer, start: number, end: number): number {
  let n = 0;
  let i = start;
  while (i < end) {
    const c = b[i];
    if (c === QUOTE) {
      const e = skipString(b, i);
      n += e - i;
      i = e;
    } else {
      if (SPACE[c] !== 1) n++;
      i++;
    }
  }
  return n;
}

/** JSON.stringify's spelling of the string `s`. */
function quote(s: string): string {
  return JSON.stringify(s);
}

/**
 * The first `max` characters of JSON.stringify(JSON.parse(value)), reading no further; members in the order sent
 * (JSON.parse would merge repeats and move integer-like names first: only the prefix key reads this).
 */
export function stringifyPrefix(b: Buffer, start: number, max: number): string {
  let out = '';
  let i = start;
  let depth = 0;
  do {
    i = skipSpace(b, i);
    const c = b[i];
    if (c === QUOTE) {
      // Each unit takes at least one character once quoted: max - out.length units are enough.
      const room = max - out.length;
      const s = stringPrefix(b, i, room);
      let q = quote(s);
      if (s.length === room) q = q.slice(0, -1); // perhaps cut: the closing quote is not known to follow
      out += q;
      i = skipString(b, i);
    } else if (c === OPEN_BRACE || c === OPEN_BRACKET) {
      out += String.fromCharCode(c);
      depth++;
      i++;
    } else if (c === CLOSE_BRACE || c === CLOSE_BRACKET) {
      out += String.fromCharCode(c);
      depth--;
      i++;
    } else if (c === COMMA || c === COLON) {
      out += String.fromCharCode(c);
      i++;
    } else {
      const e = skipValue(b, i);
      if (c === 0x74 || c === 0x66 || c === 0x6e) out += b.toString('latin1', i, e);
      else {
        // A number of more than 400 characters is read from its first 400 (an absurd tool schema's key may differ).
        const v = Number(b.toString('latin1', i, Math.min(e, i + 400)));
        out += Number.isFinite(v) ? String(v) : 'null';
      }
      i = e;
    }
  } while (depth > 0 && out.length < max);
  return out.length > max ? out.slice(0, max) : out;
}
