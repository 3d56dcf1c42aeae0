// A body the gateway must read, decoded off the event loop and never past limits.maxDecodedBodyBytes (a few hundred
// bytes of brotli must not become tens of megabytes of JSON: 413), a few at a time (a bounded queue, then 503).
import { brotliDecompress, gunzip, inflate, inflateRaw, type InputType } from 'node:zlib';
import { gatewayError, type GatewayError } from './errors.js';

type Decoder = (
  buf: InputType,
  options: { maxOutputLength: number },
  cb: (err: Error | null, out: Buffer) => void,
) => void;

const DECODERS: Record<string, Decoder> = {
  gzip: gunzip,
  'x-gzip': gunzip,
  br: brotliDecompress,
  // RFC 9110's deflate is zlib-wrapped; some clients send raw deflate: tried second.
  deflate: (buf, options, cb) =>
    inflate(buf, options, (err, out) => (err && !isTooLarge(err) ? inflateRaw(buf, options, cb) : cb(err, out))),
};

export const SUPPORTED_ENCODINGS = ['identity', ...Object.keys(DECODERS)];

function isTooLarge(err: Error): boolean {
  return (err as NodeJS.ErrnoException).code === 'ERR_BUFFER_TOO_LARGE' || err instanceof RangeError;
}

/** Decodes `buf` per `coding` (lower case), or the error: 415 unknown coding or chain, 413 past `max`, 400 corrupt. */
export function decodeBody(
  buf: Buffer,
  coding: string,
  max: number,
  done: (err: GatewayError | undefined, plain?: Buffer) => void,
): void {
  const c = coding.trim();
  if (c === '' || c === 'identity') return done(undefined, buf);
  const decoder = DECODERS[c];
  if (!decoder) {
    return done(
      gatewayError(
        'unsupported_media_type',
        `content-encoding "${coding}" is not supported on this route: send the body as identity, gzip, deflate or br`,
      ),
    );
  }
  decoder(buf, { maxOutputLength: max }, (err, out) => {
    if (!err) return done(undefined, out);
    if (isTooLarge(err))
      return done(gatewayError('body_too_large', `the ${c}-decoded body is larger than the limit of ${max} bytes`));
    done(gatewayError('invalid_body', `the body is not valid ${c}: ${err.message}`));
  });
}

/** Decodes at most `concurrency` bodies at once; up to `maxWaiting` more wait in arrival order; past that, 503. */
export class DecodeBudget {
  private active = 0;
  private readonly waiting: Array<() => void> = [];

  constructor(
    private readonly concurrency: number,
    private readonly maxWaiting = 64,
  ) {}

  /** Decodes as decodeBody does, when a turn is free. */
  decode(
    buf: Buffer,
    coding: string,
    max: number,
    done: (err: GatewayError | undefined, plain?: Buffer) => void,
  ): void {
    const run = (): void => {
      this.active++;
      decodeBody(buf, coding, max, (err, plain) => {
        this.active--;
        this.waiting.shift()?.();
        done(err, plain);
      });
    };
    if (this.active < this.concurrency) return run();
    if (this.waiting.length >= this.maxWaiting) {
      return done(
        gatewayError('server_busy', 'too many compressed request bodies are being decoded; retry shortly', {
          'retry-after': '1',
        }),
      );
    }
    this.waiting.push(run);
  }

  /** Decodes running and waiting (tests). */
  get load(): { active: number; waiting: number } {
    return { active: this.active, waiting: this.waiting.length };
  }
}
