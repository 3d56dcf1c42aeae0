// Which headers go upstream and which come back, as flat [name, value, ...] lists: hop-by-hop removal, no client
// credentials, gateway-set forwarding and identity headers (SPEC §3); and the functions such lists are edited with.

/** Hop-by-hop (RFC 9110 §7.6.1) and legacy connection headers: never forwarded either way. */
export const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'proxy-authorization',
  'proxy-authenticate',
  'http2-settings',
]);

const ONLY_CHUNKED = /^[\s,]*chunked[\s,]*$/i;

/** A Transfer-Encoding value that is chunked alone (RFC 9112 §7: case-insensitive, empty list elements allowed). */
export function onlyChunked(te: string): boolean {
  return te === 'chunked' || ONLY_CHUNKED.test(te);
}

/** What upstreamHeaders reads of the request's head (readHead's RequestHead). */
export interface ForwardedHead {
  /** Client header lines that may be forwarded, names lower-case. */
  forward: readonly string[];
  authority: string | undefined;
  xff: string | undefined;
  xfProto: string | undefined;
  xfHost: string | undefined;
}

export interface UpstreamContext {
  clientIp: string;
  proto: 'http' | 'https';
  requestId: string;
  project: string;
  deployment: string;
  keyName: string;
  /** host[:port] of the backend, sent as Host. */
  backendAuthority: string;
  trustForwarded: boolean;
  /** Content length to send, when known. */
  contentLength?: number;
  /**
   * The gateway reads the answer (LLM usage): it asks for it uncompressed (`accept-encoding: identity`, the client's
   * own Accept-Encoding not forwarded), since a compressed answer would hide its usage.
   */
  identity?: boolean;
  /** Tracing on: the gateway's span as the backend's parent (the client's own were not forwarded). */
  traceparent?: string;
  tracestate?: string;
}

/** The whole header list for the backend: the client's forwardable lines plus the gateway's own. */
export function upstreamHeaders(head: ForwardedHead, ctx: UpstreamContext): string[] {
  const out = ctx.identity ? withoutHeader(head.forward, 'accept-encoding') : head.forward.slice();
  const trusted = ctx.trustForwarded;
  out.push('x-forwarded-for', trusted && head.xff ? `${head.xff}, ${ctx.clientIp}` : ctx.clientIp);
  if (!trusted || head.xfProto === undefined) out.push('x-forwarded-proto', ctx.proto);
  if ((!trusted || head.xfHost === undefined) && head.authority) out.push('x-forwarded-host', head.authority);
  out.push(
    'x-request-id',
    ctx.requestId,
    'x-servegate-project',
    ctx.project,
    'x-servegate-deployment',
    ctx.deployment,
    'x-servegate-key',
    ctx.keyName,
    'host',
    ctx.backendAuthority,
  );
  if (ctx.contentLength !== undefined) out.push('content-length', String(ctx.contentLength));
  if (ctx.identity) out.push('accept-encoding', 'identity');
  if (ctx.traceparent) out.push('traceparent', ctx.traceparent);
  if (ctx.tracestate) out.push('tracestate', ctx.tracestate);
  return out;
}

/** The gateway's own response header names (and their "_" look-alikes): never taken from a backend. */
const GATEWAY_NAME = /^x[-_]servegate[-_]/;

/** Lines of a backend's answer that stay even when its Connection names them. */
const FRAMING = new Set(['content-length', 'content-type']);

/**
 * The backend's response header lines as the client gets them: hop-by-hop ones and those named in Connection removed,
 * the backend's x-request-id (the gateway sets its own, the one the backend was sent), any x-servegate-* or look-alike
 * x_servegate_* (the gateway's own names, such as x-servegate-variant: a backend must not forge them), and the
 * backend's CORS headers too when the gateway answers CORS itself. `raw` is undici's [name, value, ...].
 */
export function downstreamHeaders(
  raw: ReadonlyArray<Buffer | string>,
  stripCors: boolean,
): {
  list: string[];
  contentType: string | undefined;
  cacheControl: boolean;
  length: boolean;
  chunked: boolean;
  /** A Transfer-Encoding other than chunked alone (gzip, chunked): codings the gateway does not decode. */
  codings: string | undefined;
} {
  const list: string[] = [];
  let codings: string | undefined;
  let contentType: string | undefined;
  let cacheControl = false;
  let length = false;
  let chunked = false;
  let connection: string | undefined;
  for (let i = 0; i < raw.length; i += 2) {
    // Bytes as they came (RFC 9110 §5.5 allows 0x80-0xFF in a value): latin1 both ways, so Node writes them back as is.
    const name = raw[i].toString('latin1').toLowerCase();
    const value = raw[i + 1].toString('latin1');
    if (name === 'connection') {
      connection = connection === undefined ? value : `${connection},${value}`;
      continue;
    }
    if (name === 'transfer-encoding') {
      chunked = true;
      codings = codings === undefined ? value : `${codings},${value}`;
      continue;
    }
    if (HOP_BY_HOP.has(name) || name === 'x-request-id' || (name.charCodeAt(0) === 0x78 && GATEWAY_NAME.test(name)))
      continue;
    if (stripCors && name.startsWith('access-control-')) continue;
    if (name === 'content-length') length = true;
    else if (name === 'content-type') contentType ??= value;
    else if (name === 'cache-control') cacheControl = true;
    list.push(name, value);
  }
  // Taken out, the framing or the type would leave the client unable to read the answer.
  if (connection !== undefined) removeConnectionNamed(list, connection, FRAMING);
  if (codings !== undefined && onlyChunked(codings)) codings = undefined;
  return { list, contentType, cacheControl, length, chunked, codings };
}

