// Limits inside a realtime session: each client `response.create` is admitted against the per-minute windows, a
// refused one answered with a realtime `error` event, never forwarded. Frames pass unchanged; a message is held only
// until whole (MAX_READ) to read its `type`. The gateway's event goes into the backend's stream between messages only.
import { randomUUID } from 'node:crypto';
import { openaiErrorType, type GatewayError } from '../http/errors.js';

/** A client message longer than this is not read (held) before it is forwarded. */
const MAX_READ = 1 << 20;
const CREATE = 'response.create';

/** What the gate asks of the session. */
export interface GateOwner {
  /** Client bytes for the backend, in order. */
  forward(bytes: Buffer): void;
  /** The limits' answer: `take` for a response.create, else a message too large to read (refused only when spent). */
  decide(take: boolean): GatewayError | undefined | Promise<GatewayError | undefined>;
  /** A message was refused (not forwarded): the client is told with an error event. */
  refused(err: GatewayError, eventId: string | undefined): void;
  /** Reading the client pauses while a decision is pending (the store is remote). */
  hold(on: boolean): void;
  /**
   * True when the gateway-wide budget of held bytes has room for `bytes` in all; else the message passes unread: a
   * few hundred sessions' held messages (~2 MB each) would take the process past its memory.
   */
  room?(bytes: number): boolean;
}

interface FrameHead {
  fin: boolean;
  opcode: number;
  masked: boolean;
  /** Header length, mask included. */
  size: number;
  len: number;
}

/** The header at the start of `b`, or undefined while it is incomplete. */
function frameHead(b: Buffer): FrameHead | undefined {
  if (b.length < 2) return undefined;
  const masked = (b[1] & 0x80) !== 0;
  let len = b[1] & 0x7f;
  let size = 2;
  if (len === 126) {
    if (b.length < 4) return undefined;
    len = b.readUInt16BE(2);
    size = 4;
  } else if (len === 127) {
    if (b.length < 10) return undefined;
    len = Number(b.readBigUInt64BE(2));
    size = 10;
  }
  if (masked) size += 4;
  if (b.length < size) return undefined;
  return { fin: (b[0] & 0x80) !== 0, opcode: b[0] & 0x0f, masked, size, len };
}

/** A frame's payload, unmasked (a copy). */
function payloadOf(frame: Buffer, h: FrameHead): Buffer {
  const p = Buffer.from(frame.subarray(h.size, h.size + h.len));
  if (h.masked) {
    const m = frame.subarray(h.size - 4, h.size);
    for (let i = 0; i < p.length; i++) p[i] ^= m[i & 3];
  }
  return p;
}

/** The `type` and `event_id` of a client event (a JSON object), as far as they can be read. */
function eventOf(text: string): { type?: unknown; event_id?: unknown } | undefined {
  if (!text.includes(CREATE)) return undefined;
  try {
    const doc = JSON.parse(text) as unknown;
    return doc && typeof doc === 'object' && !Array.isArray(doc) ? (doc as { type?: unknown }) : undefined;
  } catch {
    return undefined;
  }
}

export class RealtimeGate {
  private buf: Buffer = Buffer.alloc(0);
  /** Joined to `buf` only once `need` bytes are there: a 1 MiB frame in 100-byte chunks took 0.6 s of copying. */
  private parts: Buffer[] = [];
  private partsLength = 0;
  private need = 0;
  /** The data message being read: its frames as sent, and their payloads. */
  private held: Buffer[] = [];
  private heldLength = 0;
  private text: Buffer[] = [];
  /** idle: between messages; holding: reading one; passing/dropping: one too large to read, after the decision. */
  private mode: 'idle' | 'holding' | 'passing' | 'dropping' = 'idle';
  /** Payload bytes left of a frame streamed through (passing) or dropped. */
  private frameLeft = 0;
  private frameFin = false;
  private waiting = false;

  constructor(private readonly owner: GateOwner) {}

