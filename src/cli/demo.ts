// `servegate demo` (and `npm start`): the sample backends of examples/backends/ plus the gateway on the files source
// reading examples/, with one working curl per deployment. Runs until SIGINT/SIGTERM.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { InvalidArgumentError, type Command } from 'commander';
import { loadConfigFile, ownNamespace } from '../config/load.js';
import { CommandError, ServegateError } from '../errors.js';
import type { Config } from '../config/schema.js';
import { createLogger, type Logger } from '../log.js';
import { deploymentUrls } from '../routing/names.js';
import type { Route, Snapshot } from '../routing/types.js';
import { startServegate, type Servegate } from '../server.js';
import { FilesSource } from '../sources/files/index.js';
import type { RouteSource } from '../sources/types.js';
import { command, portNumber, processIo, run, setExit, type CliIo } from './io.js';

/** The package's examples/ folder: ../../examples from src/cli/ and from dist/cli/ alike. */
export const EXAMPLES_DIR = fileURLToPath(new URL('../../examples/', import.meta.url));

/** The public DEMO ONLY key of examples/keys/demo-key.yaml (grants project "demo"). */
export const DEMO_API_KEY = 'DemoKeyDoNotUse1.this-is-the-public-demo-key-never-use-it';

/** The sample servers and the ports examples/deployments.yaml points at (--backend-ports moves them). */
export const DEMO_BACKENDS = [
  { file: 'v1-server.mjs', port: 8081, what: 'V1 model server (iris, mnist)', options: { models: ['iris', 'mnist'] } },
  { file: 'llm-server.mjs', port: 8082, what: 'OpenAI-compatible LLM server (chat)', options: { model: 'chat' } },
  { file: 'echo-server.mjs', port: 8083, what: 'echo server with websocket (echo)', options: {} },
] as const;

interface SampleBackend {
  port: number;
  close(): Promise<void>;
}
type SampleModule = { start(port: number, options?: object): Promise<SampleBackend> };

export interface Demo {
  server: Servegate;
  config: Config;
  /** Base URL the curls use. */
  baseUrl: string;
  /** One line per deployment: "<project>/<deployment>  <kind>  <curl>". */
  lines: string[];
  stop(): Promise<void>;
}

export interface DemoOptions {
  port: number;
  adminPort: number;
  host?: string;
  logger?: Logger;
  /** Ports of the three sample backends, in DEMO_BACKENDS order (default 8081, 8082, 8083); 0 = any free port. */
  backendPorts?: readonly [number, number, number];
}

/** Starts backends and gateway; on failure everything started is stopped again and the error is thrown. */
export async function startDemo(opts: DemoOptions): Promise<Demo> {
  if (!existsSync(join(EXAMPLES_DIR, 'deployments.yaml'))) {
    throw new Error(`the examples folder was not found at ${EXAMPLES_DIR} (it ships with the servegate package)`);
  }
  const config = loadConfigFile(join(EXAMPLES_DIR, 'config.yaml'), { port: opts.port, namespace: ownNamespace() });
  const logger = opts.logger ?? createLogger(config.logLevel, process.stderr);
  const backends: SampleBackend[] = [];
  const closeBackends = () => Promise.all(backends.map((b) => b.close().catch(() => undefined)));
  let server: Servegate;
  try {
    const ports = new Map<number, number>(); // the port examples/deployments.yaml names → the one in use
    for (const [i, b] of DEMO_BACKENDS.entries()) {
      const want = opts.backendPorts?.[i] ?? b.port;
      const mod = (await import(pathToFileURL(join(EXAMPLES_DIR, 'backends', b.file)).href)) as SampleModule;
      try {
        const started = await mod.start(want, b.options);
        backends.push(started);
        ports.set(b.port, started.port);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'EADDRINUSE') {
          throw new Error(
            `port ${want} is in use, and the demo's ${b.what} needs it; stop what uses it, or move the backends with --backend-ports (0,0,0 picks free ports)`,
          );
        }
        throw err;
      }
    }
    // The examples name the default ports; backends elsewhere are reached by rewriting those URLs as they are read.
    const moved = [...ports].some(([from, to]) => from !== to);
    const files = new FilesSource(EXAMPLES_DIR, { keysNamespace: config.auth.keysNamespace, logger });
    const source: RouteSource = moved
      ? {
          start: (on) => files.start((s) => on(movePorts(s, ports))),
          stop: () => files.stop(),
          health: () => files.health(),
        }
      : files;
    server = await startServegate({
      config,
      source,
      port: opts.port,
      adminPort: opts.adminPort,
      host: opts.host,
      logger,
    });
  } catch (err) {
    await closeBackends();
    throw err;
  }

  // publicUrl defaults to http://localhost:<port>; with --port 0 the real port is known only now.
  const baseUrl =
    config.publicUrl === `http://localhost:${opts.port}` ? `http://localhost:${server.port}` : config.publicUrl;
  const lines = server.store
    .current()
    .routes.map(
      (r) =>
        `${`${r.project}/${r.deployment}`.padEnd(12)} ${(r.modelServer ?? 'python').padEnd(11)} ${curlFor(r, baseUrl)}`,
    );
  let stopped = false;
  return {
    server,
    config,
    baseUrl,
    lines,
    async stop() {
      if (stopped) return;
      stopped = true;
      await server.shutdown(2000);
      await closeBackends();
    },
  };
}

