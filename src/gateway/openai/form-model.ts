// The `model` field of a multipart upload (/audio/transcriptions, /images/edits, ...), read from part headers only.
// Strict where a backend's form parser could read otherwise: anything but plainly one `model` field is a 400.
import { gatewayError, type GatewayError } from '../http/errors.js';

/** Where the `model` field's value lies in the body (a second one is a 400), and the value. */
export interface FormModel {
  value: string;
  start: number;
  end: number;
}

/** A part's header block longer than this is malformed (browsers and SDKs write a few hundred bytes). */
const MAX_PART_HEAD = 8192;
const HEAD_END = Buffer.from('\r\n\r\n');

/** Whether a Content-Type is multipart/form-data (the only multipart a form parser reads fields from). */
export function isFormData(contentType: string | undefined): boolean {
  return !!contentType && contentType.split(';', 1)[0].trim().toLowerCase() === 'multipart/form-data';
}

const malformed = (why: string): GatewayError =>
  gatewayError('invalid_body', `the multipart/form-data body is malformed: ${why}`);

/**
 * The `model` field, undefined when none, or a 400 for what parsers may read differently: `model` twice or in another
 * case (the backend could read another than was checked), a transfer coding on it, broken framing. Linear in the body.
 */
export function formModel(body: Buffer, contentType: string): FormModel | undefined | GatewayError {
  const boundary = boundaryOf(contentType);
  if (boundary instanceof Error) return boundary;
  if (boundary === undefined) return malformed('its Content-Type has no boundary');
  const open = Buffer.from(`--${boundary}`, 'latin1');
  const delim = Buffer.from(`\r\n--${boundary}`, 'latin1');
  let at = body.subarray(0, open.length).equals(open) ? 0 : body.indexOf(delim);
  if (at === -1) return malformed('no part delimiter');
  at += at === 0 ? open.length : delim.length;
  let found: FormModel | undefined;
  for (;;) {
    if (body[at] === 0x2d && body[at + 1] === 0x2d) return found; // "--": the closing delimiter
    // Transport padding (spaces, tabs) may follow a delimiter before its CRLF.
    while (body[at] === 0x20 || body[at] === 0x09) at++;
    if (body[at] !== 0x0d || body[at + 1] !== 0x0a) return malformed('a delimiter is not followed by CRLF');
    at += 2;
    const headEnd = body.indexOf(HEAD_END, at - 2);
    if (headEnd === -1 || headEnd - at > MAX_PART_HEAD) return malformed('a part has no end of its headers');
    const head = headEnd < at ? '' : body.toString('latin1', at, headEnd);
    const valueStart = Math.max(headEnd + 4, at + 2);
    const next = body.indexOf(delim, valueStart);
    if (next === -1) return malformed('the last part has no closing delimiter');
    const part = readPartHead(head);
    if (part instanceof Error) return part;
    if (part.name !== undefined && part.name.toLowerCase() === 'model') {
      if (part.name !== 'model')
        return gatewayError('invalid_body', `the form field "model" is spelled "${part.name}"`);
      if (found) return gatewayError('invalid_body', 'the form field "model" is sent twice');
      if (part.encoded) return malformed('the "model" part has a Content-Transfer-Encoding');
      found = { value: body.toString('utf8', valueStart, next), start: valueStart, end: next };
    }
    at = next + delim.length;
  }
}

/** The boundary parameter of a Content-Type (quoted or not), undefined when absent or empty. */
function boundaryOf(contentType: string): string | undefined | GatewayError {
  const p = parameters(contentType, 'boundary', 'its Content-Type');
  if (p instanceof Error) return p;
  return p && p.length <= 200 ? p : undefined;
}

const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

/**
 * The parameter `wanted` of a header value, or a 400 where parsers differ: not plain `; token=token|quoted-string`,
 * repeated (Python's email parser keeps the last, WHATWG's the first) or RFC 2231 `wanted*=` (Python reads it).
 */
function parameters(value: string, wanted: string, where: string): string | undefined | GatewayError {
  const bad = (why: string) => malformed(`${where} ${why}`);
  let found: string | undefined;
  let i = value.indexOf(';');
  if (i === -1) return undefined;
  const n = value.length;
  const ows = (): void => {
    while (value[i] === ' ' || value[i] === '\t') i++;
  };
  while (i < n) {
    i++; // the ';'
    ows();
    if (i >= n) break;
    if (value[i] === ';') continue;
    // Up to the next ';' (a name holds none), searched once: linear in the header however many parameters it has.
    const semi = value.indexOf(';', i);
    const end = semi === -1 ? n : semi;
    const seg = value.slice(i, end);
    const eq = seg.indexOf('=');
    if (eq === -1) {
      // A name alone: no value, skipped by every parser (Python's keeps it as "", and an empty boundary is none).
      const alone = seg.trim().toLowerCase();
      if (alone === wanted || alone.startsWith(`${wanted}*`)) return bad(`has "${wanted}" without a value`);
      i = end;
      continue;
    }
    const name = seg.slice(0, eq).trim().toLowerCase();
    if (!TOKEN.test(name)) return bad('has a parameter name that is not a token');
    i += eq + 1;
    ows();
    let v: string;
    if (value[i] === '"') {
      v = '';
      i++;
      for (;;) {
        if (i >= n) return bad('has a quoted parameter without its closing quote');
        const c = value[i++];
        if (c === '"') break;
        v += c === '\\' && i < n ? value[i++] : c;
      }
      ows();
      if (i < n && value[i] !== ';') return bad('has text after a quoted parameter');
    } else {
      v = value.slice(i, end).trim();
      i = end;
    }
    if (name === `${wanted}*` || (name.startsWith(`${wanted}*`) && /^\*\d+\*?$/.test(name.slice(wanted.length))))
      return bad(`names its ${wanted} in RFC 2231 form (${name}=)`);
    if (name !== wanted) continue;
    if (found !== undefined) return bad(`has "${wanted}" twice`);
    found = v;
  }
  return found === '' ? undefined : found;
}

/** A part's field name (Content-Disposition: form-data; name=...) and whether it declares a transfer coding. */
function readPartHead(head: string): { name: string | undefined; encoded: boolean } | GatewayError {
  let name: string | undefined;
  let dispositions = 0;
  let encoded = false;
  for (const line of head.split('\r\n')) {
    if (line === '') continue;
    if (line[0] === ' ' || line[0] === '\t') return malformed('a part header is folded');
    const colon = line.indexOf(':');
    if (colon <= 0) return malformed('a part header has no name');
    const field = line.slice(0, colon).trim().toLowerCase();
    const value = line.slice(colon + 1);
    if (field === 'content-transfer-encoding') {
      const coding = value.trim().toLowerCase();
      encoded = coding !== '7bit' && coding !== '8bit' && coding !== 'binary';
    } else if (field === 'content-disposition') {
      dispositions++;
      // name*= (RFC 2231) could name the part otherwise for some parsers: not read, so refused (like a second name).
      const p = parameters(value, 'name', "a part's Content-Disposition");
      if (p instanceof Error) return p;
      name = p;
    }
  }
  if (dispositions > 1) return malformed('a part has two Content-Disposition headers');
  return { name, encoded };
}

/** The body with the `model` field's value replaced (the OpenAI base URL rewrites it to the served name). */
export function withFormModel(body: Buffer, m: FormModel, served: string): Buffer {
  return Buffer.concat([body.subarray(0, m.start), Buffer.from(served, 'utf8'), body.subarray(m.end)]);
}
