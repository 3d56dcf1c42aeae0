// A prompt's keys for endpoint picking (SPEC §12; docs/llm.md, "Which endpoint"): the shared key (model, tools, the
// history cut at 128..2048 characters) and the conversation key (system part + the first 512 characters after it).
// Read from the bytes only as far as the keys need, so a 24 MiB image part costs what its first kilobytes cost.
import {
  eachElement,
  memberOf,
  objectMembers,
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
const OPEN_BRACE = 0x7b;
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
  let text = `${model}\n`;
  const tools = top.get('tools');
  if (tools && nonEmptyArray(raw, tools)) text += stringifyPrefix(raw, tools.start, MAX) + '\n';
  const messages = top.get('messages');
  const prompt = top.get('prompt');
  let body = '';
  /** Characters of `body` that are the system part (-1: still in it), and the conversation's first characters. */
  let system = -1;
  let after = '';
  if (messages && nonEmptyArray(raw, messages)) {
    // The messages before the last one, or the first when it is the only one.
    let i = 0;
    eachElement(raw, messages.start, (at, more) => {
      if (i++ > 0 && !more()) return false;
      // A lone message is a prompt, not a conversation: it keeps the shared key.
      if (i === 1 && !more()) conversation = false;
      if (!conversation) {
        body += messageText(raw, at, MAX - body.length);
        return body.length < MAX && i < MAX_ITEMS;
      }
      // Enough for the shared key and for the conversation's start, whichever this message turns out to be (a system
      // message past MAX is read only that far).
      const t = messageText(raw, at, Math.max(MAX - body.length, CONVERSATION_CHARS - after.length));
      if (system === -1 && !t.startsWith('system:') && !t.startsWith('developer:')) system = body.length;
      if (body.length < MAX) body += t.length > MAX - body.length ? t.slice(0, MAX - body.length) : t;
      if (system !== -1 && after.length < CONVERSATION_CHARS) after += t.slice(0, CONVERSATION_CHARS - after.length);
      return (body.length < MAX || system === -1 || after.length < CONVERSATION_CHARS) && i < MAX_ITEMS;
    });
  } else if (prompt && raw[prompt.start] === QUOTE) {
    body = stringPrefix(raw, prompt.start, MAX);
  } else if (prompt && raw[prompt.start] === OPEN_BRACKET && raw[firstElement(raw, prompt.start)] === QUOTE) {
    body = stringPrefix(raw, firstElement(raw, prompt.start), MAX);
  } else {
    return undefined;
  }
  const cut = BOUNDS.find((b) => body.length >= b) ?? body.length;
  // The hash runs left to right: that of the model, tools and system part is shared by both keys.
  const head = fold(text, 0, text.length, FNV_OFFSET);
  if (system === -1 || after.length === 0) return { hash: fold(body, 0, cut, head), rule: 'prefix' };
  return { hash: fold(after, 0, after.length, fold(body, 0, system, head) ^ 1), rule: 'conversation' };
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
