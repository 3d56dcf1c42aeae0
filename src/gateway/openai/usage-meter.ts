// Token usage of LLM answers, read as the bytes pass (SPEC §9), in bounded memory: never the whole answer.
// - Event streams: parsed line by line; the `usage` of the event that carries one (the last wins: with
//   continuous usage stats every event carries the running total), and when the first data event came (TTFT).
//   With `strip`, the gateway asked for the usage the client did not ask for: events are then passed on whole (one
//   at a time, as they complete) and the usage is taken out — the event dropped when it carries nothing else, else
//   written again without `usage`.
// - JSON answers: the bytes pass unchanged; a scanner finds the `"usage"` member and parses that value alone.

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
  /**
   * Streams: data events that carried generated text (each proves at least one completion token), for charging an
   * answer that ends without its usage.
   */
  readonly generated: number;
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
const USAGE_KEY = Buffer.from('"usage"');
const DATA = Buffer.from('data:');
const EMPTY = Buffer.alloc(0);

/** Reads a usage object in either naming (chat/completions: prompt/completion; responses: input/output). */
export function readUsage(u: unknown): TokenUsage | undefined {
  if (typeof u !== 'object' || u === null) return undefined;
  const o = u as Record<string, unknown>;
  const prompt = num(o.prompt_tokens) ?? num(o.input_tokens);
  const completion = num(o.completion_tokens) ?? num(o.output_tokens);
  if (prompt === undefined && completion === undefined) return undefined;
  return { prompt: prompt ?? 0, completion: completion ?? 0 };
}

/**
 * Where `"usage"` starts in `buf` at or after `from`, else -1. A search for its `u` (a one-byte search is native and
 * fast; a multi-byte needle costs several times more) and a check of the bytes around it.
 */
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

function num(v: unknown): number | undefined {
  return typeof v === 'number' && Number.isFinite(v) && v >= 0 ? v : undefined;
}

/** Member names whose non-empty string value is generated text: chat and completions deltas, tool-call arguments,
 * the Responses API's `delta`. */
const TEXT_KEYS = ['"content":', '"text":', '"arguments":', '"delta":'].map((k) => Buffer.from(k));

/** A data line [s, stop) holding a non-empty string under one of TEXT_KEYS. */
export function carriesText(buf: Buffer, s: number, stop: number): boolean {
  const line = buf.subarray(s, stop);
  for (const key of TEXT_KEYS) {
    let at = line.indexOf(key);
    while (at !== -1) {
      let j = at + key.length;
      while (line[j] === 0x20) j++;
      if (line[j] === 0x22 && j + 1 < line.length && line[j + 1] !== 0x22) return true;
      at = line.indexOf(key, at + key.length);
    }
  }
  return false;
}

// ---- event streams ------------------------------------------------------------------------------------------------

type Piece = Buffer | [number, number];

export class SseUsageMeter implements UsageMeter {
  usage: TokenUsage | undefined;
  generated = 0;
  firstAt = 0;
  readonly streamed = true;
  /** The beginning of a line that has not ended yet (a copy), while it is short enough to read. */
  private carry: Buffer | undefined;
  /** Bytes of that unfinished line so far (counted on past MAX_LINE, when `carry` is let go). */
  private carryLength = 0;
  // strip only ---------------------------------------------------------------------------------------------------
  /** The current event: copies (earlier chunks, rewritten lines) and [start, end) ranges of the chunk being read. */
  private ev: Piece[] = [];
  private evLength = 0;
  /** The current event grew past MAX_EVENT: its bytes pass as they come, unstripped. */
  private passing = false;
  /** The current event carries only the usage the client did not ask for. */
  private drop = false;
  /** While a chunk is read: what goes out, the open run of it that is a range of the chunk. */
  private out: Buffer[] = [];
  private runStart = -1;
  private runEnd = -1;
  private chunk: Buffer | undefined;

  constructor(private readonly strip: boolean) {}

  push(chunk: Buffer, now: number): Buffer | undefined {
    const strip = this.strip;
    if (strip) this.chunk = chunk;
    let from = 0;
    if (this.carryLength > 0) {
      // The line left open by the previous chunk.
      const nl = chunk.indexOf(NL);
      const end = nl === -1 ? chunk.length : nl + 1;
      if (strip && !this.passing && this.evLength + this.carryLength + end > MAX_EVENT) this.overflow();
      if (strip && this.passing) this.emitRange(0, end);
      this.carryLength += end;
      this.carry =
        this.carry && this.carryLength <= MAX_LINE ? Buffer.concat([this.carry, chunk.subarray(0, end)]) : undefined;
      if (nl === -1) return this.result(chunk);
      const line = this.carry;
      this.carry = undefined;
      this.carryLength = 0;
      from = end;
      // A line too long to read went out as it came: only an event that is passing can hold one.
      if (line) this.lineDone(line, 0, line.length, findUsage(line, 0) !== -1, now, true);
    }
    let hint = findUsage(chunk, from);
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
      this.carry = this.carryLength <= MAX_LINE ? Buffer.from(chunk.subarray(from)) : undefined;
    }
    return this.result(chunk);
  }

  end(): Buffer | undefined {
    if (!this.strip) return undefined;
    // An event the stream did not finish with a blank line goes as it is (unless it was all usage).
    const rest: Buffer[] = this.passing || this.drop ? [] : (this.ev as Buffer[]);
    if (!this.passing && !this.drop && this.carry) rest.push(this.carry);
    this.ev = [];
    this.carry = undefined;
    return rest.length ? Buffer.concat(rest) : undefined;
  }

  /** The bytes to send for this chunk; what stays held is copied, since the chunk's memory is not ours to keep. */
  private result(chunk: Buffer): Buffer | undefined {
    if (!this.strip) return chunk;
    if (this.ev.length)
      this.ev = [Buffer.concat(this.ev.map((p) => (Buffer.isBuffer(p) ? p : chunk.subarray(p[0], p[1]))))];
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
    if (this.carry) this.emit(this.carry);
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
    if (carriesText(buf, s, stop)) this.generated++;
    if (!hasUsage) return undefined;
    let doc: unknown;
    try {
      doc = JSON.parse(buf.toString('utf8', s, stop));
    } catch {
      return undefined;
    }
    if (typeof doc !== 'object' || doc === null) return undefined;
    const o = doc as Record<string, unknown>;
    const response = o.response as Record<string, unknown> | undefined;
    const u =
      readUsage(o.usage) ?? (typeof response === 'object' && response !== null ? readUsage(response.usage) : undefined);
    if (u) this.usage = u;
    if (!this.strip || this.passing || !('usage' in o)) return undefined;
    // The client did not ask for usage: the event goes when it carries nothing else, else loses its `usage` (OpenAI
    // sends `"usage": null` in every chunk once usage is asked for).
    if (o.usage !== null && Array.isArray(o.choices) && o.choices.length === 0) {
      this.drop = true;
      return undefined;
    }
    delete o.usage;
    return Buffer.concat([DATA, Buffer.from(` ${JSON.stringify(o)}`), buf.subarray(stop, end)]);
  }
}

