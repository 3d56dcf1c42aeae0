// A prompt's keys for endpoint picking (SPEC §12; docs/llm.md, "Which endpoint"): the shared key (model, tools, the
// history cut at 128..2048 characters) and the conversation key (system part + the first 512 characters after it).
// Read from the bytes only as far as the keys need, so a 24 MiB image part costs what its first kilobytes cost.
import { isAscii } from 'node:buffer';
import {
  eachElement,
  memberOf,
  objectMembers,
  skipString,
  skipValue,
  stringifyPrefix,
  stringPrefix,
  type MemberSpan,
} from '../http/json-scan.js';
import type { LlmMembers } from './llm-body.js';

/** The key that picks an endpoint (forward/targets.ts TargetPicker). */
export interface PromptKey {
  hash: number;
  /** prefix: the shared prefix's key (a system prompt, a tenant); conversation: the conversation's own key. */
  rule: 'prefix' | 'conversation';
}

const BOUNDS = [2048, 1024, 512, 256, 128];
const MAX = BOUNDS[0];
/** Characters past the system part that make a conversation's key. */
export const CONVERSATION_CHARS = 512;
/** Messages or parts read at most: each adds 2+ characters, so 1,024 reach MAX; millions of empty ones are not read. */
const MAX_ITEMS = 1024;
const STRIDE = 8;
/** FNV-1a's 32-bit offset basis and prime (forward/targets.ts hashes addresses with the same). */
const FNV_OFFSET = 0x811c9dc5;
const FNV_PRIME = 0x01000193;
const FULL = 256;
const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COMMA = 0x2c;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;
const OPEN_BRACKET = 0x5b;

/** The shared key alone: `raw`: the body, `members`: llmMembers(raw); `model`: the name the deployment serves. */
export function prefixKey(raw: Buffer, members: LlmMembers, model: string): number | undefined {
  return keys(raw, members, model, false)?.hash;
}

/** The conversation key when the history has a conversation, else the shared key; undefined: nothing to key. */
export function promptKey(raw: Buffer, members: LlmMembers, model: string): PromptKey | undefined {
  return keys(raw, members, model, true);
}

function keys(raw: Buffer, members: LlmMembers, model: string, conversation: boolean): PromptKey | undefined {
  if (!members.object) return undefined;
  const top = members.prompt;
  const tools = top.get('tools');
  let head: number;
  if (tools && nonEmptyArray(raw, tools)) {
    const text = `${model}\n${stringifyPrefix(raw, tools.start, MAX)}\n`;
    head = fold(text, 0, text.length, FNV_OFFSET);
  } else {
    if (model !== headModel) {
      headModel = model;
      headHash = fold(`${model}\n`, 0, model.length + 1, FNV_OFFSET);
    }
    head = headHash;
  }
  const messages = top.get('messages');
  const prompt = top.get('prompt');
  // The hash runs left to right: that of the model, tools and system part is shared by both keys.
  bodyHash = head;
  bodyLength = 0;
  system = -1;
  afterLength = 0;
  if (messages && nonEmptyArray(raw, messages)) {
    // The messages before the last one, or the first when it is the only one.
    let i = firstElement(raw, messages.start);
    for (let index = 1; ; index++) {
      const at = i;
      let plain = raw[at] === OPEN_BRACE && plainMessage(raw, at);
      const next = skipSpace(raw, raw[at] === OPEN_BRACE ? messageEnd : skipValue(raw, at));
      const more = raw[next] === COMMA;
      if (index > 1 && !more) break;
      // A lone message is a prompt, not a conversation: it keeps the shared key.
      if (index === 1 && !more) conversation = false;
      // Enough for the shared key and for the conversation's start, whichever this message turns out to be (a system
      // message past MAX is read only that far).
      const room = conversation ? Math.max(MAX - bodyLength, CONVERSATION_CHARS - afterLength) : MAX - bodyLength;
      const from = contentAt + 1;
      const n = plain && contentAt !== -1 ? Math.min(contentEnd - 1 - from, room - roleText.length) : 0;
      if (n > 0 && !asciiText(raw, from, n)) plain = false;
      const t = plain ? roleText : messageText(raw, at, room);
      if (conversation && system === -1 && !t.startsWith('system:') && !t.startsWith('developer:')) {
        system = bodyLength;
        afterHash = bodyHash ^ 1;
      }
      take(t);
      if (plain) {
        // The content's first characters are its bytes (ASCII, no escape): hashed from the body, no string made.
        if (n > 0) takeBytes(raw, from, n);
        take('\n');
      }
      if (conversation ? bodyLength >= MAX && system !== -1 && afterLength >= CONVERSATION_CHARS : bodyLength >= MAX)
        break;
      if (index >= MAX_ITEMS || !more) break;
      i = skipSpace(raw, next + 1);
    }
  } else if (prompt && raw[prompt.start] === QUOTE) {
    take(stringPrefix(raw, prompt.start, MAX));
  } else if (prompt && raw[prompt.start] === OPEN_BRACKET && raw[firstElement(raw, prompt.start)] === QUOTE) {
    take(stringPrefix(raw, firstElement(raw, prompt.start), MAX));
  } else {
    return undefined;
  }
  if (system === -1 || afterLength === 0) return { hash: cutHash() >>> 0, rule: 'prefix' };
  return { hash: afterHash >>> 0, rule: 'conversation' };
}