const REQUEST_ID = /^[\x21-\x7e]{1,200}$/;

/** The client's x-request-id when it is sane, else undefined (the caller makes one). */
export function clientRequestId(value: string | string[] | undefined): string | undefined {
  if (typeof value !== 'string') return undefined;
  return REQUEST_ID.test(value) ? value : undefined;
}

// Editing flat [name, value, ...] lists. Names compare case-insensitively (RFC 9110 §5.1); the gateway's own lists
// hold lower-case names, so the plain `===` decides almost every line and nothing is allocated per line.

/** Whether header names `a` and `lower` (already lower case) are the same name. */
function sameName(a: string, lower: string): boolean {
  if (a === lower) return true;
  if (a.length !== lower.length) return false;
  for (let i = 0; i < a.length; i++) {
    let c = a.charCodeAt(i);
    if (c >= 0x41 && c <= 0x5a) c += 0x20;
    if (c !== lower.charCodeAt(i)) return false;
  }
  return true;
}

/** The index of the first `name` line in `list` (its name's index; the value is at +1), or -1. */
export function headerIndex(list: readonly string[], name: string): number {
  const lower = name.toLowerCase();
  for (let i = 0; i < list.length; i += 2) if (sameName(list[i], lower)) return i;
  return -1;
}

/** The value of the first `name` line in `list`, or undefined. */
export function headerValue(list: readonly string[], name: string): string | undefined {
  const i = headerIndex(list, name);
  return i === -1 ? undefined : list[i + 1];
}

/** A copy of `list` without its `name` lines; `list` itself is left as it is (it may be shared). */
export function withoutHeader(list: readonly string[], name: string): string[] {
  const lower = name.toLowerCase();
  const out: string[] = [];
  for (let i = 0; i < list.length; i += 2) if (!sameName(list[i], lower)) out.push(list[i], list[i + 1]);
  return out;
}

/**
 * Takes out of `list` (lower-case names), in place, the lines a Connection value names: hop-by-hop for this message
 * (RFC 9110 §7.6.1). `keep`: names that stay even so.
 */
export function removeConnectionNamed(list: string[], connection: string, keep?: ReadonlySet<string>): void {
  // Nearly every message names one token (keep-alive, close): a split and a Set cost ~130 ns on each side.
  if (connection.indexOf(',') === -1) {
    const name = connection === 'keep-alive' || connection === 'close' ? connection : connection.trim().toLowerCase();
    if (keep?.has(name)) return;
    for (let i = list.length - 2; i >= 0; i -= 2) if (list[i] === name) list.splice(i, 2);
    return;
  }
  const named = new Set<string>();
  for (const t of connection.split(',')) named.add(t.trim().toLowerCase());
  for (let i = list.length - 2; i >= 0; i -= 2) if (named.has(list[i]) && !keep?.has(list[i])) list.splice(i, 2);
}

/** Takes every `name` line out of `list`, in place. */
export function removeHeader(list: string[], name: string): void {
  const lower = name.toLowerCase();
  for (let i = list.length - 2; i >= 0; i -= 2) if (sameName(list[i], lower)) list.splice(i, 2);
}

/**
 * Leaves `list` with one `name` line of `value`, in place: the first such line takes the value where it stands (so the
 * order of the others holds), later ones go; with none, the line is appended.
 */
export function setHeader(list: string[], name: string, value: string): void {
  const i = headerIndex(list, name);
  if (i === -1) {
    list.push(name, value);
    return;
  }
  list[i + 1] = value;
  const lower = name.toLowerCase();
  for (let j = list.length - 2; j > i; j -= 2) if (sameName(list[j], lower)) list.splice(j, 2);
}

/**
 * Leaves `list` with at most one Vary line, in place: when there are several (a backend's `Vary: Accept-Encoding,
 * Origin` and the gateway's CORS `Vary: Origin`), the first takes every field name of them all, each once (compared
 * case-insensitively, the first spelling kept), or `*` alone when any says `*` (RFC 9110 §12.5.5); later ones go.
 */
export function mergeVary(list: string[]): void {
  const first = headerIndex(list, 'vary');
  if (first === -1) return;
  let more = false;
  for (let i = first + 2; i < list.length && !more; i += 2) more = sameName(list[i], 'vary');
  if (!more) return;
  const seen = new Set<string>();
  const names: string[] = [];
  for (let i = first; i < list.length; i += 2) {
    if (!sameName(list[i], 'vary')) continue;
    for (const t of list[i + 1].split(',')) {
      const name = t.trim();
      const lower = name.toLowerCase();
      if (name === '' || seen.has(lower)) continue;
      seen.add(lower);
      names.push(name);
    }
  }
  list[first + 1] = seen.has('*') ? '*' : names.join(', ');
  for (let j = list.length - 2; j > first; j -= 2) if (sameName(list[j], 'vary')) list.splice(j, 2);
}

/** A copy of the gateway's own `list` (lower-case names) without its x-ratelimit-* and retry-after lines. */
export function withoutRateHeaders(list: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < list.length; i += 2)
    if (!list[i].startsWith('x-ratelimit-') && list[i] !== 'retry-after') out.push(list[i], list[i + 1]);
  return out;
}
