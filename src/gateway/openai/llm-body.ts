// The gateway's edits to an LLM request body, made on the bytes so that how a client spells things cannot steer what
// the backend serves or the gateway meters: `model`, `stream`, `stream_options` once each in lower case (Go's decoder
// folds case, so `"MODEL"` could name a model not checked); `model` set to the served name; `stream` written back as a
// boolean; usage asked for on streams that report it only when asked, and stripped again (`stripUsage`).
import type { ApiKeyRecord, Backend, Route, RouteTable } from '../../routing/types.js';
import { grantsProject } from '../../routing/names.js';
import { gatewayError, type GatewayError } from '../http/errors.js';
import {
  nameFilter,
  objectMembers,
  scanJson,
  skipString,
  skipValue,
  stringValue,
  type MemberSpan,
} from '../http/json-scan.js';

/** OpenAI routes whose streams report usage only when `stream_options.include_usage` asks for it. */
export const USAGE_OPTION_ROUTES = new Set(['/v1/chat/completions', '/v1/completions']);

/** Members the gateway reads or edits: each must appear once, spelled in lower case. */
const READ_MEMBERS = ['model', 'stream', 'stream_options'];
/** Members the prompt estimate and the prefix key read (JSON.parse's reading: the last of a name). */
const PROMPT_MEMBERS = ['messages', 'prompt', 'input', 'tools'];
const TOP_NAMES = nameFilter(
  [...READ_MEMBERS, ...PROMPT_MEMBERS],
  (n) => PROMPT_MEMBERS.includes(n) || READ_MEMBERS.includes(foldName(n)),
);

export interface LlmBody {
  /** The body to forward (`raw` itself when nothing changed). */
  body: Buffer;
  changed: boolean;
  /** The gateway asked for usage the client did not ask for: it is taken out of the answer. */
  stripUsage: boolean;
  /** The request asks for a stream (as the servers read `stream`). */
  stream: boolean;
  /** Prompt tokens guessed from the request (about 4 bytes a token): charged when an answer reports no usage. */
  promptEstimate: number;
}

/** Where the members the gateway reads sit in a valid JSON body; refused when one is spelled otherwise or repeated. */
export interface LlmMembers {
  /** The body is a JSON object (nothing else is known of another value). */
  object: boolean;
  /** How many top-level members, and the offset of the closing brace. */
  count: number;
  close: number;
  /** `model`, `stream`, `stream_options`, each present once. */
  seen: Map<string, MemberSpan>;
  /** The prompt's members (`messages`, `prompt`, `input`, `tools`): the last of each name. */
  prompt: Map<string, MemberSpan>;
  /** `stream_options` as an object: its one `include_usage`, its member count and closing brace. */
  options?: { includeUsage?: MemberSpan; count: number; close: number };
}

/** `raw`: the (decoded) body. A body that is not JSON is the 400 that says where it stops being JSON. */
export function llmMembers(raw: Buffer): LlmMembers | GatewayError {
  const scanned = scanJson(raw, TOP_NAMES);
  if (scanned instanceof Error) return scanned;
  const out: LlmMembers = {
    object: scanned.first === 0x7b,
    count: scanned.count,
    close: scanned.close,
    seen: new Map(),
    prompt: new Map(),
  };
  const prompt = scanned.members.filter((m) => PROMPT_MEMBERS.includes(m.name));
  for (const m of prompt) out.prompt.set(m.name, m);
  const problem = checkNames(
    scanned.members.filter((m) => !prompt.includes(m)),
    READ_MEMBERS,
    out.seen,
    '',
  );
  if (problem) return problem;
  // Inside stream_options, include_usage is read too.
  const so = out.seen.get('stream_options');
  if (so && raw[so.start] === 0x7b) {
    const inner = objectMembers(raw, so.start, (n) => foldName(n) === 'include_usage', 'include_usage'.length * 6);
    const seen = new Map<string, MemberSpan>();
    const p = checkNames(inner.members, ['include_usage'], seen, 'stream_options.');
    if (p) return p;
    out.options = { includeUsage: seen.get('include_usage'), count: inner.count, close: inner.close };
  }
  return out;
}

/**
 * Go's JSON decoder matches member names by Unicode case folding, so "Model", "MODEL" and "ſtream" (a long s) all
 * reach a Go backend as its `model` or `stream`: any such spelling of a name in `names`, or a repeat, is refused.
 */
