// The few figures endpoint picking needs (SPEC §12), read from an LLM server's Prometheus text as it streams: each byte
// looked at once at most (a crafted body cannot make it quadratic), bounded in bytes and lines, every figure clamped.

/** What an LLM server says about its own load. */
export interface ServerFigures {
  /** Requests waiting in the server's queue. */
  waiting: number;
  running: number;
  /** KV-cache use, 0-1 (undefined: the server does not say). */
  kv: number | undefined;
  blockSize: number | undefined;
  /**
   * Requests the server has finished since it started (vLLM's `vllm:request_success_total`, summed over its
   * finished_reason series: stop, length, abort); undefined: it does not say. With running and waiting, it counts the
   * requests the server was sent, whose rate the rendezvous weights follow (targets.ts).
   */
  finished?: number;
}

/** Most bytes of metrics text read per scrape by default (1 MiB; vLLM serves tens of kilobytes per model). */
export const DEFAULT_MAX_BYTES = 1 << 20;
/** Most lines read per scrape (comments and series alike): what a scrape may cost in per-line work. */
export const MAX_LINES = 50_000;
/** Longest line of a needed name kept across two reads (its labels); a longer one is dropped, unread. */
const MAX_LINE = 16 << 10;
/** Largest count believed (a sum over series included): larger ones are read as this. */
const MAX_COUNT = 1e9;

/** A scrape stopped at one of its bounds. */
export class ScrapeBoundError extends Error {
  constructor(readonly bound: 'bytes' | 'lines') {
    super(`metrics over ${bound === 'bytes' ? 'the byte' : 'the line'} bound`);
  }
}

const WAITING = 0;
const RUNNING = 1;
const KV = 2;
const GPU_KV = 3;
const CACHE_INFO = 4;
const SG_QUEUE = 5;
const SG_RUNNING = 6;
const SG_TOKENS = 7;
const FINISHED = 8;
/** The names read, by the indexes above; the others are dropped at their first bytes. */
const NAMES = [
  'vllm:num_requests_waiting',
  'vllm:num_requests_running',
  'vllm:kv_cache_usage_perc',
  'vllm:gpu_cache_usage_perc',
  'vllm:cache_config_info',
  'sglang:num_queue_reqs',
  'sglang:num_running_reqs',
  'sglang:token_usage',
  'vllm:request_success_total',
].map((n) => Buffer.from(n, 'latin1'));
const IS_SHARE = [false, false, true, true, false, false, false, true, false];
const VLLM = Buffer.from('vllm:', 'latin1');
const SGLANG = Buffer.from('sglang:', 'latin1');
const BLOCK_SIZE = /(?:^|,)\s*block_size\s*=\s*"(\d{1,7})"/;

/**
 * Lines read on, once vLLM's four figures are in, for `vllm:request_success_total` (vLLM prints it after the gauges and
 * a few counters, before its histograms, and its cache_config_info last): a text without it costs this much more.
 */
const FINISHED_LOOKAHEAD = 512;

/** A name's state (0: not seen yet). */
const OPEN = 1;
const CLOSED = 2;

/**
 * One scrape's text: `push` is true once every figure is complete (a name's lines come together, so the next name
 * ends it) and the rest need not be read; past `maxBytes` or `maxLines` it throws ScrapeBoundError.
 */
export class MetricsReader {
  private bytes = 0;
  private lines = 0;
  /** Inside a line of no needed name: drop bytes up to its end. */
  private skipping = false;
  /** The start of a line cut by the end of a piece (of a needed name, or too short to tell yet). */
  private carry: Buffer[] = [];
  private carried = 0;
  /** Per name: the sum (a share: the largest) of its samples; undefined: none read. */
  private readonly value: Array<number | undefined> = [];
  private readonly state = new Uint8Array(NAMES.length);
  /** The name whose lines are being read (-1: none). */
  private open = -1;
  private blockSize: number | undefined;
  private done = false;
  /** Lines read since vLLM's four figures were in (-1: not yet). */
  private after = -1;

