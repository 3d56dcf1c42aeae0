// `servegate serve`: runs the gateway on the files source (--manifests) or the Kubernetes source (--kubernetes).
import { parseArgs } from 'node:util';
import { ConfigError, loadConfigFile, ownNamespace } from '../config/load.js';
import type { Config } from '../config/schema.js';
import { createLogger, type Logger } from '../log.js';
import { startServegate, type Servegate } from '../server.js';
import { FilesSource } from '../sources/files/index.js';

export const SERVE_USAGE = `usage: servegate serve (--manifests <dir|file> | --kubernetes) [--config FILE] [--port 8080] [--admin-port 9090] [--host ADDR]`;

export interface ServeArgs {
  manifests?: string;
  kubernetes: boolean;
  config?: string;
  port: number;
  adminPort: number;
  host?: string;
}

export function parseServeArgs(argv: string[]): ServeArgs {
  const { values } = parseArgs({
    args: argv,
    options: {
      manifests: { type: 'string' },
      kubernetes: { type: 'boolean', default: false },
      config: { type: 'string' },
      port: { type: 'string', default: '8080' },
      'admin-port': { type: 'string', default: '9090' },
      host: { type: 'string' },
    },
    strict: true,
    allowPositionals: false,
  });
  const port = portArg('--port', values.port!);
  const adminPort = portArg('--admin-port', values['admin-port']!);
  if (!values.manifests && !values.kubernetes) throw new UsageError(`one of --manifests or --kubernetes is required\n${SERVE_USAGE}`);
  if (values.manifests && values.kubernetes) throw new UsageError(`--manifests and --kubernetes exclude each other\n${SERVE_USAGE}`);
  return { manifests: values.manifests, kubernetes: !!values.kubernetes, config: values.config, port, adminPort, host: values.host };
}

export class UsageError extends Error {}

function portArg(flag: string, v: string): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0 || n > 65535) throw new UsageError(`${flag} must be a port number 0-65535, got "${v}"`);
  return n;
}

/** Starts serving; resolves with the running server (the process stays up on its sockets). */
export async function serve(args: ServeArgs, logger?: Logger): Promise<{ server: Servegate; config: Config }> {
  const config = loadConfigFile(args.config, { port: args.port, namespace: ownNamespace() });
  const log = logger ?? createLogger(config.logLevel);
  if (args.kubernetes) {
    const kubernetesModule = './serve-kubernetes.js';
    const { startKubernetes } = (await import(kubernetesModule)) as {
      startKubernetes: (config: Config, args: ServeArgs, log: Logger) => Promise<Servegate>;
    };
    const server = await startKubernetes(config, args, log);
    return { server, config };
  }
  const source = new FilesSource(args.manifests!, { keysNamespace: config.auth.keysNamespace, logger: log });
  const server = await startServegate({ config, source, port: args.port, adminPort: args.adminPort, host: args.host, logger: log });
  return { server, config };
}

/** Ends the process gracefully on SIGTERM/SIGINT; a second signal exits at once. */
export function exitOnSignals(server: Servegate, logger: Logger): void {
  let stopping = false;
  const onSignal = (signal: NodeJS.Signals): void => {
    if (stopping) {
      logger.warn({ signal }, 'second signal: exiting now');
      process.exit(1);
    }
    stopping = true;
    logger.info({ signal }, 'signal received');
    server.shutdown().then(
      () => process.exit(0),
      (err) => {
        logger.error({ err }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
}

export async function serveCommand(argv: string[]): Promise<number> {
  let args: ServeArgs;
  try {
    args = parseServeArgs(argv);
  } catch (err) {
    process.stderr.write(`servegate serve: ${(err as Error).message}\n`);
    return 2;
  }
  try {
    const { server, config } = await serve(args);
    const logger = createLogger(config.logLevel);
    exitOnSignals(server, logger);
    return -1; // keep running
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`servegate: ${err.message}\n`);
      return 2;
    }
    process.stderr.write(`servegate: cannot start: ${(err as Error).message}\n`);
    return 1;
  }
}