function checkNames(
  members: readonly MemberSpan[],
  names: readonly string[],
  seen: Map<string, MemberSpan>,
  where: string,
): GatewayError | undefined {
  for (const m of members) {
    const folded = foldName(m.name);
    if (!names.includes(folded)) continue;
    if (m.name !== folded) {
      return gatewayError(
        'invalid_body',
        `the request body has a member "${where}${m.name}": write it "${folded}" (in lower case), exactly once`,
      );
    }
    if (seen.has(folded))
      return gatewayError(
        'invalid_body',
        `the request body has more than one "${where}${folded}" member; send exactly one`,
      );
    seen.set(folded, m);
  }
  return undefined;
}

/** A member name as Go's decoder compares it: case-folded, the long s (ſ) and the Kelvin sign (K) as s and k. */
function foldName(name: string): string {
  return name.toLowerCase().replace(/\u017f/g, 's');
}

/** Bigger values than this are not read for an error message. */
const SHOWN_MAX = 4096;

/** A small value as JSON.parse reads it (undefined: absent); an object or array over a few KiB stands as `{}`. */
function valueAt(raw: Buffer, m: MemberSpan | undefined): unknown {
  if (!m) return undefined;
  const c = raw[m.start];
  if (c === 0x22) return stringValue(raw, m.start, m.end);
  if ((c === 0x7b || c === 0x5b) && m.end - m.start > SHOWN_MAX) {
    const size = m.end - m.start;
    return { toJSON: () => `(a JSON ${c === 0x7b ? 'object' : 'array'} of ${size} bytes)` };
  }
  return JSON.parse(raw.toString('utf8', m.start, m.end));
}

/** The body's `model` as JSON.parse reads it (undefined when absent). */
export function modelValue(raw: Buffer, members: LlmMembers): unknown {
  return valueAt(raw, members.seen.get('model'));
}

/** `members`: llmMembers(raw); `path`: the OpenAI path without query; `servedModel`: when known. */
export function editLlmBody(raw: Buffer, members: LlmMembers, path: string, servedModel: string | undefined): LlmBody {
  const { seen } = members;
  const edits: Array<{ start: number; end: number; text: string }> = [];
  const append: string[] = [];
  const set = (name: string, valueJson: string): void => {
    const m = seen.get(name);
    if (m) edits.push({ start: m.start, end: m.end, text: valueJson });
    else append.push(`${JSON.stringify(name)}:${valueJson}`);
  };

  if (servedModel !== undefined && modelValue(raw, members) !== servedModel) set('model', JSON.stringify(servedModel));

  const streamValue = valueAt(raw, seen.get('stream'));
  const stream = coerceBool(streamValue);
  if (stream !== undefined && typeof streamValue !== 'boolean') set('stream', String(stream));

  let stripUsage = false;
  const so = seen.get('stream_options');
  const soNull = so !== undefined && raw[so.start] === 0x6e;
  if (stream === true && USAGE_OPTION_ROUTES.has(path) && (so === undefined || soNull || members.options)) {
    const opts = members.options;
    if (coerceBool(valueAt(raw, opts?.includeUsage)) !== true) {
      // Asked for on the bytes: the member set to true, or added to the object (the client's other options kept).
      if (!opts) set('stream_options', '{"include_usage":true}');
      else if (opts.includeUsage)
        edits.push({ start: opts.includeUsage.start, end: opts.includeUsage.end, text: 'true' });
      else edits.push({ start: opts.close, end: opts.close, text: `${opts.count ? ',' : ''}"include_usage":true` });
      stripUsage = true;
    }
  }

  const promptEstimate = estimatePrompt(raw, members);
  if (edits.length === 0 && append.length === 0)
    return { body: raw, changed: false, stripUsage, stream: stream === true, promptEstimate };
  // Applied from the end, so that earlier offsets stay valid; added members go before the closing brace.
  const parts: Buffer[] = [];
  let tail = raw.length;
  const closing = append.length === 0 ? '' : (members.count ? ',' : '') + append.join(',');
  const all = [...edits, ...(closing ? [{ start: members.close, end: members.close, text: closing }] : [])].sort(
    (a, b) => b.start - a.start,
  );
  for (const e of all) {
    parts.unshift(Buffer.from(e.text, 'utf8'), raw.subarray(e.end, tail));
    tail = e.start;
  }
  parts.unshift(raw.subarray(0, tail));
  return { body: Buffer.concat(parts), changed: true, stripUsage, stream: stream === true, promptEstimate };
}

/**
 * A flag as pydantic's lax mode reads it (vLLM's and LiteLLM's models): booleans, 0/1, and true/false, 1/0, yes/no,
 * on/off, t/f, y/n in any case with nothing around them; undefined: absent or not a flag (left for the server to refuse).
 */
