// The access log: one JSON line per request (SPEC §11), built without a logger call and written in batches: at most
// every FLUSH_MS or every 64 KB, instead of one write (and one thread-pool round trip) per request.
export interface AccessRecord {
  requestId: string;
  method: string;
  path: string;
  status: number;
  ms: number;
  project: string;
  deployment: string;
  key: string;
  client: string;
  upstream: string;
  /** Deployments with several endpoints: the rule that picked `upstream` (servegate_endpoint_picks_total counts conversation as prefix, spill as load). */
  pick?: string;
  bytesIn: number;
  bytesOut: number;
  error?: string;
  /** LLM answers whose usage was seen. */
  promptTokens?: number;
  completionTokens?: number;
  /** LLM answers: time to first token, ms. */
  ttftMs?: number;
  /** The token counts are the gateway's: the answer reported no usage (cut, or none sent) or less than it saw pass. */
  tokensEstimated?: boolean;
  /** The usage the answer reported, when the gateway charged more. */
  reportedPromptTokens?: number;
  reportedCompletionTokens?: number;
}

const FLUSH_MS = 100;
const FLUSH_BYTES = 65_536;
/** What JSON.stringify escapes in a string: '"', '\\', control characters, lone surrogates (here: any surrogate). */
// eslint-disable-next-line no-control-regex -- the control characters are what is looked for
const NEEDS_ESCAPE = /["\\\u0000-\u001f\ud800-\udfff]/;

export class AccessLog {
  /**
   * The batch's pieces, joined once when it is written: a line built with `+` or a template makes a string per piece
   * and the batch another copy of each line (about 2 KB of garbage a request; this way 0.8 KB).
   */
  private parts: (string | number)[] = [];
  private n = 0;
  private size = 0;
  private scheduled = false;
  /** The ISO time of the last line's millisecond, made again only when the clock has moved. */
  private lastMs = -1;
  private lastTime = '';
  private readonly flushNow = (): void => this.flush();

  /** `write` takes whole lines (each ends with "\n"). */
  constructor(private readonly write: (text: string) => void) {}

  log(r: AccessRecord): void {
    const now = Date.now();
    if (now !== this.lastMs) {
      this.lastMs = now;
      this.lastTime = new Date(now).toISOString();
    }
    this.put('{"level":"info","time":"', this.lastTime);
    this.str('","service":"servegate","msg":"request","requestId":"', r.requestId);
    this.str('","method":"', r.method);
    this.str('","path":"', r.path);
    this.put('","status":', r.status);
    this.put(',"ms":', r.ms);
    this.str(',"project":"', r.project);
    this.str('","deployment":"', r.deployment);
    this.str('","key":"', r.key);
    this.str('","client":"', r.client);
    this.str('","upstream":"', r.upstream);
    this.put('","bytesIn":', r.bytesIn);
    this.put(',"bytesOut":', r.bytesOut);
    if (r.pick !== undefined) this.str(',"pick":"', r.pick, '"');
    if (r.promptTokens !== undefined) {
      this.put(',"promptTokens":', r.promptTokens);
      this.put(',"completionTokens":', r.completionTokens ?? 0);
    }
    if (r.tokensEstimated) this.put(',"tokensEstimated":true', '');
    if (r.reportedPromptTokens !== undefined) {
      this.put(',"reportedPromptTokens":', r.reportedPromptTokens);
      this.put(',"reportedCompletionTokens":', r.reportedCompletionTokens ?? 0);
    }
    if (r.ttftMs !== undefined) this.put(',"ttftMs":', r.ttftMs);
    if (r.error !== undefined) this.str(',"error":"', r.error, '"');
    this.put('}\n', '');
    if (this.size > FLUSH_BYTES) this.flush();
    else if (!this.scheduled) {
      this.scheduled = true;
      setTimeout(this.flushNow, FLUSH_MS).unref();
    }
  }

  flush(): void {
    this.scheduled = false;
    if (!this.n) return;
    const parts = this.parts;
    parts.length = this.n;
    const text = parts.join('');
    this.n = 0;
    this.size = 0;
    this.write(text);
  }

  /** A constant and a value written as is (a number, or a string that needs no escaping). */
  private put(constant: string, value: string | number): void {
    this.parts[this.n++] = constant;
    this.parts[this.n++] = value;
    this.size += constant.length + (typeof value === 'string' ? value.length : 4);
  }

  /** A constant ending in '"', then `value` as the inside of a JSON string, then `after` (the closing quote). */
  private str(constant: string, value: string, after?: string): void {
    this.put(constant, NEEDS_ESCAPE.test(value) ? JSON.stringify(value).slice(1, -1) : value);
    if (after !== undefined) this.parts[this.n++] = after;
  }
}
