// Self-signed certificates made with the openssl command (Debian's package), for the TLS tests.
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';

/** Writes `<name>.crt` and `<name>.key` (EC P-256, CN and SAN `cn`) into `dir`; returns their paths. */
export function makeCert(dir: string, name: string, cn = 'localhost'): { certFile: string; keyFile: string } {
  const certFile = join(dir, `${name}.crt`);
  const keyFile = join(dir, `${name}.key`);
  execFileSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:prime256v1',
      '-nodes',
      '-days',
      '2',
      '-subj',
      `/CN=${cn}`,
      '-addext',
      `subjectAltName=DNS:${cn},IP:127.0.0.1`,
      '-keyout',
      keyFile,
      '-out',
      certFile,
    ],
    { stdio: 'ignore' },
  );
  return { certFile, keyFile };
}
