// Backends that do what HTTP allows but clients rarely see: interim 1xx answers nobody asked for (SPEC §6: the client
// gets the final answer, never a 502 for a request the backend processed), and event streams that break after they
// started (SPEC §6: one last event in the route's dialect, then the connection closes).
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import { Conn, RawBackend, type RawRequest } from '../../support/raw-backend.js';
import { send, startGateway, type Gateway } from '../../support/harness.js';
import { metricValue } from '../../support/metrics.js';
import { waitFor } from '../../support/wait.js';
import type { Socket } from 'node:net';

/** What the backend writes for a request, by its path. */
const scripts: Record<string, (req: RawRequest, s: Socket) => void> = {};
let raw: RawBackend;
let gw: Gateway;

const answer = (body: string, extra = ''): string =>
  `HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n${extra}\r\n${body}`;

beforeAll(async () => {
  raw = await new RawBackend((req, s) => {
    const path = req.target.replace(/\?.*/, '');
    const script = scripts[path.slice(path.lastIndexOf('/'))];
    if (script) script(req, s);
    else s.write(answer('{"ok":true}'));
  }).listen();
  gw = await startGateway({
    deployments: [
      { namespace: 'demo', name: 'app', type: 'python', url: raw.url },
      { namespace: 'demo', name: 'chat', modelServer: 'llm', url: raw.url },
    ],
    keys: [{ name: 'k', projects: 'demo' }],
  });
});

afterAll(async () => {
  await gw?.close();
  await raw?.close();
});

const auth = () => ({ authorization: `ApiKey ${gw.keys.k}` });

describe('interim answers the gateway did not ask for', () => {
  test.each([
    ['one 100 Continue', (s: Socket) => s.write('HTTP/1.1 100 Continue\r\n\r\n' + answer('{"n":1}'))],
    [
      'a 100 Continue in pieces, then the answer in another write',
      (s: Socket) => {
        s.write('HTTP/1.1 1');
        setTimeout(() => s.write('00 Continue\r\n'), 20);
        setTimeout(() => s.write('\r\n'), 40);
        setTimeout(() => s.write(answer('{"n":2}')), 60);
      },
    ],
    [
      'a 103 then a 100 before the answer',
      (s: Socket) =>
        s.write(
          'HTTP/1.1 103 Early Hints\r\nlink: </b.css>; rel=preload\r\n\r\nHTTP/1.1 100 Continue\r\n\r\n' +
            answer('{"n":4}'),
        ),
    ],
    [
      'two 100s, a 102 and a 103 before the answer',
      (s: Socket) =>
        s.write(
          'HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 102 Processing\r\n\r\n' +
            'HTTP/1.1 103 Early Hints\r\nlink: </a.css>; rel=preload\r\n\r\n' +
            answer('{"n":3}'),
        ),
    ],
  ])('%s: the client gets the final answer, the backend saw one request', async (name, script) => {
    const path = `/interim-${name.length}`;
    scripts[path] = (_req, s) => script(s);
    const before = raw.requests.length;
    const r = await send(`${gw.url}/v1/demo/app${path}`, { method: 'POST', headers: auth(), body: { x: 1 } });
    expect(r.status).toBe(200);
    expect(r.json()).toEqual({
      n: name.startsWith('one') ? 1 : name.startsWith('a 100') ? 2 : name.startsWith('a 103') ? 4 : 3,
    });
    expect(raw.requests.length - before).toBe(1);
    // The connection stays usable: the next request on the pool is answered.
    const again = await send(`${gw.url}/v1/demo/app/plain`, { headers: auth() });
    expect(again.status).toBe(200);
  });

  test.each([
    ['a 100 with no reason phrase', 'HTTP/1.1 100\r\n\r\n'],
    ['a 100 with no reason phrase, in pieces', 'HTTP/1.1 100', '\r\n\r\n'],
    ['a 102 and a 100 with no reason phrase', 'HTTP/1.1 102\r\n\r\nHTTP/1.1 100\r\n\r\n'],
  ])('%s: the client gets the final answer, the backend saw one request', async (name, ...pieces) => {
    const path = `/bare-${name.length}`;
    scripts[path] = (_req, s) => {
      pieces.forEach((p, i) => setTimeout(() => s.write(p), 20 * i));
      setTimeout(() => s.write(answer('{"n":5}')), 20 * pieces.length);
    };
    const before = raw.requests.length;
    const r = await send(`${gw.url}/v1/demo/app${path}`, { method: 'POST', headers: auth(), body: { x: 1 } });
    expect(r.status).toBe(200);
    expect(r.json()).toEqual({ n: 5 });
    expect(raw.requests.length - before).toBe(1);
  });
});

