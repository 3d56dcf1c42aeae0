// A websocket tunnel is over once either side closes: the other side is ended (its FIN), destroyed if it has not
// closed a few seconds later, and the tunnel's access-log line and request metric are written at once. Before, a client
// that closed its half (or whose socket failed) while the backend kept its socket open left the tunnel unrecorded, and
// the backend's socket open, until the backend closed (found by a hostile review). The backend here is a raw socket
// that answers the handshake and never closes on its own.
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import { eventually, startGateway, type Gateway } from '../../support/harness.js';
import { rawClients } from '../../support/net.js';
import { metricValue } from '../../support/metrics.js';

/** A backend socket: what it read, whether the gateway ended it (FIN) and whether it is closed. */
interface BackendSide {
  socket: net.Socket;
  path: string;
  got: string;
  ended: boolean;
  closed: boolean;
}

/** The backend's first message: a websocket text frame "hello" (a realtime route reads frames). */
const HELLO = '\x81\x05hello';
/** The client's first message: a masked text frame "{}". */
const FROM_CLIENT = '\x81\x82\x01\x02\x03\x04' + String.fromCharCode(0x7b ^ 1, 0x7d ^ 2);

let backend: net.Server;
const sides: BackendSide[] = [];
let gw: Gateway;
const raw = rawClients(
  () => gw,
  () => gw.keys.k,
);

beforeAll(async () => {
  // allowHalfOpen: the gateway's FIN does not close it; it answers 101, sends "hello" and never closes on its own.
  backend = net.createServer({ allowHalfOpen: true }, (s) => {
    const side: BackendSide = { socket: s, path: '', got: '', ended: false, closed: false };
    sides.push(side);
    s.on('data', (c: Buffer) => {
      const first = side.got === '';
      side.got += c.toString('latin1');
      if (first) {
        side.path = /^GET (\S+)/.exec(side.got)?.[1] ?? '';
        s.write(
          `HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: websocket\r\n\r\n${HELLO}`,
          'latin1',
        );
      }
    });
    s.on('end', () => (side.ended = true));
    s.on('close', () => (side.closed = true));
    s.on('error', () => s.destroy());
  });
  await new Promise<void>((r) => backend.listen(0, '127.0.0.1', r));
  gw = await startGateway({
    deployments: [
      { namespace: 'demo', name: 'app', type: 'python', url: `http://127.0.0.1:${port()}` },
      { namespace: 'demo', name: 'chat', modelServer: 'llm', url: `http://127.0.0.1:${port()}` },
    ],
    keys: [{ name: 'k', projects: 'demo' }],
  });
});

const port = () => (backend.address() as AddressInfo).port;

afterAll(async () => {
  await gw?.close();
  for (const s of sides) s.socket.destroy();
  await new Promise((r) => backend?.close(r));
});

/** A tunnel through the gateway to `path` of deployment `app` (python) or `chat` (LLM), open. */
async function tunnel(path: string, deployment = 'app') {
  const c = await raw.connect();
  c.write(
    `GET /v1/demo/${deployment}/${path} HTTP/1.1\r\nhost: x\r\nconnection: upgrade\r\nupgrade: websocket\r\n` +
      'sec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n' +
      `authorization: ApiKey ${gw.keys.k}\r\n\r\n${FROM_CLIENT}`,
  );
  await c.until((x) => x.text.endsWith(HELLO), 5000, 'the 101 and the backend\'s "hello"');
  const side = await eventually(() => {
    const s = sides.find((x) => x.path === `/${path}`);
    expect(s?.got.endsWith(FROM_CLIENT)).toBe(true);
    return s!;
  });
  return { c, side };
}

/** The access-log line of the tunnel to `path`, if written. */
function logLine(path: string): { status: number; bytesIn: number; bytesOut: number } | undefined {
  const line = gw.logs.find((l) => l.includes('"msg":"request"') && new RegExp(`/v1/demo/\\w+/${path}"`).test(l));
  return line ? (JSON.parse(line) as { status: number; bytesIn: number; bytesOut: number }) : undefined;
}

const tunnels = async () =>
  metricValue(await (await fetch(`${gw.adminUrl}/metrics`)).text(), 'servegate_requests_total', {
    project: 'demo',
    deployment: 'app',
    status: '101',
  }) ?? 0;

describe('a tunnel whose backend never closes', () => {
  test('the client closing its half ends the tunnel: logged and counted at once, the backend ended', async () => {
    const before = await tunnels();
    const { c, side } = await tunnel('half');
    c.socket.end();
    // Recorded well before the grace in which the backend may still close on its own.
    await eventually(() => expect(logLine('half')).toMatchObject({ status: 101, bytesIn: 8, bytesOut: 7 }), 2000);
    expect(await tunnels()).toBe(before + 1);
    // The client's FIN is passed on, and the client's connection is closed.
    await eventually(() => expect(side.ended).toBe(true), 2000);
    expect(await c.closed(2000)).toBe('fin');
    // The backend that holds its socket open is let go of after the grace (a few seconds): until then the gateway
    // reads and drops what it sends; then its socket is gone and the backend's next write is refused (RST).
    const writes = setInterval(() => side.socket.writable && side.socket.write('still here'), 200);
    try {
      await eventually(() => expect(side.closed).toBe(true), 10_000);
    } finally {
      clearInterval(writes);
    }
  });

  test('the client socket failing ends the tunnel too', async () => {
    const { c, side } = await tunnel('reset');
    c.socket.resetAndDestroy();
    await eventually(() => expect(logLine('reset')).toMatchObject({ status: 101, bytesOut: 7 }), 2000);
    await eventually(() => expect(side.ended || side.closed).toBe(true), 2000);
  });

  test('the backend closing its half ends the tunnel while the client keeps its socket open', async () => {
    const { c, side } = await tunnel('backend-half');
    side.socket.end();
    await eventually(() => expect(logLine('backend-half')).toMatchObject({ status: 101 }), 2000);
    expect(await c.closed(2000)).toBe('fin');
    await eventually(() => expect(side.closed).toBe(true), 2000);
  });

  test('on a realtime (LLM) route too', async () => {
    const { c, side } = await tunnel('v1/realtime', 'chat');
    c.socket.end();
    await eventually(
      () => expect(logLine('v1/realtime')).toMatchObject({ status: 101, bytesIn: 8, bytesOut: 7 }),
      2000,
    );
    await eventually(() => expect(side.ended).toBe(true), 2000);
    expect(await c.closed(2000)).toBe('fin');
  });
});
