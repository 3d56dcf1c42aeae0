// Token usage of LLM answers, read as the bytes pass (SPEC §9), never holding the whole answer. Streams: the last
// `usage` wins (continuous usage stats send running totals); with `strip` (usage the client did not ask for) events
// pass whole and lose it. JSON: only the top-level `"usage"` is the answer's (nested or in a string is not).
import { MAX_CHARGE } from '../../limits/buckets.js';
import {
  BACKSLASH,
  CLOSE_BRACE,
  CLOSE_BRACKET,
  COLON,
  COMMA,
  isSpace,
  OPEN_BRACE,
  OPEN_BRACKET,
  QUOTE,
  skipSpace,
  skipValue,
} from './json-members.js';
import { memberOf, nameFilter, objectMembers, scanJson, type MemberSpan } from '../http/json-scan.js';

export interface TokenUsage {
  prompt: number;
  completion: number;
}

export interface UsageMeter {
  /** What to write to the client for this chunk (the chunk itself unless usage is being taken out). */
  push(chunk: Buffer, now: number): Buffer | undefined;
  /** The end of the answer: bytes still held, if any. */
  end(): Buffer | undefined;
  readonly usage: TokenUsage | undefined;
  /** Streams: data events that carried text (each proves a completion token), to charge an answer without usage. */
  readonly generated: number;
  /** Raw bytes of the generated text that passed (streams: increments only), for completionFloor. */
  readonly textBytes: number;
  /** performance.now() of the first data event (streams) or the first body byte (JSON); 0 = none yet. */
  readonly firstAt: number;
  readonly streamed: boolean;
}

/** A line longer than this is not read for usage (passed on all the same). */
const MAX_LINE = 1 << 20;
/** An event held for stripping longer than this is passed on as it is. */
const MAX_EVENT = 1 << 20;
/** A `usage` value longer than this is not parsed. */
const MAX_USAGE_VALUE = 16_384;

const NL = 0x0a;
const CR = 0x0d;
const DATA = Buffer.from('data:');

/** `b` ends with a blank line (LF or CRLF) of its own: at the end of an event. */
function endsEvent(b: Buffer): boolean {
  const n = b.length;
  if (n < 2 || b[n - 1] !== NL) return false;
  return b[n - 2] === NL || (n >= 3 && b[n - 2] === CR && b[n - 3] === NL);
}

/** Reads a usage object in either naming (chat/completions: prompt/completion; responses: input/output). */
export function readUsage(u: unknown): TokenUsage | undefined {
  if (typeof u !== 'object' || u === null) return undefined;
  const o = u as Record<string, unknown>;
  const prompt = num(o.prompt_tokens) ?? num(o.input_tokens);
  const completion = num(o.completion_tokens) ?? num(o.output_tokens);
  if (prompt === undefined && completion === undefined) return undefined;
  return { prompt: prompt ?? 0, completion: completion ?? 0 };
}

/** Where `"usage"` starts at or after `from`, else -1: searches its `u` (a one-byte search is several times faster). */
export function findUsage(buf: Buffer, from: number): number {
  let u = buf.indexOf(0x75, from + 1);
  while (u !== -1) {
    if (
      buf[u - 1] === 0x22 &&
      buf[u + 1] === 0x73 &&
      buf[u + 2] === 0x61 &&
      buf[u + 3] === 0x67 &&
      buf[u + 4] === 0x65 &&
      buf[u + 5] === 0x22
    )
      return u - 1;
    u = buf.indexOf(0x75, u + 1);
  }
  return -1;
}

/** A reported count bounded as a charge (MAX_CHARGE): one `1e300` would otherwise own the token counters for good. */
function num(v: unknown): number | undefined {
  return typeof v === 'number' && Number.isFinite(v) && v >= 0 ? Math.min(MAX_CHARGE, Math.floor(v)) : undefined;
}

/** Member names whose non-empty string value is generated text: chat and completions deltas, tool-call arguments,
 * the Responses API's `delta`. */
const TEXT_KEYS = ['"content":', '"text":', '"arguments":', '"delta":'].map((k) => Buffer.from(k));
/** Bytes of text per token, as the prompt estimate counts them (llm-body.ts estimatePrompt). */
export const BYTES_PER_TOKEN = 4;
/** Against a report, text counts at half the rate (4 bytes a token is an average that honest reports fall below). */
const REPORT_SLACK = 2;

