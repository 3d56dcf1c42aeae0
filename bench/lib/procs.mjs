// Child processes for the benchmark: started in their own process group, all killed at the end,
// on Ctrl-C, on an uncaught error, and when the global time limit expires.
import { execFileSync, spawn } from 'node:child_process';
import {
  accessSync,
  appendFileSync,
  closeSync,
  constants,
  fstatSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
} from 'node:fs';
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
 * messages. `child.exited` resolves with the exit code (or signal name). With `stdoutFile`, the child's
 * stdout goes straight to that file (a server logging every request costs this process nothing; read
 * the tail with outputOf); stderr is still kept, and with `stderrFile` written to that file as well.
 */
export function startProcess(name, command, args, options = {}) {
  const out = options.stdoutFile ? openSync(options.stdoutFile, 'a') : 'pipe';
  let child;
  try {
    child = spawn(command, args, {
      detached: true,
      stdio: ['ignore', out, 'pipe'],
      env: options.env ?? process.env,
      cwd: options.cwd,
    });
  } finally {
    if (typeof out === 'number') closeSync(out);
  }
  child.benchName = name;
  child.stdoutFile = options.stdoutFile;
  child.output = '';
  const keep = (chunk) => {
    child.output = (child.output + chunk.toString()).slice(-8000);
  };
  child.stdout?.on('data', keep);
  child.stderr.on('data', keep);
  // `stderrFile`: all of its stderr in that file too (a diagnostic, e.g. jemalloc's statistics at exit).
  if (options.stderrFile) child.stderr.on('data', (chunk) => appendFileSync(options.stderrFile, chunk));
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

/** The last `max` characters of a child's output: stderr (and stdout if piped), then the tail of its stdout file. */
export function outputOf(child, max = 4000) {
  if (!child.stdoutFile) return child.output.slice(-max);
  return `${child.output.slice(-max / 2)}${child.output ? '\n' : ''}${fileTail(child.stdoutFile, max / 2)}`;
}

/** The last `bytes` bytes of a file as text ('' if unreadable). */
export function fileTail(file, bytes) {
  let fd;
  try {
    fd = openSync(file, 'r');
    const size = fstatSync(fd).size;
    const buf = Buffer.alloc(Math.min(bytes, size));
    readSync(fd, buf, 0, buf.length, size - buf.length);
    return buf.toString('utf8');
  } catch {
    return '';
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

/** Newlines in a file (read in 1 MB blocks), e.g. access-log lines; undefined if unreadable. */
export function countLines(file) {
  let fd;
  try {
    fd = openSync(file, 'r');
    const buf = Buffer.alloc(1 << 20);
    let n = 0;
    for (let got; (got = readSync(fd, buf, 0, buf.length, null)) > 0;) {
      for (let i = buf.indexOf(10); i !== -1 && i < got; i = buf.indexOf(10, i + 1)) n++;
    }
    return n;
  } catch {
    return undefined;
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
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
    const child = spawn(command, args, {
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: env ?? process.env,
      cwd,
    });
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
      throw new Error(
        `${what}: ${child.benchName} exited (${child.exitCode ?? child.signalCode}):\n${outputOf(child).trim()}`,
      );
    }
    try {
      if (await check()) return;
    } catch (err) {
      lastError = err;
    }
    await sleep(intervalMs);
  }
  const tail = child ? `\n${child.benchName} output:\n${outputOf(child).trim()}` : '';
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

/**
 * Samples every `everyMs` the scheduler figures of a process's main thread (Linux /proc/<pid>/schedstat): time on a
 * CPU and time runnable but waiting for one (ns); and its open file descriptors (sockets, mostly).
 * stop() returns [{ at (epoch ms), runNs, waitNs, fds }].
 */
export function schedSampler(pid, everyMs = 50) {
  const samples = [];
  const read = () => {
    try {
      const [run, wait] = readFileSync(`/proc/${pid}/schedstat`, 'utf8').trim().split(' ').map(Number);
      samples.push({ at: Date.now(), runNs: run, waitNs: wait, fds: readdirSync(`/proc/${pid}/fd`).length });
    } catch {
      /* gone or not Linux */
    }
  };
  read();
  const timer = setInterval(read, everyMs);
  return {
    stop() {
      clearInterval(timer);
      read();
      return samples;
    },
  };
}

/** Sum of the increments of samples[key] over the intervals that end inside the [from, to] windows. */
export function sumInWindows(samples, key, windows) {
  let sum = 0;
  for (let i = 1; i < samples.length; i++) {
    const at = samples[i].at;
    if (windows.some(([a, b]) => at > a && at <= b)) sum += samples[i][key] - samples[i - 1][key];
  }
  return sum;
}

let clockTicks;
/** CPU seconds (user + system) used so far by every live process in a process group (Linux /proc). */
export function groupCpuSeconds(pgid) {
  return cpuOfGroups([pgid])?.get(pgid);
}

/**
 * Calls fn(pid, fields) for every live process, `fields` being /proc/<pid>/stat after the command name "(...)":
 * state ppid pgrp ... utime(11) stime(12), counted from 0. false when /proc cannot be read.
 */
export function forEachProcess(fn) {
  let entries = [];
  try {
    entries = readdirSync('/proc');
  } catch {
    return false;
  }
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue;
    let stat;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
    } catch {
      continue;
    }
    fn(entry, stat.slice(stat.lastIndexOf(')') + 2).split(' '));
  }
  return true;
}

/** Map pgid → CPU seconds (user + system) of the live processes of each group, in one scan of /proc. */
function cpuOfGroups(pgids) {
  clockTicks ??= Number(spawnSyncText('getconf', ['CLK_TCK'])) || 100;
  const ticks = new Map(pgids.map((g) => [g, 0]));
  const read = forEachProcess((_pid, fields) => {
    const pgrp = Number(fields[2]);
    if (ticks.has(pgrp)) ticks.set(pgrp, ticks.get(pgrp) + Number(fields[11]) + Number(fields[12]));
  });
  if (!read) return undefined;
  return new Map([...ticks].map(([g, t]) => [g, t / clockTicks]));
}

/**
 * CPU seconds so far: `busy`, of the whole machine (every core, steal included, from /proc/stat), and `ours`, of
 * this process, its children already reaped (wrk runs, ...) and every live process group it started.
 * Two snapshots give otherCores(): what the rest of the machine used meanwhile (noise on a shared host).
 */
export function cpuSnapshot() {
  try {
    const [user, nice, system, , , irq, softirq, steal] = readFileSync('/proc/stat', 'utf8')
      .split('\n')[0]
      .trim()
      .split(/\s+/)
      .slice(1)
      .map(Number);
    const self = readFileSync('/proc/self/stat', 'utf8');
    const f = self.slice(self.lastIndexOf(')') + 2).split(' ');
    const groups = cpuOfGroups([...children].map((c) => c.pid));
    const hz = clockTicks;
    const ours =
      (Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14])) / hz +
      [...groups.values()].reduce((a, b) => a + b, 0);
    return { t: Date.now(), busy: (user + nice + system + irq + softirq + (steal || 0)) / hz, ours };
  } catch {
    return undefined;
  }
}

/** Cores the processes that are not the benchmark's used between two cpuSnapshot()s; NaN if unknown. */
export function otherCores(a, b) {
  if (!a || !b || b.t <= a.t) return NaN;
  return Math.max(0, b.busy - a.busy - (b.ours - a.ours)) / ((b.t - a.t) / 1000);
}

function spawnSyncText(command, args) {
  try {
    return execFileSync(command, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'], timeout: 2000 }).trim();
  } catch {
    return '';
  }
}
