// With CORS on, an answer names Origin in Vary once: the gateway's Vary: Origin is merged into the backend's Vary
// (its other names kept, `*` staying `*`) instead of sent as a second line, which gave the client "Origin" twice
// (found by a hostile review). Checked on the bytes a raw client gets, for relayed answers and a declined upgrade.
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import { RecordingBackend } from '../../support/backends.js';
import { startGateway, type Gateway } from '../../support/harness.js';
import { rawClients } from '../../support/net.js';
import type { ParsedResponse } from '../../support/raw-backend.js';

const ORIGIN = 'https://app.example.com';

/** The Vary lines the backend answers each path with. */
const BACKEND_VARY: Record<string, string[]> = {
  origin: ['Origin'],
  both: ['Accept-Encoding, Origin'],
  lower: ['accept-encoding, origin'],
  star: ['*'],
  'star-and-more': ['Accept-Encoding, *'],
  'accept-encoding': ['Accept-Encoding'],
  'two-lines': ['Accept-Encoding', 'Origin'],
  none: [],
};

let backend: RecordingBackend;
let gw: Gateway;
const raw = rawClients(
  () => gw,
  () => gw.keys.k,
);

beforeAll(async () => {
  backend = await new RecordingBackend((req, res) => {
    const vary = BACKEND_VARY[(req.url ?? '').split('/').pop() ?? ''] ?? [];
    const headers: Array<[string, string]> = [
      ['content-type', 'text/plain'],
      ['content-length', '2'],
    ];
    for (const v of vary) headers.push(['Vary', v]);
    // A declined websocket upgrade: answered as plain HTTP, with the same Vary.
    res.writeHead(req.headers.upgrade ? 403 : 200, headers.flat());
    res.end('ok');
  }).listen();
  gw = await startGateway({
    config: { cors: { allowedOrigins: [ORIGIN] } },
    deployments: [{ namespace: 'demo', name: 'app', type: 'python', url: backend.url }],
    keys: [{ name: 'k', projects: 'demo' }],
  });
});

afterAll(async () => {
  await gw?.close();
  await backend?.close();
});

function varyLines(r: ParsedResponse): string[] {
  return r.rawHeaders.filter(([name]) => name.toLowerCase() === 'vary').map(([, value]) => value);
}

async function get(path: string, origin: string, upgrade = false): Promise<ParsedResponse> {
  const c = await raw.connect();
  c.write(
    `GET /v1/demo/app/${path} HTTP/1.1\r\nhost: x\r\norigin: ${origin}\r\nauthorization: ApiKey ${gw.keys.k}\r\n` +
      (upgrade
        ? 'connection: upgrade\r\nupgrade: websocket\r\nsec-websocket-version: 13\r\n' +
          'sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n'
        : '') +
      '\r\n',
  );
  return c.response();
}

describe('Vary with CORS on', () => {
  test.each([
    ['origin', ['Origin']],
    ['both', ['Accept-Encoding, Origin']],
    ['lower', ['accept-encoding, origin']],
    ['star', ['*']],
    ['star-and-more', ['*']],
    ['accept-encoding', ['Accept-Encoding, Origin']],
    ['two-lines', ['Accept-Encoding, Origin']],
    ['none', ['Origin']],
  ])('a backend answering %s: the client gets Vary %j', async (path, want) => {
    const r = await get(path, ORIGIN);
    expect(r.status).toBe(200);
    expect(r.headers['access-control-allow-origin']).toBe(ORIGIN);
    expect(varyLines(r)).toEqual(want);
  });

  test('a disallowed origin gets one Vary naming Origin once too', async () => {
    const r = await get('both', 'https://evil.test');
    expect(r.status).toBe(200);
    expect(r.headers['access-control-allow-origin']).toBeUndefined();
    expect(varyLines(r)).toEqual(['Accept-Encoding, Origin']);
  });

  test('a websocket upgrade the backend declines is relayed with one Vary', async () => {
    const r = await get('both', ORIGIN, true);
    expect(r.status).toBe(403);
    expect(varyLines(r)).toEqual(['Accept-Encoding, Origin']);
  });
});