/** What an answer is charged, and whether (and over what report) the gateway's own figures were used. */
export interface ChargedUsage {
  tokens: TokenUsage;
  /** A figure is the gateway's own: no usage was reported, or it was less than what the gateway saw. */
  estimated: boolean;
  /** The backend's report, when one came and was raised. */
  reported?: TokenUsage;
}

/**
 * The tokens an answer is charged: no report, what the gateway saw (prompt estimate; text events or bytes); a report,
 * raised to what was seen at REPORT_SLACK (`{0, 0}` after 50 content events is charged 50).
 */
export function chargedUsage(m: UsageMeter, promptEstimate: number): ChargedUsage | undefined {
  const reported = m.usage;
  const slack = reported ? REPORT_SLACK : 1;
  const prompt = Math.max(reported?.prompt ?? 0, Math.ceil(promptEstimate / slack));
  const seen = Math.max(m.generated, Math.ceil(m.textBytes / (BYTES_PER_TOKEN * slack)));
  const completion = Math.max(reported?.completion ?? 0, Math.min(MAX_CHARGE, seen));
  if (!reported) return prompt + completion > 0 ? { tokens: { prompt, completion }, estimated: true } : undefined;
  if (prompt === reported.prompt && completion === reported.completion) return { tokens: reported, estimated: false };
  return { tokens: { prompt, completion }, estimated: true, reported };
}

/** Member names of a JSON answer whose string value is generated text (chat, completions, Responses, reasoning). */
const ANSWER_TEXT_KEYS = ['"content":', '"text":', '"arguments":', '"refusal":', '"reasoning_content":'].map((k) =>
  Buffer.from(k),
);
/** The longest of ANSWER_TEXT_KEYS and TEXT_KEYS: what of a chunk's end is kept for a name cut in two. */
const MAX_KEY = 20;
/** A Responses API event is `"type":"response.…"`: its key, and the start of its value. */
const TYPE_KEY = [Buffer.from('"type":')];
const RESPONSES_VALUE = Buffer.from('"response.');

/** The end of a JSON string whose contents start at `i` (before `stop`): the index of its closing quote, or -1. */
function stringEnd(buf: Buffer, i: number, stop: number): number {
  for (let q = buf.indexOf(QUOTE, i); q !== -1 && q < stop; q = buf.indexOf(QUOTE, q + 1)) {
    let k = q;
    while (k > i && buf[k - 1] === BACKSLASH) k--;
    if ((q - k) % 2 === 0) return q;
  }
  return -1;
}

/** Raw bytes of text in a data line: only `delta` for the Responses API (its `.done` events repeat the text). */
export function lineTextBytes(buf: Buffer, s: number, stop: number): number {
  let bytes = 0;
  let delta = 0;
  let other = 0;
  // Found on the way through the colons: a search of its own cost more than the rest of the line (bench/sse-cost.mjs).
  let responses = false;
  for (let c = buf.indexOf(COLON, s); c !== -1 && c < stop; c = buf.indexOf(COLON, c + 1)) {
    if (!keyEndsAt(buf, s, c, TEXT_KEYS)) {
      if (!responses && startsAt(buf, c + 1, stop, RESPONSES_VALUE) && keyEndsAt(buf, s, c, TYPE_KEY)) responses = true;
      continue;
    }
    let j = c + 1;
    while (j < stop && buf[j] === 0x20) j++;
    if (j >= stop || buf[j] !== QUOTE) continue;
    const end = stringEnd(buf, j + 1, stop);
    const n = (end === -1 ? stop : end) - (j + 1);
    // Of TEXT_KEYS only `"delta":` ends in `a":`.
    if (buf[c - 2] === 0x61) delta += n;
    else other += n;
    bytes += n;
    if (end === -1) break;
    c = end;
  }
  if (other === 0 || delta > 0) return delta > 0 ? delta : bytes;
  return responses ? 0 : bytes;
}

/** `buf` holds `bytes` from `at` on, before `stop`. */
function startsAt(buf: Buffer, at: number, stop: number, bytes: Buffer): boolean {
  if (at + bytes.length > stop) return false;
  for (let k = 0; k < bytes.length; k++) if (buf[at + k] !== bytes[k]) return false;
  return true;
}

/** A data line [s, stop) holding a non-empty string under one of TEXT_KEYS. */
export function carriesText(buf: Buffer, s: number, stop: number): boolean {
  // One pass over the line itself, in place: no view of it per event, and nothing read past its end (a chunk may
  // hold many events). Every key ends with a colon: at each colon, does a key end there, and a string follow?
  for (let c = s; c < stop; c++) {
    if (buf[c] !== 0x3a || !keyEndsAt(buf, s, c, TEXT_KEYS)) continue;
    let j = c + 1;
    while (j < stop && buf[j] === 0x20) j++;
    if (j + 1 < stop && buf[j] === 0x22 && buf[j + 1] !== 0x22) return true;
  }
  return false;
}

