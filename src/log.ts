// JSON logs (pino). Keys are never logged: authorization headers are redacted and nothing else carries them.
import pinoDefault, { type Logger } from 'pino';

export type { Logger };

const pino = pinoDefault;

export function createLogger(level: string = 'info', destination?: NodeJS.WritableStream): Logger {
  return pino(
    {
      level,
      base: { service: 'servegate' },
      redact: {
        paths: ['req.headers.authorization', 'headers.authorization', '*.authorization', 'key', 'apiKey'],
        censor: '[redacted]',
      },
      timestamp: pino.stdTimeFunctions.isoTime,
      // Levels as words ("info"), as log pipelines and the access log expect.
      formatters: { level: (label) => ({ level: label }) },
    },
    destination ?? pino.destination({ sync: false }),
  );
}

export const silentLogger: Logger = pino({ level: 'silent' });

/** Writes whole lines to the logger's own destination (used by the batched access log). */
export function logWriter(logger: Logger): (text: string) => void {
  const stream = (logger as unknown as Record<symbol, { write(s: string): unknown }>)[pino.symbols.streamSym];
  return (text) => {
    stream.write(text);
  };
}
