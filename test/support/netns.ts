// A network namespace of the test's own, joined to the host by a veth pair, for backends whose addresses a real
// kube-apiserver accepts in EndpointSlices (it refuses loopback ones). Each run picks a random /30 in 198.18.0.0/15
// (RFC 2544's benchmarking range, never routed) so that concurrent runs do not clash: the host side keeps the first
// address, the namespace side the second. Needs root (CAP_NET_ADMIN) and iproute2; without them create() throws
// saying so (the test fails: it is not skipped).
//
// Nothing outlives the test: every process started inside runs under `timeout`, and a detached watchdog removes the
// namespace, its processes and the veth pair as soon as the jest worker is gone (or after maxLifetimeSeconds), even if
// jest is killed before afterAll runs.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes, randomInt } from 'node:crypto';

export interface NetnsProcess {
  child: ChildProcess;
  /** stdout and stderr so far. */
  output(): string;
}

export class TestNetns {
  private readonly children: ChildProcess[] = [];
  private watchdog: ChildProcess | undefined;
  private removed = false;

  private constructor(
    /** The namespace's name (`ip netns`). */
    readonly name: string,
    /** The host end of the veth pair. */
    readonly hostLink: string,
    /** The host side's address (reached from inside). */
    readonly hostAddress: string,
    /** The namespace side's address: where backends listen, what EndpointSlices name. */
    readonly address: string,
  ) {}

  /** Makes the namespace and the veth pair, both ends up; throws a message naming what is missing. */
  static create(maxLifetimeSeconds = 1200): TestNetns {
    const id = randomBytes(4).toString('hex');
    const block = 4 * randomInt(0, 1 << 15); // one /30 of the 2^17 addresses of 198.18.0.0/15
    const addr = (n: number) => {
      const v = (198 << 24) + (18 << 16) + block + n;
      return [v >>> 24, (v >>> 16) & 255, (v >>> 8) & 255, v & 255].join('.');
    };
    const ns = new TestNetns(`sg-${id}`, `sgh${id}`, addr(1), addr(2));
    const peer = `sgn${id}`;
    const probe = spawnSync('ip', ['netns', 'add', ns.name], { encoding: 'utf8' });
    if (probe.error || probe.status !== 0) {
      throw new Error(
        `this test needs a network namespace of its own (\`ip netns add ${ns.name}\` failed: ` +
          `${probe.error?.message ?? probe.stderr.trim()}). Run it as root (or with CAP_NET_ADMIN and CAP_SYS_ADMIN) ` +
          'with iproute2 installed (`apt-get install iproute2`); CI runs as root. The API server refuses loopback ' +
          'addresses in EndpointSlices, so the backends cannot listen on 127.0.0.1.',
      );
    }
    ns.startWatchdog(maxLifetimeSeconds);
    try {
      for (const args of [
        ['link', 'add', ns.hostLink, 'type', 'veth', 'peer', 'name', peer],
        ['link', 'set', peer, 'netns', ns.name],
        ['addr', 'add', `${ns.hostAddress}/30`, 'dev', ns.hostLink],
        ['link', 'set', ns.hostLink, 'up'],
        ['-n', ns.name, 'addr', 'add', `${ns.address}/30`, 'dev', peer],
        ['-n', ns.name, 'link', 'set', peer, 'up'],
        ['-n', ns.name, 'link', 'set', 'lo', 'up'],
      ]) {
        const r = spawnSync('ip', args, { encoding: 'utf8' });
        if (r.status !== 0) throw new Error(`ip ${args.join(' ')}: ${r.error?.message ?? r.stderr.trim()}`);
      }
    } catch (err) {
      ns.remove();
      throw err;
    }
    return ns;
  }

  /** A detached shell that cleans up once this jest worker is gone or the lifetime has passed. */
  private startWatchdog(maxLifetimeSeconds: number): void {
    const script = [
      `end=$(( $(date +%s) + ${maxLifetimeSeconds} ))`,
      `while kill -0 ${process.pid} 2>/dev/null && [ "$(date +%s)" -lt "$end" ]; do sleep 1; done`,
      `for p in $(ip netns pids ${this.name} 2>/dev/null); do kill -9 "$p" 2>/dev/null; done`,
      `ip netns del ${this.name} 2>/dev/null`,
      `ip link del ${this.hostLink} 2>/dev/null`,
      'exit 0',
    ].join('\n');
    this.watchdog = spawn('sh', ['-c', script], { detached: true, stdio: 'ignore' });
    this.watchdog.unref();
  }

  /**
   * Runs `node <args>` inside the namespace (under `timeout`, so it ends by itself at the latest after
   * maxSeconds), with env added to this process's environment.
   */
  node(args: readonly string[], env: Record<string, string> = {}, maxSeconds = 1200): NetnsProcess {
    const child = spawn(
      'ip',
      ['netns', 'exec', this.name, 'timeout', '-s', 'KILL', String(maxSeconds), process.execPath, ...args],
      { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'], detached: true },
    );
    let out = '';
    child.stdout?.setEncoding('utf8').on('data', (d: string) => (out += d));
    child.stderr?.setEncoding('utf8').on('data', (d: string) => (out += d));
    this.children.push(child);
    return { child, output: () => out };
  }

  /** Stops every process inside, removes the namespace and the veth pair, and ends the watchdog. */
  remove(): void {
    if (this.removed) return;
    this.removed = true;
    for (const c of this.children) {
      try {
        process.kill(-c.pid!, 'SIGKILL'); // its process group: `timeout` and node
      } catch {
        c.kill('SIGKILL');
      }
    }
    const pids = spawnSync('ip', ['netns', 'pids', this.name], { encoding: 'utf8' }).stdout ?? '';
    for (const p of pids.split(/\s+/).filter(Boolean)) {
      try {
        process.kill(Number(p), 'SIGKILL');
      } catch {
        // already gone
      }
    }
    spawnSync('ip', ['netns', 'del', this.name]);
    spawnSync('ip', ['link', 'del', this.hostLink]);
    this.watchdog?.kill('SIGKILL');
  }

  /** Whether the namespace still exists (for the cleanup test). */
  exists(): boolean {
    const list = spawnSync('ip', ['netns', 'list'], { encoding: 'utf8' }).stdout ?? '';
    return list.split('\n').some((l) => l.split(' ')[0] === this.name);
  }
}
