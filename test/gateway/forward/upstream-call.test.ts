// The backend call's report that its answer started: the exchange lets go of what only a retry, a fallback or its own
// answer would need (the request head, the body, header lines) once the backend's head is written to the client, and
// not before — a 5xx handed to a fallback deployment is no answer.
import { describe, expect, test } from '@jest/globals';
import type { ServerResponse } from 'node:http';
import type { Metrics } from '../../../src/observe/metrics.js';
import type { Pools } from '../../../src/gateway/forward/pools.js';
import type { Chosen } from '../../../src/gateway/forward/targets.js';
import { UpstreamCall, type CallOwner } from '../../../src/gateway/forward/upstream-call.js';

/** A client answer that records what is done to it. */
function fakeAnswer(events: string[]): ServerResponse {
  return {
    destroyed: false,
    writeHead: (status: number) => events.push(`writeHead ${status}`),
    flushHeaders: () => events.push('flushHeaders'),
    write: () => {
      events.push('write');
      return true;
    },
  } as unknown as ServerResponse;
}

function callFor(events: string[], divert: boolean): UpstreamCall {
  const owner: CallOwner = {
    divert: () => divert,
    answering: () => events.push('answering'),
    callEnded: () => events.push('ended'),
    callFailed: () => events.push('failed'),
  };
  return new UpstreamCall(
    owner,
    {
      res: fakeAnswer(events),
      extra: ['x-request-id', 'r1'],
      meter: true,
      stripUsage: false,
      stripCors: false,
      drain: { draining: false },
      head: false,
    },
    { backend: 'b', target: { origin: 'http://127.0.0.1:1' } } as unknown as Chosen,
    1,
    { inflightNow: 0 } as unknown as Metrics,
    { resetNow: false } as unknown as Pools,
    { begin: () => undefined, end: () => undefined },
  );
}

const raw = (...lines: string[]): Buffer[] => lines.map((l) => Buffer.from(l));

describe('UpstreamCall tells its owner when the answer started', () => {
  test('an event stream: once, right after its head is written and flushed; its chunks still pass', () => {
    const events: string[] = [];
    const call = callFor(events, false);
    expect(call.onHeaders(200, raw('content-type', 'text/event-stream'), () => undefined)).toBe(true);
    expect(events).toEqual(['writeHead 200', 'flushHeaders', 'answering']);
    expect(call.onData(Buffer.from('data: {"choices":[{"delta":{"content":"x"}}]}\n\n'))).toBe(true);
    expect(events).toEqual(['writeHead 200', 'flushHeaders', 'answering', 'write']);
  });

  test('an interim 1xx is not the answer', () => {
    const events: string[] = [];
    const call = callFor(events, false);
    expect(call.onHeaders(103, raw('link', '</a>'), () => undefined)).toBe(true);
    expect(events).toEqual([]);
  });

  test('a 503 that a fallback deployment takes over: never an answer', () => {
    const events: string[] = [];
    const call = callFor(events, true);
    expect(call.onHeaders(503, raw('content-type', 'application/json'), () => undefined)).toBe(false);
    expect(events).toEqual([]);
  });
});
