// A backend that answers a websocket upgrade with 101 to another protocol (h2c): the client asked for a websocket, and
// RFC 6455 §4.1 has it fail such a handshake, so the gateway answers 502 in the route's dialect and passes none of it
// on (before, the 101 went through and the client was left talking to an h2c server). Found by bench/differential.mjs.
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, expect, test } from '@jest/globals';
import { startGateway, type Gateway } from '../../support/harness.js';
import { metricValue } from '../../support/metrics.js';

let backend: net.Server;
let gw: Gateway;
/** What the backend answers the next handshake with. */
let upgradeLine = 'upgrade: h2c\r\n';

beforeAll(async () => {
  backend = net.createServer((s) => {
    s.once('data', () => s.write(`HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\n${upgradeLine}\r\n`));
    s.on('error', () => s.destroy());
  });
  await new Promise<void>((r) => backend.listen(0, '127.0.0.1', r));
  gw = await startGateway({
    deployments: [
      {
        namespace: 'demo',
        name: 'app',
        type: 'python',
        url: `http://127.0.0.1:${(backend.address() as AddressInfo).port}`,
      },
    ],
    keys: [{ name: 'k', projects: 'demo' }],
  });
});

afterAll(async () => {
  await gw?.close();
  await new Promise((r) => backend?.close(r));
});

/** A websocket handshake through the gateway over a raw socket: what the gateway sent. */
async function handshake(): Promise<string> {
  const s = net.connect(gw.port, '127.0.0.1');
  let got = '';
  s.on('data', (c: Buffer) => (got += c.toString('latin1')));
  s.write(
    'GET /v1/demo/app/ws HTTP/1.1\r\nhost: x\r\nconnection: upgrade\r\nupgrade: websocket\r\n' +
      'sec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n' +
      `authorization: ApiKey ${gw.keys.k}\r\n\r\n`,
  );
  // Until the gateway closes, or has sent a whole 101 head (the tunnel then stays open).
  await new Promise<void>((r) => {
    s.once('close', () => r());
    s.on('data', () => {
      if (/^HTTP\/1\.1 101 [^]*\r\n\r\n/.test(got)) s.destroy();
    });
  });
  return got;
}

const failures = async () =>
  metricValue(await (await fetch(`${gw.adminUrl}/metrics`)).text(), 'servegate_upstream_errors_total', {
    cause: 'bad_answer',
  }) ?? 0;

test('a 101 to h2c is answered 502, not passed on', async () => {
  upgradeLine = 'upgrade: h2c\r\n';
  const before = await failures();
  const got = await handshake();
  expect(got).toMatch(/^HTTP\/1\.1 502 /);
  expect(got).not.toMatch(/101 Switching/);
  expect(got).toMatch(/"the backend switched to h2c, not to websocket"/);
  expect(await failures()).toBe(before + 1);
});

test('a 101 to websocket, in any case, is passed on', async () => {
  upgradeLine = 'upgrade: WebSocket\r\n';
  const got = await handshake();
  expect(got).toMatch(/^HTTP\/1\.1 101 /);
});
