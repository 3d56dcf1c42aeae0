// How a problem message shows a value a user wrote (a Secret field, a spec field): quoted, control characters
// escaped, cut at 64 characters with the total length. Messages reach status conditions, /readyz, /deployments, the
// admin page, the logs and the CLI, so a 1 MB field or one with newlines must not land there whole.

/** The most characters of a value a message shows. */
export const QUOTE_MAX = 64;

// C0 controls, DEL and C1 controls, line and paragraph separators, and bidi marks/overrides/isolates: invisible or
// layout-changing in a log line or a terminal.
// eslint-disable-next-line no-control-regex
const UNSAFE = /[\u0000-\u001f\u007f-\u009f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"\\]/g;

/**
 * `value` as a message shows it: a string in double quotes with `"`, `\` and control characters escaped as JSON
 * does them (`\n`, `\u001b`); anything else as its JSON text, unquoted (`got 70000`, `got {"a":1}`). Longer than
 * `max` characters: the first `max`, then `…" (N characters)`.
 */
export function quoted(value: unknown, max = QUOTE_MAX): string {
  if (typeof value === 'string') return clip(value, max, true);
  let text: string;
  try {
    text = JSON.stringify(value) ?? String(value);
  } catch {
    text = String(value);
  }
  return clip(text, max, false);
}

/** `text` with control characters escaped and cut at `max` characters as `quoted` does, without quotes. */
export function shown(text: string, max = QUOTE_MAX): string {
  return clip(text, max, false);
}

function clip(text: string, max: number, quote: boolean): string {
  let head = text;
  if (text.length > max) {
    let end = max;
    const last = text.charCodeAt(end - 1);
    if (last >= 0xd800 && last <= 0xdbff) end--; // do not cut a surrogate pair in two
    head = text.slice(0, end);
  }
  const body = quote
    ? head.replace(UNSAFE, escape)
    : head.replace(UNSAFE, (c) => (c === '"' || c === '\\' ? c : escape(c)));
  const q = quote ? '"' : '';
  return head === text ? `${q}${body}${q}` : `${q}${body}…${q} (${text.length} characters)`;
}

function escape(c: string): string {
  switch (c) {
    case '"':
      return '\\"';
    case '\\':
      return '\\\\';
    case '\n':
      return '\\n';
    case '\r':
      return '\\r';
    case '\t':
      return '\\t';
    default:
      return `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`;
  }
}