/** One of `keys` ends at `c` (its colon), starting at `s` or later. */
function keyEndsAt(buf: Buffer, s: number, c: number, keys: readonly Buffer[]): boolean {
  for (let i = 0; i < keys.length; i++) {
    const key = keys[i];
    const from = c + 1 - key.length;
    if (from < s) continue;
    let k = 0;
    while (k < key.length && buf[from + k] === key[k]) k++;
    if (k === key.length) return true;
  }
  return false;
}

// ---- event streams ------------------------------------------------------------------------------------------------

/** [s, stop) holds an escape of a letter of `usage` (`\u0075`...): a name JSON.parse may read as `usage`. */
function escapesUsageLetter(buf: Buffer, s: number, stop: number): boolean {
  for (let i = buf.indexOf(BACKSLASH, s); i !== -1 && i + 5 < stop; i = buf.indexOf(BACKSLASH, i + 2)) {
    if (buf[i + 1] !== 0x75 || buf[i + 2] !== 0x30 || buf[i + 3] !== 0x30) continue;
    const hi = buf[i + 4];
    const lo = buf[i + 5];
    // u 0075, s 0073, a 0061, g 0067, e 0065
    if ((hi === 0x37 && (lo === 0x35 || lo === 0x33)) || (hi === 0x36 && (lo === 0x31 || lo === 0x37 || lo === 0x35)))
      return true;
  }
  return false;
}

/**
 * The span [start, end) (with one comma) of a line's only `"usage"` when it is a top-level null, as OpenAI sends in
 * every chunk once usage is asked for; undefined for anything else (escaped names too): the line is then parsed.
 */
export function nullUsageSpan(buf: Buffer, s: number, stop: number): [number, number] | undefined {
  const at = findUsage(buf, s);
  if (at === -1 || at >= stop) return undefined;
  const again = findUsage(buf, at + 1);
  if (again !== -1 && again < stop) return undefined;
  if (escapesUsageLetter(buf, s, stop)) return undefined;
  let i = skipSpace(buf, s, stop);
  if (buf[i] !== OPEN_BRACE) return undefined;
  i = skipSpace(buf, i + 1, stop);
  let comma = -1; // the comma before the member being read
  let span: [number, number] | undefined;
  while (i < stop && buf[i] === QUOTE) {
    const name = i;
    for (i++; i < stop && buf[i] !== QUOTE; i++) if (buf[i] === BACKSLASH) return undefined;
    i = skipSpace(buf, i + 1, stop);
    if (i >= stop || buf[i] !== COLON) return undefined;
    const value = skipSpace(buf, i + 1, stop);
    i = skipValue(buf, value, stop);
    const after = skipSpace(buf, i, stop);
    if (after >= stop || (buf[after] !== COMMA && buf[after] !== CLOSE_BRACE)) return undefined;
    if (name === at) {
      const isNull =
        i - value === 4 &&
        buf[value] === 0x6e &&
        buf[value + 1] === 0x75 &&
        buf[value + 2] === 0x6c &&
        buf[value + 3] === 0x6c;
      if (!isNull) return undefined;
      span = buf[after] === COMMA ? [name, after + 1] : [comma === -1 ? name : comma, i];
    }
    // Read on to the end: a later member named with escapes could be a second `usage`.
    if (buf[after] === CLOSE_BRACE) return skipSpace(buf, after + 1, stop) === stop ? span : undefined;
    comma = after;
    i = skipSpace(buf, after + 1, stop);
  }
  return undefined;
}

/** Top-level members of a data line read for usage. */
const LINE_NAMES = nameFilter(
  ['usage', 'response', 'choices'],
  (n) => n === 'usage' || n === 'response' || n === 'choices',
);

/** The usage object at `m` (a valid value), read when it is small enough to be one. */
function usageAt(b: Buffer, m: MemberSpan | undefined): TokenUsage | undefined {
  if (!m || b[m.start] !== OPEN_BRACE || m.end - m.start > MAX_USAGE_VALUE) return undefined;
  return readUsage(JSON.parse(b.toString('utf8', m.start, m.end)));
}

