// `servegate serve`: runs the gateway on the files source (--manifests) or the Kubernetes source (--kubernetes).
import type { Command } from 'commander';
import { loadConfigFile, ownNamespace } from '../config/load.js';
import { CommandError, ServegateError, UsageError } from '../errors.js';
import type { Config } from '../config/schema.js';
import { createLogger, type Logger } from '../log.js';
import { ADMIN_HOST, startServegate, type Servegate } from '../server.js';
import { FilesSource } from '../sources/files/index.js';
import { ADMIN_HOST_HELP, command, portNumber, processIo, run, setExit, type CliIo } from './io.js';

export interface ServeArgs {
  manifests?: string;
  kubernetes: boolean;
  config?: string;
  port: number;
  adminPort: number;
  host?: string;
  adminHost?: string;
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
  const server = await startServegate({
    config,
    source,
    port: args.port,
    adminPort: args.adminPort,
    host: args.host,
    adminHost: args.adminHost,
    logger: log,
  });
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

export function serveProgram(io: CliIo): Command {
  return command('serve', io)
    .description('Runs the gateway on the files source (--manifests) or the Kubernetes source (--kubernetes).')
    .option(
      '--manifests <dir|file>',
      'serve the ServingDeployments and key Secrets in these manifests (reloaded on change)',
    )
    .option('--kubernetes', 'serve what the API server has (in-cluster config, or KUBECONFIG), and write statuses')
    .option('--config <file>', 'the gateway configuration (YAML; the chart values under gateway:)')
    .option('--port <port>', 'the gateway port', portNumber, 8080)
    .option(
      '--admin-port <port>',
      'the admin port (/healthz, /readyz, /metrics, the deployments page)',
      portNumber,
      9090,
    )
    .option('--host <addr>', 'listen address of the gateway port (default: every interface)')
    .option('--admin-host <addr>', ADMIN_HOST_HELP, ADMIN_HOST)
    .action(
      async (
        flags: {
          manifests?: string;
          kubernetes?: boolean;
          config?: string;
          port: number;
          adminPort: number;
          host?: string;
          adminHost: string;
        },
        cmd: Command,
      ) => {
        if (!flags.manifests && !flags.kubernetes)
          throw new UsageError('one of --manifests or --kubernetes is required');
        if (flags.manifests && flags.kubernetes)
          throw new UsageError('--manifests and --kubernetes exclude each other');
        const args: ServeArgs = { ...flags, kubernetes: !!flags.kubernetes };
        let started;
        try {
          started = await serve(args);
        } catch (err) {
          if (err instanceof ServegateError) throw err;
          throw new CommandError(`cannot start: ${(err as Error).message}`);
        }
        exitOnSignals(started.server, createLogger(started.config.logLevel));
        setExit(cmd, -1); // keep running on the sockets
      },
    );
}

/** `servegate serve ...` with `argv` after "serve"; -1 while it keeps running. */
export async function serveCommand(argv: string[], io: CliIo = processIo()): Promise<number> {
  return run(command('servegate', io).addCommand(serveProgram(io)), ['serve', ...argv], io);
}
