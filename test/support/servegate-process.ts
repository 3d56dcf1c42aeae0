// `servegate serve --kubernetes` as a process of its own, as the chart's pod runs it: the built CLI (dist/, which
// `npm test` builds first; SERVEGATE_TEST_DIST points at another build, e.g. one made with
// `npx tsc -p tsconfig.json --outDir .bench-tmp/<you>/dist` while dist/ is stale), a configuration file, KUBECONFIG,
// POD_NAMESPACE and POD_NAME. It listens on free ports (read back from its "servegate listening" line), lives at
// most maxSeconds (`timeout`) and is killed by a watchdog as soon as the jest worker is gone.
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { ROOT } from './paths.js';

export const SERVEGATE_DIST = process.env.SERVEGATE_TEST_DIST ?? join(ROOT, 'dist');

export interface ServegateProcess {
  child: ChildProcess;
  port: number;
  adminPort: number;
  /** http://127.0.0.1:<port> */
  base: string;
  /** http://127.0.0.1:<adminPort> */
  admin: string;
  /** Everything it printed so far (JSON log lines). */
  log(): string;
  stop(): Promise<void>;
}

export interface ServegateProcessOptions {
  kubeconfig: string;
  config: string;
  namespace: string;
  podName: string;
  maxSeconds?: number;
}

export async function startServegateProcess(opts: ServegateProcessOptions): Promise<ServegateProcess> {
  const main = join(SERVEGATE_DIST, 'cli', 'main.js');
  const child = spawn(
    'timeout',
    [
      '-s',
      'KILL',
      String(opts.maxSeconds ?? 1200),
      process.execPath,
      main,
      'serve',
      '--kubernetes',
      '--config',
      opts.config,
      '--port',
      '0',
      '--admin-port',
      '0',
    ],
    {
      env: { ...process.env, KUBECONFIG: opts.kubeconfig, POD_NAMESPACE: opts.namespace, POD_NAME: opts.podName },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true, // its own process group: stop() kills `timeout` and servegate together
    },
  );
  // Gone with the jest worker: a detached shell kills the group as soon as this process is gone.
  spawn(
    'sh',
    [
      '-c',
      `while kill -0 ${process.pid} 2>/dev/null && kill -0 ${child.pid} 2>/dev/null; do sleep 1; done; kill -9 -${child.pid} 2>/dev/null; exit 0`,
    ],
    { detached: true, stdio: 'ignore' },
  ).unref();
  let out = '';
  child.stdout?.setEncoding('utf8').on('data', (d: string) => (out += d));
  child.stderr?.setEncoding('utf8').on('data', (d: string) => (out += d));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  let gone = false;
  void exited.then(() => (gone = true));
  const stop = async () => {
    if (!gone) {
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {
        child.kill('SIGKILL');
      }
      await exited;
    }
  };
  const deadline = Date.now() + 30_000;
  for (;;) {
    const line = out.split('\n').find((l) => l.includes('"servegate listening"'));
    if (line) {
      const { port, adminPort } = JSON.parse(line) as { port: number; adminPort: number };
      return {
        child,
        port,
        adminPort,
        base: `http://127.0.0.1:${port}`,
        admin: `http://127.0.0.1:${adminPort}`,
        log: () => out,
        stop,
      };
    }
    if (gone || Date.now() > deadline) {
      await stop();
      throw new Error(`servegate (${main}) did not start listening:\n${out}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}
