// What every command shares: where it writes (tests pass their own), usage errors through the error catalogue (exit 2,
// `error[SG_USAGE]`), and `run`, which turns a command's error into a message and an exit status.
import { Command, CommanderError, InvalidArgumentError, Option } from 'commander';
import { errorLine, exitCodeOf, UsageError, ServegateError } from '../errors.js';

export interface CliIo {
  stdout: (text: string) => void;
  stderr: (text: string) => void;
  env: NodeJS.ProcessEnv;
  now: () => number;
}

export function processIo(): CliIo {
  return {
    stdout: (t) => void process.stdout.write(t),
    stderr: (t) => void process.stderr.write(t),
    env: process.env,
    now: () => Date.now(),
  };
}

/** A commander command writing to `io`, throwing instead of exiting, suggesting the closest command or flag. */
export function command(name: string, io: CliIo): Command {
  return configure(new Command(name), io);
}

function configure(cmd: Command, io: CliIo): Command {
  return cmd
    .exitOverride()
    .showSuggestionAfterError(true)
    .allowExcessArguments(false)
    .helpOption('-h, --help', 'show this help')
    .configureOutput({
      writeOut: (t) => io.stdout(t),
      // Help asked for by mistake (a command group without its subcommand) goes to stderr; commander's own error
      // lines are rethrown and printed by run(), in the catalogue's format.
      writeErr: (t) => io.stderr(t),
      outputError: () => undefined,
    });
}

/** A subcommand configured like its parent. */
export function subcommand(parent: Command, name: string, io: CliIo): Command {
  const sub = configure(parent.command(name), io);
  return sub;
}

/** Parses `argv` (without the program name) and runs the action; every error becomes a message and an exit status. */
export async function run(program: Command, argv: readonly string[], io: CliIo): Promise<number> {
  let code = 0;
  try {
    await program.parseAsync([...argv], { from: 'user' });
    code = (program as Command & { _exitCode?: number })._exitCode ?? 0;
  } catch (err) {
    if (err instanceof CommanderError) {
      if (err.code === 'commander.helpDisplayed' || err.code === 'commander.version') return 0;
      if (err.code === 'commander.help') return 2; // a command group without its subcommand: its help went to stderr
      const usage = new UsageError(err.message.replace(/^error: /, ''));
      io.stderr(`${errorLine(usage)}\n(run with --help for usage)\n`);
      return usage.exitCode;
    }
    io.stderr(`${errorLine(err)}\n${err instanceof UsageError ? '(run with --help for usage)\n' : ''}`);
    return exitCodeOf(err);
  }
  return code;
}

/** The exit status an action asks for (an action that keeps running, like serve, returns -1). */
export function setExit(cmd: Command, code: number): void {
  let root: Command = cmd;
  while (root.parent) root = root.parent;
  (root as Command & { _exitCode?: number })._exitCode = code;
}

/** --admin-host of serve and demo (the default is server.ts ADMIN_HOST). */
export const ADMIN_HOST_HELP =
  'listen address of the admin port: it lists every deployment and endpoint, so only this machine by default; ' +
  '0.0.0.0 (or ::) for every interface, as the chart sets for the probes and Prometheus';

/** A port number 0-65535 (commander argument parser). */
export function portNumber(value: string): number {
  const n = Number(value);
  if (!/^\d+$/.test(value) || !Number.isInteger(n) || n < 0 || n > 65535)
    throw new InvalidArgumentError(`must be a port number 0-65535, got "${value}"`);
  return n;
}

/** A non-negative whole number (commander argument parser). */
export function count(value: string): number {
  const n = Number(value);
  if (!/^\d+$/.test(value) || !Number.isSafeInteger(n))
    throw new InvalidArgumentError(`must be a whole number 0 or more, got "${value}"`);
  return n;
}

/** An option with a fixed set of values. */
export function choice(flags: string, description: string, values: readonly string[]): Option {
  return new Option(flags, description).choices(values);
}

export { ServegateError };