/** A curl that works against the demo for one route. */
export function curlFor(route: Route, baseUrl: string, key = DEMO_API_KEY): string {
  const urls = deploymentUrls(baseUrl, route.project, route.deployment, route.kind, route.modelName);
  const json = `-H 'content-type: application/json'`;
  switch (route.kind) {
    case 'predictive':
      return `curl -s -H 'Authorization: ApiKey ${key}' ${json} -d '{"instances": [[5.1, 3.5, 1.4, 0.2]]}' ${urls.inferenceUrl}`;
    case 'llm':
      return `curl -s -H 'Authorization: Bearer ${key}' ${json} -d '{"model": "${route.deployment}", "messages": [{"role": "user", "content": "Hello!"}]}' ${urls.openaiUrl}/chat/completions`;
    case 'python':
      return `curl -s -H 'Authorization: ApiKey ${key}' '${urls.endpointUrl}/hello?name=world'`;
  }
}

/** The examples' backend URLs (http://127.0.0.1:<default port>) pointed at the ports the backends listen on. */
function movePorts(snapshot: Snapshot, ports: ReadonlyMap<number, number>): Snapshot {
  const deployments = snapshot.deployments.map((d) => {
    const backend = (d.spec as { backend?: { url?: unknown } } | undefined)?.backend;
    if (typeof backend?.url !== 'string') return d;
    const u = new URL(backend.url);
    const to = ports.get(Number(u.port));
    if (to === undefined) return d;
    u.port = String(to);
    return { ...d, spec: { ...(d.spec as object), backend: { ...backend, url: u.href.replace(/\/$/, '') } } };
  });
  return { ...snapshot, deployments };
}

function backendPorts(value: string): [number, number, number] {
  const parts = value.split(',').map((p) => p.trim());
  if (parts.length !== 3)
    throw new InvalidArgumentError(`give three ports (V1, LLM, echo) like 8081,8082,8083 or 0,0,0; got "${value}"`);
  return parts.map((p) => portNumber(p)) as [number, number, number];
}

export function demoProgram(io: CliIo): Command {
  return command('demo', io)
    .description(
      'Starts the sample backends of examples/backends/ and the gateway on the files source reading examples/ (config ' +
        'examples/config.yaml), then prints a curl for each deployment. Ctrl+C stops it. The API key it prints is public ' +
        'and for the demo only.',
    )
    .option('--port <port>', 'the gateway port', portNumber, 8080)
    .option('--admin-port <port>', 'the admin port', portNumber, 9090)
    .option('--host <addr>', 'listen address (default: every interface)')
    .option(
      '--backend-ports <v1,llm,echo>',
      'ports of the three sample backends (0 = any free port)',
      backendPorts,
      [8081, 8082, 8083],
    )
    .action(
      async (
        flags: { port: number; adminPort: number; host?: string; backendPorts: [number, number, number] },
        cmd: Command,
      ) => {
        setExit(
          cmd,
          await runDemo({
            port: flags.port,
            adminPort: flags.adminPort,
            host: flags.host,
            backendPorts: flags.backendPorts,
          }),
        );
      },
    );
}

/** `servegate demo ...` with `argv` after "demo"; resolves when the demo stops. */
export async function demoCommand(argv: string[], io: CliIo = processIo()): Promise<number> {
  return run(command('servegate', io).addCommand(demoProgram(io)), ['demo', ...argv], io);
}

async function runDemo(opts: DemoOptions): Promise<number> {
  let demo: Demo;
  try {
    demo = await startDemo(opts);
  } catch (err) {
    if (err instanceof ServegateError) throw err;
    throw new CommandError(`cannot start: ${(err as Error).message}`);
  }

  const out = [
    '',
    `servegate demo: gateway ${demo.baseUrl}   admin http://localhost:${demo.server.adminPort}/ (deployments, /metrics, /readyz)`,
    `manifests: ${EXAMPLES_DIR} (edit them: the gateway reloads within a second)`,
    '',
    `API key (DEMO ONLY, public): ${DEMO_API_KEY}`,
    '',
    ...demo.lines.map((l) => `  ${l}`),
    '',
    'Ctrl+C stops the demo.',
    '',
  ];
  process.stdout.write(out.join('\n'));

  return new Promise<number>((resolve) => {
    let stopping = false;
    const onSignal = (): void => {
      if (stopping) process.exit(1); // a second Ctrl+C: leave now
      stopping = true;
      process.stderr.write('servegate demo: stopping\n');
      demo.stop().then(
        () => {
          process.off('SIGINT', onSignal);
          process.off('SIGTERM', onSignal);
          resolve(0);
        },
        (err: Error) => {
          process.stderr.write(`servegate demo: stop failed: ${err.message}\n`);
          resolve(1);
        },
      );
    };
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
  });
}
