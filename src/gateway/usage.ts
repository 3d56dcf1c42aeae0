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

/** Reads a usage object in either naming (chat/completions: prompt/completion; responses: input/output). */
export function readUsage(u: unknown): TokenUsage | undefined {
  if (typeof u !== 'object' || u === null) return undefined;
  const o = u as Record<string, unknown>;
  const prompt = num(o.prompt_tokens) ?? num(o.input_tokens);
  const completion = num(o.completion_tokens) ?? num(o.output_tokens);
  if (prompt === undefined && completion === undefined) return undefined;
  return { prompt: prompt ?? 0, completion: completion ?? 0 };
}

function num(v: unknown): number | undefined {
  return typeof v === 'number' && Number.isFinite(v) && v >= 0 ? v : undefined;
}

// ---- event streams ------------------------------------------------------------------------------------------------

export class SseUsageMeter implements UsageMeter {
  usage: TokenUsage | undefined;
  firstAt = 0;
  readonly streamed = true;
  /** The current line so far, across chunks (copied when a chunk ends inside it). */
  private line: Buffer[] = [];
  private lineLength = 0;
  /** The line grew past MAX_LINE: it is not read (and, when not stripping, not kept). */
  private lineTooLong = false;
  /** strip: the lines of the current event (copies, terminators included), held until the blank line ends it. */
  private held: Buffer[] = [];
  private heldLength = 0;
  /** strip: the current event grew past MAX_EVENT and passes as it comes (not stripped). */
  private passing = false;
  /** strip: the current event carries only the usage the client did not ask for. */
  private drop = false;

  constructor(private readonly strip: boolean) {}

  push(chunk: Buffer, now: number): Buffer | undefined {
    const out: Buffer[] | undefined = this.strip ? [] : undefined;
    let from = 0;
    while (from < chunk.length) {
      const nl = chunk.indexOf(NL, from);
      const end = nl === -1 ? chunk.length : nl + 1;
      const part = chunk.subarray(from, end);
      if (out && this.passing) out.push(part);
      this.addToLine(part, out);
      if (nl !== -1) this.lineDone(now, out);
      from = end;
    }
    // A line still open refers to this chunk's memory: keep a copy.
    if (this.line.length) this.line = [Buffer.concat(this.line)];
    if (!out) return chunk;
    return out.length === 0 ? undefined : out.length === 1 ? out[0] : Buffer.concat(out);
  }

  end(): Buffer | undefined {
    if (!this.strip) return undefined;
    const rest = this.passing ? [] : [...(this.drop ? [] : this.held), ...this.line];
    this.held = [];
    this.line = [];
    return rest.length ? Buffer.concat(rest) : undefined;
  }

  private addToLine(part: Buffer, out: Buffer[] | undefined): void {
    this.lineLength += part.length;
    if (this.lineLength > MAX_LINE) this.lineTooLong = true;
    if (!out) {
      if (this.lineTooLong) this.line = [];
      else this.line.push(part);
      return;
    }
    this.line.push(part);
    if (!this.passing && this.heldLength + this.lineLength > MAX_EVENT) {
      // Too big to hold: what is held goes now, the rest of the event as it comes, unstripped.
      for (const b of this.held) out.push(b);
      for (const b of this.line) out.push(b);
      this.held = [];
      this.heldLength = 0;
      this.passing = true;
      this.drop = false;
    }
  }

