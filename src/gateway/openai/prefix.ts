// The prefix of a prompt that endpoint picking keeps together (SPEC §12): requests that share it go to the same
// endpoint, whose KV cache then holds it. A 32-bit hash of the served model, `tools` and the leading part of the prompt:
// - chat: the messages before the last one (the system prompt and the history: what the next turn shares), or the
//   first message when it is the only one;
// - completions: the prompt.
// The part hashed is cut at a fixed boundary (the largest of 128, 256, 512, 1024 or 2048 characters that the text
// reaches), so that requests sharing a long system prompt hash alike whatever follows it, and a conversation keeps
// its hash from turn to turn once its history passes 2 KiB. Only what the gateway already parsed is read; at most a
// few kilobytes are touched.
import { hash32 } from '../forward/targets.js';

const BOUNDS = [2048, 1024, 512, 256, 128];
const MAX = BOUNDS[0];

/** `model`: the name the deployment serves (the same whichever URL the request came by). */
export function prefixKey(doc: Record<string, unknown>, model: string): number | undefined {
  let text = `${model}\n`;
  if (Array.isArray(doc.tools) && doc.tools.length) text += JSON.stringify(doc.tools).slice(0, MAX) + '\n';
  const messages = doc.messages;
  let body = '';
  if (Array.isArray(messages) && messages.length) {
    const upTo = messages.length > 1 ? messages.length - 1 : 1;
    for (let i = 0; i < upTo && body.length < MAX; i++) body += messageText(messages[i], MAX - body.length);
  } else if (typeof doc.prompt === 'string') {
    body = doc.prompt.slice(0, MAX);
  } else if (Array.isArray(doc.prompt) && typeof doc.prompt[0] === 'string') {
    body = (doc.prompt[0] as string).slice(0, MAX);
  } else {
    return undefined;
  }
  const cut = BOUNDS.find((b) => body.length >= b) ?? body.length;
  return hash32(text + body.slice(0, cut));
}

/** A message as the model reads it, at most `room` characters: its role and its text parts. */
function messageText(m: unknown, room: number): string {
  if (typeof m !== 'object' || m === null) return '';
  const o = m as Record<string, unknown>;
  let out = `${typeof o.role === 'string' ? o.role : ''}:`;
  const c = o.content;
  if (typeof c === 'string') out += c.slice(0, room);
  else if (Array.isArray(c)) {
    for (const part of c) {
      if (out.length >= room) break;
      const p = part as Record<string, unknown> | null;
      if (p && typeof p.text === 'string') out += p.text.slice(0, room - out.length);
      else out += JSON.stringify(part).slice(0, room - out.length);
    }
  }
  return `${out}\n`.slice(0, room);
}
