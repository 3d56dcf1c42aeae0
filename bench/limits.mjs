// Part C of `npm run bench`: the cost of SPEC §9's per-minute limits on the data plane. The same gateway (access log
// off) three times against the same backend: no limit, a per-key rpm counted in process, and the same rpm counted in a
// local redis-server (one Lua script per request). The budget is far above the load, so every request is admitted
// and the figure is the check itself. Printed as CPU µs per request and as ratios against the no-limit gateway of the
// same run. Without redis-server the Redis row is skipped (apt-get install -y redis-server).
import { spawn } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { startBackend, throughput, probe } from './gateway.mjs';
import { deploymentObject, keySecretObject, makeKey } from './lib/manifests.mjs';
import { findExecutable, freePort, stopProcess, waitFor } from './lib/procs.mjs';
import { writeWrkScript } from './lib/load.mjs';
import { log, ratio, rps, table, us } from './lib/report.mjs';
import { cliBuilt, startGateway } from './lib/servegate.mjs';

const PROJECT = 'bench';
const DEPLOYMENT = 'iris';
const MODEL_PATH = `/v1/models/${DEPLOYMENT}:predict`;
const RPM = 1_000_000_000;

async function startRedis(dir) {
  const bin = findExecutable('redis-server');
  if (!bin) return undefined;
  const port = await freePort();
  const child = spawn(bin, ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout.on('data', (c) => (out += c));
  await waitFor('redis-server', () => out.includes('Ready to accept connections'), { child, timeoutMs: 10_000 });
  writeFileSync(join(dir, 'redis-port'), String(port));
  return { child, url: `redis://127.0.0.1:${port}/0` };
}

export async function runLimitsBench(ctx) {
  const dir = join(ctx.dir, 'limits');
  mkdirSync(dir, { recursive: true });
  if (!cliBuilt()) {
    log('  SKIPPED: dist/cli/main.js not built');
    return { summary: ['limits: skipped (not built)'] };
  }
  const { key, prefix, sha256 } = makeKey();
  const headers = { 'content-type': 'application/json', authorization: `ApiKey ${key}` };
  const lctx = {
    ...ctx,
    headers,
    wrkScript: ctx.tools.wrk
      ? writeWrkScript(dir, { method: 'POST', body: '{"instances":[[6.8,2.8,4.8,1.4]]}', headers, name: 'wrk-limits' })
      : undefined,
  };
  const started = [];
  const rows = [['gateway', 'requests/s', 'CPU µs/request', 'vs no limit']];
  const figures = {};
  try {
    const backend = await startBackend(ctx, dir);
    started.push(backend.child);
    /** A folder with the deployment and the key, the key with `extra` fields (e.g. its rpm). */
    const manifestsDir = (name, extra) => {
      const folder = join(dir, name);
      mkdirSync(folder, { recursive: true });
      const keyDoc = keySecretObject({ name: 'bench-key', prefix, sha256, projects: PROJECT });
      Object.assign(keyDoc.stringData, extra);
      const backendUrl = `http://127.0.0.1:${backend.port}`;
      const docs = [deploymentObject({ namespace: PROJECT, name: DEPLOYMENT, backend: { url: backendUrl } }), keyDoc];
      writeFileSync(join(folder, 'bench.yaml'), docs.map((d) => stringify(d)).join('---\n'));
      return folder;
    };
    const manifests = manifestsDir('manifests', { rpm: String(RPM) });
    const noLimits = manifestsDir('manifests-none', {});
    const redis = await startRedis(dir);
    if (redis) started.push(redis.child);
    const variants = [
      { name: 'no limit', manifests: noLimits, config: {} },
      { name: 'rpm, in process', manifests, config: {} },
      ...(redis
        ? [{ name: 'rpm, Redis', manifests, config: { limits: { redis: { url: redis.url, failOpen: false } } } }]
        : []),
    ];
    for (const v of variants) {
      const gw = await startGateway(dir, ['--manifests', v.manifests], {
        accessLog: false,
        name: `limits-${v.name.replace(/\W+/g, '-')}`,
        config: v.config,
        ready: (g) =>
          waitFor(
            `${v.name} route`,
            async () =>
              (await probe(`http://127.0.0.1:${g.port}/v1/${PROJECT}/${DEPLOYMENT}${MODEL_PATH}`, headers)) !==
              undefined,
            { child: g.child, timeoutMs: 20_000 },
          ),
      });
      try {
        const r = await throughput(
          lctx,
          `http://127.0.0.1:${gw.port}/v1/${PROJECT}/${DEPLOYMENT}${MODEL_PATH}`,
          gw.child,
        );
        figures[v.name] = r.errors || r.non2xx ? undefined : r;
      } finally {
        await stopProcess(gw.child);
      }
    }
    if (!redis) log('  rpm, Redis: SKIPPED (redis-server not installed; apt-get install -y redis-server)');
  } finally {
    for (const child of started.reverse()) await stopProcess(child);
  }
  const base = figures['no limit'];
  for (const [name, r] of Object.entries(figures)) {
    rows.push([
      name,
      rps(r?.rps),
      us(r?.serverCpuUsPerRequest),
      name === 'no limit' ? '1.00×' : ratio(r && base ? r.serverCpuUsPerRequest / base.serverCpuUsPerRequest : NaN),
    ]);
  }
  table(rows);
  // A difference inside the run-to-run noise can come out negative; it is printed as measured, with its sign.
  const cost = (name) =>
    figures[name] && base ? Math.round(figures[name].serverCpuUsPerRequest - base.serverCpuUsPerRequest) || 0 : NaN;
  const summary = [
    `limits: a per-key rpm check costs ${us(cost('rpm, in process'))} of CPU per request in process, ${figures['rpm, Redis'] ? us(cost('rpm, Redis')) : 'n/a (no redis-server)'} with Redis (the gateway's side; Redis's own CPU not counted)`,
  ];
  for (const line of summary) log(`  ${line}`);
  return { figures, summary };
}
