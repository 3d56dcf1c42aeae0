// JSON logs (pino). Keys are never logged: authorization headers are redacted and nothing else carries them.
import { pino, destination, stdTimeFunctions, type Logger } from 'pino';

export type { Logger };

export function createLogger(level: string = 'info', destination?: NodeJS.WritableStream): Logger {
  return pino(
    {
      level,
      base: { service: 'servegate' },
      redact: { paths: ['req.headers.authorization', 'headers.authorization', '*.authorization', 'key', 'apiKey'], censor: '[redacted]' },
      timestamp: stdTimeFunctions.isoTime,
    },
    destination ?? destination({ sync: false }),
  );
}

export const silentLogger: Logger = pino({ level: 'silent' });
