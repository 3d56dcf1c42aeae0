// The clocks of a request body that is still arriving, read once a second by the connection sweep: idle (no byte for
// limits.requestBodyIdleTimeoutSeconds) and slow (on average below limits.requestBodyMinBytesPerSecond over any
// window of BODY_RATE_WINDOW_MS, once the body has been coming that long). Only the client can be late: a second in
// which the gateway itself held the body back (bytes waiting in the request's buffer) restarts the rate window and
// counts as progress.

/** The window of the minimum body rate, and the time before it starts. */
export const BODY_RATE_WINDOW_MS = 10_000;

export class BodyClock {
  /** The connection's bytes read at the last look, and when they last moved. */
  private seenBytes: number;
  private seenAt: number;
  private readonly startedAt: number;
  /** [time, bytes read, ...] of the looks in the current rate window. */
  private rate: number[] | undefined;

  constructor(
    bytesRead: number,
    now: number,
    private readonly idleMs: number,
    private readonly minBytesPerSecond: number,
  ) {
    this.seenBytes = bytesRead;
    this.seenAt = this.startedAt = now;
  }

  /**
   * One look: `bytesRead` of the connection now, `backpressured` when bytes wait in the request's own buffer.
   * 'idle' or 'slow' when the body broke its bound.
   */
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
