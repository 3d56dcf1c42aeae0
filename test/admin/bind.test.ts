// Where the admin listener listens (docs/install.md, "The admin port"): /deployments lists every project's deployments
// and endpoints, so outside the chart only this machine reaches it unless --admin-host says otherwise. 127.0.0.2 is a
// loopback address that a listener bound to 127.0.0.1 does not answer, and one bound to every interface does.
import { mkdtempSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import { demoProgram } from '../../src/cli/demo.js';
import type { CliIo } from '../../src/cli/io.js';
import { serve, serveProgram } from '../../src/cli/serve.js';
import { silentLogger } from '../../src/log.js';
import type { Servegate } from '../../src/server.js';

/** 'open' when a TCP connection to host:port is accepted, else the error code (ECONNREFUSED). */
function reach(host: string, port: number): Promise<string> {
  return new Promise((resolve) => {
    const socket = connect({ host, port });
    socket.setTimeout(5000, () => socket.destroy(new Error('timeout')));
    socket.once('connect', () => {
      socket.destroy();
      resolve('open');
    });
    socket.once('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
  });
}

describe('the admin listener binds to 127.0.0.1 unless told otherwise', () => {
  let dir: string;
  const servers: Servegate[] = [];
  const start = async (adminHost?: string) => {
    const { server } = await serve(
      { manifests: dir, kubernetes: false, port: 0, adminPort: 0, adminHost }, // --host left out: every interface
      silentLogger,
    );
    servers.push(server);
    return server;
  };
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'servegate-admin-bind-'));
  });
  afterAll(async () => {
    await Promise.all(servers.map((s) => s.close()));
    rmSync(dir, { recursive: true, force: true });
  });

  test('by default: this machine only (127.0.0.1)', async () => {
    const s = await start();
    expect(await reach('127.0.0.1', s.adminPort)).toBe('open');
    expect(await reach('127.0.0.2', s.adminPort)).toBe('ECONNREFUSED');
  });

  test('--admin-host 0.0.0.0: every interface (what the chart sets)', async () => {
    const s = await start('0.0.0.0');
    expect(await reach('127.0.0.1', s.adminPort)).toBe('open');
    expect(await reach('127.0.0.2', s.adminPort)).toBe('open');
  });

  test.each([
    ['serve', serveProgram, ['--manifests', '.']],
    ['demo', demoProgram, []],
  ])('%s: --admin-host defaults to 127.0.0.1 and is passed on', async (_name, program, required) => {
    const io: CliIo = { stdout: () => undefined, stderr: () => undefined, env: {}, now: () => 0 };
    const flags = async (...argv: string[]) => {
      const cmd = program(io).action(() => undefined); // parse only: the real action would start the server
      await cmd.parseAsync([...required, ...argv], { from: 'user' });
      return cmd.opts<{ adminHost: string }>().adminHost;
    };
    expect(await flags()).toBe('127.0.0.1');
    expect(await flags('--admin-host', '::')).toBe('::');
  });
});
