// SSE CPU per event alone (Part A's SSE cost, bench/lib/sse-cost.mjs), in R alternating rounds: this build's gateway,
// the bare node:http + undici forwarder and, with --baseline-dist, another build's gateway, each against the same
// sse-burst backend (K events of 80 B back to back, each its own write). A quicker look than all of Part A when the
// per-event path changes, old build against new in one run:
//   npm run build && node bench/sse-cost.mjs [--rounds 3] [--streams 2000] [--baseline-dist <dist of another build>]
// Loopback only; every process it starts is stopped at the end.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { request } from 'undici';
import { stringify } from 'yaml';
import { startForwarder } from './lib/forwarders.mjs';
import { deploymentObject, keySecretObject, makeKey } from './lib/manifests.mjs';
import { freePort, stopProcess, waitFor } from './lib/procs.mjs';
import { imageAllocator, prepareBaseline, startGateway } from './lib/servegate.mjs';
import { LONG, SHORT, sseCostOf } from './lib/sse-cost.mjs';

const { values: flags } = parseArgs({
  options: {
    rounds: { type: 'string', default: '3' },
    streams: { type: 'string', default: '2000' },
    'baseline-dist': { type: 'string' },
  },
});
const rounds = Number(flags.rounds);
const streams = Number(flags.streams);
if (!Number.isInteger(rounds) || rounds < 1 || !Number.isInteger(streams) || streams < 10) {
  process.stderr.write('usage: node bench/sse-cost.mjs [--rounds N >= 1] [--streams N >= 10] [--baseline-dist DIR]\n');
  process.exit(2);
}
const PATH = '/v1/chat/completions';
const dir = mkdtempSync(join(tmpdir(), 'servegate-sse-cost-'));
const started = [];

/** A POST that must answer 200 with an event stream ending in [DONE]. */
async function streams200(url, headers) {
  const res = await request(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: '{"model":"bench","stream":true,"messages":[]}',
  });
  return res.statusCode === 200 && (await res.body.text()).includes('[DONE]');
}

try {
  const burstPort = await freePort();
  started.push(
    await startForwarder('sse-burst', { mode: 'sse-burst', port: burstPort }, () =>
      streams200(`http://127.0.0.1:${burstPort}${PATH}`, {}),
    ),
  );
  const origin = `http://127.0.0.1:${burstPort}`;
  const allocator = imageAllocator().env;
  const targets = [];

  const barePort = await freePort();
  const bareUrl = `http://127.0.0.1:${barePort}/v1/bench/burst${PATH}`;
  const bare = await startForwarder(
    'bare',
    { mode: 'bare', port: barePort, routes: [{ prefix: '/v1/bench/burst', origin }] },
    () => streams200(bareUrl, {}),
    allocator,
  );
  started.push(bare);
  targets.push({ name: 'bare', url: bareUrl, child: bare });

  const { key, prefix, sha256 } = makeKey();
  const manifests = join(dir, 'manifests');
  mkdirSync(manifests, { recursive: true });
  const docs = [
    deploymentObject({ namespace: 'bench', name: 'burst', modelServer: 'llm', backend: { url: origin } }),
    keySecretObject({ name: 'bench-key', prefix, sha256, projects: 'bench' }),
  ];
  writeFileSync(join(manifests, 'bench.yaml'), docs.map((d) => stringify(d)).join('---\n'));
  const headers = { authorization: `ApiKey ${key}` };
  const builds = [{ name: 'servegate', cli: undefined }];
  if (flags['baseline-dist']) builds.push({ name: 'servegate-old', cli: prepareBaseline(flags['baseline-dist']).cli });
  for (const b of builds) {
    const gw = await startGateway(dir, ['--manifests', manifests], {
      accessLog: false,
      env: allocator,
      name: b.name,
      cli: b.cli,
      ready: (g) =>
        waitFor('servegate route', () => streams200(`http://127.0.0.1:${g.port}/v1/bench/burst${PATH}`, headers), {
          child: g.child,
          timeoutMs: 20_000,
        }),
    });
    started.push(gw.child);
    targets.push({ name: b.name, url: `http://127.0.0.1:${gw.port}/v1/bench/burst${PATH}`, child: gw.child });
  }

  const settings = { streams, warmup: 300, concurrency: 8, timeoutMs: 120_000 };
  const per = Object.fromEntries(targets.map((t) => [t.name, []]));
  for (let r = 0; r < rounds; r++) {
    // Alternating order, so that a noisier minute falls on every target alike.
    const order = r % 2 ? [...targets].reverse() : targets;
    for (const t of order) {
      const res = await sseCostOf(t, t.name === 'bare' ? {} : headers, settings);
      if (res.lost || res.errors) throw new Error(`${t.name}: ${res.lost} streams lost, ${res.errors} errors`);
      per[t.name].push(res.usPerEvent);
    }
    process.stdout.write(
      `round ${r + 1}: ${targets.map((t) => `${t.name} ${per[t.name][r].toFixed(2)} µs`).join(', ')}\n`,
    );
  }
  const median = (v) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)];
  process.stdout.write(
    `CPU per event (median of ${rounds}; (per ${LONG}-event stream − per ${SHORT}-event stream) ÷ ${LONG - SHORT}): ${targets
      .map((t) => `${t.name} ${median(per[t.name]).toFixed(2)} µs`)
      .join(', ')}\n`,
  );
  const sg = per.servegate;
  process.stdout.write(
    `servegate ÷ bare by round: ${sg.map((v, i) => (v / per.bare[i]).toFixed(2)).join(', ')}${
      per['servegate-old']
        ? `; servegate ÷ servegate-old by round: ${sg.map((v, i) => (v / per['servegate-old'][i]).toFixed(2)).join(', ')}`
        : ''
    }\n`,
  );
} finally {
  for (const c of started.reverse()) await stopProcess(c);
  rmSync(dir, { recursive: true, force: true });
}