/** The JSON object `b` without every top-level member `name` (as `delete` after JSON.parse); the rest as it came. */
function withoutMembers(b: Buffer, close: number, name: string): Buffer {
  const open = skipSpace(b, 0);
  const kept: Buffer[] = [b.subarray(0, open + 1)];
  let first = true;
  const { members } = objectMembers(b, open, () => true, Infinity);
  for (const m of members) {
    if (m.name === name) continue;
    // The name starts at the quote before its closing quote (a name the gateway reads has no quote in it).
    let q = m.start - 1;
    while (b[q] !== COLON) q--;
    q--;
    while (b[q] !== QUOTE) q--;
    let open2 = q - 1;
    for (;;) {
      while (b[open2] !== QUOTE) open2--;
      let k = open2 - 1;
      while (b[k] === BACKSLASH) k--;
      if ((open2 - 1 - k) % 2 === 0) break;
      open2--;
    }
    if (!first) kept.push(COMMA_BYTE);
    first = false;
    kept.push(b.subarray(open2, m.end));
  }
  kept.push(b.subarray(close));
  return Buffer.concat(kept);
}

const COMMA_BYTE = Buffer.from(',');

type Piece = Buffer | [number, number];

/** Appends `b`, joining the last two pieces while the earlier is at most twice the later: few copies, short list. */
function settle(list: Buffer[], b: Buffer): void {
  list.push(b);
  while (list.length >= 2 && list[list.length - 2].length <= 2 * list[list.length - 1].length) {
    const last = list.pop()!;
    list[list.length - 1] = Buffer.concat([list[list.length - 1], last]);
  }
}

const NOTHING = Object.freeze([]) as unknown as never[];

export class SseUsageMeter implements UsageMeter {
  usage: TokenUsage | undefined;
  generated = 0;
  textBytes = 0;
  firstAt = 0;
  readonly streamed = true;
  /** The beginning of a line that has not ended yet (copies, joined by `settle`), while it is short enough to read. */
  private carry: Buffer[] | undefined;
  /** Bytes of that unfinished line so far (counted on past MAX_LINE, when `carry` is let go). */
  private carryLength = 0;
  // strip only ---------------------------------------------------------------------------------------------------
  /** The current event: copies (earlier chunks, rewritten lines) and [start, end) ranges of the chunk being read. */
  private ev: Piece[];
  private evLength = 0;
  /** The current event grew past MAX_EVENT: its bytes pass as they come, unstripped. */
  private passing = false;
  /** The current event carries only the usage the client did not ask for. */
  private drop = false;
  /** While a chunk is read: what goes out, the open run of it that is a range of the chunk. */
  private out: Buffer[];
  private runStart = -1;
  private runEnd = -1;
  private chunk: Buffer | undefined;

  constructor(private readonly strip: boolean) {
    // Without strip nothing is held or rewritten: one shared, frozen empty list (a meter lives as long as its stream).
    this.ev = strip ? [] : NOTHING;
    this.out = strip ? [] : NOTHING;
  }

  push(chunk: Buffer, now: number): Buffer | undefined {
    const strip = this.strip;
    let hint = -2; // where the chunk's first `"usage"` is (-2: not looked for yet)
    // Stripping, the usual chunk is whole events with no usage in them, nothing held before it: all of it goes as
    // it came, read in place (no pieces, no copies, no lists: the cost of an event is its reads and writes).
    if (strip && this.evLength === 0 && this.carryLength === 0 && !this.passing && !this.drop && endsEvent(chunk)) {
      hint = findUsage(chunk, 0);
      if (hint === -1) {
        for (let from = 0; from < chunk.length;) {
          const nl = chunk.indexOf(NL, from);
          let stop = nl;
          if (stop > from && chunk[stop - 1] === CR) stop--;
          if (stop > from) this.readLine(chunk, from, stop, nl + 1, false, now);
          from = nl + 1;
        }
        return chunk;
      }
    }
    if (strip) this.chunk = chunk;
    let from = 0;
    if (this.carryLength > 0) {
      // The line left open by the previous chunk.
      const nl = chunk.indexOf(NL);
      const end = nl === -1 ? chunk.length : nl + 1;
      if (strip && !this.passing && this.evLength + this.carryLength + end > MAX_EVENT) this.overflow();
      if (strip && this.passing) this.emitRange(0, end);
      this.carryLength += end;
      if (this.carryLength > MAX_LINE) this.carry = undefined;
      if (nl === -1) {
        // Kept as a piece, not joined to what is carried at each chunk: a long line trickled in small chunks would
        // be copied whole at each one (a 900 KB line in 100-byte chunks: 4 GB of copying).
        if (this.carry) settle(this.carry, Buffer.from(chunk.subarray(0, end)));
        return this.result(chunk);
      }
      const line = this.carry && Buffer.concat([...this.carry, chunk.subarray(0, end)]);
      this.carry = undefined;
      this.carryLength = 0;
      from = end;
      // A line too long to read went out as it came: only an event that is passing can hold one.
      if (line) this.lineDone(line, 0, line.length, findUsage(line, 0) !== -1, now, true);
    }
    // Looked for above only with nothing carried, so from is still 0 then.
    if (hint === -2) hint = findUsage(chunk, from);
    for (;;) {
      const nl = chunk.indexOf(NL, from);
      if (nl === -1) break;
      const hasUsage = hint !== -1 && hint < nl;
      this.lineDone(chunk, from, nl + 1, hasUsage, now, false);
      if (hasUsage) hint = findUsage(chunk, nl + 1);
      from = nl + 1;
    }
    if (from < chunk.length) {
      // A line that ends in a later chunk: kept (a copy) to be read when it does.
      this.carryLength = chunk.length - from;
      if (strip && !this.passing && this.evLength + this.carryLength > MAX_EVENT) this.overflow();
      if (strip && this.passing) this.emitRange(from, chunk.length);
      this.carry = this.carryLength <= MAX_LINE ? [Buffer.from(chunk.subarray(from))] : undefined;
    }
    return this.result(chunk);
  }

