#!/usr/bin/env node
// The `servegate` command: dispatches to serve, demo, keys and url.
import { readFileSync } from 'node:fs';
import { serveCommand } from './serve.js';

const USAGE = `servegate — a gateway for model serving on Kubernetes

usage:
  servegate serve --manifests <dir|file> [--config FILE] [--port 8080] [--admin-port 9090]
  servegate serve --kubernetes [--config FILE] [--port 8080] [--admin-port 9090]
  servegate demo [--port 8080] [--admin-port 9090]       sample backends + gateway on examples/
  servegate keys create --name N --projects p1,p2 [--expires 30d] [-n NS] [-o yaml | --manifests DIR]
  servegate keys list | revoke ...
  servegate url <project>/<deployment> [--manifests DIR | --kubeconfig F] [--config FILE]
  servegate version
`;

type Command = (argv: string[]) => Promise<number>;

/** Each command lives in ./<name>.js and exports <name>Command; loaded on use so `serve` starts lean. */
const commands: Record<string, () => Promise<Command>> = {
  serve: async () => serveCommand,
  demo: () => lazy('demo'),
  keys: () => lazy('keys'),
  url: () => lazy('url'),
};

async function lazy(name: string): Promise<Command> {
  const mod = (await import(`./${name}.js`)) as Record<string, Command>;
  return mod[`${name}Command`];
}

process.on('unhandledRejection', (reason) => {
  // Never crash on a stray rejection: report it and keep serving.
  process.stderr.write(`${JSON.stringify({ level: 50, msg: 'unhandled rejection', err: String((reason as Error)?.stack ?? reason) })}\n`);
});

async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (!name || name === '-h' || name === '--help' || name === 'help') {
    process.stdout.write(USAGE);
    return name ? 0 : 2;
  }
  if (name === 'version' || name === '--version') {
    const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
    process.stdout.write(`servegate ${pkg.version}\n`);
    return 0;
  }
  const load = commands[name];
  if (!load) {
    process.stderr.write(`servegate: unknown command "${name}"\n\n${USAGE}`);
    return 2;
  }
  return (await load())(rest);
}

main(process.argv.slice(2)).then(
  (code) => {
    if (code >= 0) process.exitCode = code;
  },
  (err: Error) => {
    process.stderr.write(`servegate: ${err.message}\n`);
    process.exitCode = 1;
  },
);
