// JSON logs (pino). Keys are never logged: authorization headers are redacted and nothing else carries them.
import pinoDefault, { type Logger } from 'pino';

export type { Logger };

const pino = pinoDefault;

export function createLogger(level: string = 'info', destination?: NodeJS.WritableStream): Logger {
  return pino(
    {
      level,
      base: { service: 'servegate' },
      redact: { paths: ['req.headers.authorization', 'headers.authorization', '*.authorization', 'key', 'apiKey'], censor: '[redacted]' },
      timestamp: pino.stdTimeFunctions.isoTime,
    },
    destination ?? pino.destination({ sync: false }),
  );
}

export const silentLogger: Logger = pino({ level: 'silent' });
