// One pass over the client's header lines (req.rawHeaders, so Node never builds its headers object): the facts the
// decisions need, and the lines that may go upstream. Counting happens here too: Host lines, header lines, duplicates.
import type { IncomingMessage } from 'node:http';
import { gatewayError, type GatewayError } from './errors.js';
import { HOP_BY_HOP, onlyChunked, removeConnectionNamed } from './headers.js';

export interface RequestHead {
  method: string;
  /** Authority that routes: an absolute-form target's (RFC 9112 §3.2.2), else the Host header's. */
  authority: string | undefined;
  /** Host header lines (RFC 9112 §3.2: exactly one). */
  hostLines: number;
  /** One value, or every value when the header came more than once (then it is malformed). */
  authorization: string | string[] | undefined;
  contentType: string | undefined;
  /** Content-Encoding, lower case; several lines joined by ", " (a chain of codings). */
  contentEncoding: string | undefined;
  /** With tracing on only (else they are forwarded like any header); a repeated traceparent is invalid (''). */
  traceparent: string | undefined;
  tracestate: string | undefined;
  /** From Content-Length (Node's parser already refused invalid or conflicting values). */
  contentLength: number | undefined;
  chunked: boolean;
  /** The Transfer-Encoding lines, joined with commas (undefined: none). */
  transferCoding: string | undefined;
  origin: string | undefined;
  requestId: string | undefined;
  /** The Expect lines, joined by ", " as Node joins them. */
  expect: string | undefined;
  /** Lower-cased Upgrade token(s). */
  upgrade: string | undefined;
  acrMethod: boolean;
  acrHeaders: string | undefined;
  headerLines: number;
  /** Client header lines that may be forwarded, flat [name, value, ...], names lower-case. */
  forward: string[];
  /** Forwarding headers the client sent, used only when trustForwardedHeaders is on. */
  xff: string | undefined;
  xfProto: string | undefined;
  xfHost: string | undefined;
}

export interface HeadOptions {
  trustForwarded: boolean;
  forwardUnderscore: boolean;
  /** Tracing on: the client's traceparent/tracestate are read here and replaced upstream by the gateway's own. */
  tracing?: boolean;
}

/** Client headers the gateway handles itself or sets itself. */
const GATEWAY_OWNED = new Set(['host', 'authorization', 'expect', 'content-length', 'x-request-id']);
export const FORWARDING = new Set([
  'x-forwarded-for',
  'x-forwarded-proto',
  'x-forwarded-host',
  'x-forwarded-port',
  'forwarded',
  'x-real-ip',
]);

/** True when a header of this (lower-case, "-"-spelled) name is never taken from the client. */
function reserved(name: string, trustForwarded: boolean): boolean {
  return (
    HOP_BY_HOP.has(name) ||
    GATEWAY_OWNED.has(name) ||
    name.startsWith('x-servegate-') ||
    (!trustForwarded && FORWARDING.has(name))
  );
}