// ---- JSON answers ---------------------------------------------------------------------------------------------------

/**
 * Finds `"usage": {...}` in a JSON answer as it passes. Outside a string a `"usage"` followed by `:` is a member
 * name (a string value holding those characters has its quotes escaped); the last one found wins, as in JSON.parse.
 */
export class JsonUsageMeter implements UsageMeter {
  usage: TokenUsage | undefined;
  readonly generated = 0;
  firstAt = 0;
  readonly streamed = false;
  /** The last bytes of the previous chunk, so a `"usage"` split between chunks is seen. */
  private tail: Buffer = EMPTY;
  /** While reading a value: its bytes so far and the scanner state. */
  private value: number[] | undefined;
  private phase: 'colon' | 'start' | 'value' = 'colon';
  private depth = 0;
  private inString = false;
  private escaped = false;

  push(chunk: Buffer, now: number): Buffer | undefined {
    if (!this.firstAt && chunk.length) this.firstAt = now;
    let from = 0;
    const prevTail = this.tail;
    this.tail = EMPTY;
    if (this.value) {
      from = this.feed(chunk, 0);
      if (from === -1) return chunk;
    } else if (prevTail.length) {
      // A "usage" that began at the end of the previous chunk(s).
      const edge = Buffer.concat([prevTail, chunk.subarray(0, USAGE_KEY.length - 1)]);
      const at = findUsage(edge, 0);
      if (at !== -1) {
        this.start();
        from = this.feed(chunk, at + USAGE_KEY.length - prevTail.length);
        if (from === -1) return chunk;
      }
    }
    for (;;) {
      const at = findUsage(chunk, from);
      if (at === -1) break;
      this.start();
      from = this.feed(chunk, at + USAGE_KEY.length);
      if (from === -1) return chunk;
    }
    // The last bytes read (of this chunk, and of the ones before when it is short), in case a "usage" goes on in the
    // next chunk.
    const keep = USAGE_KEY.length - 1;
    const rest = chunk.subarray(Math.max(from, chunk.length - keep));
    const joined = from === 0 && rest.length < keep && prevTail.length ? Buffer.concat([prevTail, rest]) : rest;
    this.tail = Buffer.from(joined.subarray(Math.max(0, joined.length - keep)));
    return chunk;
  }

  private start(): void {
    this.value = [];
    this.phase = 'colon';
  }

  end(): Buffer | undefined {
    return undefined;
  }

  /** Reads the value from `chunk[i]` on; the offset after it, or -1 when the chunk ended inside it. */
  private feed(chunk: Buffer, i: number): number {
    const v = this.value!;
    for (; i < chunk.length; i++) {
      const c = chunk[i];
      if (this.phase === 'colon') {
        if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) continue;
        if (c !== 0x3a) return this.stop(i); // a string value "usage", not a member name
        this.phase = 'start';
        continue;
      }
      if (this.phase === 'start') {
        if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) continue;
        if (c !== 0x7b) return this.stop(i); // null or not an object
        this.phase = 'value';
        this.depth = 0;
        this.inString = false;
        this.escaped = false;
      }
      v.push(c);
      if (v.length > MAX_USAGE_VALUE) return this.stop(i + 1);
      if (this.inString) {
        if (this.escaped) this.escaped = false;
        else if (c === 0x5c) this.escaped = true;
        else if (c === 0x22) this.inString = false;
        continue;
      }
      if (c === 0x22) this.inString = true;
      else if (c === 0x7b || c === 0x5b) this.depth++;
      else if (c === 0x7d || c === 0x5d) {
        this.depth--;
        if (this.depth === 0) {
          try {
            this.usage = readUsage(JSON.parse(Buffer.from(v).toString('utf8'))) ?? this.usage;
          } catch {
            // not JSON after all: ignored
          }
          return this.stop(i + 1);
        }
      }
    }
    return -1;
  }

  private stop(next: number): number {
    this.value = undefined;
    return next;
  }
}
