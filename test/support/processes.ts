// Child processes for tests: every one runs with a deadline (its whole process group is killed when the deadline
// passes), never blocks the event loop (the gateway a child calls may run in the test's own process), and never
// reaches the network through npm or pip (offline settings in the environment).
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { freePort } from './net.js';
import { CLI } from './paths.js';
import { waitFor } from './wait.js';

export interface RunResult {
  /** Exit code; null when killed by a signal. */
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  /** The deadline passed and the process group was killed. */
  timedOut: boolean;
  /** The command line, for messages. */
  command: string;
}

export interface RunOptions {
  cwd?: string;
  env?: NodeJS.ProcessEnv;
  /** Kill the process group after this long. */
  timeoutMs: number;
  input?: string;
}

const MAX_OUTPUT = 4 * 1024 * 1024;

/** Runs a command to completion (or its deadline); resolves with its status and output, never rejects. */
export function runProcess(command: string, args: readonly string[], opts: RunOptions): Promise<RunResult> {
  const line = [command, ...args].map((a) => (/[\s"']/.test(a) ? JSON.stringify(a) : a)).join(' ');
  return new Promise((resolve) => {
    let stdout = '';
    let stderr = '';
    let timedOut = false;
    const child = spawn(command, args, {
      cwd: opts.cwd,
      env: opts.env ?? process.env,
      stdio: ['pipe', 'pipe', 'pipe'],
      detached: true, // its own process group: the deadline kills grandchildren too (pip's build hooks, npm's scripts)
    });
    const killGroup = () => {
      try {
        if (child.pid) process.kill(-child.pid, 'SIGKILL');
      } catch {
        child.kill('SIGKILL');
      }
    };
    const timer = setTimeout(() => {
      timedOut = true;
      killGroup();
    }, opts.timeoutMs);
    child.stdout.on('data', (d: Buffer) => {
      if (stdout.length < MAX_OUTPUT) stdout += d.toString('utf8');
    });
    child.stderr.on('data', (d: Buffer) => {
      if (stderr.length < MAX_OUTPUT) stderr += d.toString('utf8');
    });
    child.on('error', (err) => {
      clearTimeout(timer);
      resolve({ code: null, signal: null, stdout, stderr: `${stderr}${err.message}`, timedOut, command: line });
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr, timedOut, command: line });
    });
    child.stdin.end(opts.input ?? '');
  });
}

/** A RunResult as text for an assertion message: the command, how it ended, and its output. */
export function describeRun(r: RunResult): string {
  const ended = r.timedOut ? 'timed out (killed)' : r.code !== null ? `exit ${r.code}` : `signal ${r.signal}`;
  return `$ ${r.command}\n${ended}\n--- stdout ---\n${r.stdout}\n--- stderr ---\n${r.stderr}`;
}

/** Throws with the whole run described unless the command exited 0. */
export function expectSuccess(r: RunResult): RunResult {
  if (r.code !== 0) throw new Error(describeRun(r));
  return r;
}

/**
 * The environment for npm children: offline (answers from the npm cache only), no audit, no fund, no update check,
 * and a registry nobody listens on, so that anything npm would still fetch fails at once instead of hanging.
 */
export function offlineNpmEnv(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  return {
    ...process.env,
    npm_config_offline: 'true',
    npm_config_audit: 'false',
    npm_config_fund: 'false',
    npm_config_update_notifier: 'false',
    npm_config_yes: 'false',
    npm_config_fetch_retries: '0',
    npm_config_fetch_timeout: '10000',
    npm_config_registry: 'http://127.0.0.1:9/',
    ...extra,
  };
}

export interface ManifestGateway {
  child: ChildProcess;
  port: number;
  adminPort: number;
}

/**
 * `servegate serve --manifests <dir>/manifests --config <dir>/config.yaml` from the built CLI on free loopback ports,
 * resolved once it logs that it listens. The caller kills it (SIGKILL in afterAll).
 */
export async function startManifestGateway(dir: string): Promise<ManifestGateway> {
  const [port, adminPort] = [await freePort(), await freePort()];
  const child = spawn(
    process.execPath,
    [CLI, 'serve', '--manifests', join(dir, 'manifests'), '--config', join(dir, 'config.yaml')].concat([
      '--port',
      String(port),
      '--admin-port',
      String(adminPort),
      '--host',
      '127.0.0.1',
    ]),
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let out = '';
  child.stdout!.on('data', (c: Buffer) => (out += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (out += c.toString()));
  await waitFor(() => out.includes('servegate listening'), `gateway on ${port} to listen`, 15_000);
  return { child, port, adminPort };
}
