// Does what stays after a burst of streams grow with every burst? One gateway (as the image runs it: jemalloc with the
// Dockerfile's MALLOC_CONF when the machine has it), bench Part E's backend and client, a warm-up, then B bursts of N
// streams × S s; 15 s after each, its live JS heap and RSS after a forced full GC (through its inspector).
//   ulimit -n "$(ulimit -Hn)"; npm run build; node bench/stream-bursts.mjs [bursts=4] [streams=4000] [seconds=5]
// A gateway that kept something per stream would show it growing burst after burst; one whose residual is a level
// (Node's free lists, compiled code, the allocator's) shows it flat after the first (docs/performance.md, Part E).
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { stringify } from 'yaml';
import { deploymentObject, keySecretObject, makeKey } from './lib/manifests.mjs';
import { freePort, startProcess, stopProcess } from './lib/procs.mjs';
import { CLI, imageAllocator, liveHeap, ROOT } from './lib/servegate.mjs';

const [bursts, streams, seconds] = [4, 4000, 5].map((d, i) => {
  const v = Number(process.argv[2 + i] ?? d);
  if (!Number.isInteger(v) || v < 1) {
    process.stderr.write('usage: node bench/stream-bursts.mjs [bursts=4] [streams=4000] [seconds=5] (whole numbers)\n');
    process.exit(2);
  }
  return v;
});
const SELF = join(ROOT, 'bench/streams.mjs');
const mb = (b) => `${(b / 1048576).toFixed(1)} MB`;
// Every child with the hard limit of descriptors (a proxy holding N streams needs 2N).
const ulimited = (args) => ['sh', ['-c', 'ulimit -n "$(ulimit -Hn)" && exec "$0" "$@"', process.execPath, ...args]];

const dir = mkdtempSync(join(tmpdir(), 'servegate-bursts-'));
const started = [];
try {
  mkdirSync(join(dir, 'manifests'));
  const key = makeKey();
  const [backendPort, port, adminPort] = [await freePort(), await freePort(), await freePort()];
  const backend = startProcess('backend', ...ulimited([SELF, 'backend', String(backendPort)]));
  started.push(backend);
  writeFileSync(
    join(dir, 'manifests', 'streams.yaml'),
    [
      deploymentObject({
        namespace: 'bench',
        name: 'chat',
        modelServer: 'llm',
        backend: { url: `http://127.0.0.1:${backendPort}` },
      }),
      keySecretObject({ name: 'bench-key', prefix: key.prefix, sha256: key.sha256, projects: 'bench' }),
    ]
      .map((d) => stringify(d))
      .join('---\n'),
  );
  writeFileSync(join(dir, 'config.json'), JSON.stringify({ accessLog: false, shutdown: { drainSeconds: 1 } }));
  const { env, note } = imageAllocator();
  console.log(note);
  const gateway = startProcess(
    'servegate',
    ...ulimited([
      '--inspect=127.0.0.1:0',
      CLI,
      'serve',
      '--manifests',
      join(dir, 'manifests'),
      '--config',
      join(dir, 'config.json'),
      '--port',
      String(port),
      '--admin-port',
      String(adminPort),
    ]),
    { env: { ...process.env, ...env }, cwd: ROOT },
  );
  started.push(gateway);
  const headers = { 'content-type': 'application/json', authorization: `ApiKey ${key.key}` };
  const url = `http://127.0.0.1:${port}/v1/bench/chat/v1/chat/completions`;
  const burst = async (n, secs) => {
    const client = startProcess(
      'client',
      ...ulimited([SELF, 'client', JSON.stringify({ url, streams: n, seconds: secs, headers, promptKb: 0 })]),
    );
    started.push(client);
    const code = await Promise.race([client.exited, sleep((secs + 60 + n / 100) * 1000).then(() => 'timeout')]);
    const final = client.output
      .split('\n')
      .filter((l) => l.includes('"final"'))
      .pop();
    if (code === 'timeout' || !final) throw new Error(`client gave no result (${code}): ${client.output.slice(-500)}`);
    return JSON.parse(final);
  };
  const read = async (what) => {
    await sleep(15_000);
    const h = await liveHeap(gateway);
    if (!h) throw new Error(`no inspector answer from the gateway: ${gateway.output.slice(-500)}`);
    console.log(`${what}: live JS heap ${mb(h.liveHeap)}, RSS ${mb(h.rssAfterGc)}`);
  };
  // Ready once one stream goes through; then a warm-up as Part E's.
  for (let i = 0; ; i++) {
    try {
      if ((await burst(1, 1)).events === 1) break;
    } catch (err) {
      if (i > 40) throw err;
    }
    await sleep(500);
  }
  await burst(100, 2);
  await read('baseline (after 100 streams × 2 s)');
  for (let b = 1; b <= bursts; b++) {
    const r = await burst(streams, seconds);
    await read(`after burst ${b} (${r.opened} streams, ${r.events} of ${streams * seconds} events)`);
  }
} finally {
  for (const child of started.reverse()) await stopProcess(child);
  rmSync(dir, { recursive: true, force: true });
}
process.exit(0);
