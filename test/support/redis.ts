// A real redis-server (Debian's package) on a free loopback port, for the shared-limits tests. Missing binary: the
// tests that need it are skipped visibly, and fail when CI=true (.ci/run installs it).
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { freePort } from './net.js';

// Re-exported for the tests that take a port for redis from here; defined in net.ts.
export { freePort };
import { setTimeout as delay } from 'node:timers/promises';

export const hasRedis = spawnSync('redis-server', ['--version']).status === 0;

export class RedisServer {
  private child: ChildProcess | undefined;
  constructor(readonly port: number) {}

  get url(): string {
    return `redis://127.0.0.1:${this.port}/0`;
  }

  static async start(port?: number): Promise<RedisServer> {
    const r = new RedisServer(port ?? (await freePort()));
    await r.start();
    return r;
  }

  async start(): Promise<void> {
    const child = spawn(
      'redis-server',
      [
        '--port',
        String(this.port),
        '--bind',
        '127.0.0.1',
        '--save',
        '',
        '--appendonly',
        'no',
        '--protected-mode',
        'no',
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    this.child = child;
    let out = '';
    child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
    for (let i = 0; i < 100; i++) {
      if (out.includes('Ready to accept connections')) return;
      if (child.exitCode !== null) throw new Error(`redis-server exited: ${out}`);
      await delay(50);
    }
    child.kill('SIGKILL');
    throw new Error(`redis-server did not start on ${this.port}: ${out}`);
  }

  async stop(): Promise<void> {
    const child = this.child;
    this.child = undefined;
    if (!child || child.exitCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGKILL');
    await exited;
  }
}