describe('answers without a body whose head gives a length (RFC 9112 §6.3: a 204 or 304 ends with its head)', () => {
  test.each([
    [
      'a 304 with the Content-Length of the full answer',
      'HTTP/1.1 304 Not Modified\r\netag: "abc"\r\ncontent-length: 1234\r\n\r\n',
      304,
    ],
    ['a 204 with a Content-Length', 'HTTP/1.1 204 No Content\r\ncontent-length: 5\r\n\r\n', 204],
  ])('%s: passed on, complete, the connection kept', async (name, head, status) => {
    const path = `/nobody-${name.length}`;
    scripts[path] = (_req, s) => s.write(head);
    const c = await Conn.connect(gw.port);
    try {
      c.write(`GET /v1/demo/app${path} HTTP/1.1\r\nHost: x\r\nAuthorization: ApiKey ${gw.keys.k}\r\n\r\n`);
      const r = await c.response();
      expect(r.status).toBe(status);
      expect(r.complete).toBe(true);
      if (status === 304) {
        expect(r.headers.etag).toBe('"abc"');
        expect(r.headers['content-length']).toBe('1234');
      } else {
        expect(r.headers['content-length']).toBeUndefined();
      }
      // The client's connection stays usable.
      c.write(`GET /v1/demo/app/plain HTTP/1.1\r\nHost: x\r\nAuthorization: ApiKey ${gw.keys.k}\r\n\r\n`);
      expect((await c.response({ index: 1 })).status).toBe(200);
    } finally {
      c.close();
    }
  });
});

describe('answer heads passed on byte for byte, or refused', () => {
  test('header values with bytes 0x80-0xFF (UTF-8 and Latin-1) reach the client unchanged', async () => {
    const utf8 = Buffer.from('attachment; filename="café €.txt"', 'utf8');
    const latin1 = Buffer.from([0x63, 0x61, 0x66, 0xe9, 0x20, 0xff]);
    scripts['/bytes'] = (_req, s) =>
      s.write(
        Buffer.concat([
          Buffer.from('HTTP/1.1 200 OK\r\ncontent-disposition: '),
          utf8,
          Buffer.from('\r\nx-latin: '),
          latin1,
          Buffer.from('\r\ncontent-length: 2\r\n\r\nok'),
        ]),
      );
    const c = await Conn.connect(gw.port);
    try {
      c.write(`GET /v1/demo/app/bytes HTTP/1.1\r\nHost: x\r\nAuthorization: ApiKey ${gw.keys.k}\r\n\r\n`);
      const r = await c.response();
      expect(r.status).toBe(200);
      const head = c.data.subarray(0, c.data.indexOf('\r\n\r\n') + 4);
      expect(head.includes(Buffer.concat([Buffer.from('content-disposition: '), utf8, Buffer.from('\r\n')]))).toBe(
        true,
      );
      expect(head.includes(Buffer.concat([Buffer.from('x-latin: '), latin1, Buffer.from('\r\n')]))).toBe(true);
    } finally {
      c.close();
    }
  });

  test('an answer with Transfer-Encoding: gzip, chunked is a 502 that says why, not gzip bytes as the body', async () => {
    scripts['/gzipped'] = (_req, s) =>
      s.write(
        'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: gzip, chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n',
      );
    const r = await send(`${gw.url}/v1/demo/app/gzipped`, { headers: auth() });
    expect(r.status).toBe(502);
    expect(r.json()).toEqual({ error: expect.stringContaining('Transfer-Encoding other than chunked') });
  });
});

