// Token usage of an LLM websocket (Realtime API): each `response.done`'s usage, read from frames as they pass.
// Compressed frames cannot be read, so the gateway does not offer permessage-deflate to the backend on LLM routes.
import { readUsage, type TokenUsage } from './usage-meter.js';

/** A message longer than this is not read for usage. */
const MAX_MESSAGE = 1 << 20;
const DONE = 'response.done';
const CREATED = 'response.created';

export class RealtimeMeter {
  private buf: Buffer = Buffer.alloc(0);
  /** Chunks after `buf`, joined to it only once `need` bytes are there (not at each chunk: a trickled frame). */
  private parts: Buffer[] = [];
  private partsLength = 0;
  private need = 0;
  /** The text message being assembled from its fragments (undefined: none, or one too long to read). */
  private message: Buffer[] | undefined;
  private messageLength = 0;
  private skipping = false;

  constructor(
    private readonly onUsage: (u: TokenUsage) => void,
    /** Each `response.created` (a response the backend starts, asked for or on its own). */
    private readonly onCreated?: () => void,
  ) {}

  /** Bytes from the backend, in order. */
  push(chunk: Buffer): void {
    this.parts.push(chunk);
    this.partsLength += chunk.length;
    if (this.buf.length + this.partsLength < this.need) return;
    const parts = this.buf.length ? [this.buf, ...this.parts] : this.parts;
    this.buf = parts.length === 1 ? parts[0] : Buffer.concat(parts);
    this.parts = [];
    this.partsLength = 0;
    this.need = 0;
    for (;;) {
      const b = this.buf;
      if (b.length < 2) return void (this.need = 2);
      const fin = (b[0] & 0x80) !== 0;
      const opcode = b[0] & 0x0f;
      const masked = (b[1] & 0x80) !== 0;
      let len = b[1] & 0x7f;
      let at = 2;
      if (len === 126) {
        if (b.length < 4) return void (this.need = 4);
        len = b.readUInt16BE(2);
        at = 4;
      } else if (len === 127) {
        if (b.length < 10) return void (this.need = 10);
        const big = b.readBigUInt64BE(2);
        if (big > BigInt(Number.MAX_SAFE_INTEGER)) return this.stop();
        len = Number(big);
        at = 10;
      }
      const maskAt = at;
      if (masked) at += 4;
      if (b.length < at + len) {
        // A frame too large to wait for: what follows it cannot be framed without holding it, so reading stops.
        if (at + len > MAX_MESSAGE + 16) return this.stop();
        return void (this.need = at + len);
      }
      let payload = b.subarray(at, at + len);
      if (masked) {
        const mask = b.subarray(maskAt, maskAt + 4);
        payload = Buffer.from(payload);
        for (let i = 0; i < payload.length; i++) payload[i] ^= mask[i & 3];
      }
      this.buf = b.subarray(at + len);
      this.frame(fin, opcode, payload);
    }
  }

  private frame(fin: boolean, opcode: number, payload: Buffer): void {
    if (opcode >= 8) return; // control frames
    if (opcode === 1) {
      this.message = [];
      this.messageLength = 0;
      this.skipping = false;
    } else if (opcode !== 0 || (!this.message && !this.skipping)) {
      this.message = undefined; // binary, or a continuation of nothing we read
      return;
    }
    if (this.skipping) {
      if (fin) this.skipping = false;
      return;
    }
    this.messageLength += payload.length;
    if (this.messageLength > MAX_MESSAGE) {
      this.message = undefined;
      this.skipping = !fin;
      return;
    }
    this.message!.push(Buffer.from(payload));
    if (!fin) return;
    const text = Buffer.concat(this.message!).toString('utf8');
    this.message = undefined;
    const created = this.onCreated !== undefined && text.includes(CREATED);
    if (!created && !text.includes(DONE)) return;
    let doc: unknown;
    try {
      doc = JSON.parse(text);
    } catch {
      return;
    }
    const o = doc as { type?: unknown; response?: { usage?: unknown } } | null;
    if (created && o?.type === CREATED) return this.onCreated!();
    if (!o || o.type !== DONE) return;
    const u = readUsage(o.response?.usage);
    if (u) this.onUsage(u);
  }

  /** The stream cannot be followed any more: nothing more is read. */
  private stop(): void {
    this.buf = Buffer.alloc(0);
    this.parts = [];
    this.push = () => undefined;
  }
}
