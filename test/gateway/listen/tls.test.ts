// TLS on the gateway listener (SPEC §11): https with the configured pair, the backend told x-forwarded-proto https,
// the certificate swapped for new connections when its files change (a bad pair keeps the one in use, counted), an
// extra plain listener on tls.httpPort, and a bad pair at start-up refused naming the file.
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import { copyFileSync, mkdtempSync, renameSync, rmSync } from 'node:fs';
import { request as httpsRequest } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { PeerCertificate, TLSSocket } from 'node:tls';
import { readFileSync } from 'node:fs';
import { startPythonBackend, type RecordingBackend } from '../../support/backends.js';
import { makeCert } from '../../support/certs.js';
import { eventually, send, startGateway, type Gateway } from '../../support/harness.js';
import { freePort } from '../../support/net.js';

const dir = mkdtempSync(join(tmpdir(), 'servegate-tls-gw-'));
const alpha = makeCert(dir, 'alpha', 'alpha.test');
const beta = makeCert(dir, 'beta', 'beta.test');
const live = { certFile: join(dir, 'live.crt'), keyFile: join(dir, 'live.key') };
/** Replaces the live files the way an operator's tooling does: write aside, rename over. */
function install(pair: { certFile: string; keyFile: string }) {
  copyFileSync(pair.certFile, `${live.certFile}.new`);
  copyFileSync(pair.keyFile, `${live.keyFile}.new`);
  renameSync(`${live.certFile}.new`, live.certFile);
  renameSync(`${live.keyFile}.new`, live.keyFile);
}
install(alpha);

let py: RecordingBackend;
let gw: Gateway;
let httpPort: number;

beforeAll(async () => {
  py = await startPythonBackend();
  httpPort = await freePort();
  gw = await startGateway({
    config: { tls: { ...live, httpPort }, serverlessDomain: 'serving.example.com' },
    deployments: [{ name: 'echo', namespace: 'demo', type: 'python', url: py.url }],
    keys: [{ name: 'apikey-tls', projects: 'demo' }],
  });
});

afterAll(async () => {
  await gw?.close();
  await py?.close();
  rmSync(dir, { recursive: true, force: true });
});

interface HttpsReply {
  status: number;
  body: string;
  peer: PeerCertificate;
}

function get(path: string, ca: string[], legacyHost?: string): Promise<HttpsReply> {
  return new Promise((resolve, reject) => {
    const req = httpsRequest(
      {
        host: '127.0.0.1',
        port: gw.port,
        path,
        ca,
        agent: false,
        // A legacy hostname: sent as SNI and Host, as a client resolving it to the gateway would (the test
        // certificate does not name it, so only the chain is checked).
        ...(legacyHost ? { servername: legacyHost, checkServerIdentity: () => undefined } : {}),
        headers: { authorization: `ApiKey ${gw.keys['apikey-tls']}`, ...(legacyHost ? { host: legacyHost } : {}) },
      },
      (res) => {
        const peer = (res.socket as TLSSocket).getPeerCertificate();
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => (body += d));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body, peer }));
      },
    );
    req.on('error', reject);
    req.end();
  });
}

const bothCAs = [readFileSync(alpha.certFile, 'utf8'), readFileSync(beta.certFile, 'utf8')];

describe('TLS listener', () => {
  test('https with the configured certificate; the backend is told x-forwarded-proto https', async () => {
    const r = await get('/v1/demo/echo/hello', [readFileSync(alpha.certFile, 'utf8')]);
    expect(r.status).toBe(200);
    expect(r.peer.subject.CN).toBe('alpha.test');
    expect(JSON.parse(r.body).headers['x-forwarded-proto']).toBe('https');
  });

  test('legacy Host routing over https with SNI: the deployment named by the host answers', async () => {
    const r = await get('/some/path?q=1', [readFileSync(alpha.certFile, 'utf8')], 'echo.demo.serving.example.com');
    expect(r.status).toBe(200);
    const seen = JSON.parse(r.body) as { path: string; headers: Record<string, string> };
    expect(seen.path).toBe('/some/path?q=1');
    expect(seen.headers['x-forwarded-proto']).toBe('https');
    const unknown = await get('/x', [readFileSync(alpha.certFile, 'utf8')], 'nope.demo.serving.example.com');
    expect(unknown.status).toBe(404);
  });

  test('plain http on the gateway port is not answered as HTTP; the extra plain listener serves the same routes', async () => {
    await expect(send(`${gw.url}/v1/demo/echo/x`, { timeoutMs: 2000 })).rejects.toThrow();
    const r = await send(`http://127.0.0.1:${httpPort}/v1/demo/echo/plain`, {
      headers: { authorization: `ApiKey ${gw.keys['apikey-tls']}` },
    });
    expect(r.status).toBe(200);
    expect(r.json().headers['x-forwarded-proto']).toBe('http');
  });

  test('changed files: new connections get the new certificate within 5 s; a bad pair keeps it and is counted', async () => {
    install(beta);
    await eventually(
      async () => expect((await get('/v1/demo/echo/after', bothCAs)).peer.subject.CN).toBe('beta.test'),
      5000,
    );
    const metrics = (await send(`${gw.adminUrl}/metrics`)).text;
    expect(metrics).toMatch(/^servegate_tls_certificate_reloads_total\{result="success"\} 1$/m);
    expect(metrics).toMatch(
      /^servegate_tls_certificate_expiry_timestamp_seconds\{subject="CN=beta\.test"\} \d+(\.\d+)?$/m,
    );

    install({ certFile: alpha.certFile, keyFile: beta.keyFile }); // a mismatched pair
    await eventually(async () => {
      expect((await send(`${gw.adminUrl}/metrics`)).text).toMatch(
        /^servegate_tls_certificate_reloads_total\{result="error"\} 1$/m,
      );
    }, 5000);
    const r = await get('/v1/demo/echo/still', bothCAs);
    expect([r.status, r.peer.subject.CN]).toEqual([200, 'beta.test']);
    expect(gw.logs.some((l) => l.includes('TLS certificate not reloaded') && l.includes('tls.keyFile'))).toBe(true);
  });
});

describe('TLS at start-up', () => {
  test('a bad pair stops start-up naming the file', async () => {
    await expect(
      startGateway({ config: { tls: { certFile: alpha.certFile, keyFile: beta.keyFile } } }),
    ).rejects.toThrow(
      /tls\.keyFile .*beta\.key is not the private key of the certificate in tls\.certFile .*alpha\.crt/,
    );
  });
});