describe('an event stream that breaks after it started', () => {
  const sseHead = 'HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n';
  const chunk = (text: string) => `${Buffer.byteLength(text).toString(16)}\r\n${text}\r\n`;
  const event = (i: number) =>
    chunk(
      `data: ${JSON.stringify({ id: 'x', object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content: `tok${i}` } }] })}\n\n`,
    );

  test('OpenAI route: the SDK raises the error event instead of returning a shortened answer', async () => {
    scripts['/completions'] = (_req, s) => {
      s.write(sseHead + event(0) + event(1));
      setTimeout(() => s.resetAndDestroy(), 30);
    };
    const resets = async () =>
      metricValue((await send(`${gw.adminUrl}/metrics`)).text, 'servegate_upstream_errors_total', { cause: 'reset' }) ??
      0;
    const resetsBefore = await resets();
    const client = new OpenAI({ baseURL: `${gw.url}/v1/demo/chat/v1`, apiKey: gw.keys.k, maxRetries: 0 });
    const stream = await client.chat.completions.create({
      model: 'chat',
      messages: [{ role: 'user', content: 'x' }],
      stream: true,
    });
    const got: string[] = [];
    let error: unknown;
    try {
      for await (const c of stream) got.push(c.choices[0]?.delta?.content ?? '');
    } catch (err) {
      error = err;
    }
    expect(got).toEqual(['tok0', 'tok1']);
    expect(error).toBeInstanceOf(OpenAI.APIError);
    expect((error as Error).message).toContain('the backend broke off its answer: the answer is incomplete');
    // This one reset, counted once.
    await waitFor(async () => (await resets()) === resetsBefore + 1, 'the reset to be counted');
    expect(await resets()).toBe(resetsBefore + 1);
  });

  test('the bytes: the events sent, a blank line, the error event in the route dialect, then no clean end', async () => {
    scripts['/events'] = (_req, s) => {
      s.write(sseHead + chunk('data: {"half":'));
      setTimeout(() => s.resetAndDestroy(), 30);
    };
    const c = await Conn.connect(gw.port);
    c.write(`GET /v1/demo/app/events HTTP/1.1\r\nHost: x\r\nAuthorization: ApiKey ${gw.keys.k}\r\n\r\n`);
    await c.closed();
    const text = c.text;
    expect(text).toContain('data: {"half":');
    expect(text).toContain('\n\ndata: {"error":"the backend broke off its answer: the answer is incomplete"}\n\n');
    // No terminating zero-length chunk: the client sees the stream cut, never a clean end.
    expect(text.endsWith('0\r\n\r\n')).toBe(false);
  });

  test.each([
    ['in the middle of an event', 'data: {"part', true],
    ['after a line but before the blank line that ends the event', 'data: {"a":1}\n', true],
    ['at an event boundary (\\n\\n)', 'data: {"a":1}\n\n', false],
    ['at an event boundary (\\r\\n\\r\\n)', 'data: {"a":1}\r\n\r\n', false],
    ['at an event boundary (\\n\\r\\n, mixed line ends)', 'data: {"a":1}\n\r\n', false],
  ])('a close-delimited stream whose backend closes %s', async (_what, last, cut) => {
    const path = `/closedelim-${last.length}`;
    scripts[path] = (_req, s) => {
      // No Content-Length, no chunking: the connection's end is the answer's end.
      s.write('HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\ndata: {"a":0}\n\n');
      setTimeout(() => s.end(last), 20);
    };
    const c = await Conn.connect(gw.port);
    c.write(`GET /v1/demo/app${path} HTTP/1.1\r\nHost: x\r\nAuthorization: ApiKey ${gw.keys.k}\r\n\r\n`);
    if (cut) {
      // Cut like a reset: the events sent, a blank line, the error event, and no clean end.
      await c.closed();
      expect(c.text).toContain('data: {"a":0}\n\n');
      expect(c.text).toContain(last);
      expect(c.text).toContain('\n\ndata: {"error":"the backend broke off its answer: the answer is incomplete"}\n\n');
      expect(c.text.endsWith('0\r\n\r\n')).toBe(false);
    } else {
      const r = await c.response();
      expect(r.status).toBe(200);
      expect(r.complete).toBe(true);
      expect(r.body.toString()).toBe(`data: {"a":0}\n\n${last}`);
    }
  });

  test('a media type in another case (Text/Event-Stream) is an event stream too: flushed, metered', async () => {
    scripts['/completions'] = (_req, s) => {
      s.write(
        'HTTP/1.1 200 OK\r\ncontent-type: Text/Event-Stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n' +
          event(0) +
          chunk(
            `data: ${JSON.stringify({ id: 'x', choices: [], usage: { prompt_tokens: 7, completion_tokens: 1 } })}\n\n`,
          ) +
          chunk('data: [DONE]\n\n') +
          '0\r\n\r\n',
      );
    };
    const tokens = async () =>
      metricValue((await send(`${gw.adminUrl}/metrics`)).text, 'servegate_llm_tokens_total', {
        project: 'demo',
        deployment: 'chat',
        type: 'prompt',
      }) ?? 0;
    const before = await tokens();
    const r = await send(`${gw.url}/v1/demo/chat/v1/chat/completions`, {
      headers: auth(),
      body: { model: 'chat', messages: [], stream: true, stream_options: { include_usage: true } },
    });
    expect(r.status).toBe(200);
    expect(r.headers['x-accel-buffering']).toBe('no');
    await waitFor(async () => (await tokens()) === before + 7, 'the usage to be counted');
  });
});