// A key's running hashes, carried as its text is read (keys() runs to its end before another starts; no string of
// the history is built): the body's (the messages' text, its first MAX characters) with its value at each cut of
// BOUNDS, and the conversation's (the first CONVERSATION_CHARS characters after the system part), which starts from
// the body's at the end of the system part.
let headModel: string | undefined;
let headHash = 0;
let bodyHash = 0;
let bodyLength = 0;
/** Characters of the body that are the system part (-1: still in it). */
let system = -1;
let afterHash = 0;
let afterLength = 0;
/** The cuts of BOUNDS short of MAX, and bodyHash when bodyLength reached each. */
const CUT_AT = BOUNDS.slice(1).reverse();
const CUTS = new Int32Array(CUT_AT.length);

/** The body's hash cut at the longest of BOUNDS it reaches (all of it when shorter than the shortest). */
function cutHash(): number {
  if (bodyLength >= MAX) return bodyHash;
  for (let k = CUT_AT.length - 1; k >= 0; k--) if (bodyLength >= CUT_AT[k]) return CUTS[k];
  return bodyHash;
}

/** Characters until the body's next cut (or its end). */
function untilCut(): number {
  for (let k = 0; k < CUT_AT.length; k++) if (bodyLength < CUT_AT[k]) return CUT_AT[k] - bodyLength;
  return MAX - bodyLength;
}

function noteCut(): void {
  const k = CUT_AT.indexOf(bodyLength);
  if (k !== -1) CUTS[k] = bodyHash;
}

/** The next characters of the message text: `s`, as far as the body and the conversation's start still take. */
function take(s: string): void {
  const n = Math.min(s.length, MAX - bodyLength);
  for (let from = 0; from < n;) {
    const to = Math.min(n, from + untilCut());
    bodyHash = foldAt(s, from, to, bodyLength, bodyHash);
    bodyLength += to - from;
    from = to;
    noteCut();
  }
  if (system === -1) return;
  const m = Math.min(s.length, CONVERSATION_CHARS - afterLength);
  if (m <= 0) return;
  afterHash = foldAt(s, 0, m, afterLength, afterHash);
  afterLength += m;
}

