// Hostile review of the realtime gate (issue 31 items 4 and 7): a client message is held until whole (up to 1 MiB)
// to read its type, and nothing bounded what all sessions held but the websocket caps (200 per client address, 1000
// per key). 150 sessions that each sent all but one byte of a 1 MiB frame took the gateway's external memory from
// 14 to 315 MB (a few client addresses past the chart's 512 Mi: an OOM kill resets every tenant). What the gate holds
// now counts in limits.maxBufferedBodyBytes, of which all sessions take at most a quarter and never ahead of a body
// waiting for room; without room a message passes unread, as one too large to read (14 to 38 MB for the same 150).
import { createHash } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import WebSocket from 'ws';
import { RealtimeGate } from '../../../src/gateway/openai/realtime-gate.js';
import { startGateway, type Gateway } from '../../support/harness.js';
import { waitFor } from '../../support/wait.js';

/** A masked text frame header for `len` payload bytes (mask 1, 2, 3, 4). */
function frameHead(len: number): Buffer {
  return Buffer.from([
    0x81,
    0xff,
    0,
    0,
    0,
    0,
    len >>> 24,
    (len >>> 16) & 0xff,
    (len >>> 8) & 0xff,
    len & 0xff,
    1,
    2,
    3,
    4,
  ]);
}

describe('RealtimeGate asks for room before it holds a message', () => {
  test('without room a message is not held: it goes on as it comes, taking nothing; with room it is held', () => {
    for (const room of [false, true]) {
      const asked: boolean[] = [];
      const rooms: number[] = [];
      let forwarded = 0;
      const gate = new RealtimeGate({
        forward: (b) => (forwarded += b.length),
        decide: (take) => {
          asked.push(take);
          return undefined;
        },
        refused: () => undefined,
        hold: () => undefined,
        room: (bytes) => {
          rooms.push(bytes);
          return room || bytes === 0;
        },
      });
      const len = 600_000;
      gate.push(Buffer.concat([frameHead(len), Buffer.alloc(len - 1, 0x20)]));
      expect(rooms[0]).toBe(2 * (14 + len)); // the frames and their unmasked copies
      if (room) {
        expect(forwarded).toBe(0); // held until whole
        expect(asked).toEqual([]);
      } else {
        expect(forwarded).toBe(14 + len - 1); // on its way unread
        expect(asked).toEqual([false]);
      }
    }
  });
});

describe('realtime sessions and the budget of buffered bytes', () => {
  let gw: Gateway;
  let received = 0;
  const backend = http.createServer((_req, res) => res.end('{}'));
  backend.on('upgrade', (req: http.IncomingMessage, socket: Socket) => {
    const accept = createHash('sha1')
      .update(`${String(req.headers['sec-websocket-key'])}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`)
      .digest('base64');
    socket.write(
      `HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-accept: ${accept}\r\n\r\n`,
    );
    tunnels.push(socket);
    socket.on('data', (d: Buffer) => (received += d.length));
    socket.on('error', () => undefined);
  });
  const clients: WebSocket[] = [];
  const tunnels: Socket[] = [];

  beforeAll(async () => {
    await new Promise<void>((r) => backend.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(backend.address() as AddressInfo).port}`;
    gw = await startGateway({
      config: { limits: { maxBufferedBodyBytes: 1_048_576 } },
      deployments: [{ namespace: 'demo', name: 'chat', modelServer: 'llm', url }],
      keys: [{ name: 'k', projects: 'demo' }],
    });
  });

  afterAll(async () => {
    for (const c of clients) c.terminate();
    await gw?.close();
    for (const t of tunnels) t.destroy();
    await new Promise((r) => backend.close(r));
  });

  /** An open realtime session's raw socket. */
  async function session(): Promise<Socket> {
    const ws = new WebSocket(`ws://127.0.0.1:${gw.port}/v1/demo/chat/v1/realtime`, {
      headers: { authorization: `Bearer ${gw.keys.k}` },
    });
    clients.push(ws);
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
    });
    return (ws as unknown as { _socket: Socket })._socket;
  }

  test('past the realtime share (a quarter: 256 KiB; one message alone always fits) a message goes on unread', async () => {
    const len = 600_000;
    // All but its last byte: a gate that holds it until whole passes the backend nothing of it.
    const partial = Buffer.concat([frameHead(len), Buffer.alloc(len - 1, 0x20)]);
    (await session()).write(partial);
    const before = received;
    (await session()).write(partial);
    await waitFor(() => received - before >= len, "the second session's message to reach the backend unread");
  });
});
