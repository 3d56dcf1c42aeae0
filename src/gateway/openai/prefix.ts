// The prefix of a prompt that endpoint picking keeps together (SPEC §12): requests that share it go to the same
// endpoint, whose KV cache then holds it. A 32-bit hash of the served model, `tools` and the leading part of the prompt:
// - chat: the messages before the last one (the system prompt and the history: what the next turn shares), or the
//   first message when it is the only one;
// - completions: the prompt.
// The part hashed is cut at a fixed boundary (the largest of 128, 256, 512, 1024 or 2048 characters that the text
// reaches), so that requests sharing a long system prompt hash alike whatever follows it, and a conversation keeps
// its hash from turn to turn once its history passes 2 KiB. The text is what JSON.parse then JSON.stringify would
// give, but read from the body's bytes only as far as the key needs (http/json-scan.ts): a 24 MiB image part or 15 MiB
// of tools cost what their first 2 KiB cost, plus a quote search or a skip over the rest of the message they are in.
import { hash32 } from '../forward/targets.js';
import {
  eachElement,
  memberOf,
  objectMembers,
  stringifyPrefix,
  stringPrefix,
  type MemberSpan,
} from '../http/json-scan.js';
import type { LlmMembers } from './llm-body.js';

const BOUNDS = [2048, 1024, 512, 256, 128];
const MAX = BOUNDS[0];
/**
 * Messages, and parts of a message, read at most: a message object adds at least 2 characters (":" and a new line),
 * so 1,024 of them reach MAX; past this only elements that add nothing (a string as a message, an empty text part)
 * could follow, and a body of millions of them is not walked for its key.
 */
const MAX_ITEMS = 1024;
const QUOTE = 0x22;
const OPEN_BRACE = 0x7b;
const OPEN_BRACKET = 0x5b;

/** `raw`: the body, `members`: llmMembers(raw); `model`: the name the deployment serves (whichever URL it came by). */
export function prefixKey(raw: Buffer, members: LlmMembers, model: string): number | undefined {
  if (!members.object) return undefined;
  const top = members.prompt;
  let text = `${model}\n`;
  const tools = top.get('tools');
  if (tools && nonEmptyArray(raw, tools)) text += stringifyPrefix(raw, tools.start, MAX) + '\n';
  const messages = top.get('messages');
  const prompt = top.get('prompt');
  let body = '';
  if (messages && nonEmptyArray(raw, messages)) {
    // The messages before the last one, or the first when it is the only one.
    let i = 0;
    eachElement(raw, messages.start, (at, more) => {
      if (i++ > 0 && !more()) return false;
      body += messageText(raw, at, MAX - body.length);
      return body.length < MAX && i < MAX_ITEMS;
    });
  } else if (prompt && raw[prompt.start] === QUOTE) {
    body = stringPrefix(raw, prompt.start, MAX);
  } else if (prompt && raw[prompt.start] === OPEN_BRACKET && raw[firstElement(raw, prompt.start)] === QUOTE) {
    body = stringPrefix(raw, firstElement(raw, prompt.start), MAX);
  } else {
    return undefined;
  }
  const cut = BOUNDS.find((b) => body.length >= b) ?? body.length;
  return hash32(text + body.slice(0, cut));
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

/** A message as the model reads it, at most `room` characters: its role and its text parts. */
function messageText(raw: Buffer, at: number, room: number): string {
  const c0 = raw[at];
  if (c0 !== OPEN_BRACE && c0 !== OPEN_BRACKET) return '';
  let out = ':';
  if (c0 === OPEN_BRACE) {
    // One walk over the message's members; JSON.parse keeps the last of a name.
    const { members } = objectMembers(raw, at, (n) => n === 'role' || n === 'content', 'content'.length * 6);
    const role = members.findLast((m) => m.name === 'role');
    out = `${role && raw[role.start] === QUOTE ? stringPrefix(raw, role.start, room) : ''}:`;
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
