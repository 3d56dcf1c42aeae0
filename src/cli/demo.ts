// `servegate demo` (and `npm start`): the sample backends of examples/backends/ plus the gateway on the files source
// reading examples/, with one working curl per deployment. Runs until SIGINT/SIGTERM.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { ConfigError, loadConfigFile, ownNamespace } from '../config/load.js';
import type { Config } from '../config/schema.js';
import { createLogger, type Logger } from '../log.js';
import { deploymentUrls } from '../routing/names.js';
import type { Route } from '../routing/types.js';
import { startServegate, type Servegate } from '../server.js';
import { FilesSource } from '../sources/files/index.js';

/** The package's examples/ folder: ../../examples from src/cli/ and from dist/cli/ alike. */
export const EXAMPLES_DIR = fileURLToPath(new URL('../../examples/', import.meta.url));

/** The public DEMO ONLY key of examples/keys/demo-key.yaml (grants project "demo"). */
export const DEMO_API_KEY = 'DemoKeyDoNotUse1.this-is-the-public-demo-key-never-use-it';

/** The sample servers and the ports examples/deployments.yaml points at. */
export const DEMO_BACKENDS = [
  { file: 'v1-server.mjs', port: 8081, what: 'V1 model server (iris, mnist)', options: { models: ['iris', 'mnist'] } },
  { file: 'llm-server.mjs', port: 8082, what: 'OpenAI-compatible LLM server (chat)', options: { model: 'chat' } },
  { file: 'echo-server.mjs', port: 8083, what: 'echo server with websocket (echo)', options: {} },
] as const;

const USAGE = `usage: servegate demo [--port 8080] [--admin-port 9090] [--host ADDR]

Starts the sample backends of examples/backends/ on 127.0.0.1:8081-8083 and the gateway on the files source
reading examples/ (config examples/config.yaml), then prints a curl for each deployment. Ctrl+C stops it.
The API key it prints is public and for the demo only.`;

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
    for (const b of DEMO_BACKENDS) {
      const mod = (await import(pathToFileURL(join(EXAMPLES_DIR, 'backends', b.file)).href)) as SampleModule;
      try {
        backends.push(await mod.start(b.port, b.options));
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'EADDRINUSE') {
          throw new Error(`port ${b.port} is in use, and the demo's ${b.what} needs it (examples/deployments.yaml points there); stop what uses it and try again`);
        }
        throw err;
      }
    }
    const source = new FilesSource(EXAMPLES_DIR, { keysNamespace: config.auth.keysNamespace, logger });
    server = await startServegate({ config, source, port: opts.port, adminPort: opts.adminPort, host: opts.host, logger });
  } catch (err) {
    await closeBackends();
    throw err;
  }

  // publicUrl defaults to http://localhost:<port>; with --port 0 the real port is known only now.
  const baseUrl = config.publicUrl === `http://localhost:${opts.port}` ? `http://localhost:${server.port}` : config.publicUrl;
  const lines = server.store
    .current()
    .routes.map((r) => `${`${r.project}/${r.deployment}`.padEnd(12)} ${(r.modelServer ?? 'python').padEnd(11)} ${curlFor(r, baseUrl)}`);
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

export async function demoCommand(argv: string[]): Promise<number> {
  let values;
  try {
    ({ values } = parseArgs({
      args: argv,
      options: {
        port: { type: 'string', default: '8080' },
        'admin-port': { type: 'string', default: '9090' },
        host: { type: 'string' },
        help: { type: 'boolean', short: 'h', default: false },
      },
      strict: true,
      allowPositionals: false,
    }));
  } catch (err) {
    process.stderr.write(`servegate demo: ${(err as Error).message}\n${USAGE}\n`);
    return 2;
  }
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  const port = Number(values.port);
  const adminPort = Number(values['admin-port']);
  for (const [flag, n, raw] of [['--port', port, values.port], ['--admin-port', adminPort, values['admin-port']]] as const) {
    if (!Number.isInteger(n) || n < 0 || n > 65535) {
      process.stderr.write(`servegate demo: ${flag} must be a port number 0-65535, got "${raw}"\n`);
      return 2;
    }
  }

  let demo: Demo;
  try {
    demo = await startDemo({ port, adminPort, host: values.host });
  } catch (err) {
    process.stderr.write(`servegate demo: ${err instanceof ConfigError ? '' : 'cannot start: '}${(err as Error).message}\n`);
    return 1;
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
