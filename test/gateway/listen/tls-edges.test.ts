// TLS edges from a hostile review: a handshake that never finishes is bounded by limits.headersTimeoutSeconds (as
// plain-http headers are), a certificate outside its validity period is refused at start-up and at reload, and the
// reload error's log line names the file in a field the logger does not redact.
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import net, { type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect as tlsConnect, type TLSSocket } from 'node:tls';
import {
  CertificateError,
  CertificateReloader,
  loadCertificatePair,
  type CertificatePair,
} from '../../../src/gateway/listen/tls.js';
import { tcpFds } from '../../support/attack.js';
import { makeCert } from '../../support/certs.js';
import { eventually, send, startGateway, type Gateway } from '../../support/harness.js';

const dir = mkdtempSync(join(tmpdir(), 'servegate-tls-edges-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/**
 * A self-signed pair with the given validity period (openssl `ca -selfsign`: `req -x509` has no start date, and
 * `x509 -not_before` is newer than the openssl here). Dates as openssl writes them: YYYYMMDDHHMMSSZ.
 */
function makeDatedCert(name: string, cn: string, startdate: string, enddate: string) {
  const certFile = join(dir, `${name}.crt`);
  const keyFile = join(dir, `${name}.key`);
  const csr = join(dir, `${name}.csr`);
  const db = join(dir, `${name}.index`);
  writeFileSync(db, '');
  writeFileSync(`${db}.serial`, '01\n');
  const cnf = join(dir, `${name}.cnf`);
  writeFileSync(
    cnf,
    [
      '[ca]',
      'default_ca = dflt',
      '[dflt]',
      `database = ${db}`,
      `serial = ${db}.serial`,
      `new_certs_dir = ${dir}`,
      'default_md = sha256',
      'policy = any',
      'copy_extensions = copy',
      'unique_subject = no',
      '[any]',
      'commonName = supplied',
      '',
    ].join('\n'),
  );
  const run = (args: string[]) => execFileSync('openssl', args, { stdio: 'ignore' });
  run([
    'req',
    '-new',
    '-newkey',
    'ec',
    '-pkeyopt',
    'ec_paramgen_curve:prime256v1',
    '-nodes',
    '-subj',
    `/CN=${cn}`,
    '-addext',
    `subjectAltName=DNS:${cn},IP:127.0.0.1`,
    '-keyout',
    keyFile,
    '-out',
    csr,
  ]);
  run([
    'ca',
    '-batch',
    '-config',
    cnf,
    '-selfsign',
    '-keyfile',
    keyFile,
    '-in',
    csr,
    '-out',
    certFile,
    '-notext',
    '-startdate',
    startdate,
    '-enddate',
    enddate,
  ]);
  return { certFile, keyFile };
}

const current = makeCert(dir, 'current', 'current.test');
const other = makeCert(dir, 'other', 'other.test');
const expired = makeDatedCert('expired', 'expired.test', '20200101000000Z', '20200102000000Z');
const future = makeDatedCert('future', 'future.test', '20990101000000Z', '20990201000000Z');
const FUTURE_NOT_BEFORE = Date.parse('2099-01-01T00:00:00Z');

/** Resolves with the ms it took once `socket` closes; rejects if it is still open after `withinMs`. */
function closedWithin(socket: Socket, withinMs: number, what: string): Promise<number> {
  const t0 = Date.now();
  return new Promise((resolve, reject) => {
    if (socket.destroyed) return resolve(0);
    const timer = setTimeout(
      () => reject(new Error(`${what}: still open ${withinMs} ms after it connected`)),
      withinMs,
    );
    socket.once('close', () => {
      clearTimeout(timer);
      resolve(Date.now() - t0);
    });
  });
}

function connectRaw(port: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = net.connect(port, '127.0.0.1', () => resolve(s));
    s.on('error', reject);
  });
}

/** The bytes of a real ClientHello (what node:tls sends first), caught by a plain TCP server. */
async function clientHello(): Promise<Buffer> {
  const catcher = net.createServer();
  await new Promise<void>((r) => catcher.listen(0, '127.0.0.1', r));
  const got = new Promise<Buffer>((resolve) =>
    catcher.once('connection', (s) => s.once('data', (d: Buffer) => (resolve(d), s.destroy()))),
  );
  const c = tlsConnect({ host: '127.0.0.1', port: (catcher.address() as net.AddressInfo).port, servername: 'x' });
  c.on('error', () => undefined);
  const hello = await got;
  c.destroy();
  await new Promise<void>((r) => catcher.close(() => r()));
  return hello;
}

