// Starts the BUILT gateway (dist/cli/main.js) as its own process: one process = one worker.
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort, startProcess } from './procs.mjs';

export const ROOT = fileURLToPath(new URL('../../', import.meta.url));
export const CLI = join(ROOT, 'dist', 'cli', 'main.js');

export function cliBuilt() {
  return existsSync(CLI);
}

/**
 * `node dist/cli/main.js serve <sourceArgs> --config <tmp> --port P --admin-port A`, logLevel warn.
 * Resolves { child, port, adminPort } once started (readiness is for the caller to probe).
 */
export async function startGatewayProcess(dir, sourceArgs, { env, config = {}, profileDir } = {}) {
  const port = await freePort();
  const adminPort = await freePort();
  const configFile = join(dir, 'servegate-config.json');
  writeFileSync(configFile, JSON.stringify({ logLevel: 'warn', shutdown: { drainSeconds: 1 }, ...config }, null, 2));
  const args = [CLI, 'serve', ...sourceArgs, '--config', configFile, '--port', String(port), '--admin-port', String(adminPort)];
  // --cpu-prof writes the profile when the process exits normally (servegate exits 0 after SIGTERM).
  const nodeArgs = profileDir ? ['--cpu-prof', '--cpu-prof-dir', profileDir] : [];
  const child = startProcess('servegate', process.execPath, [...nodeArgs, ...args], { env: { ...process.env, ...env }, cwd: ROOT });
  return { child, port, adminPort };
}

/** JS heap figures from the admin listener's /metrics (prom-client default metrics), in bytes; {} if unavailable. */
export async function heapOf(adminPort) {
  try {
    const res = await fetch(`http://127.0.0.1:${adminPort}/metrics`, { signal: AbortSignal.timeout(5000) });
    const text = await res.text();
    const get = (name) => {
      const m = new RegExp(`^\\w*${name}(?:\\{[^}]*\\})? ([0-9.e+]+)`, 'm').exec(text);
      return m ? Number(m[1]) : undefined;
    };
    return { heapUsed: get('nodejs_heap_size_used_bytes'), heapTotal: get('nodejs_heap_size_total_bytes'), external: get('nodejs_external_memory_bytes') };
  } catch {
    return {};
  }
}
