// Request bodies that cost the gateway more than they look: a few hundred compressed bytes that decode to megabytes
// (limits.maxDecodedBodyBytes, decoded a few at a time), and a body that trickles in to pin a backend request
// (limits.requestBodyMinBytesPerSecond, SPEC §6).
import net from 'node:net';
import { brotliCompressSync, gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import { DecodeBudget } from '../../../src/gateway/http/body-encoding.js';
import {
  startOpenAIBackend,
  startPythonBackend,
  type OpenAIBackend,
  type RecordingBackend,
} from '../../support/backends.js';
import { send, startGateway, type Gateway } from '../../support/harness.js';
import { waitFor } from '../../support/wait.js';

let llm: OpenAIBackend;
let py: RecordingBackend;
let gw: Gateway;
const DECODED_MAX = 65_536;

beforeAll(async () => {
  [llm, py] = await Promise.all([startOpenAIBackend(), startPythonBackend()]);
  gw = await startGateway({
    config: { limits: { maxDecodedBodyBytes: DECODED_MAX, requestBodyMinBytesPerSecond: 100 } },
    deployments: [
      { namespace: 'demo', name: 'chat', modelServer: 'llm', url: llm.url },
      { namespace: 'demo', name: 'iris', modelServer: 'sklearn', url: py.url },
      { namespace: 'demo', name: 'app', type: 'python', url: py.url },
    ],
    keys: [{ name: 'k', projects: 'demo' }],
  });
});

afterAll(async () => {
  await gw?.close();
  await Promise.all([llm?.close(), py?.close()]);
});

const auth = () => ({ authorization: `ApiKey ${gw.keys.k}` });

describe('compressed bodies decode to at most limits.maxDecodedBodyBytes', () => {
  // ~33 MB of JSON in a few hundred bytes of brotli, or ~32 KB of gzip.
  const json = Buffer.from(`{"model":"demo/chat","messages":[],"pad":"${'a'.repeat(33_000_000)}"}`);
  const bomb = { br: brotliCompressSync(json), gzip: gzipSync(json, { level: 9 }) };

  test.each([
    ['br', '/openai/v1/chat/completions'],
    ['gzip', '/openai/v1/chat/completions'],
    ['gzip', '/v1/demo/iris/v1/models/iris:predict'],
  ] as const)('a %s bomb to %s: 413 naming the decoded limit, the backend never asked', async (coding, path) => {
    expect(bomb[coding].length).toBeLessThan(40_000);
    const before = llm.requests.length + py.requests.length;
    const r = await send(`${gw.url}${path}`, {
      headers: { ...auth(), 'content-type': 'application/json', 'content-encoding': coding },
      body: bomb[coding],
    });
    expect(r.status).toBe(413);
    expect(r.text).toContain(`the ${coding}-decoded body is larger than the limit of ${DECODED_MAX} bytes`);
    expect(llm.requests.length + py.requests.length).toBe(before);
  });

  test('a compressed body under the decoded limit is served', async () => {
    const body = gzipSync(JSON.stringify({ instances: [[1, 2]] }));
    const r = await send(`${gw.url}/v1/demo/iris/v1/models/iris:predict`, {
      headers: { ...auth(), 'content-type': 'application/json', 'content-encoding': 'gzip' },
      body,
    });
    expect(r.status).toBe(200);
  });
});

describe('DecodeBudget: a few decodes at once, the rest wait in order, past the queue 503', () => {
  test('concurrency 1, one waiting: the third is refused at once; the waiting one runs after the first', async () => {
    const budget = new DecodeBudget(1, 1);
    const body = gzipSync(Buffer.from('{"a":1}'));
    const order: string[] = [];
    const run = (name: string) =>
      new Promise<string>((resolve) =>
        budget.decode(body, 'gzip', 1000, (err, plain) => {
          order.push(name);
          resolve(err ? `${err.status} ${err.code}` : plain!.toString());
        }),
      );
    const first = run('first');
    const second = run('second');
    expect(budget.load).toEqual({ active: 1, waiting: 1 });
    const third = await run('third');
    expect(third).toBe('503 server_busy');
    expect(await Promise.all([first, second])).toEqual(['{"a":1}', '{"a":1}']);
    expect(order).toEqual(['third', 'first', 'second']);
    expect(budget.load).toEqual({ active: 0, waiting: 0 });
  });
});

describe('a body that trickles (limits.requestBodyMinBytesPerSecond: 100 here)', () => {
  /** Sends `size` bytes of body as `step` bytes every `everyMs`, over a raw socket; resolves with what came back. */
  function trickle(size: number, step: number, everyMs: number, path: string) {
    const s = net.connect(gw.port, '127.0.0.1');
    let answer = '';
    s.on('data', (c: Buffer) => (answer += c.toString('latin1')));
    s.on('error', () => undefined);
    s.write(
      `POST ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: ApiKey ${gw.keys.k}\r\n` +
        `Content-Type: application/octet-stream\r\nContent-Length: ${size}\r\n\r\n`,
    );
    let sent = 0;
    const timer = setInterval(() => {
      if (s.destroyed || sent >= size) return clearInterval(timer);
      s.write(Buffer.alloc(Math.min(step, size - sent), 0x61));
      sent += step;
    }, everyMs);
    return {
      answer: () => answer,
      closed: new Promise<void>((r) => s.once('close', () => r())),
      stop: () => {
        clearInterval(timer);
        s.destroy();
      },
    };
  }

  test(
    'at 5 bytes/s: 408 once a 10 s window after the first 10 s is below the rate, and the backend request is aborted; ' +
      'at 150 bytes/s the same body goes on',
    async () => {
      const slow = trickle(4000, 1, 200, '/v1/demo/app/trickle-slow');
      const fast = trickle(6000, 30, 200, '/v1/demo/app/trickle-fast');
      try {
        // The backend has both requests (their bodies stream to it as they come).
        await waitFor(() => py.matching('/trickle-slow').length > 0, 'the slow body to reach the backend');
        await slow.closed;
        expect(slow.answer()).toMatch(/^HTTP\/1\.1 408 /);
        expect(slow.answer()).toContain('the request body arrived slower than 100 bytes/s over 10s');
        const upstream = py.matching('/trickle-slow')[0];
        await waitFor(() => upstream.closedAt !== undefined, 'the backend request to be closed');
        expect(upstream.aborted).toBe(true);
        // Same age, three times the rate: still being sent, no answer yet.
        expect(fast.answer()).toBe('');
      } finally {
        slow.stop();
        fast.stop();
      }
    },
    45_000,
  );
});
