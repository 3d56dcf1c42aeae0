// Hostile review of the body budget (issue 31 item 2): room in limits.maxBufferedBodyBytes is taken by the bytes a
// body has sent, not by the Content-Length it declares. A client that declared a near-limit body and trickles it
// (within the 408 rules) held the whole budget, and every other tenant's JSON body waited out
// bufferedBodyWaitSeconds and got 503.
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import { EventEmitter } from 'node:events';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { gzipSync } from 'node:zlib';
import { afterAll, afterEach, beforeAll, describe, expect, test } from '@jest/globals';
import { collectBody } from '../../../src/gateway/http/body-collect.js';
import { send, startGateway, type Gateway } from '../../support/harness.js';
import { waitFor } from '../../support/wait.js';

describe('a declared body reserves what it has sent', () => {
  let gw: Gateway;
  const backend = http.createServer((req: IncomingMessage, res: ServerResponse) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{"id":"x","object":"chat.completion","choices":[]}');
    });
  });
  const sockets: net.Socket[] = [];

  beforeAll(async () => {
    await new Promise<void>((r) => backend.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(backend.address() as AddressInfo).port}`;
    const llm = { modelServer: 'llm' as const, namespace: 'demo' };
    gw = await startGateway({
      config: {
        limits: { maxBufferedBodyBytes: 1_048_576, bufferedBodyWaitSeconds: 0.5, maxDecodedBodyBytes: 400_000 },
      },
      deployments: [
        { ...llm, name: 'plain', modelName: 'plain', url },
        { ...llm, name: 'kept', modelName: 'kept', url, spec: { fallbacks: ['plain'] } },
      ],
      keys: [
        { name: 'attacker', projects: 'demo' },
        { name: 'victim', projects: 'demo' },
      ],
    });
  });

  afterEach(async () => {
    const open = sockets.splice(0);
    const gone = open.map((s) => new Promise((r) => (s.closed ? r(null) : s.once('close', r))));
    for (const s of open) s.destroy();
    await Promise.all(gone);
  });

  afterAll(async () => {
    await gw?.close();
    await new Promise((r) => backend.close(r));
  });

  /**
   * A raw request that declares `declared` body bytes and, once the gateway asks for the body (100 Continue: its
   * room is granted), sends only `sent`.
   */
  async function trickle(path: string, declared: number, sent: string | Buffer, extra = ''): Promise<net.Socket> {
    const s = net.connect(gw.port, '127.0.0.1');
    sockets.push(s);
    await new Promise<void>((r) => s.once('connect', () => r()));
    s.on('error', () => undefined);
    let seen = '';
    s.on('data', (d: Buffer) => (seen += d.toString('latin1')));
    s.write(
      `POST ${path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${gw.keys.attacker}\r\nexpect: 100-continue\r\n` +
        `content-type: application/json\r\ncontent-length: ${declared}\r\n${extra}\r\n`,
    );
    await waitFor(() => seen.startsWith('HTTP/1.1 100'), 'the gateway to ask for the body');
    s.write(sent);
    return s;
  }

  test.each(['plain', 'kept'])(
    'a body that declared the whole budget and sent 14 bytes (to %s) leaves room for another key',
    async (deployment) => {
      const path = `/v1/demo/${deployment}/v1/chat/completions`;
      await trickle(path, 1_048_576, '{"messages":[{');
      const reply = await send(`${gw.url}/v1/demo/plain/v1/chat/completions`, {
        body: { messages: [{ role: 'user', content: 'hello' }] },
        headers: { authorization: `Bearer ${gw.keys.victim}` },
      });
      expect(reply.status).toBe(200);
    },
    10_000,
  );

  test.each(['plain', 'kept'])(
    'compressed bodies still coming (to %s) hold no room for their decoded form: another key is served',
    async (deployment) => {
      // Each would have held maxDecodedBodyBytes (400 KB, twice when it may be edited) from its first byte.
      const gz = gzipSync(JSON.stringify({ messages: [{ role: 'user', content: 'x' }] }));
      const path = `/v1/demo/${deployment}/v1/chat/completions`;
      for (let i = 0; i < 3; i++) await trickle(path, gz.length, gz.subarray(0, 10), 'content-encoding: gzip\r\n');
      const reply = await send(`${gw.url}/v1/demo/plain/v1/chat/completions`, {
        body: { messages: [{ role: 'user', content: 'hello' }] },
        headers: { authorization: `Bearer ${gw.keys.victim}` },
      });
      expect(reply.status).toBe(200);
      // A whole compressed body is still decoded, checked and served.
      const whole = await trickle(path, gz.length, gz, 'content-encoding: gzip\r\n');
      let answer = '';
      whole.on('data', (d: Buffer) => (answer += d.toString('latin1')));
      await waitFor(() => /HTTP\/1\.1 200[^]*chat\.completion/.test(answer), 'the compressed body to be served');
    },
    10_000,
  );

  test('twenty bodies that each sent 14 bytes (a 64 KiB first buffer each filled the budget at 8) leave room', async () => {
    for (let i = 0; i < 20; i++) await trickle('/v1/demo/kept/v1/chat/completions', 1_000_000, '{"messages":[{');
    const reply = await send(`${gw.url}/v1/demo/plain/v1/chat/completions`, {
      body: { messages: [{ role: 'user', content: 'hello' }] },
      headers: { authorization: `Bearer ${gw.keys.victim}` },
    });
    expect(reply.status).toBe(200);
  }, 10_000);

  test('a client that hangs up in the middle of its body lets its room go', async () => {
    const path = '/v1/demo/plain/v1/chat/completions';
    const s = await trickle(path, 1_048_576, '{"messages":[{');
    const closed = new Promise((r) => s.once('close', r));
    s.destroy();
    await closed;
    // Alone again in the budget: a body of the whole budget is granted at once.
    const t = await trickle(path, 1_048_576, '{"messages":[{');
    t.destroy();
  }, 10_000);

  test('a storm of refused, failed and abandoned bodies gives all its room back', async () => {
    const path = (d: string) => `/v1/demo/${d}/v1/chat/completions`;
    const auth = { authorization: `Bearer ${gw.keys.attacker}`, 'content-type': 'application/json' };
    const storm: Array<Promise<unknown>> = [];
    for (let i = 0; i < 10; i++) {
      // Hung up in the middle of a declared body, of a chunked one, and of a compressed one.
      storm.push(trickle(path('kept'), 500_000, '{"messages":[').then((s) => s.destroy()));
      storm.push(
        trickle(path('plain'), 0, '', '').then((s) => s.destroy()), // a GET-like empty body, then gone
      );
      const gz = gzipSync('{"messages":[]}');
      storm.push(
        trickle(path('kept'), gz.length, gz.subarray(0, 5), 'content-encoding: gzip\r\n').then((s) => s.destroy()),
      );
      // Refused once read: not JSON (400), a broken gzip body (400), too large once decoded (413).
      storm.push(send(`${gw.url}${path('kept')}`, { body: '{"messages":', headers: auth }));
      storm.push(
        send(`${gw.url}${path('kept')}`, {
          body: Buffer.from('not gzip at all'),
          headers: { ...auth, 'content-encoding': 'gzip' },
        }),
      );
      storm.push(
        send(`${gw.url}${path('plain')}`, {
          body: gzipSync(Buffer.alloc(500_000, 0x20)),
          headers: { ...auth, 'content-encoding': 'gzip' },
        }),
      );
    }
    await Promise.all(storm);
    // Alone in the budget again: a body kept for a fallback, with its copy twice the budget, goes straight through.
    const body = Buffer.from(JSON.stringify({ messages: [{ role: 'user', content: 'x'.repeat(1_000_000) }] }));
    const reply = await send(`${gw.url}${path('kept')}`, { body, headers: auth });
    expect(reply.status).toBe(200);
  }, 20_000);
});

describe('collectBody asks for room as bytes come', () => {
  /** A request whose body the test pushes; `asked`: each capacity collectBody asks room for (granted at once). */
  function collect(declared: number | undefined) {
    const req = Object.assign(new EventEmitter(), { pause: () => undefined, resume: () => undefined });
    const asked: number[] = [];
    let body: Buffer | undefined;
    collectBody(
      req as unknown as IncomingMessage,
      declared,
      33_554_432,
      (capacity, go) => {
        asked.push(capacity);
        go(true);
      },
      (end) => {
        if ('body' in end) body = end.body;
      },
    );
    return { req, asked, body: () => body };
  }

  test.each([33_554_432, undefined])('a body declaring %s bytes that sent 14 holds at most 1 KiB', (declared) => {
    const c = collect(declared);
    c.req.emit('data', Buffer.from('{"messages":[{'));
    expect(c.asked.length).toBeGreaterThan(0); // room is asked for here, not taken before the read
    expect(Math.max(...c.asked)).toBeLessThanOrEqual(1024);
  });

  test('room grows at most to twice what came, and the body is read whole into one buffer of its length', () => {
    const c = collect(300_000);
    const sent: Buffer[] = [];
    for (let i = 0; i < 300; i++) {
      const chunk = Buffer.alloc(1000, i & 0xff);
      sent.push(chunk);
      c.req.emit('data', chunk);
      const came = (i + 1) * 1000;
      expect(Math.max(...c.asked)).toBeLessThanOrEqual(Math.max(1024, 2 * came));
    }
    c.req.emit('end');
    expect(c.asked[c.asked.length - 1]).toBe(300_000);
    expect(c.body()!.equals(Buffer.concat(sent))).toBe(true);
  });
});