  /** A whole line (terminator included) is in `this.line`. */
  private lineDone(now: number, out: Buffer[] | undefined): void {
    const parts = this.line;
    const tooLong = this.lineTooLong;
    this.line = [];
    this.lineLength = 0;
    this.lineTooLong = false;
    const raw = parts.length === 1 ? parts[0] : Buffer.concat(parts);
    let end = raw.length - 1; // the "\n"
    if (end > 0 && raw[end - 1] === CR) end--;
    const blank = end === 0 && !tooLong;
    const rewritten = tooLong || blank ? undefined : this.readLine(raw.subarray(0, end), raw.subarray(end), now);
    if (!out) return;
    if (this.passing) {
      // Its bytes went out as they came.
      if (blank) this.passing = false;
      return;
    }
    if (blank) {
      if (!this.drop) {
        for (const b of this.held) out.push(b);
        out.push(raw);
      }
      this.held = [];
      this.heldLength = 0;
      this.drop = false;
      return;
    }
    const kept = rewritten ?? Buffer.from(raw);
    this.held.push(kept);
    this.heldLength += kept.length;
  }

  /** Reads one non-blank line; returns the line to send instead when usage was taken out of it. */
  private readLine(line: Buffer, terminator: Buffer, now: number): Buffer | undefined {
    if (line.length < DATA.length || line.compare(DATA, 0, DATA.length, 0, DATA.length) !== 0) return undefined;
    let start = DATA.length;
    if (line[start] === 0x20) start++;
    const data = line.subarray(start);
    if (!this.firstAt && !(data.length === 6 && data.toString('latin1') === '[DONE]')) this.firstAt = now;
    if (data.indexOf(USAGE_KEY) === -1) return undefined;
    let doc: unknown;
    try {
      doc = JSON.parse(data.toString('utf8'));
    } catch {
      return undefined;
    }
    if (typeof doc !== 'object' || doc === null) return undefined;
    const o = doc as Record<string, unknown>;
    const response = o.response as Record<string, unknown> | undefined;
    const u = readUsage(o.usage) ?? (typeof response === 'object' && response !== null ? readUsage(response.usage) : undefined);
    if (u) this.usage = u;
    if (!this.strip || this.passing || !('usage' in o)) return undefined;
    // The client did not ask for usage: the event goes when it carries nothing else, else loses its `usage` (OpenAI
    // sends `"usage": null` in every chunk once usage is asked for).
    if (o.usage !== null && Array.isArray(o.choices) && o.choices.length === 0) {
      this.drop = true;
      return undefined;
    }
    delete o.usage;
    return Buffer.concat([DATA, Buffer.from(` ${JSON.stringify(o)}`), terminator]);
  }
}

// ---- JSON answers ---------------------------------------------------------------------------------------------------

/**
 * Finds `"usage": {...}` in a JSON answer as it passes. Outside a string a `"usage"` followed by `:` is a member
 * name (a string value holding those characters has its quotes escaped); the last one found wins, as in JSON.parse.
 */
export class JsonUsageMeter implements UsageMeter {
  usage: TokenUsage | undefined;
  firstAt = 0;
  readonly streamed = false;
  /** The last bytes of the previous chunk, so a `"usage"` split between chunks is seen. */
  private tail: Buffer = Buffer.alloc(0);
  /** While reading a value: its bytes so far and the scanner state. */
  private value: number[] | undefined;
  private phase: 'colon' | 'start' | 'value' = 'colon';
  private depth = 0;
  private inString = false;
  private escaped = false;

  push(chunk: Buffer, now: number): Buffer | undefined {
    if (!this.firstAt && chunk.length) this.firstAt = now;
    let from = 0;
    if (this.value) from = this.feed(chunk, 0);
    while (from !== -1 && from < chunk.length) {
      const joined = this.tail.length ? Buffer.concat([this.tail, chunk.subarray(from)]) : chunk.subarray(from);
      const at = joined.indexOf(USAGE_KEY);
      if (at === -1) {
        this.tail = Buffer.from(joined.subarray(Math.max(0, joined.length - (USAGE_KEY.length - 1))));
        return chunk;
      }
      const afterKey = at + USAGE_KEY.length - this.tail.length; // offset in the chunk's remainder
      this.tail = Buffer.alloc(0);
      this.value = [];
      this.phase = 'colon';
      from = this.feed(chunk, from + afterKey);
    }
    return chunk;
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
