// An arriving body's clocks, read each second by the connection sweep: idle and slow (below the minimum rate over
// BODY_RATE_WINDOW_MS). Only the client can be late: a second the gateway held the body back counts as progress.

/** The window of the minimum body rate, and the time before it starts. */
export const BODY_RATE_WINDOW_MS = 10_000;

export class BodyClock {
  /** The connection's bytes read at the last look, and when they last moved. */
  private seenBytes: number;
  private seenAt: number;
  private startedAt: number;
  /** [time, bytes read, ...] of the looks in the current rate window. */
  private rate: number[] | undefined;

  constructor(
    bytesRead: number,
    now: number,
    private idleMs: number,
    private minBytesPerSecond: number,
  ) {
    this.seenBytes = bytesRead;
    this.seenAt = this.startedAt = now;
  }

  /** Starts again, for the next body on the same connection. */
  reset(bytesRead: number, now: number, idleMs: number, minBytesPerSecond: number): void {
    this.seenBytes = bytesRead;
    this.seenAt = this.startedAt = now;
    this.idleMs = idleMs;
    this.minBytesPerSecond = minBytesPerSecond;
    this.rate = undefined;
  }

  /** One look (`backpressured`: bytes wait in the request's own buffer); 'idle' or 'slow' when a bound broke. */
  look(now: number, bytesRead: number, backpressured: boolean): 'idle' | 'slow' | undefined {
    if (backpressured) {
      this.rate = undefined;
      this.seenBytes = bytesRead;
      this.seenAt = now;
      return undefined;
    }
    if (bytesRead !== this.seenBytes) {
      this.seenBytes = bytesRead;
      this.seenAt = now;
    } else if (now - this.seenAt >= this.idleMs) {
      return 'idle';
    }
    const min = this.minBytesPerSecond;
    if (min <= 0 || now - this.startedAt < BODY_RATE_WINDOW_MS) return undefined;
    const rate = (this.rate ??= []);
    rate.push(now, bytesRead);
    while (rate.length > 2 && now - rate[2] >= BODY_RATE_WINDOW_MS) rate.splice(0, 2);
    return now - rate[0] >= BODY_RATE_WINDOW_MS && bytesRead - rate[1] < (min * (now - rate[0])) / 1000
      ? 'slow'
      : undefined;
  }
}
