// The access log's lines, built from pieces joined once per batch: each line is exactly what JSON.stringify makes of
// the record's fields in their documented order (any characters in the strings, quotes, backslashes, control
// characters and lone surrogates included), one line per request, written in batches.
import { describe, expect, test } from '@jest/globals';
import fc from 'fast-check';
import { AccessLog, type AccessRecord } from '../../src/observe/access-log.js';

/** The line an operator's tools expect: JSON.stringify of the fields in order (the oracle). */
function expected(r: AccessRecord, time: string): string {
  const o: Record<string, unknown> = {
    level: 'info',
    time,
    service: 'servegate',
    msg: 'request',
    requestId: r.requestId,
    method: r.method,
    path: r.path,
    status: r.status,
    ms: r.ms,
    project: r.project,
    deployment: r.deployment,
    key: r.key,
    client: r.client,
    upstream: r.upstream,
    bytesIn: r.bytesIn,
    bytesOut: r.bytesOut,
  };
  if (r.pick !== undefined) o.pick = r.pick;
  if (r.promptTokens !== undefined) {
    o.promptTokens = r.promptTokens;
    o.completionTokens = r.completionTokens ?? 0;
  }
  if (r.tokensEstimated) o.tokensEstimated = true;
  if (r.reportedPromptTokens !== undefined) {
    o.reportedPromptTokens = r.reportedPromptTokens;
    o.reportedCompletionTokens = r.reportedCompletionTokens ?? 0;
  }
  if (r.ttftMs !== undefined) o.ttftMs = r.ttftMs;
  if (r.error !== undefined) o.error = r.error;
  return JSON.stringify(o);
}

// Any UTF-16 code units (lone surrogates too) mixed with the characters JSON escapes.
const text = fc.oneof(
  fc.string({ unit: 'binary', maxLength: 30 }),
  fc.string({
    unit: fc.constantFrom('"', '\\', '\n', '\u0000', '\u001f', '\u007f', 'é', '\ud800', '\udc00', 'a', '/'),
    maxLength: 12,
  }),
  fc.constantFrom('', 'POST', '/v1/bench/iris/v1/models/iris:predict', '127.0.0.1:8080'),
);
const count = fc.oneof(fc.nat(), fc.constant(0), fc.integer({ min: 2 ** 31, max: Number.MAX_SAFE_INTEGER }));
const ms = fc.oneof(
  fc.nat(100_000).map((k) => k / 10),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
);
const record: fc.Arbitrary<AccessRecord> = fc.record(
  {
    requestId: text,
    method: text,
    path: text,
    status: fc.integer({ min: 100, max: 599 }),
    ms,
    project: text,
    deployment: text,
    key: text,
    client: text,
    upstream: text,
    pick: text,
    bytesIn: count,
    bytesOut: count,
    error: text,
    promptTokens: count,
    completionTokens: count,
    ttftMs: ms,
    tokensEstimated: fc.boolean(),
    reportedPromptTokens: count,
    reportedCompletionTokens: count,
  },
  {
    requiredKeys: [
      'requestId',
      'method',
      'path',
      'status',
      'ms',
      'project',
      'deployment',
      'key',
      'client',
      'upstream',
      'bytesIn',
      'bytesOut',
    ],
  },
);

/** An access log writing to a list, and its lines once flushed. */
function capture(): { log: AccessLog; writes: string[]; lines: () => string[] } {
  const writes: string[] = [];
  const log = new AccessLog((t) => writes.push(t));
  return {
    log,
    writes,
    lines: () => {
      log.flush();
      const all = writes.join('');
      expect(all.endsWith('\n')).toBe(true);
      return all.slice(0, -1).split('\n');
    },
  };
}

