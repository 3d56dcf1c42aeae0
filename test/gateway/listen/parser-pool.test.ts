// The free list of idle HTTP parsers: Node keeps up to 1,000 after a burst of connections (with their native memory);
// the gateway caps it. Real loopback connections to a node:http server in this process, and to a real gateway (its data
// plane is what makes the call), raw sockets as clients.
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import { createServer, type Server } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { once } from 'node:events';
import { createRequire } from 'node:module';
import { capIdleParsers, IDLE_PARSERS, idleParsers } from '../../../src/gateway/listen/parser-pool.js';
import { startPythonBackend, type RecordingBackend } from '../../support/backends.js';
import { startGateway, type Gateway } from '../../support/harness.js';
import { waitFor } from '../../support/wait.js';

let server: Server;
let port: number;

// Node's own free list. Another test file in this jest worker may have started a data plane (which caps it): each
// test here starts from Node's default cap and the list as it was is put back at the end.
const nodeParsers = (createRequire(import.meta.url)('_http_common') as { parsers: { max: number } }).parsers;
const capBefore = nodeParsers.max;
const NODE_DEFAULT_CAP = 1000;

beforeAll(async () => {
  server = createServer({ keepAlive: true }, (_req, res) => res.end('ok'));
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  port = (server.address() as AddressInfo).port;
});
afterAll(() => {
  server.close();
  nodeParsers.max = capBefore;
});

/**
 * `n` connections to `to` open at once, one answered request each (`request`, its answer ending in `ends`), then all
 * closed by the client; waits until the server has seen every one close (`openOnServer`), which is when it frees the
 * connection's parser.
 */
async function burst(
  n: number,
  to = port,
  request = 'GET / HTTP/1.1\r\nHost: x\r\n\r\n',
  ends = 'ok',
  openOnServer: () => Promise<number> = () =>
    new Promise((resolve, reject) => server.getConnections((err, count) => (err ? reject(err) : resolve(count)))),
): Promise<void> {
  const done = Array.from({ length: n }, async () => {
    const socket = connect(to, '127.0.0.1');
    await once(socket, 'connect');
    socket.write(request);
    // Read without ending the socket (a for-await loop left early would destroy it): every connection stays open
    // until all have their answer.
    let got = '';
    socket.setEncoding('latin1');
    await new Promise<void>((resolve, reject) => {
      socket.on('error', reject);
      socket.on('data', (chunk: string) => {
        got += chunk;
        if (got.endsWith(ends)) resolve();
      });
    });
    return socket;
  });
  const sockets = await Promise.all(done);
  for (const s of sockets) s.destroy();
  // The server frees each parser when it sees its connection close.
  await waitFor(async () => (await openOnServer()) === 0, 'the server to see every connection closed');
  await new Promise((r) => setImmediate(r));
}

describe('capIdleParsers', () => {
  test('Node keeps a parser per closed connection; once capped, the list is trimmed and stays at the cap', async () => {
    nodeParsers.max = NODE_DEFAULT_CAP;
    const uncapped = idleParsers();
    expect(uncapped).toBeDefined(); // this Node has the list (the gateway's memory figures rely on it)
    await burst(IDLE_PARSERS + 100);
    // Uncapped, Node keeps them all (its default cap is 1,000): what the gateway's cap is there to undo.
    expect(idleParsers()).toBeGreaterThanOrEqual(IDLE_PARSERS + 100);

    expect(capIdleParsers()).toBe(IDLE_PARSERS);
    expect(idleParsers()).toBe(IDLE_PARSERS);
    await burst(IDLE_PARSERS + 100);
    expect(idleParsers()).toBe(IDLE_PARSERS);

    // The server still works with parsers made anew and reused.
    await burst(3);
    expect(idleParsers()).toBe(IDLE_PARSERS);
  });

  test('never raises the cap, and a second call keeps the lower one', () => {
    nodeParsers.max = NODE_DEFAULT_CAP;
    capIdleParsers();
    expect(capIdleParsers(IDLE_PARSERS * 4)).toBe(IDLE_PARSERS);
    expect(capIdleParsers(8)).toBe(8);
    expect(idleParsers()).toBeLessThanOrEqual(8);
  });
});

describe('the gateway caps the list', () => {
  let backend: RecordingBackend;
  let gw: Gateway;
  beforeAll(async () => {
    // Node's default as a fresh process has it: the gateway's data plane, not this file, must lower it.
    nodeParsers.max = NODE_DEFAULT_CAP;
    backend = await startPythonBackend();
    gw = await startGateway({
      deployments: [{ namespace: 'demo', name: 'app', type: 'python', url: backend.url }],
      keys: [{ name: 'k', projects: 'demo' }],
    });
  });
  afterAll(async () => {
    await gw?.close();
    await backend?.close();
  });

  test('a gateway started on an uncapped process keeps at most IDLE_PARSERS idle after a burst of connections', async () => {
    // The cap is in force once the gateway is up (Node's list never lowers its own max).
    expect(nodeParsers.max).toBe(IDLE_PARSERS);
    // The gateway's own connections, each closed by the client: their parsers go back to a list that stays capped.
    const served = backend.requests.length;
    await burst(
      IDLE_PARSERS + 100,
      gw.port,
      `GET /v1/demo/app/burst HTTP/1.1\r\nHost: x\r\nAuthorization: ApiKey ${gw.keys.k}\r\n\r\n`,
      '}',
      // The gateway's connections are not countable from here: the backend's count says every request was served.
      async () => IDLE_PARSERS + 100 - (backend.requests.length - served),
    );
    await waitFor(() => idleParsers() === IDLE_PARSERS, 'the freed parsers to fill the list to its cap');
    expect(nodeParsers.max).toBe(IDLE_PARSERS);
  });
});