  constructor(
    private readonly maxBytes = DEFAULT_MAX_BYTES,
    private readonly maxLines = MAX_LINES,
  ) {}

  push(piece: Uint8Array): boolean {
    if (this.done) return true;
    const over = this.bytes + piece.length > this.maxBytes;
    const b = over ? piece.subarray(0, this.maxBytes - this.bytes) : piece;
    this.bytes += b.length;
    this.read(b);
    if (this.done) return true;
    if (over) throw new ScrapeBoundError('bytes');
    return false;
  }

  end(): ServerFigures | undefined {
    if (!this.done && this.carried > 0) {
      const last = Buffer.concat(this.carry);
      this.line(last, 0, last.length);
    }
    const v = this.value;
    const waiting = v[WAITING] ?? v[SG_QUEUE];
    const running = v[RUNNING] ?? v[SG_RUNNING];
    const kv = v[KV] ?? v[GPU_KV] ?? v[SG_TOKENS];
    if (waiting === undefined && running === undefined && kv === undefined) return undefined;
    return { waiting: waiting ?? 0, running: running ?? 0, kv, blockSize: this.blockSize, finished: v[FINISHED] };
  }

  private read(b: Uint8Array): void {
    let at = 0;
    const n = b.length;
    if (this.skipping || this.carried > 0) {
      const nl = b.indexOf(10);
      if (nl === -1) {
        if (!this.skipping) this.keep(b, 0, n);
        return;
      }
      if (!this.skipping) {
        this.keep(b, 0, nl);
        if (this.carried > 0) {
          const whole = Buffer.concat(this.carry);
          this.line(whole, 0, whole.length);
        }
      }
      this.carry = [];
      this.carried = 0;
      this.skipping = false;
      at = nl + 1;
      if (this.counted()) return;
    }
    while (at < n) {
      const nl = b.indexOf(10, at);
      if (nl === -1) {
        // The piece ends inside a line: keep its start if it may be a needed name, else drop the rest of it.
        if (n - at < 32 || nameAt(b, at, n) !== -1) this.keep(b, at, n);
        else {
          this.skipping = true;
          this.leave();
        }
        return;
      }
      this.line(b, at, nl);
      at = nl + 1;
      if (this.counted()) return;
    }
  }

  /** One more line ended: false to read on; true once every needed figure is read. Throws past the line bound. */
  private counted(): boolean {
    if (++this.lines > this.maxLines) throw new ScrapeBoundError('lines');
    return (this.done = this.complete());
  }

  /** Keeps the start of a cut line, up to MAX_LINE (past it, the line is dropped). */
  private keep(b: Uint8Array, from: number, to: number): void {
    if (this.carried + to - from > MAX_LINE) {
      this.carry = [];
      this.carried = 0;
      this.skipping = true;
      this.leave();
      return;
    }
    this.carry.push(Buffer.from(b.subarray(from, to)));
    this.carried += to - from;
  }

  /** One line, `b[s..e)` without its newline. */
  private line(b: Uint8Array, s: number, e: number): void {
    if (e > s && b[e - 1] === 13) e--;
    if (e === s) return;
    const f = nameAt(b, s, e);
    if (f === -1) return this.leave();
    let i = s + NAMES[f].length;
    let labels = -1;
    if (b[i] === 123 /* { */) {
      labels = i + 1;
      i = labelsEnd(b, labels, e);
      if (i === -1) return this.leave();
      i++;
    }
    if (this.open !== f) {
      this.leave();
      this.open = f;
      this.state[f] = OPEN;
    }
    if (f === CACHE_INFO) {
      if (labels !== -1 && this.blockSize === undefined) {
        const m = BLOCK_SIZE.exec(Buffer.from(b.buffer, b.byteOffset, b.length).toString('latin1', labels, i - 1));
        const size = m ? Number(m[1]) : 0;
        if (size > 0) this.blockSize = size;
      }
      return;
    }
    while (i < e && (b[i] === 32 || b[i] === 9)) i++;
    let j = i;
    while (j < e && b[j] !== 32 && b[j] !== 9) j++;
    if (j === i || j - i > 40) return;
    const raw = Number(latin1(b, i, j));
    if (!Number.isFinite(raw)) return; // NaN, +Inf, -Inf, or not a number: not believed
    const old = this.value[f];
    if (IS_SHARE[f]) {
      const v = raw < 0 ? 0 : raw > 1 ? 1 : raw;
      this.value[f] = old === undefined ? v : Math.max(old, v);
    } else {
      const v = raw < 0 ? 0 : Math.min(raw, MAX_COUNT);
      this.value[f] = Math.min(MAX_COUNT, (old ?? 0) + v);
    }
  }