export function coerceBool(v: unknown): boolean | undefined {
  if (typeof v === 'boolean') return v;
  if (v === 1) return true;
  if (v === 0) return false;
  if (typeof v !== 'string') return undefined;
  const s = v.toLowerCase();
  if (s === 'true' || s === '1' || s === 'yes' || s === 'on' || s === 't' || s === 'y') return true;
  if (s === 'false' || s === '0' || s === 'no' || s === 'off' || s === 'f' || s === 'n') return false;
  return undefined;
}

/** About 4 bytes a token (BPE's rule of thumb) of what the model reads, media left out (an image is not base64/4). */
export function estimatePrompt(raw: Buffer, members: LlmMembers): number {
  const notNull = (m: MemberSpan | undefined) => (m && raw[m.start] !== 0x6e ? m : undefined);
  const p = members.prompt;
  const input = notNull(p.get('messages')) ?? notNull(p.get('prompt')) ?? notNull(p.get('input'));
  if (input === undefined) return 0;
  const bytes = raw[input.start] === 0x22 ? input.end - input.start - 2 : promptTextLength(raw, input.start, input.end);
  return Math.ceil(bytes / 4);
}

/** Content-part members whose values are media, not text (`input_audio`'s data, Ollama's images): not estimated. */
const MEDIA_MEMBERS = ['"url"', '"image_url"', '"data"', '"file_data"', '"images"'].map((n) => Buffer.from(n));

/** compactLength of the valid value [start, end), without the values of MEDIA_MEMBERS. Linear in the value. */
export function promptTextLength(b: Buffer, start: number, end: number): number {
  let n = 0;
  let i = start;
  while (i < end) {
    const c = b[i];
    if (c !== 0x22) {
      if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) n++;
      i++;
      continue;
    }
    const e = skipString(b, i);
    let k = e;
    while (b[k] === 0x20 || b[k] === 0x0a || b[k] === 0x0d || b[k] === 0x09) k++;
    if (b[k] === 0x3a && e - i <= 11 && MEDIA_MEMBERS.some((m) => m.length === e - i && m.equals(b.subarray(i, e)))) {
      // A media member: its value is skipped (the comma or brace after it is counted as it comes).
      k++;
      while (b[k] === 0x20 || b[k] === 0x0a || b[k] === 0x0d || b[k] === 0x09) k++;
      i = skipValue(b, k);
      continue;
    }
    n += e - i;
    i = e;
  }
  return n;
}

/** Per table: LLM routes by the backend they share (a Service port or a URL). */
const byBackend = new WeakMap<RouteTable, Map<string, Route[]>>();

function backendKey(b: Backend): string {
  if (b.kind === 'url') return `url:${b.url}`;
  if (b.kind === 'urls') return `urls:${b.urls.join(',')}`;
  return `svc:${b.namespace}/${b.service}:${b.port}`;
}

/** The 403 for a `model` (body, query or form field) naming a model on this backend the key is not granted. */
export function modelForbidden(
  table: RouteTable,
  route: Route,
  model: unknown,
  key: ApiKeyRecord,
): GatewayError | undefined {
  if (!otherDeploymentsModel(table, route, model, key)) return undefined;
  return gatewayError(
    'model_forbidden',
    `the model "${String(model)}" is served by another deployment; this URL serves "${route.modelName ?? route.deployment}"`,
  );
}

/**
 * On a backend serving several deployments' models (LoRA adapters, one Ollama) `model` could name another's: the
 * deployment it names that the key is not granted, else undefined.
 */
export function otherDeploymentsModel(
  table: RouteTable,
  route: Route,
  model: unknown,
  key: ApiKeyRecord,
): Route | undefined {
  if (typeof model !== 'string' || model === (route.modelName ?? route.deployment)) return undefined;
  let idx = byBackend.get(table);
  if (!idx) {
    idx = new Map();
    for (const r of table.routes) {
      if (r.kind !== 'llm') continue;
      const k = backendKey(r.backend);
      const list = idx.get(k);
      if (list) list.push(r);
      else idx.set(k, [r]);
    }
    byBackend.set(table, idx);
  }
  const shared = idx.get(backendKey(route.backend));
  if (!shared || shared.length < 2) return undefined;
  // A deployment the key may use anyway is no smuggling.
  return shared.find(
    (r) => r.id !== route.id && (r.modelName ?? r.deployment) === model && !grantsProject(key, r.project, r.namespace),
  );
}
