// The request path as auth, routing and forwarding all see it. Ambiguous forms (dot segments, encoded or back slashes,
// NUL, empty segments) are refused, not rewritten, so no form can be authorised as one deployment and reach another.
import { gatewayError, type GatewayError } from './errors.js';

export interface RequestTarget {
  /** Path segments exactly as sent (still percent-encoded); no empty segment except a trailing one. */
  segments: string[];
  /** "?..." or "". */
  search: string;
}

// Encoded '/', '\', NUL and '.' (an encoded dot can hide a dot segment): refused anywhere in the path.
const FORBIDDEN_ENCODED = /%(2f|5c|00|2e)/i;

export function parseTarget(rawUrl: string): RequestTarget | GatewayError {
  let url = rawUrl;
  if (!url.startsWith('/')) {
    // absolute-form (a client talking to us as a proxy): keep only path and query.
    const m = /^https?:\/\/[^/?#]*(.*)$/i.exec(url);
    if (!m) return gatewayError('bad_path', 'request target must be an absolute path');
    url = m[1] || '/';
    if (!url.startsWith('/')) url = `/${url}`;
  }
  const q = url.indexOf('?');
  const path = q === -1 ? url : url.slice(0, q);
  const search = q === -1 ? '' : url.slice(q);
  if (path.includes('\\')) return gatewayError('bad_path', 'backslashes are not allowed in the path');
  if (FORBIDDEN_ENCODED.test(path)) {
    return gatewayError('bad_path', 'encoded "/", "\\", "." or NUL (%2F, %5C, %2E, %00) are not allowed in the path');
  }
  if (path.includes('#')) return gatewayError('bad_path', 'a fragment is not allowed in the request target');
  const segments = path.slice(1).split('/');
  for (let i = 0; i < segments.length; i++) {
    const s = segments[i];
    if (s === '.' || s === '..')
      return gatewayError('bad_path', 'dot segments ("." or "..") are not allowed in the path');
    if (s === '' && i !== segments.length - 1)
      return gatewayError('bad_path', 'empty path segments ("//") are not allowed');
    // Control characters (raw) never belong in a path.
    for (let j = 0; j < s.length; j++) {
      const c = s.charCodeAt(j);
      if (c < 0x21 || c === 0x7f)
        return gatewayError('bad_path', 'control characters or spaces are not allowed in the path');
    }
    if (s.includes('%')) {
      try {
        decodeURIComponent(s);
      } catch {
        return gatewayError('bad_path', 'the path has an invalid percent-encoding');
      }
    }
  }
  return { segments, search };
}

/** Joins segments back into a path that starts with "/". */
export function joinPath(segments: readonly string[], from = 0): string {
  if (from >= segments.length) return '/';
  return `/${segments.slice(from).join('/')}`;
}

/** The path of a request target, without its query (span names and log lines never carry query strings). */
export function pathOf(url: string | undefined): string {
  const u = url ?? '/';
  const q = u.indexOf('?');
  return q === -1 ? u : u.slice(0, q);
}
