#!/usr/bin/env node
// The `servegate` command: one commander program with serve, demo, keys, url and version; `--help` on every command
// and subcommand, usage errors and unknown commands (with the closest suggestion) exit 2 as error[SG_USAGE].
import { readFileSync } from 'node:fs';
import { demoProgram } from './demo.js';
import { command, processIo, run } from './io.js';
import { keysProgram } from './keys.js';
import { serveProgram } from './serve.js';
import { urlProgram } from './url.js';
import { usageProgram } from './usage.js';

const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };

process.on('unhandledRejection', (reason) => {
  // Never crash on a stray rejection: report it and keep serving.
  process.stderr.write(
    `${JSON.stringify({ level: 50, msg: 'unhandled rejection', err: String((reason as Error)?.stack ?? reason) })}\n`,
  );
});

const io = processIo();
const program = command('servegate', io)
  .description('servegate — a gateway for model serving on Kubernetes')
  .version(`servegate ${pkg.version}`, '-v, --version', 'print the version')
  .addCommand(serveProgram(io))
  .addCommand(demoProgram(io))
  .addCommand(keysProgram(io))
  .addCommand(urlProgram(io))
  .addCommand(usageProgram(io));
program
  .command('version')
  .description('print the version')
  .action(() => io.stdout(`servegate ${pkg.version}\n`));

run(program, process.argv.slice(2), io).then(
  (code) => {
    if (code >= 0) process.exitCode = code;
  },
  (err: Error) => {
    process.stderr.write(`error[SG_FAILED]: ${err.message}\n`);
    process.exitCode = 1;
  },
);
