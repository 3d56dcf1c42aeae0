// The `model` field of a multipart/form-data upload (OpenAI's /audio/transcriptions, /audio/translations,
// /images/edits, ...): found by reading the part headers only, never the files. Strict where a lenient reading could
// differ from the backend's form parser: what is not plainly one `model` field in well-formed multipart is a 400.
import { gatewayError, type GatewayError } from '../http/errors.js';

/** Where the one `model` field's value lies in the body, and the value. */
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
 * The `model` field of a multipart/form-data body, undefined when there is none, or a 400: no boundary, a part
 * without its delimiter or header end, `model` twice or in another case (a backend takes one of them, the gateway
 * could check the other), or a `model` part with a Content-Transfer-Encoding that would change its bytes.
 * Linear in the body's length: each delimiter is found with one search from the last.
 */
export function formModel(body: Buffer, contentType: string): FormModel | undefined | GatewayError {
  const boundary = boundaryOf(contentType);
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
function boundaryOf(contentType: string): string | undefined {
  const m = /;\s*boundary\s*=\s*(?:"([^"]{1,200})"|([^\s;"]{1,200}))/i.exec(contentType);
  return m ? (m[1] ?? m[2]) : undefined;
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
      const m = /;\s*name\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"]+))/i.exec(value);
      if (m) name = m[1] !== undefined ? m[1].replace(/\\(.)/g, '$1') : m[2];
      // name*= (RFC 2231) could name the part otherwise for some parsers: not read, so refused.
      if (/;\s*name\*\s*=/i.test(value)) return malformed('a part is named with name*=');
    }
  }
  if (dispositions > 1) return malformed('a part has two Content-Disposition headers');
  return { name, encoded };
}

/** The body with the `model` field's value replaced (the OpenAI base URL rewrites it to the served name). */
export function withFormModel(body: Buffer, m: FormModel, served: string): Buffer {
  return Buffer.concat([body.subarray(0, m.start), Buffer.from(served, 'utf8'), body.subarray(m.end)]);
}
