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
import { ADMIN_HOST, startServegate, type Servegate } from '../server.js';
import { FilesSource } from '../sources/files/index.js';
import type { RouteSource } from '../sources/types.js';
import { ADMIN_HOST_HELP, command, portNumber, processIo, run, setExit, type CliIo } from './io.js';

/** The package's examples/ folder: ../../examples from src/cli/ and from dist/cli/ alike. */
export const EXAMPLES_DIR = fileURLToPath(new URL('../../examples/', import.meta.url));

/** The public DEMO ONLY key of examples/keys/demo-key.yaml (grants project "demo"). */
export const DEMO_API_KEY = 'DemoKeyDoNotUse1.this-is-the-public-demo-key-never-use-it';

/**
 * The sample servers and the ports examples/deployments.yaml points at (--backend-ports moves them): three servers,
 * then the three simulated vLLM replicas of demo/fleet, whose endpoint the gateway picks per request (SPEC §12).
 */
export const DEMO_BACKENDS = [
  { file: 'v1-server.mjs', port: 8081, what: 'V1 model server (iris, mnist)', options: { models: ['iris', 'mnist'] } },
  { file: 'llm-server.mjs', port: 8082, what: 'OpenAI-compatible LLM server (chat)', options: { model: 'chat' } },
  { file: 'echo-server.mjs', port: 8083, what: 'echo server with websocket (echo)', options: {} },
  ...[0, 1, 2].map((index) => ({
    file: 'vllm-replica.mjs',
    port: 8084 + index,
    what: `simulated vLLM replica ${index} (fleet)`,
    options: { model: 'sim-llama', index },
  })),
] as const;

/** What --backend-ports takes: the three servers (v1,llm,echo), or those and the fleet's three replicas. */
export type BackendPorts =
  readonly [number, number, number] | readonly [number, number, number, number, number, number];

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
  /** The sample backends, in DEMO_BACKENDS order. */
  backends: DemoBackend[];
  stop(): Promise<void>;
}

export interface DemoOptions {
  port: number;
  adminPort: number;
  host?: string;
  /** The admin port's address; default 127.0.0.1 (as `serve`). */
  adminHost?: string;
  logger?: Logger;
  /**
   * Ports of the sample backends in DEMO_BACKENDS order (default 8081 to 8086); 0 = any free port. Three ports move
   * the three servers; the fleet's replicas then keep 8084-8086, or take free ports too when the three are 0,0,0.
   */
  backendPorts?: BackendPorts;
}

/** A sample backend the demo started, and the port it listens on. */
export interface DemoBackend {
  file: string;
  what: string;
  port: number;
}