  end(): Buffer | undefined {
    if (!this.strip) return undefined;
    // An unfinished event goes as it is, but not an unfinished line holding `"usage"`: unread, it may be the usage the
    // client did not ask for (a client reading lines would see it).
    const rest: Buffer[] = this.passing || this.drop ? [] : (this.ev as Buffer[]);
    const carry = this.carry && Buffer.concat(this.carry);
    if (!this.passing && !this.drop && carry && findUsage(carry, 0) === -1) rest.push(carry);
    this.ev = [];
    this.carry = undefined;
    return rest.length ? Buffer.concat(rest) : undefined;
  }

  /** The bytes to send for this chunk; what stays held is copied, since the chunk's memory is not ours to keep. */
  private result(chunk: Buffer): Buffer | undefined {
    if (!this.strip) return chunk;
    if (this.ev.length) {
      // The ranges of this chunk become copies; the held pieces are joined as they pair up (settle), not all at
      // each chunk: an event of many lines, each in its own chunk, would be copied whole at each one.
      const held: Buffer[] = [];
      for (const p of this.ev) settle(held, Buffer.isBuffer(p) ? p : Buffer.from(chunk.subarray(p[0], p[1])));
      this.ev = held;
    }
    this.flushRun();
    const out = this.out;
    this.out = [];
    this.chunk = undefined;
    return out.length === 0 ? undefined : out.length === 1 ? out[0] : Buffer.concat(out);
  }

  /** One whole line [start, end) of `buf` (terminator included); `copied`: buf is not the chunk being read. */
  private lineDone(buf: Buffer, start: number, end: number, hasUsage: boolean, now: number, copied: boolean): void {
    let stop = end - 1; // the "\n"
    if (stop > start && buf[stop - 1] === CR) stop--;
    const blank = stop === start;
    const edit = blank ? undefined : this.readLine(buf, start, stop, end, hasUsage, now);
    if (!this.strip) return;
    if (this.passing) {
      // Its bytes went out as they came (a line carried over) or go now.
      if (!copied) this.emitRange(start, end);
      if (blank) this.passing = false;
      return;
    }
    const piece: Piece = edit ?? (copied ? buf.subarray(start, end) : [start, end]);
    this.evLength += Buffer.isBuffer(piece) ? piece.length : end - start;
    this.ev.push(piece);
    if (blank) {
      if (!this.drop) for (const p of this.ev) this.emitPiece(p);
      this.ev = [];
      this.evLength = 0;
      this.drop = false;
    } else if (this.evLength > MAX_EVENT) this.overflow();
  }

  /** strip: the event is too big to hold; what is held goes now, the rest as it comes, unstripped. */
  private overflow(): void {
    for (const p of this.ev) this.emitPiece(p);
    if (this.carry) for (const c of this.carry) this.emit(c);
    this.ev = [];
    this.evLength = 0;
    this.passing = true;
    this.drop = false;
  }

  private emitPiece(p: Piece): void {
    if (Buffer.isBuffer(p)) this.emit(p);
    else this.emitRange(p[0], p[1]);
  }