/** take() for the n characters that are the bytes raw[at, at + n) (ASCII). */
function takeBytes(raw: Buffer, at: number, count: number): void {
  const n = Math.min(count, MAX - bodyLength);
  for (let from = 0; from < n;) {
    const to = Math.min(n, from + untilCut());
    bodyHash = foldBytesAt(raw, at + from, at + to, bodyLength, bodyHash);
    bodyLength += to - from;
    from = to;
    noteCut();
  }
  if (system === -1) return;
  const m = Math.min(count, CONVERSATION_CHARS - afterLength);
  if (m <= 0) return;
  afterHash = foldBytesAt(raw, at, at + m, afterLength, afterHash);
  afterLength += m;
}

/** fold's steps over s[from, to), s[from] being character `p` of the text hashed. */
function foldAt(s: string, from: number, to: number, p: number, h: number): number {
  let i = from;
  const full = Math.min(to, from + FULL - p);
  for (; i < full; i++) h = Math.imul(h ^ s.charCodeAt(i), FNV_PRIME);
  i += (STRIDE - ((p + i - from) % STRIDE)) % STRIDE;
  for (; i < to; i += STRIDE) h = Math.imul(h ^ s.charCodeAt(i), FNV_PRIME);
  return h;
}

/** foldAt over bytes that are characters (ASCII). */
function foldBytesAt(raw: Buffer, from: number, to: number, p: number, h: number): number {
  let i = from;
  const full = Math.min(to, from + FULL - p);
  for (; i < full; i++) h = Math.imul(h ^ raw[i], FNV_PRIME);
  i += (STRIDE - ((p + i - from) % STRIDE)) % STRIDE;
  for (; i < to; i += STRIDE) h = Math.imul(h ^ raw[i], FNV_PRIME);
  return h;
}

/** Whether raw[from, from + n) is ASCII without a backslash: the characters of a JSON string's text are its bytes. */
function asciiText(raw: Buffer, from: number, n: number): boolean {
  if (n <= 32) {
    for (let k = from; k < from + n; k++) if (raw[k] >= 0x80 || raw[k] === BACKSLASH) return false;
    return true;
  }
  const run = raw.subarray(from, from + n);
  return isAscii(run) && run.indexOf(BACKSLASH) === -1;
}

/** Set by plainMessage: the offset after the message, its role's text ("system:"), its content string [at, end). */
let messageEnd = 0;
let roleText = ':';
let contentAt = -1;
let contentEnd = -1;

/**
 * Walks the message object at `at` (sets messageEnd); true when its text is its role written plainly (a usual one,
 * or none) and a content string or none, its members' names without escapes: read without decoding.
 */
function plainMessage(raw: Buffer, at: number): boolean {
  let role = -1;
  let content = -1;
  let plain = true;
  let i = skipSpace(raw, at + 1);
  while (raw[i] !== CLOSE_BRACE) {
    const name = i;
    i = skipString(raw, i);
    const length = i - name - 2;
    // Any name that may decode to "role" or "content" is read as the general reader reads it.
    if (length <= MAX_NAME) for (let k = name + 1; k < i - 1; k++) if (raw[k] === BACKSLASH) plain = false;
    i = skipSpace(raw, skipSpace(raw, i) + 1); // the colon
    const value = i;
    i = skipValue(raw, i);
    if (length === 4 && named(raw, name + 1, ROLE)) role = value;
    else if (length === 7 && named(raw, name + 1, CONTENT)) {
      content = value;
      contentEnd = i;
    }
    i = skipSpace(raw, i);
    if (raw[i] === COMMA) i = skipSpace(raw, i + 1);
  }
  messageEnd = i + 1;
  if (!plain) return false;
  if (role !== -1 && raw[role] === QUOTE) {
    const known = knownRole(raw, role);
    if (known === undefined) return false;
    roleText = known;
  } else roleText = ':';
  if (content !== -1 && raw[content] === OPEN_BRACKET) return false;
  contentAt = content !== -1 && raw[content] === QUOTE ? content : -1;
  return true;
}

const ROLE = Buffer.from('role');
const CONTENT = Buffer.from('content');
/** The longest name that may decode to "content" (\uXXXX for each letter). */
const MAX_NAME = CONTENT.length * 6;

