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
  /** Deployments with several endpoints: the rule that picked `upstream` (servegate_endpoint_picks_total's reason). */
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

export class AccessLog {
  private pending = '';
  private scheduled = false;
  private readonly flushNow = (): void => this.flush();

  /** `write` takes whole lines (each ends with "\n"). */
  constructor(private readonly write: (text: string) => void) {}

  log(r: AccessRecord): void {
    let line =
      `{"level":"info","time":"${new Date().toISOString()}","service":"servegate","msg":"request","requestId":${JSON.stringify(r.requestId)}` +
      `,"method":${JSON.stringify(r.method)},"path":${JSON.stringify(r.path)},"status":${r.status},"ms":${r.ms}` +
      `,"project":${JSON.stringify(r.project)},"deployment":${JSON.stringify(r.deployment)},"key":${JSON.stringify(r.key)}` +
      `,"client":${JSON.stringify(r.client)},"upstream":${JSON.stringify(r.upstream)},"bytesIn":${r.bytesIn},"bytesOut":${r.bytesOut}`;
    if (r.pick !== undefined) line += `,"pick":"${r.pick}"`;
    if (r.promptTokens !== undefined)
      line += `,"promptTokens":${r.promptTokens},"completionTokens":${r.completionTokens ?? 0}`;
    if (r.tokensEstimated) line += `,"tokensEstimated":true`;
    if (r.reportedPromptTokens !== undefined)
      line += `,"reportedPromptTokens":${r.reportedPromptTokens},"reportedCompletionTokens":${r.reportedCompletionTokens ?? 0}`;
    if (r.ttftMs !== undefined) line += `,"ttftMs":${r.ttftMs}`;
    if (r.error !== undefined) line += `,"error":${JSON.stringify(r.error)}`;
    this.pending += `${line}}\n`;
    if (this.pending.length > FLUSH_BYTES) this.flush();
    else if (!this.scheduled) {
      this.scheduled = true;
      setTimeout(this.flushNow, FLUSH_MS).unref();
    }
  }

  flush(): void {
    this.scheduled = false;
    if (!this.pending) return;
    const text = this.pending;
    this.pending = '';
    this.write(text);
  }
}
