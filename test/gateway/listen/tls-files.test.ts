// The certificate pair: checked at start naming the file at fault; re-read on change, Kubernetes' `..data` symlink
// swap included; a bad pair at reload keeps the one in use.
import { afterAll, describe, expect, test } from '@jest/globals';
import { copyFileSync, mkdirSync, mkdtempSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  CertificateReloader,
  loadCertificatePair,
  type CertificateError,
  type CertificatePair,
} from '../../../src/gateway/listen/tls.js';
import { makeCert } from '../../support/certs.js';

const dir = mkdtempSync(join(tmpdir(), 'servegate-tls-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const a = makeCert(dir, 'a', 'alpha.test');
const b = makeCert(dir, 'b', 'beta.test');

describe('loadCertificatePair', () => {
  test('a matching pair loads, with its subject and expiry', () => {
    const pair = loadCertificatePair(a);
    expect(pair.subject).toBe('CN=alpha.test');
    expect(pair.notAfter).toBeGreaterThan(Date.now() + 86_400_000);
  });

  test.each([
    [
      'a missing certificate',
      () => ({ certFile: join(dir, 'nope.crt'), keyFile: a.keyFile }),
      /^tls\.certFile .*nope\.crt: cannot read \(ENOENT\)$/,
      'tls.certFile',
    ],
    [
      'a key that is not the certificate’s',
      () => ({ certFile: a.certFile, keyFile: b.keyFile }),
      /^tls\.keyFile .*b\.key is not the private key of the certificate in tls\.certFile .*a\.crt$/,
      'tls.keyFile',
    ],
    [
      'a certificate that is not PEM',
      () => ({ certFile: write('junk.crt', 'hello'), keyFile: a.keyFile }),
      /^tls\.certFile .*junk\.crt: not a PEM certificate/,
      'tls.certFile',
    ],
    [
      'a key that is not PEM',
      () => ({ certFile: a.certFile, keyFile: write('junk.key', 'hello') }),
      /^tls\.keyFile .*junk\.key: not a PEM private key/,
      'tls.keyFile',
    ],
  ])('%s is refused naming the file and its key', (_what, files, message, key) => {
    let err: CertificateError | undefined;
    try {
      loadCertificatePair(files());
    } catch (e) {
      err = e as CertificateError;
    }
    expect(err?.message).toMatch(message);
    expect(err?.key).toBe(key);
  });
});

function write(name: string, text: string): string {
  const p = join(dir, name);
  writeFileSync(p, text);
  return p;
}

describe('CertificateReloader', () => {
  /** A Secret volume as the kubelet writes it: tls.crt → ..data/tls.crt, ..data → a timestamped folder, swapped whole. */
  function secretVolume(name: string) {
    const vol = join(dir, name);
    mkdirSync(vol);
    let n = 0;
    const publish = (pair: { certFile: string; keyFile: string }) => {
      const folder = `..${++n}`;
      mkdirSync(join(vol, folder));
      copyFileSync(pair.certFile, join(vol, folder, 'tls.crt'));
      copyFileSync(pair.keyFile, join(vol, folder, 'tls.key'));
      symlinkSync(folder, join(vol, '..data_tmp'));
      renameSync(join(vol, '..data_tmp'), join(vol, '..data'));
    };
    publish(a);
    symlinkSync('..data/tls.crt', join(vol, 'tls.crt'));
    symlinkSync('..data/tls.key', join(vol, 'tls.key'));
    return { files: { certFile: join(vol, 'tls.crt'), keyFile: join(vol, 'tls.key') }, publish };
  }

  test("a Secret volume's ..data swap is picked up; a bad pair keeps the certificate in use and is reported once", () => {
    const vol = secretVolume('vol1');
    const reloads: CertificatePair[] = [];
    const errors: CertificateError[] = [];
    const r = new CertificateReloader(vol.files, { onReload: (p) => reloads.push(p), onError: (e) => errors.push(e) });
    expect(r.current.subject).toBe('CN=alpha.test');
    r.check();
    expect(reloads).toHaveLength(0); // nothing changed

    vol.publish(b);
    r.check();
    expect(reloads).toHaveLength(0); // changed since the last poll: loaded once it holds still for one more
    r.check();
    expect(reloads.map((p) => p.subject)).toEqual(['CN=beta.test']);
    expect(r.current.subject).toBe('CN=beta.test');

    vol.publish({ certFile: a.certFile, keyFile: b.keyFile }); // mismatched
    r.check();
    r.check();
    r.check();
    expect(errors.map((e) => e.key)).toEqual(['tls.keyFile']);
    expect(r.current.subject).toBe('CN=beta.test');

    vol.publish(a); // fixed
    r.check();
    r.check();
    expect(reloads.map((p) => p.subject)).toEqual(['CN=beta.test', 'CN=alpha.test']);
  });

  test('a pair caught half-written is not reported: the certificate changed, then the key, one poll apart', () => {
    const vol = secretVolume('vol2');
    const errors: CertificateError[] = [];
    const reloads: CertificatePair[] = [];
    const r = new CertificateReloader(vol.files, { onReload: (p) => reloads.push(p), onError: (e) => errors.push(e) });
    vol.publish({ certFile: b.certFile, keyFile: a.keyFile });
    r.check();
    vol.publish(b);
    r.check();
    r.check();
    expect(errors).toEqual([]);
    expect(reloads.map((p) => p.subject)).toEqual(['CN=beta.test']);
  });

  test('a bad pair at start throws', () => {
    expect(
      () =>
        new CertificateReloader(
          { certFile: a.certFile, keyFile: b.keyFile },
          { onReload: () => {}, onError: () => {} },
        ),
    ).toThrow(/tls\.keyFile/);
  });
});