  private emitRange(start: number, end: number): void {
    if (this.runStart !== -1 && this.runEnd === start) {
      this.runEnd = end;
      return;
    }
    this.flushRun();
    this.runStart = start;
    this.runEnd = end;
  }

  private emit(b: Buffer): void {
    this.flushRun();
    this.out.push(b);
  }

  private flushRun(): void {
    if (this.runStart === -1) return;
    this.out.push(this.chunk!.subarray(this.runStart, this.runEnd));
    this.runStart = this.runEnd = -1;
  }

  /**
   * Reads one non-blank line [start, stop) (terminator [stop, end)); returns the line to send instead when usage was
   * taken out of it. Only `data:` lines holding `"usage"` are parsed.
   */
  private readLine(
    buf: Buffer,
    start: number,
    stop: number,
    end: number,
    hasUsage: boolean,
    now: number,
  ): Buffer | undefined {
    if (
      stop - start < 5 ||
      buf[start] !== 0x64 ||
      buf[start + 1] !== 0x61 ||
      buf[start + 2] !== 0x74 ||
      buf[start + 3] !== 0x61 ||
      buf[start + 4] !== 0x3a
    ) {
      return undefined;
    }
    let s = start + 5;
    if (buf[s] === 0x20) s++;
    if (!this.firstAt && !(stop - s === 6 && buf[s] === 0x5b && buf.toString('latin1', s, stop) === '[DONE]'))
      this.firstAt = now;
    const text = lineTextBytes(buf, s, stop);
    this.textBytes += text;
    if (text > 0 || carriesText(buf, s, stop)) this.generated++;
    if (!hasUsage) return undefined;
    // The usual `"usage": null` of every chunk: no usage to read; stripping, the member goes, in place.
    const cut = nullUsageSpan(buf, s, stop);
    if (cut) {
      if (!this.strip || this.passing) return undefined;
      return Buffer.concat([buf.subarray(start, cut[0]), buf.subarray(cut[1], end)]);
    }
    // Scanned, not parsed (http/json-scan.ts): a backend's line of up to MAX_LINE could cost 20 times that as a tree.
    const line = buf.subarray(s, stop);
    const doc = scanJson(line, LINE_NAMES);
    if (doc instanceof Error || doc.first !== OPEN_BRACE) return undefined;
    const usages = doc.members.filter((m) => m.name === 'usage');
    const last = (name: string): MemberSpan | undefined => doc.members.findLast((m) => m.name === name);
    const usage = usages[usages.length - 1];
    const response = last('response');
    const inner = response && line[response.start] === OPEN_BRACE ? memberOf(line, response.start, 'usage') : undefined;
    const u = usageAt(line, usage) ?? usageAt(line, inner);
    if (u) this.usage = u;
    if (!this.strip || this.passing || !usage) return undefined;
    // The client did not ask for usage: the event goes when it carries nothing else, else loses its `usage` (OpenAI
    // sends `"usage": null` in every chunk once usage is asked for).
    const choices = last('choices');
    const isNull = usage.end - usage.start === 4 && line[usage.start] === 0x6e;
    if (
      !isNull &&
      choices &&
      line[choices.start] === OPEN_BRACKET &&
      skipSpace(line, choices.start + 1) === choices.end - 1
    ) {
      this.drop = true;
      return undefined;
    }
    return Buffer.concat([DATA, Buffer.from(' '), withoutMembers(line, doc.close, 'usage'), buf.subarray(stop, end)]);
  }
}

// ---- JSON answers ---------------------------------------------------------------------------------------------------

const USAGE_NAME = Buffer.from('usage');
/** A top-level string longer than this (raw) is not read as a member name: "usage" is 5 bytes, or 30 escaped. */
const MAX_NAME = 64;

/** The raw bytes of a member name (between its quotes) name `usage`, escapes decoded as JSON.parse does. */
function isUsageName(raw: Buffer): boolean {
  if (raw.length === USAGE_NAME.length) return raw.equals(USAGE_NAME);
  if (raw.length > MAX_NAME || !raw.includes(BACKSLASH)) return false;
  try {
    return JSON.parse(`"${raw.toString('utf8')}"`) === 'usage';
  } catch {
    return false;
  }
}

/**
 * Parses a JSON answer's top-level `"usage"` alone as the bytes pass, following the structure across chunks so a
 * `usage` nested (a tool call's arguments) or in a string is never taken; the last one decides, as in JSON.parse.
 */