  /** A line of another name (or a comment) ends the group of the name being read. */
  private leave(): void {
    if (this.open !== -1) {
      this.state[this.open] = CLOSED;
      this.open = -1;
    }
  }

  /**
   * Every figure this server's kind reports has been read in full (vLLM: its newer KV name, and the finished requests
   * or FINISHED_LOOKAHEAD lines past the others without them).
   */
  private complete(): boolean {
    const s = this.state;
    if (s[WAITING] === CLOSED && s[RUNNING] === CLOSED && s[KV] === CLOSED && s[CACHE_INFO] === CLOSED)
      return s[FINISHED] === CLOSED || ++this.after > FINISHED_LOOKAHEAD;
    return s[SG_QUEUE] === CLOSED && s[SG_RUNNING] === CLOSED && s[SG_TOKENS] === CLOSED;
  }
}

/** The figures of a whole text (no bounds); undefined when it reports none of them. */
export function parseServerMetrics(text: string): ServerFigures | undefined {
  const r = new MetricsReader(Infinity, Infinity);
  r.push(Buffer.from(text, 'latin1'));
  return r.end();
}

/**
 * Which needed name the line `b[s..e)` starts with (followed by `{`, a space or a tab), or -1. A line of any other
 * name costs its first byte, or its first few when it starts with `vllm:` or `sglang:`.
 */
function nameAt(b: Uint8Array, s: number, e: number): number {
  const c = b[s];
  let first: number;
  let last: number;
  let prefix: Buffer;
  if (c === 118 /* v */) {
    first = WAITING;
    last = FINISHED;
    prefix = VLLM;
  } else if (c === 115 /* s */) {
    first = SG_QUEUE;
    last = SG_TOKENS;
    prefix = SGLANG;
  } else return -1;
  if (!startsWith(b, s, e, prefix, 1)) return -1;
  // vLLM's names are WAITING to CACHE_INFO, then FINISHED.
  for (let f = first; f <= last; f = f === CACHE_INFO ? FINISHED : f + 1) {
    const name = NAMES[f];
    const after = s + name.length;
    if (after >= e || !startsWith(b, s, e, name, prefix.length)) continue;
    const d = b[after];
    if (d === 123 || d === 32 || d === 9) return f;
  }
  return -1;
}

function startsWith(b: Uint8Array, s: number, e: number, name: Buffer, from: number): boolean {
  if (e - s < name.length) return false;
  for (let k = from; k < name.length; k++) if (b[s + k] !== name[k]) return false;
  return true;
}

/** The `}` closing a label set that starts at `i`, skipping quoted values (which may hold `}`); -1 if none. */
function labelsEnd(b: Uint8Array, i: number, e: number): number {
  let quoted = false;
  for (; i < e; i++) {
    const c = b[i];
    if (quoted) {
      if (c === 92 /* \ */) i++;
      else if (c === 34 /* " */) quoted = false;
    } else if (c === 34) quoted = true;
    else if (c === 125 /* } */) return i;
  }
  return -1;
}

/** A short run of bytes as text (a sample's value). */
function latin1(b: Uint8Array, from: number, to: number): string {
  let s = '';
  for (let k = from; k < to; k++) s += String.fromCharCode(b[k]);
  return s;
}