/** Starts backends and gateway; on failure everything started is stopped again and the error is thrown. */
export async function startDemo(opts: DemoOptions): Promise<Demo> {
  if (!existsSync(join(EXAMPLES_DIR, 'deployments.yaml'))) {
    throw new Error(`the examples folder was not found at ${EXAMPLES_DIR} (it ships with the servegate package)`);
  }
  const config = loadConfigFile(join(EXAMPLES_DIR, 'config.yaml'), { port: opts.port, namespace: ownNamespace() });
  const logger = opts.logger ?? createLogger(config.logLevel, process.stderr);
  const wanted = demoBackendPorts(opts.backendPorts);
  const backends: SampleBackend[] = [];
  const listening: DemoBackend[] = [];
  const closeBackends = () => Promise.all(backends.map((b) => b.close().catch(() => undefined)));
  let server: Servegate;
  try {
    const ports = new Map<number, number>(); // the port examples/deployments.yaml names → the port in use
    for (const [i, b] of DEMO_BACKENDS.entries()) {
      const want = wanted[i];
      const mod = (await import(pathToFileURL(join(EXAMPLES_DIR, 'backends', b.file)).href)) as SampleModule;
      try {
        const started = await mod.start(want, b.options);
        backends.push(started);
        listening.push({ file: b.file, what: b.what, port: started.port });
        ports.set(b.port, started.port);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'EADDRINUSE') throw portInUse(want, b.what, listening);
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
      adminHost: opts.adminHost,
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
    backends: listening,
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
      // Several endpoints: -i shows the x-vllm-replica header of the endpoint picked (the same for the same prompt).
      return `curl -s${route.backend.kind === 'urls' ? 'i' : ''} -H 'Authorization: Bearer ${key}' ${json} -d '{"model": "${route.modelName ?? route.deployment}", "messages": [{"role": "user", "content": "Hello!"}]}' ${urls.openaiUrl}/chat/completions`;
    case 'python':
      return `curl -s -H 'Authorization: ApiKey ${key}' '${urls.endpointUrl}/hello?name=world'`;
  }
}

/** The port each of DEMO_BACKENDS is started on (see DemoOptions.backendPorts). */
function demoBackendPorts(given: readonly number[] | undefined): number[] {
  const defaults = DEMO_BACKENDS.map((b) => b.port);
  if (given === undefined) return defaults;
  if (given.length === DEMO_BACKENDS.length) return [...given];
  if (given.length !== 3) throw new Error(`backendPorts takes 3 or ${DEMO_BACKENDS.length} ports, got ${given.length}`);
  return [...given, ...defaults.slice(3).map((p) => (given.every((g) => g === 0) ? 0 : p))];
}

function portInUse(port: number, what: string, listening: readonly DemoBackend[]): Error {
  const own = port === 0 ? undefined : listening.find((b) => b.port === port);
  return new Error(
    own
      ? `port ${port} is given to the demo's ${own.what} and to its ${what}; give each backend its own port with --backend-ports`
      : `port ${port} is in use, and the demo's ${what} needs it; stop what uses it, or move the backends with ` +
          `--backend-ports (v1,llm,echo or v1,llm,echo,fleet0,fleet1,fleet2; 0,0,0 picks free ports for all six)`,
  );
}

/**
 * The examples' backend URLs (http://127.0.0.1:<default port>, in backend.url and each backend.urls entry) pointed
 * at the ports the backends listen on.
 */
function movePorts(snapshot: Snapshot, ports: ReadonlyMap<number, number>): Snapshot {
  const move = (url: unknown): unknown => {
    if (typeof url !== 'string' || !URL.canParse(url)) return url;
    const u = new URL(url);
    const to = ports.get(Number(u.port));
    if (to === undefined) return url;
    u.port = String(to);
    return u.href.replace(/\/$/, '');
  };
  const deployments = snapshot.deployments.map((d) => {
    const backend = (d.spec as { backend?: { url?: unknown; urls?: unknown } } | undefined)?.backend;
    if (typeof backend !== 'object' || backend === null) return d;
    const moved = { ...backend };
    if (backend.url !== undefined) moved.url = move(backend.url);
    if (Array.isArray(backend.urls)) moved.urls = backend.urls.map(move);
    return { ...d, spec: { ...(d.spec as object), backend: moved } };
  });
  return { ...snapshot, deployments };
}

function backendPorts(value: string): BackendPorts {
  const parts = value.split(',').map((p) => p.trim());
  if (parts.length !== 3 && parts.length !== DEMO_BACKENDS.length)
    throw new InvalidArgumentError(
      `give three ports (V1, LLM, echo) like 8081,8082,8083, or six with the fleet's three simulated vLLM replicas ` +
        `like 8081,8082,8083,8084,8085,8086; 0,0,0 picks free ports for all; got "${value}"`,
    );
  return parts.map((p) => portNumber(p)) as unknown as BackendPorts;
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
    .option('--host <addr>', 'listen address of the gateway port (default: every interface)')
    .option('--admin-host <addr>', ADMIN_HOST_HELP, ADMIN_HOST)
    .option(
      '--backend-ports <v1,llm,echo[,fleet0,fleet1,fleet2]>',
      'ports of the sample backends, 0 = any free port (default 8081,8082,8083,8084,8085,8086): the three servers, ' +
        'optionally followed by the three simulated vLLM replicas of demo/fleet (when left out, they keep 8084-8086, ' +
        'or take free ports when the three given are 0,0,0)',
      backendPorts,
    )
    .action(
      async (
        flags: { port: number; adminPort: number; host?: string; adminHost: string; backendPorts?: BackendPorts },
        cmd: Command,
      ) => {
        setExit(
          cmd,
          await runDemo({
            port: flags.port,
            adminPort: flags.adminPort,
            host: flags.host,
            adminHost: flags.adminHost,
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

/** A line per deployment whose endpoint is picked per request (demo/fleet), saying where to see the picks. */
function pickNotes(demo: Demo): string[] {
  const notes = demo.server.store
    .current()
    .routes.flatMap((r) =>
      r.backend.kind === 'urls'
        ? [
            `${r.project}/${r.deployment}: one of ${r.backend.urls.length} endpoints is picked per request ` +
              `${r.balancing.policy === 'llm' ? 'by prompt prefix and load' : `by ${r.balancing.policy}`}. The ` +
              `x-vllm-replica header (curl -i) names the simulated replica that answered; the admin page shows ` +
              `each endpoint's load.`,
          ]
        : [],
    );
  return notes.length ? [...notes, ''] : [];
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
    ...pickNotes(demo),
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
