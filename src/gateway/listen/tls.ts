// The gateway's certificate and key (SPEC §11): read and checked at start (a bad pair stops start-up naming the file),
// then re-read when either file changes — polled, because a Kubernetes Secret volume swaps a `..data` symlink rather
// than writing the files, which file watchers miss. A bad pair at reload keeps the certificate in use and is reported.
import { X509Certificate, createPrivateKey } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';

export interface TlsFiles {
  certFile: string;
  keyFile: string;
}

export interface CertificatePair {
  cert: Buffer;
  key: Buffer;
  /** The leaf certificate's notAfter, epoch ms (for the expiry metric). */
  notAfter: number;
  subject: string;
}

export class CertificateError extends Error {
  constructor(
    /** The configuration key of the file at fault (`tls.certFile` or `tls.keyFile`). */
    readonly key: string,
    message: string,
  ) {
    super(message);
  }
}

/** Reads and checks a pair: each file readable and PEM, the key the certificate's own. */
export function loadCertificatePair(files: TlsFiles): CertificatePair {
  const cert = read(files.certFile, 'tls.certFile');
  const key = read(files.keyFile, 'tls.keyFile');
  let x509: X509Certificate;
  try {
    x509 = new X509Certificate(cert);
  } catch (err) {
    throw new CertificateError(
      'tls.certFile',
      `tls.certFile ${files.certFile}: not a PEM certificate (${(err as Error).message})`,
    );
  }
  let privateKey;
  try {
    privateKey = createPrivateKey(key);
  } catch (err) {
    throw new CertificateError(
      'tls.keyFile',
      `tls.keyFile ${files.keyFile}: not a PEM private key (${(err as Error).message})`,
    );
  }
  if (!x509.checkPrivateKey(privateKey)) {
    throw new CertificateError(
      'tls.keyFile',
      `tls.keyFile ${files.keyFile} is not the private key of the certificate in tls.certFile ${files.certFile}`,
    );
  }
  return { cert, key, notAfter: Date.parse(x509.validTo), subject: x509.subject.replace(/\n/g, ', ') };
}

function read(file: string, key: string): Buffer {
  try {
    return readFileSync(file);
  } catch (err) {
    throw new CertificateError(
      key,
      `${key} ${file}: cannot read (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`,
    );
  }
}

/** What identifies the files' current contents without reading them: inode, size and mtime, symlinks followed. */
function signature(files: TlsFiles): string {
  const one = (f: string) => {
    try {
      const s = statSync(f);
      return `${s.dev}:${s.ino}:${s.size}:${s.mtimeMs}:${s.ctimeMs}`;
    } catch (err) {
      return `missing:${(err as NodeJS.ErrnoException).code ?? ''}`;
    }
  };
  return `${one(files.certFile)}|${one(files.keyFile)}`;
}

export interface ReloaderOptions {
  intervalMs?: number;
  onReload: (pair: CertificatePair) => void;
  onError: (err: CertificateError) => void;
}

export class CertificateReloader {
  private seen: string;
  private pending: string | undefined;
  private timer: NodeJS.Timeout | undefined;
  current: CertificatePair;

  /** Loads the pair now (throws CertificateError naming the file) and remembers the files' state. */
  constructor(
    private readonly files: TlsFiles,
    private readonly options: ReloaderOptions,
  ) {
    this.seen = signature(files);
    this.current = loadCertificatePair(files);
  }

  /** Polls every `intervalMs` (default 1 s): a change is in use within two polls. */
  start(): void {
    this.timer ??= setInterval(() => this.check(), this.options.intervalMs ?? 1000).unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  /**
   * One poll. A change is loaded once the files have stayed the same for one more poll, so that a pair being written
   * (the certificate renamed into place before the key, a large file still being copied) is not mistaken for a bad one.
   */
  check(): void {
    const now = signature(this.files);
    if (now === this.seen) {
      this.pending = undefined;
      return;
    }
    if (now !== this.pending) {
      this.pending = now;
      return;
    }
    this.pending = undefined;
    this.seen = now;
    let pair: CertificatePair;
    try {
      pair = loadCertificatePair(this.files);
    } catch (err) {
      // A change that leaves a bad pair is reported once; the next change is checked again.
      this.options.onError(err instanceof CertificateError ? err : new CertificateError('tls.certFile', String(err)));
      return;
    }
    this.current = pair;
    this.options.onReload(pair);
  }
}