describe('access log lines', () => {
  test('each line is JSON.stringify of the record, fields in order, whatever its strings hold', () => {
    fc.assert(
      fc.property(fc.array(record, { minLength: 1, maxLength: 8 }), (records) => {
        const { log, lines } = capture();
        const before = Date.now();
        for (const r of records) log.log(r);
        const after = Date.now();
        const got = lines();
        expect(got).toHaveLength(records.length);
        got.forEach((line, i) => {
          const time = (JSON.parse(line) as { time: string }).time;
          const at = Date.parse(time);
          expect(at).toBeGreaterThanOrEqual(before);
          expect(at).toBeLessThanOrEqual(after);
          expect(line).toBe(expected(records[i], time));
        });
      }),
      { numRuns: 300 },
    );
  });

  test('a line holds the record as it was when logged (the caller may fill the same object again)', () => {
    const { log, lines } = capture();
    const r: AccessRecord = {
      requestId: 'first',
      method: 'GET',
      path: '/a',
      status: 200,
      ms: 1.5,
      project: 'p',
      deployment: 'd',
      key: 'k',
      client: 'c',
      upstream: 'u',
      bytesIn: 1,
      bytesOut: 2,
      error: 'e1',
    };
    log.log(r);
    Object.assign(r, { requestId: 'second', path: '/b', status: 502, bytesIn: 3, error: undefined });
    log.log(r);
    const got = lines().map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(got.map((l) => [l.requestId, l.path, l.status, l.bytesIn, l.error])).toEqual([
      ['first', '/a', 200, 1, 'e1'],
      ['second', '/b', 502, 3, undefined],
    ]);
  });

  test('the time is the moment of each line, also when the clock moves between lines', () => {
    const { log, lines } = capture();
    const r: AccessRecord = {
      requestId: 'a',
      method: 'GET',
      path: '/',
      status: 200,
      ms: 1,
      project: 'p',
      deployment: 'd',
      key: 'k',
      client: 'c',
      upstream: 'u',
      bytesIn: 0,
      bytesOut: 0,
    };
    const times: number[] = [];
    const deadline = Date.now() + 1000;
    // Lines until the clock has moved by at least 3 ms (bounded by the deadline).
    while (Date.now() < deadline && (times.length < 2 || times[times.length - 1] - times[0] < 3)) {
      const t0 = Date.now();
      log.log(r);
      times.push(t0);
    }
    const got = lines().map((l) => Date.parse((JSON.parse(l) as { time: string }).time));
    expect(got).toHaveLength(times.length);
    expect(new Set(got).size).toBeGreaterThan(1);
    got.forEach((t, i) => {
      expect(t).toBeGreaterThanOrEqual(times[i]);
      expect(t).toBeLessThanOrEqual(times[i] + 1000);
      if (i) expect(t).toBeGreaterThanOrEqual(got[i - 1]);
    });
  });

  test('lines are written in batches: nothing before a flush, a batch of about 64 KB at once, whole lines only', () => {
    const { log, writes, lines } = capture();
    const r = (i: number): AccessRecord => ({
      requestId: `id-${i}`,
      method: 'POST',
      path: `/v1/p/d/${'x'.repeat(200)}`,
      status: 200,
      ms: 0.5,
      project: 'p',
      deployment: 'd',
      key: 'k',
      client: '127.0.0.1',
      upstream: '127.0.0.1:1',
      bytesIn: i,
      bytesOut: i,
    });
    log.log(r(0));
    expect(writes).toEqual([]);
    let i = 1;
    while (writes.length === 0 && i < 1000) log.log(r(i++));
    expect(writes).toHaveLength(1);
    const first = writes[0];
    // 64 KB as counted while the lines are built (a number as 4 characters).
    expect(first.length).toBeGreaterThan(60_000);
    expect(first.length).toBeLessThan(65_536 + 600);
    expect(first.endsWith('\n')).toBe(true);
    log.log(r(i++));
    const all = lines();
    expect(all).toHaveLength(i);
    all.forEach((l, n) => expect((JSON.parse(l) as { bytesIn: number }).bytesIn).toBe(n));
    expect(writes).toHaveLength(2);
    log.flush();
    expect(writes).toHaveLength(2); // nothing pending: no empty write
  });
});
