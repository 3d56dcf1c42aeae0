// A failed backend call is tried again only when nothing reached the backend (the connect failed), no answer started,
// the body can be sent again (none, or held whole) and tries are left; a plain function, so fallbacks share the rule.
import { CONNECT_FAILURES } from './upstream-errors.js';

export interface RetryFacts {
  /** The error's code (undici's or the socket's). */
  code: string;
  /** The client already has the answer's head. */
  answerStarted: boolean;
  /** The body is absent or a buffer (a streamed body cannot be sent twice). */
  replayable: boolean;
  /** Tries made so far, the first included. */
  attempts: number;
}

export const RETRY = {
  /** Tries in all: the first and one more. */
  maxAttempts: 2,
  /** Pause before the next try. */
  delayMs: 25,
} as const;

export function shouldRetry(f: RetryFacts): boolean {
  return !f.answerStarted && f.replayable && f.attempts < RETRY.maxAttempts && CONNECT_FAILURES.has(f.code);
}
