// The gateway's certificate and key (SPEC §11), re-read on change by polling: a Secret volume swaps a `..data`
// symlink, which file watchers miss. A bad pair (or one outside its validity) at reload keeps the current pair.
import { X509Certificate, createPrivateKey } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';

export interface TlsFiles {
  certFile: string;
  keyFile: string;
}

export interface CertificatePair {
  cert: Buffer;
  key: Buffer;
  /** The leaf certificate's notBefore, epoch ms. */
  notBefore: number;
  /** The leaf certificate's notAfter, epoch ms (for the expiry metric). */
  notAfter: number;
  subject: string;
}

export class CertificateError extends Error {
  constructor(
    /** The configuration key of the file at fault (`tls.certFile` or `tls.keyFile`). */
    readonly key: string,
    /** The path of the file at fault, as configured. */
    readonly file: string,
    message: string,
    /** A certificate not valid yet: its notBefore (epoch ms), when the same files are worth loading again. */
    readonly retryAt?: number,
  ) {
    super(message);
  }
}

/** Reads and checks a pair: readable PEM files, the key the certificate's own, `now` within its validity. */
export function loadCertificatePair(files: TlsFiles, now: number = Date.now()): CertificatePair {
  const cert = read(files.certFile, 'tls.certFile');
  const key = read(files.keyFile, 'tls.keyFile');
  let x509: X509Certificate;
  try {
    x509 = new X509Certificate(cert);
  } catch (err) {
    throw new CertificateError(
      'tls.certFile',
      files.certFile,
      `tls.certFile ${files.certFile}: not a PEM certificate (${(err as Error).message})`,
    );
  }
  let privateKey;
  try {
    privateKey = createPrivateKey(key);
  } catch (err) {
    throw new CertificateError(
      'tls.keyFile',
      files.keyFile,
      `tls.keyFile ${files.keyFile}: not a PEM private key (${(err as Error).message})`,
    );
  }
  if (!x509.checkPrivateKey(privateKey)) {
    throw new CertificateError(
      'tls.keyFile',
      files.keyFile,
      `tls.keyFile ${files.keyFile} is not the private key of the certificate in tls.certFile ${files.certFile}`,
    );
  }
  const notBefore = Date.parse(x509.validFrom);
  const notAfter = Date.parse(x509.validTo);
  // Clients refuse such a certificate: serving it would fail every handshake that checks it.
  if (!(now <= notAfter)) {
    throw new CertificateError(
      'tls.certFile',
      files.certFile,
      `tls.certFile ${files.certFile}: the certificate expired on ${iso(notAfter)} (notAfter); install a renewed one`,
    );
  }
  if (!(now >= notBefore)) {
    throw new CertificateError(
      'tls.certFile',
      files.certFile,
      `tls.certFile ${files.certFile}: the certificate is not valid before ${iso(notBefore)} (notBefore); ` +
        `check the clock of this machine and of the issuer`,
      notBefore,
    );
  }
  return { cert, key, notBefore, notAfter, subject: x509.subject.replace(/\n/g, ', ') };
}

function iso(ms: number): string {
  return Number.isFinite(ms) ? new Date(ms).toISOString() : 'an unreadable date';
}

function read(file: string, key: string): Buffer {
  try {
    return readFileSync(file);
  } catch (err) {
    throw new CertificateError(
      key,
      file,
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
  /** The clock the validity period is checked against (tests); default Date.now. */
  now?: () => number;
}

export class CertificateReloader {
  private seen: string;
  private pending: string | undefined;
  private timer: NodeJS.Timeout | undefined;
  /** The files hold a certificate refused as not valid yet: loaded again, unchanged, once the clock reaches this. */
  private retryAt: number | undefined;
  current: CertificatePair;

  /** Loads the pair now (throws CertificateError naming the file) and remembers the files' state. */
  constructor(
    private readonly files: TlsFiles,
    private readonly options: ReloaderOptions,
  ) {
    this.seen = signature(files);
    this.current = loadCertificatePair(files, this.now());
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
   * One poll: a change loads once stable for a poll (a pair half written is not a bad one); a not-yet-valid one loads
   * at its notBefore (an issuer's clock ahead must not keep the old certificate until it expires).
   */
  check(): void {
    const now = signature(this.files);
    if (now === this.seen) {
      this.pending = undefined;
      if (this.retryAt !== undefined && this.now() >= this.retryAt) this.load();
      return;
    }
    if (now !== this.pending) {
      this.pending = now;
      return;
    }
    this.pending = undefined;
    this.seen = now;
    this.load();
  }

  private now(): number {
    return this.options.now?.() ?? Date.now();
  }

  private load(): void {
    this.retryAt = undefined;
    let pair: CertificatePair;
    try {
      pair = loadCertificatePair(this.files, this.now());
    } catch (err) {
      // A change that leaves a bad pair is reported once; the next change (or a not-yet-valid one's notBefore) is
      // checked again.
      const e =
        err instanceof CertificateError
          ? err
          : new CertificateError(
              'tls.certFile',
              this.files.certFile,
              `tls.certFile ${this.files.certFile}: ${String(err)}`,
            );
      this.retryAt = e.retryAt;
      this.options.onError(e);
      return;
    }
    this.current = pair;
    this.options.onReload(pair);
  }
}