describe('a TLS handshake that never finishes is bounded by limits.headersTimeoutSeconds', () => {
  let gw: Gateway;
  let hello: Buffer;
  const sockets: Socket[] = [];
  const timers: NodeJS.Timeout[] = [];

  beforeAll(async () => {
    hello = await clientHello();
    gw = await startGateway({ config: { tls: current, limits: { headersTimeoutSeconds: 1 } } });
  });
  afterAll(async () => {
    for (const t of timers) clearInterval(t);
    for (const s of sockets) s.destroy();
    await gw?.close();
  });

  const open = async () => {
    const s = await connectRaw(gw.port);
    s.on('error', () => undefined);
    sockets.push(s);
    return s;
  };

  test('a connection that sends nothing is closed by the gateway within about 1 s', async () => {
    const s = await open();
    const ms = await closedWithin(s, 3000, 'a silent TLS connection');
    expect(ms).toBeLessThan(3000);
  });

  test('a connection that sends half a ClientHello is closed within about 1 s', async () => {
    expect(hello.length).toBeGreaterThan(20);
    const s = await open();
    s.write(hello.subarray(0, Math.floor(hello.length / 2)));
    await closedWithin(s, 3000, 'a TLS connection stuck after half a ClientHello');
  });

  test('a ClientHello trickled one byte every 100 ms is closed within about 1 s (a deadline, not an idle timer)', async () => {
    const s = await open();
    let i = 0;
    const t = setInterval(() => {
      if (i < hello.length - 1 && !s.destroyed) s.write(hello.subarray(i, ++i));
    }, 100);
    timers.push(t);
    await closedWithin(s, 3000, 'a TLS connection trickling its ClientHello');
    clearInterval(t);
  });

  test('50 silent connections are all closed by the gateway and leave no descriptor behind', async () => {
    const many = await Promise.all(Array.from({ length: 50 }, () => open()));
    await eventually(() => expect(tcpFds({ localPort: gw.port })).toBeGreaterThanOrEqual(50), 2000);
    await Promise.all(many.map((s, i) => closedWithin(s, 4000, `silent TLS connection #${i}`)));
    await eventually(() => expect(tcpFds({ localPort: gw.port })).toBe(0), 2000);
  });

  test('after the handshake the headers timeout runs as on plain http', async () => {
    const s: TLSSocket = tlsConnect({ host: '127.0.0.1', port: gw.port, rejectUnauthorized: false });
    s.on('error', () => undefined);
    sockets.push(s);
    let answer = '';
    s.setEncoding('utf8');
    s.on('data', (d: string) => (answer += d)); // read, as a client does: the 408 and the close come after it
    await new Promise<void>((r) => s.once('secureConnect', () => r()));
    await closedWithin(s, 3000, 'a TLS connection that sends no request after the handshake');
    expect(answer).toMatch(/^HTTP\/1\.1 408 /);
  });

  test('a client that completes the handshake in time is served', async () => {
    const r = await new Promise<string>((resolve, reject) => {
      const s = tlsConnect({ host: '127.0.0.1', port: gw.port, rejectUnauthorized: false }, () =>
        s.end('GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'),
      );
      let text = '';
      s.setEncoding('utf8');
      s.on('data', (d: string) => (text += d));
      s.on('end', () => resolve(text));
      s.on('error', reject);
    });
    // The gateway's own answer for a request without a key: it parsed the request and answered it.
    expect(r).toMatch(/^HTTP\/1\.1 401 /);
    expect(r).toContain('"error"');
  });
});