// host[:port] (RFC 9110 §7.2): a reg-name, IPv4 address or bracketed IP literal; no userinfo, path or second port.
const AUTHORITY = /^(?:[A-Za-z0-9._~!$&'()*+,;=%-]+|\[[0-9A-Fa-f:.]+\])(?::\d{0,5})?$/;

const ENDS_CHUNKED = /(^|[\s,])chunked[\s,]*$/i;

/**
 * Why a head is untrustworthy (plain and upgrade): too many lines (431), not exactly one valid Host (RFC 9112 §3.2;
 * HTTP/1.0 may omit it), a Transfer-Encoding other than chunked alone (400 or 501); undefined when sound.
 */

export function headProblem(head: RequestHead, req: IncomingMessage, maxHeaders: number): GatewayError | undefined {
  if (head.headerLines > maxHeaders) {
    return gatewayError(
      'headers_too_large',
      `the request has ${head.headerLines} header lines; at most ${maxHeaders} are accepted`,
    );
  }
  if (head.hostLines > 1) return gatewayError('bad_request', 'more than one Host header');
  // Node's parser frames a body by its last coding when that is chunked ("gzip, chunked") and hands over the chunks
  // with the other codings still applied: forwarded, the backend would take gzip bytes for the body itself.
  const te = head.transferCoding;
  if (te !== undefined && !onlyChunked(te)) {
    // Not ending in chunked, the body's length cannot be known (RFC 9112 §6.3): 400. Ending in it: codings the gateway
    // does not apply (RFC 9112 §6.1): 501.
    if (!ENDS_CHUNKED.test(te)) {
      return gatewayError(
        'bad_request',
        `Transfer-Encoding "${te.slice(0, 100)}" does not end in chunked: the body's length cannot be known`,
      );
    }
    return gatewayError(
      'unsupported_transfer_coding',
      `Transfer-Encoding "${te.slice(0, 100)}" is not supported: send the body with Content-Length or Transfer-Encoding: chunked alone (a compressed body goes with Content-Encoding)`,
    );
  }
  if (head.hostLines === 0 && req.httpVersionMajor === 1 && req.httpVersionMinor === 1)
    return gatewayError('bad_request', 'an HTTP/1.1 request needs a Host header');
  if (head.authority !== undefined && !AUTHORITY.test(head.authority))
    return gatewayError('bad_request', `invalid Host ${JSON.stringify(head.authority.slice(0, 100))}`);
  return undefined;
}

/** `name` in lower case; most clients send names in lower case already, and then no copy is made. */
export function lowerName(name: string): string {
  for (let i = 0; i < name.length; i++) {
    const c = name.charCodeAt(i);
    if ((c >= 65 && c <= 90) || c > 127) return name.toLowerCase();
  }
  return name;
}

export function readHead(req: IncomingMessage, opts: HeadOptions): RequestHead {
  const raw = req.rawHeaders;
  const forward: string[] = [];
  const head: RequestHead = {
    method: req.method ?? 'GET',
    authority: undefined,
    hostLines: 0,
    authorization: undefined,
    contentType: undefined,
    contentEncoding: undefined,
    traceparent: undefined,
    tracestate: undefined,
    contentLength: undefined,
    chunked: false,
    transferCoding: undefined,
    origin: undefined,
    requestId: undefined,
    expect: undefined,
    upgrade: undefined,
    acrMethod: false,
    acrHeaders: undefined,
    headerLines: raw.length >> 1,
    forward,
    xff: undefined,
    xfProto: undefined,
    xfHost: undefined,
  };
  let connection: string | undefined;
  for (let i = 0; i < raw.length; i += 2) {
    const name = lowerName(raw[i]);
    const value = raw[i + 1];
    switch (name) {
      case 'host':
        head.hostLines++;
        if (head.authority === undefined) head.authority = value;
        continue;
      case 'authorization':
        if (head.authorization === undefined) head.authorization = value;
        else
          head.authorization = [
            ...(Array.isArray(head.authorization) ? head.authorization : [head.authorization]),
            value,
          ];
        continue;
      case 'content-length':
        head.contentLength = Number(value);
        continue;
      case 'transfer-encoding':
        head.chunked = true;
        head.transferCoding = head.transferCoding === undefined ? value : `${head.transferCoding},${value}`;
        continue;
      case 'content-type':
        head.contentType ??= value;
        break;
      case 'content-encoding': {
        const v = value.trim().toLowerCase();
        head.contentEncoding = head.contentEncoding === undefined ? v : `${head.contentEncoding}, ${v}`;
        break;
      }
      case 'origin':
        head.origin ??= value;
        break;
      case 'x-request-id':
        // Repeated: neither is trusted; the gateway makes a fresh one.
        head.requestId = head.requestId === undefined ? value : '';
        continue;
      case 'expect':
        head.expect = head.expect === undefined ? value : `${head.expect}, ${value}`;
        continue;
      case 'upgrade':
        head.upgrade = value.toLowerCase();
        continue;
      case 'connection':
        connection = connection === undefined ? value : `${connection},${value}`;
        continue;
      case 'access-control-request-method':
        head.acrMethod = true;
        break;
      case 'access-control-request-headers':
        head.acrHeaders = head.acrHeaders === undefined ? value : `${head.acrHeaders},${value}`;
        break;
      case 'traceparent':
        if (!opts.tracing) break;
        head.traceparent = head.traceparent === undefined ? value : '';
        continue;
      case 'tracestate':
        if (!opts.tracing) break;
        head.tracestate = head.tracestate === undefined ? value : `${head.tracestate},${value}`;
        continue;
      case 'x-forwarded-for':
        // Always set by the gateway (appended to the client's only when trusted).
        head.xff = head.xff === undefined ? value : `${head.xff}, ${value}`;
        continue;
      case 'x-forwarded-proto':
        head.xfProto ??= value;
        break;
      case 'x-forwarded-host':
        head.xfHost ??= value;
        break;
    }
    if (reserved(name, opts.trustForwarded)) continue;
    if (name.includes('_')) {
      // Look-alikes ("X_Servegate_Key") never pass; other underscore names only when configured.
      if (!opts.forwardUnderscore || reserved(name.replace(/_/g, '-'), false)) continue;
    }
    forward.push(name, value);
  }
  // The gateway's own lines are not in `forward` yet, so a Connection naming them cannot take them out.
  if (connection !== undefined && forward.length) removeConnectionNamed(forward, connection);
  // An absolute-form target names the authority itself; the Host header is then ignored (RFC 9112 §3.2.2).
  const url = req.url ?? '/';
  if (url.charCodeAt(0) !== 47 /* / */) {
    const m = /^https?:\/\/([^/?#]*)/i.exec(url);
    if (m) head.authority = m[1];
  }
  return head;
}

/** The Expect value Node's 'checkContinue' event stands for. */
export const CONTINUE = '100-continue';

/** Node's own test of an Expect value for 100-continue (its server emits 'checkContinue' then, else 'checkExpectation'). */
const ASKS_CONTINUE = /(?:^|\W)100-continue(?:$|\W)/i;

/**
 * The request's expectation as Node's server takes it (on HTTP/1.1 only): CONTINUE (answered once admitted), another
 * value (refused, 417), or undefined.
 */
export function expectationOf(head: RequestHead, req: IncomingMessage): string | undefined {
  const value = head.expect;
  if (value === undefined || req.httpVersionMajor !== 1 || req.httpVersionMinor !== 1) return undefined;
  return ASKS_CONTINUE.test(value) ? CONTINUE : value;
}

/** The address failed-auth throttling counts: the peer, or behind a trusted proxy the last X-Forwarded-For hop. */
export function clientAddress(peer: string, head: RequestHead, trustForwarded: boolean): string {
  if (!trustForwarded || !head.xff) return peer;
  const last = head.xff.slice(head.xff.lastIndexOf(',') + 1).trim();
  return last || peer;
}