  /** Bytes from the client, in order. */
  push(chunk: Buffer): void {
    this.parts.push(chunk);
    this.partsLength += chunk.length;
    if (!this.waiting && this.buf.length + this.partsLength >= this.need) this.run();
  }

  /** The chunks that came are joined to `buf` (one copy). */
  private join(): void {
    if (this.partsLength === 0) return;
    const parts = this.buf.length ? [this.buf, ...this.parts] : this.parts;
    this.buf = parts.length === 1 ? parts[0] : Buffer.concat(parts);
    this.parts = [];
    this.partsLength = 0;
  }

  /** Stops reading until `bytes` are in `buf`. */
  private wait(bytes: number): void {
    this.need = bytes;
  }

  private run(): void {
    const owner = this.owner;
    this.join();
    this.need = 0;
    while (!this.waiting) {
      if (this.frameLeft > 0) {
        const n = Math.min(this.frameLeft, this.buf.length);
        if (n === 0) return this.wait(1);
        if (this.mode === 'passing') owner.forward(this.buf.subarray(0, n));
        this.buf = this.buf.subarray(n);
        this.frameLeft -= n;
        if (this.frameLeft === 0 && this.frameFin) this.mode = 'idle';
        continue;
      }
      const h = frameHead(this.buf);
      if (!h) return this.wait(this.buf.length + 1);
      if (h.opcode >= 8) {
        // Control frames (at most 125 bytes) go on as they come, between the fragments of a held message too.
        if (this.buf.length < h.size + h.len) return this.wait(h.size + h.len);
        owner.forward(this.buf.subarray(0, h.size + h.len));
        this.buf = this.buf.subarray(h.size + h.len);
        continue;
      }
      if (h.opcode !== 0) {
        this.mode = 'holding';
        this.held = [];
        this.heldLength = 0;
        this.text = [];
      } else if (this.mode === 'idle') this.mode = 'passing'; // a continuation of nothing: the backend's to refuse
      if (this.mode === 'holding') {
        if (this.heldLength + h.size + h.len > MAX_READ) return this.ask(false, undefined);
        // Held: the frames as sent and their unmasked payloads, about twice the message.
        if (owner.room && !owner.room(2 * (this.heldLength + h.size + h.len))) return this.ask(false, undefined);
        if (this.buf.length < h.size + h.len) return this.wait(h.size + h.len);
        const frame = this.buf.subarray(0, h.size + h.len);
        this.buf = this.buf.subarray(h.size + h.len);
        this.held.push(frame);
        this.heldLength += frame.length;
        this.text.push(payloadOf(frame, h));
        if (!h.fin) continue;
        const event = eventOf(Buffer.concat(this.text).toString('utf8'));
        if (event?.type === CREATE) {
          return this.ask(true, typeof event.event_id === 'string' ? event.event_id : undefined);
        }
        this.release(true);
        this.mode = 'idle';
        continue;
      }
      this.stream(h);
    }
  }

  /** passing or dropping: the frame at the start of the buffer streams through (or away) as it comes. */
  private stream(h: FrameHead): void {
    if (this.mode === 'passing') this.owner.forward(this.buf.subarray(0, h.size));
    this.buf = this.buf.subarray(h.size);
    this.frameLeft = h.len;
    this.frameFin = h.fin;
    if (h.len === 0 && h.fin) this.mode = 'idle';
  }

  /** The held message goes on (`forward`) or is dropped. */
  private release(forward: boolean): void {
    if (forward) for (const f of this.held) this.owner.forward(f);
    this.held = [];
    this.heldLength = 0;
    this.text = [];
    this.owner.room?.(0);
  }