export class JsonUsageMeter implements UsageMeter {
  usage: TokenUsage | undefined;
  readonly generated = 0;
  private readonly text = new TextCounter(ANSWER_TEXT_KEYS);
  firstAt = 0;
  readonly streamed = false;
  /** Object and array depth at the scan position: 0 before the answer's value, 1 inside the answer object. */
  private depth = 0;
  /** The answer's value is an object (the members of a top-level array are not the answer's). */
  private rootObject = false;
  /** The answer's value has ended: nothing after it is read. */
  private done = false;
  private inString = false;
  /** Inside a string, a chunk ended just after a backslash: the next chunk's first byte is escaped. */
  private escaped = false;
  /** A string at depth 1 of the answer object, continued from earlier chunks: its raw bytes while they are few. */
  private name: Buffer[] | undefined;
  private nameLength = 0;
  /** After a top-level `"usage"` string: its colon (a member name), then its value, are next. */
  private after: 'none' | 'colon' | 'value' = 'none';
  /** The top-level usage object being read, continued from earlier chunks: its bytes (copies) while short enough. */
  private value: Buffer[] | undefined;
  private valueLength = 0;

  get textBytes(): number {
    return this.text.bytes;
  }

  push(chunk: Buffer, now: number): Buffer | undefined {
    if (!this.firstAt && chunk.length) this.firstAt = now;
    if (!this.done && chunk.length) {
      this.text.push(chunk);
      this.scan(chunk);
    }
    return chunk;
  }

  end(): Buffer | undefined {
    return undefined;
  }

  /** Follows the structure over one chunk with one-byte native searches for quotes and brackets, not a step a byte. */
  private scan(b: Buffer): void {
    const n = b.length;
    const next = (c: number, from: number): number => {
      const k = b.indexOf(c, from);
      return k === -1 ? n : k;
    };
    // The next position of each byte of interest at or after the scan position (n: none left); -1: not looked up.
    let quote = -1;
    let openBrace = -1;
    let closeBrace = -1;
    let openBracket = -1;
    let closeBracket = -1;
    /** Where, in this chunk, the top-level string or usage value being read began (-1: none is). */
    let nameStart = this.name ? 0 : -1;
    let valueStart = this.value ? 0 : -1;
    let i = 0;
    while (i < n) {
      if (this.inString) {
        if (this.escaped) {
          this.escaped = false;
          i++;
          continue;
        }
        if (quote < i) quote = next(QUOTE, i);
        // A quote ends the string unless an odd run of backslashes (from `i` on) escapes it; a chunk that ends in one
        // escapes the next chunk's first byte.
        let k = quote;
        while (k > i && b[k - 1] === BACKSLASH) k--;
        if ((quote - k) % 2 === 1) {
          if (quote === n) this.escaped = true;
          i = quote + 1;
          continue;
        }
        if (quote === n) break;
        this.inString = false;
        if (nameStart !== -1) {
          if (this.endName(b, nameStart, quote)) this.after = 'colon';
          nameStart = -1;
        }
        i = quote + 1;
        continue;
      }
      if (this.after !== 'none') {
        const c = b[i];
        if (isSpace(c)) {
          i++;
        } else if (this.after === 'colon') {
          // Not a colon: the string was a value, not a member name; the byte is read as any other.
          this.after = c === COLON ? 'value' : 'none';
          if (c === COLON) i++;
        } else {
          // The member JSON.parse keeps: no usage unless it is an object with token counts.
          this.after = 'none';
          this.usage = undefined;
          if (c === OPEN_BRACE) {
            this.value = [];
            this.valueLength = 0;
            valueStart = i;
          }
        }
        continue;
      }
      if (quote < i) quote = next(QUOTE, i);
      if (openBrace < i) openBrace = next(OPEN_BRACE, i);
      if (closeBrace < i) closeBrace = next(CLOSE_BRACE, i);
      if (openBracket < i) openBracket = next(OPEN_BRACKET, i);
      if (closeBracket < i) closeBracket = next(CLOSE_BRACKET, i);
      const at = Math.min(quote, openBrace, closeBrace, openBracket, closeBracket);
      if (at === n) break;
      const c = b[at];
      i = at + 1;
      if (c === QUOTE) {
        this.inString = true;
        if (this.depth === 1 && this.rootObject) {
          this.name = [];
          this.nameLength = 0;
          nameStart = i;
        }
      } else if (c === OPEN_BRACE || c === OPEN_BRACKET) {
        if (this.depth === 0) this.rootObject = c === OPEN_BRACE;
        this.depth++;
      } else {
        this.depth--;
        if (this.depth === 1 && valueStart !== -1) {
          this.endValue(b, valueStart, i);
          valueStart = -1;
        }
        if (this.depth <= 0) {
          this.done = true;
          return;
        }
      }
    }
    // The chunk ended inside a top-level string or the usage value: what is needed of it is kept (a copy).
    if (nameStart !== -1) this.addName(b, nameStart, n);
    if (valueStart !== -1) this.addValue(b, valueStart, n);
  }