function named(raw: Buffer, at: number, name: Buffer): boolean {
  for (let k = 0; k < name.length; k++) if (raw[at + k] !== name[k]) return false;
  return true;
}

function skipSpace(raw: Buffer, i: number): number {
  while (raw[i] === 0x20 || raw[i] === 0x0a || raw[i] === 0x0d || raw[i] === 0x09) i++;
  return i;
}

/**
 * FNV-1a over the first 256 characters, then every STRIDE-th: the hash is most of a pick's CPU, and prompts differ
 * mostly near the start (prompts differing only past there between sampled characters share an endpoint, no more).
 */
export function fold(s: string, from: number, to: number, h: number): number {
  const full = Math.min(to, from + FULL);
  for (let i = from; i < full; i++) h = Math.imul(h ^ s.charCodeAt(i), FNV_PRIME);
  for (let i = full; i < to; i += STRIDE) h = Math.imul(h ^ s.charCodeAt(i), FNV_PRIME);
  return h >>> 0;
}

/** The offset of the first element of the array at `start` (its `]` when it is empty). */
function firstElement(raw: Buffer, start: number): number {
  let i = start + 1;
  while (raw[i] === 0x20 || raw[i] === 0x0a || raw[i] === 0x0d || raw[i] === 0x09) i++;
  return i;
}

function nonEmptyArray(raw: Buffer, m: MemberSpan): boolean {
  return raw[m.start] === OPEN_BRACKET && raw[firstElement(raw, m.start)] !== 0x5d;
}

/** The members a message's text is made of (one function for every message, not a closure each). */
const roleOrContent = (n: string): boolean => n === 'role' || n === 'content';

/** The usual roles, followed by ":" as a message's text has them (a role sent as a string of its letters alone). */
const ROLES = ['system', 'user', 'assistant', 'tool', 'developer'].map((r) => ({
  bytes: Buffer.from(`"${r}"`, 'latin1'),
  text: `${r}:`,
}));

/** The role string at `at` (a quote) followed by ":" when it is a usual one written plainly: no decoding needed. */
function knownRole(raw: Buffer, at: number): string | undefined {
  next: for (const r of ROLES) {
    const b = r.bytes;
    for (let k = 0; k < b.length; k++) if (raw[at + k] !== b[k]) continue next;
    return r.text;
  }
  return undefined;
}

/** A message as the model reads it, at most `room` characters: its role and its text parts. */
function messageText(raw: Buffer, at: number, room: number): string {
  const c0 = raw[at];
  if (c0 !== OPEN_BRACE && c0 !== OPEN_BRACKET) return '';
  let out = ':';
  if (c0 === OPEN_BRACE) {
    // One walk over the message's members; JSON.parse keeps the last of a name.
    const { members } = objectMembers(raw, at, roleOrContent, 'content'.length * 6);
    const role = members.findLast((m) => m.name === 'role');
    out =
      role && raw[role.start] === QUOTE
        ? (knownRole(raw, role.start) ?? `${stringPrefix(raw, role.start, room)}:`)
        : ':';
    const c = members.findLast((m) => m.name === 'content');
    if (c && raw[c.start] === QUOTE) out += stringPrefix(raw, c.start, room);
    else if (c && raw[c.start] === OPEN_BRACKET) {
      let parts = 0;
      eachElement(raw, c.start, (part) => {
        if (out.length >= room || parts++ === MAX_ITEMS) return false;
        const t = raw[part] === OPEN_BRACE ? memberOf(raw, part, 'text') : undefined;
        if (t && raw[t.start] === QUOTE) out += stringPrefix(raw, t.start, room - out.length);
        else out += stringifyPrefix(raw, part, room - out.length);
        return out.length < room; // full: the part is not skipped to find the next one
      });
    }
  }
  return `${out}\n`.slice(0, room);
}