describe('a certificate outside its validity period', () => {
  test('an expired certificate is refused naming the file and the expiry date', () => {
    let err: unknown;
    try {
      loadCertificatePair(expired);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(CertificateError);
    expect((err as CertificateError).message).toMatch(
      /^tls\.certFile .*expired\.crt: the certificate expired on 2020-01-02T00:00:00\.000Z/,
    );
    expect((err as CertificateError).key).toBe('tls.certFile');
  });

  test('a certificate not yet valid is refused naming the file and the start date', () => {
    expect(() => loadCertificatePair(future)).toThrow(
      /^tls\.certFile .*future\.crt: the certificate is not valid before 2099-01-01T00:00:00\.000Z/,
    );
  });

  test('start-up with an expired pair stops naming the file and the date', async () => {
    const started = startGateway({ config: { tls: expired } });
    await expect(started).rejects.toThrow(/tls\.certFile .*expired\.crt: the certificate expired on 2020-01-02/);
    await started.then((g) => g.close()).catch(() => undefined);
  });

  test('start-up with a pair not yet valid stops naming the file and the date', async () => {
    const started = startGateway({ config: { tls: future } });
    await expect(started).rejects.toThrow(
      /tls\.certFile .*future\.crt: the certificate is not valid before 2099-01-01/,
    );
    await started.then((g) => g.close()).catch(() => undefined);
  });

  test('a pair that becomes valid later is refused at reload, then taken once the clock reaches its notBefore', () => {
    const live = { certFile: join(dir, 'clock.crt'), keyFile: join(dir, 'clock.key') };
    copyFileSync(current.certFile, live.certFile);
    copyFileSync(current.keyFile, live.keyFile);
    let clock = Date.now();
    const reloads: CertificatePair[] = [];
    const errors: CertificateError[] = [];
    const r = new CertificateReloader(live, {
      onReload: (p) => reloads.push(p),
      onError: (e) => errors.push(e),
      now: () => clock,
    });
    installInto(live, future);
    r.check();
    r.check();
    r.check();
    expect(errors.map((e) => e.message)).toEqual([expect.stringMatching(/not valid before 2099-01-01/)]);
    expect(r.current.subject).toBe('CN=current.test');
    clock = FUTURE_NOT_BEFORE + 1000;
    r.check();
    expect(reloads.map((p) => p.subject)).toEqual(['CN=future.test']);
    expect(errors).toHaveLength(1);
  });
});

/** Replaces `live`'s files the way an operator's tooling does: write aside, rename over. */
function installInto(live: { certFile: string; keyFile: string }, pair: { certFile: string; keyFile: string }) {
  copyFileSync(pair.certFile, `${live.certFile}.new`);
  copyFileSync(pair.keyFile, `${live.keyFile}.new`);
  renameSync(`${live.certFile}.new`, live.certFile);
  renameSync(`${live.keyFile}.new`, live.keyFile);
}

describe('reloads refused on a running gateway', () => {
  const live = { certFile: join(dir, 'live.crt'), keyFile: join(dir, 'live.key') };
  let gw: Gateway;
  beforeAll(async () => {
    installInto(live, current);
    gw = await startGateway({ config: { tls: live } });
  });
  afterAll(async () => {
    await gw?.close();
  });

  const peerCN = () =>
    new Promise<string>((resolve, reject) => {
      const s = tlsConnect({ host: '127.0.0.1', port: gw.port, rejectUnauthorized: false }, () => {
        resolve(String(s.getPeerCertificate().subject.CN));
        s.destroy();
      });
      s.on('error', reject);
    });
  const errorsCounted = async () => {
    const m = /^servegate_tls_certificate_reloads_total\{result="error"\} (\d+)$/m.exec(
      (await send(`${gw.adminUrl}/metrics`)).text,
    );
    return m ? Number(m[1]) : 0;
  };
  const logLines = () => gw.logs.map((l) => JSON.parse(l) as Record<string, unknown>);

  test('an expired pair at reload keeps the pair in use, is counted as an error and logged at error naming the file', async () => {
    const before = await errorsCounted();
    installInto(live, expired);
    await eventually(async () => expect(await errorsCounted()).toBe(before + 1), 5000);
    expect(await peerCN()).toBe('current.test');
    const lines = logLines().filter((l) => String(l.msg).startsWith('TLS certificate not reloaded'));
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ level: 'error', file: live.certFile, setting: 'tls.certFile' });
    expect(String(lines[0].msg)).toMatch(/the certificate expired on 2020-01-02/);
    expect(logLines().some((l) => l.msg === 'TLS certificate reloaded')).toBe(false);
    installInto(live, current); // back to a good pair for the next test
    await eventually(
      () => expect(logLines().filter((l) => l.msg === 'TLS certificate reloaded')).toHaveLength(1),
      5000,
    );
  });

  test('the reload error names the file at fault in a field that is not redacted', async () => {
    const before = await errorsCounted();
    installInto(live, { certFile: current.certFile, keyFile: other.keyFile }); // a key that is not the certificate's
    await eventually(async () => expect(await errorsCounted()).toBe(before + 1), 5000);
    const line = logLines()
      .filter((l) => String(l.msg).startsWith('TLS certificate not reloaded'))
      .at(-1);
    expect(line).toMatchObject({ level: 'error', file: live.keyFile, setting: 'tls.keyFile' });
    expect(JSON.stringify(line)).not.toContain('[redacted]');
    expect(await peerCN()).toBe('current.test');
    expect(readFileSync(live.keyFile, 'utf8')).toBe(readFileSync(other.keyFile, 'utf8'));
  });
});
