// Which headers go upstream and which come back: hop-by-hop removal, no client credentials, gateway-set forwarding headers.
import type { IncomingHttpHeaders, OutgoingHttpHeaders } from 'node:http';

const HOP_BY_HOP = new Set([
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

/** Never forwarded from the client: its credentials, what the gateway handles itself, and what only the gateway may set. */
const REQUEST_DROP = new Set(['host', 'authorization', 'expect', 'content-length']);
const FORWARDING = new Set(['x-forwarded-for', 'x-forwarded-proto', 'x-forwarded-host', 'x-forwarded-port', 'forwarded', 'x-real-ip']);

export interface UpstreamContext {
  clientIp: string;
  proto: 'http' | 'https';
  host: string | undefined;
  requestId: string;
  project: string;
  deployment: string;
  keyName: string;
  /** host[:port] of the backend, sent as Host. */
  backendAuthority: string;
  trustForwarded: boolean;
  /** Content length to send, when known. */
  contentLength?: number;
  /** Keep Connection/Upgrade for a websocket handshake. */
  upgrade?: boolean;
}

function connectionTokens(value: string | string[] | undefined): Set<string> | undefined {
  if (!value) return undefined;
  const v = Array.isArray(value) ? value.join(',') : value;
  const out = new Set<string>();
  for (const t of v.split(',')) {
    const s = t.trim().toLowerCase();
    if (s) out.add(s);
  }
  return out;
}

export function upstreamHeaders(h: IncomingHttpHeaders, ctx: UpstreamContext): Record<string, string | string[]> {
  const named = connectionTokens(h.connection);
  const out: Record<string, string | string[]> = {};
  for (const name in h) {
    const value = h[name];
    if (value === undefined) continue;
    if (HOP_BY_HOP.has(name) || REQUEST_DROP.has(name)) continue;
    if (named?.has(name)) continue;
    if (name.startsWith('x-servegate-')) continue;
    if (!ctx.trustForwarded && FORWARDING.has(name)) continue;
    out[name] = value;
  }
  const xff = ctx.trustForwarded ? h['x-forwarded-for'] : undefined;
  out['x-forwarded-for'] = xff ? `${Array.isArray(xff) ? xff.join(', ') : xff}, ${ctx.clientIp}` : ctx.clientIp;
  if (!ctx.trustForwarded || !h['x-forwarded-proto']) out['x-forwarded-proto'] = ctx.proto;
  if ((!ctx.trustForwarded || !h['x-forwarded-host']) && ctx.host) out['x-forwarded-host'] = ctx.host;
  out['x-request-id'] = ctx.requestId;
  out['x-servegate-project'] = ctx.project;
  out['x-servegate-deployment'] = ctx.deployment;
  out['x-servegate-key'] = ctx.keyName;
  out.host = ctx.backendAuthority;
  if (ctx.contentLength !== undefined) out['content-length'] = String(ctx.contentLength);
  if (ctx.upgrade) {
    out.connection = 'upgrade';
    if (h.upgrade) out.upgrade = h.upgrade;
  }
  return out;
}

/** Response headers from the backend, minus hop-by-hop ones (and its CORS headers when the gateway answers CORS). */
export function downstreamHeaders(h: IncomingHttpHeaders, stripCors: boolean): OutgoingHttpHeaders {
  const named = connectionTokens(h.connection);
  const out: OutgoingHttpHeaders = {};
  for (const name in h) {
    const value = h[name];
    if (value === undefined) continue;
    if (HOP_BY_HOP.has(name)) continue;
    if (named?.has(name)) continue;
    if (stripCors && name.startsWith('access-control-')) continue;
    out[name] = value;
  }
  return out;
}

const REQUEST_ID = /^[\x21-\x7e]{1,200}$/;

/** The client's x-request-id when it is sane, else undefined (the caller makes one). */
export function clientRequestId(value: string | string[] | undefined): string | undefined {
  if (typeof value !== 'string') return undefined;
  return REQUEST_ID.test(value) ? value : undefined;
}
