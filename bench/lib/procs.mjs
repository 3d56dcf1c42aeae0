// Child processes for the benchmark: started in their own process group, all killed at the end,
// on Ctrl-C, on an uncaught error, and when the global time limit expires.
import { execFileSync, spawn } from 'node:child_process';
import { accessSync, constants, readdirSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { delimiter, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

const children = new Set();
let cleanupInstalled = false;

/** Kills every child still running (SIGKILL to its process group). Synchronous: usable in 'exit'. */
export function killAllSync() {
  for (const child of children) {
    try {
      process.kill(-child.pid, 'SIGKILL');
    } catch {
      /* already gone */
    }
  }
  children.clear();
}

/** Installs the handlers that end every child process however the benchmark ends. */
export function installCleanup(limitMs) {
  if (cleanupInstalled) return;
  cleanupInstalled = true;
  process.on('exit', killAllSync);
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
    process.on(signal, () => {
      process.stderr.write(`\nbench: ${signal}, stopping all processes\n`);
      killAllSync();
      process.exit(130);
    });
  }
  process.on('uncaughtException', (err) => {
    process.stderr.write(`bench: ${err?.stack ?? err}\n`);
    killAllSync();
    process.exit(1);
  });
  process.on('unhandledRejection', (err) => {
    process.stderr.write(`bench: ${err?.stack ?? err}\n`);
    killAllSync();
    process.exit(1);
  });
  if (limitMs) {
    const timer = setTimeout(() => {
      process.stderr.write(`bench: time limit of ${Math.round(limitMs / 1000)} s reached, stopping all processes\n`);
      killAllSync();
      process.exit(124);
    }, limitMs);
    timer.unref();
  }
}

/**
 * Starts a long-running child in its own process group. Keeps the tail of its output for error
 * messages. `child.exited` resolves with the exit code (or signal name).
 */
export function startProcess(name, command, args, options = {}) {
  const child = spawn(command, args, {
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: options.env ?? process.env,
    cwd: options.cwd,
  });
  child.benchName = name;
  child.output = '';
  const keep = (chunk) => {
    child.output = (child.output + chunk.toString()).slice(-8000);
  };
  child.stdout.on('data', keep);
  child.stderr.on('data', keep);
  child.exited = new Promise((resolve) => {
    child.on('exit', (code, signal) => {
      children.delete(child);
      resolve(code ?? signal);
    });
    child.on('error', (err) => {
      children.delete(child);
      child.output += `\n${err.message}`;
      resolve('error');
    });
  });
  children.add(child);
  return child;
}

/** SIGTERM to the process group, SIGKILL after graceMs. */
export async function stopProcess(child, graceMs = 3000) {
  if (!child || child.exitCode !== null || child.signalCode !== null || !children.has(child)) return;
  try {
    process.kill(-child.pid, 'SIGTERM');
  } catch {
    return;
  }
  const done = await Promise.race([child.exited.then(() => true), sleep(graceMs).then(() => false)]);
  if (!done) {
    try {
      process.kill(-child.pid, 'SIGKILL');
    } catch {
      /* gone */
    }
    await Promise.race([child.exited, sleep(1000)]);
  }
  children.delete(child);
}

/** Runs a command to completion (bounded by timeoutMs); resolves { code, stdout, stderr }. */
export function runToEnd(command, args, { timeoutMs = 60_000, env, cwd } = {}) {
  return new Promise((resolve) => {
    const child = spawn(command, args, { detached: true, stdio: ['ignore', 'pipe', 'pipe'], env: env ?? process.env, cwd });
    children.add(child);
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c) => (stdout += c));
    child.stderr.on('data', (c) => (stderr += c));
    const timer = setTimeout(() => {
      stderr += `\n(killed after ${timeoutMs} ms)`;
      try {
        process.kill(-child.pid, 'SIGKILL');
      } catch {
        /* gone */
      }
    }, timeoutMs);
    child.on('error', (err) => {
      clearTimeout(timer);
      children.delete(child);
      resolve({ code: -1, stdout, stderr: stderr + err.message });
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      children.delete(child);
      resolve({ code: code ?? signal, stdout, stderr });
    });
  });
}

/** A TCP port that was free a moment ago on 127.0.0.1. */
export function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

/** Polls `check` (async, truthy = done) every intervalMs until timeoutMs; throws with `what` on timeout. */
export async function waitFor(what, check, { timeoutMs = 15_000, intervalMs = 50, child } = {}) {
  const deadline = Date.now() + timeoutMs;
  let lastError;
  while (Date.now() < deadline) {
    if (child && (child.exitCode !== null || child.signalCode !== null)) {
      throw new Error(`${what}: ${child.benchName} exited (${child.exitCode ?? child.signalCode}):\n${child.output.trim()}`);
    }
    try {
      if (await check()) return;
    } catch (err) {
      lastError = err;
    }
    await sleep(intervalMs);
  }
  const tail = child ? `\n${child.benchName} output:\n${child.output.trim()}` : '';
  throw new Error(`${what}: not ready after ${timeoutMs} ms${lastError ? ` (${lastError.message})` : ''}${tail}`);
}

/** Absolute path of an executable on PATH (also /usr/sbin, where nginx lives), or undefined. */
export function findExecutable(name) {
  const dirs = (process.env.PATH ?? '').split(delimiter).concat(['/usr/sbin', '/usr/local/sbin', '/sbin']);
  for (const dir of dirs) {
    if (!dir) continue;
    const file = join(dir, name);
    try {
      accessSync(file, constants.X_OK);
      return file;
    } catch {
      /* next */
    }
  }
  return undefined;
}

/** Resident set size of a process in bytes (Linux /proc), current and peak; undefined elsewhere. */
export function memoryOf(pid) {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const kb = (field) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN) * 1024;
    return { rss: kb('VmRSS'), peak: kb('VmHWM') };
  } catch {
    return undefined;
  }
}

let clockTicks;
/** CPU seconds (user + system) used so far by every live process in a process group (Linux /proc). */
export function groupCpuSeconds(pgid) {
  clockTicks ??= Number(spawnSyncText('getconf', ['CLK_TCK'])) || 100;
  let ticks = 0;
  let entries = [];
  try {
    entries = readdirSync('/proc');
  } catch {
    return undefined;
  }
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue;
    let stat;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
    } catch {
      continue;
    }
    // Fields after the command name "(...)": state ppid pgrp ... utime(14) stime(15), counted from 1 overall.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (Number(fields[2]) !== pgid) continue;
    ticks += Number(fields[11]) + Number(fields[12]);
  }
  return ticks / clockTicks;
}

function spawnSyncText(command, args) {
  try {
    return execFileSync(command, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'], timeout: 2000 }).trim();
  } catch {
    return '';
  }
}