  private addName(b: Buffer, start: number, end: number): void {
    if (!this.name) return;
    this.nameLength += end - start;
    if (this.nameLength > MAX_NAME) this.name = undefined;
    else this.name.push(Buffer.from(b.subarray(start, end)));
  }

  /** A top-level string ended at `end`: whether it reads `usage`. */
  private endName(b: Buffer, start: number, end: number): boolean {
    const held = this.name;
    this.name = undefined;
    if (!held) return false;
    if (held.length === 0) return isUsageName(b.subarray(start, end));
    if (this.nameLength + end - start > MAX_NAME) return false;
    return isUsageName(Buffer.concat([...held, b.subarray(start, end)]));
  }

  private addValue(b: Buffer, start: number, end: number): void {
    if (!this.value) return;
    this.valueLength += end - start;
    if (this.valueLength > MAX_USAGE_VALUE) this.value = undefined;
    else this.value.push(Buffer.from(b.subarray(start, end)));
  }

  /** The usage object ended at `end` (its closing brace included). */
  private endValue(b: Buffer, start: number, end: number): void {
    this.addValue(b, start, end);
    const v = this.value;
    this.value = undefined;
    if (!v) return; // too long to read: no usage
    try {
      this.usage = readUsage(JSON.parse(Buffer.concat(v).toString('utf8')));
    } catch {
      // not JSON after all: no usage
    }
  }
}

/**
 * Counts the raw bytes of string values under `keys` as chunks pass (a name cut by a chunk boundary included); in
 * valid JSON a name pattern cannot occur inside a string, its quotes would be escaped.
 */
export class TextCounter {
  bytes = 0;
  private state: 'seek' | 'await' | 'in' = 'seek';
  /** In a string, the chunk before ended in an odd run of backslashes: this chunk's first byte is escaped. */
  private escaped = false;
  /** While seeking: the last bytes of the chunk before (a copy), for a name cut in two. */
  private tail: Buffer | undefined;

  constructor(private readonly keys: readonly Buffer[]) {}

  push(b: Buffer): void {
    const n = b.length;
    let i = 0;
    const prev = this.tail;
    if (this.state === 'seek' && this.tail) {
      // A name that ends (its colon) among this chunk's first bytes and began in the chunk before.
      const head = b.subarray(0, Math.min(n, MAX_KEY));
      const joined = Buffer.concat([this.tail, head]);
      for (let c = joined.indexOf(COLON, this.tail.length); c !== -1; c = joined.indexOf(COLON, c + 1)) {
        if (keyEndsAt(joined, 0, c, this.keys)) {
          this.state = 'await';
          i = c - this.tail.length + 1;
          break;
        }
      }
    }
    this.tail = undefined;
    while (i < n) {
      if (this.state === 'in') {
        if (this.escaped) {
          this.escaped = false;
          this.bytes++;
          i++;
          continue;
        }
        const end = stringEnd(b, i, n);
        if (end === -1) {
          let k = n;
          while (k > i && b[k - 1] === BACKSLASH) k--;
          this.escaped = (n - k) % 2 === 1;
          this.bytes += n - i;
          return;
        }
        this.bytes += end - i;
        this.state = 'seek';
        i = end + 1;
      } else if (this.state === 'await') {
        while (i < n && isSpace(b[i])) i++;
        if (i === n) return;
        // A string is text; anything else (null, an array of parts) is not, and its own names are found in turn.
        this.state = b[i] === QUOTE ? 'in' : 'seek';
        if (this.state === 'in') i++;
      } else {
        const c = b.indexOf(COLON, i);
        if (c === -1) break;
        if (keyEndsAt(b, i, c, this.keys)) this.state = 'await';
        i = c + 1;
      }
    }
    if (this.state !== 'seek') return;
    // A chunk with no colon and shorter than a name: the name may have begun in the chunks before it.
    if (i === 0 && prev && n < MAX_KEY) this.tail = Buffer.concat([prev, b]).subarray(-MAX_KEY);
    else this.tail = Buffer.from(b.subarray(Math.max(i, n - MAX_KEY)));
  }
}