  /** A decision for the held message: a whole response.create (`take`), or the start of one too large to read. */
  private ask(take: boolean, eventId: string | undefined): void {
    const settle = (err: GatewayError | undefined): void => {
      if (err) this.owner.refused(err, eventId);
      this.release(!err);
      if (take) {
        this.mode = 'idle';
        return;
      }
      // One too large to read goes on streaming (or being dropped) from the frame it is at (its header is whole).
      this.mode = err ? 'dropping' : 'passing';
      this.stream(frameHead(this.buf)!);
    };
    const d = this.owner.decide(take);
    if (!(d instanceof Promise)) {
      settle(d);
      return this.run();
    }
    this.waiting = true;
    this.owner.hold(true);
    d.then(settle, () => settle(undefined)).finally(() => {
      this.waiting = false;
      this.owner.hold(false);
      this.run();
    });
  }
}

/** Follows the backend's websocket framing without copying: `quiet` between messages, where one may be written. */
export class FrameCursor {
  private head: Buffer = Buffer.alloc(0);
  private left = 0;
  /** A fragmented data message is open (its last fragment has not passed). */
  private open = false;
  private lastFin = true;
  private lastData = false;

  get quiet(): boolean {
    return this.left === 0 && this.head.length === 0 && !this.open;
  }

  /** Reads `chunk` up to the first quiet point after its start (`stop`), or all of it; the bytes read. */
  read(chunk: Buffer, stop: boolean): number {
    let at = 0;
    while (at < chunk.length) {
      if (stop && this.quiet && at > 0) return at;
      if (this.left > 0) {
        const n = Math.min(this.left, chunk.length - at);
        at += n;
        this.left -= n;
        if (this.left === 0) this.frameDone();
        continue;
      }
      // A header, possibly split across chunks.
      const want = Math.min(chunk.length - at, 14);
      const joined = this.head.length ? Buffer.concat([this.head, chunk.subarray(at, at + want)]) : chunk.subarray(at);
      const h = frameHead(joined);
      if (!h) {
        this.head = Buffer.from(joined.subarray(0, Math.min(joined.length, 14)));
        return chunk.length;
      }
      at += h.size - this.head.length;
      this.head = Buffer.alloc(0);
      this.left = h.len;
      this.lastFin = h.fin;
      this.lastData = h.opcode < 8;
      if (h.opcode < 8) this.open = true;
      if (this.left === 0) this.frameDone();
    }
    return at;
  }

  private frameDone(): void {
    if (this.lastData && this.lastFin) this.open = false;
  }
}

/** The realtime API's error event, as the gateway writes it (one unmasked text frame). */
export function errorEvent(err: GatewayError, clientEventId: string | undefined): Buffer {
  const text = JSON.stringify({
    type: 'error',
    event_id: `event_${randomUUID().replace(/-/g, '').slice(0, 20)}`,
    error: {
      type: openaiErrorType(err),
      code: err.code,
      message: err.message,
      param: null,
      event_id: clientEventId ?? null,
    },
  });
  const payload = Buffer.from(text, 'utf8');
  const len = payload.length;
  const head =
    len < 126
      ? Buffer.from([0x81, len])
      : len < 65536
        ? Buffer.from([0x81, 126, len >> 8, len & 0xff])
        : Buffer.from([
            0x81,
            127,
            0,
            0,
            0,
            0,
            (len >>> 24) & 0xff,
            (len >>> 16) & 0xff,
            (len >>> 8) & 0xff,
            len & 0xff,
          ]);
  return Buffer.concat([head, payload]);
}

/** A close frame (`masked` as a client sends it), with a status code and a reason of at most 123 bytes. */
export function closeFrame(code: number, reason: string, masked: boolean): Buffer {
  const r = Buffer.from(reason, 'utf8').subarray(0, 123);
  const payload = Buffer.alloc(2 + r.length);
  payload.writeUInt16BE(code, 0);
  r.copy(payload, 2);
  if (!masked) return Buffer.concat([Buffer.from([0x88, payload.length]), payload]);
  const mask = Buffer.from([0x5a, 0x3c, 0x96, 0xe1]);
  for (let i = 0; i < payload.length; i++) payload[i] ^= mask[i & 3];
  return Buffer.concat([Buffer.from([0x88, 0x80 | payload.length]), mask, payload]);
}
