// Part F of `npm run bench` (--only scrape): what scraping the LLM endpoints' metrics costs the gateway (SPEC §12: a
// scrape never delays a request). One llm-policy deployment of three endpoints (`backend.urls`), whose /metrics a
// child process serves (its CPU is not the gateway's), scraped at the default interval (100 ms: 30 scrapes a second),
// no requests. Measured: the gateway's CPU (user + system of its process group, /proc) over `seconds`, and the scrapes
// the endpoints were asked for, for four texts per endpoint:
//   small        a vLLM-like text of one model (the figures, then 20 KB of histogram series);
//   4 MB, first  the figures, then 4 MB of histogram series (vLLM's order);
//   4 MB, last   4 MB of histogram series, then the figures (past the byte bound: aborted and backed off);
//   4 MB crafted one needed name per line, the only `}` at the very end (quadratic before the linear reader).
// Also alone, e.g. against another build: node bench/scrape.mjs [--dist <dir>] [--seconds 10]
// (<dir>: a built dist/ inside this repository, such as .bench-tmp/dist-before). Loopback only.
import { createServer } from 'node:http';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import {
  freePort,
  groupCpuSeconds,
  installCleanup,
  killAllSync,
  startProcess,
  stopProcess,
  waitFor,
} from './lib/procs.mjs';
import { log, table } from './lib/report.mjs';
import { CLI, ROOT, startGateway } from './lib/servegate.mjs';

const SELF = fileURLToPath(import.meta.url);
const MB4 = 4_000_000;

/** The four texts, by name (made in the serving child only). */
function texts() {
  const figures =
    'vllm:num_requests_waiting{engine="0",model_name="m"} 3.0\nvllm:num_requests_running{engine="0",model_name="m"} 7.0\n' +
    'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.42\nvllm:cache_config_info{block_size="16",cache_dtype="auto"} 1.0\n';
  const other = (bytes) => {
    const lines = [];
    let n = 0;
    for (let i = 0; n < bytes; i++) {
      const l = `vllm:e2e_request_latency_seconds_bucket{engine="0",le="${i}",model_name="m"} ${i}\n`;
      lines.push(l);
      n += l.length;
    }
    return lines.join('');
  };
  return {
    small: figures + other(20_000),
    first: figures + other(MB4),
    last: other(MB4) + figures,
    crafted: 'vllm:num_requests_waiting{x\n'.repeat(Math.floor(MB4 / 28)) + '}',
  };
}

const CASES = [
  { text: 'small', label: 'small (~20 KB, one model)' },
  { text: 'first', label: '4 MB, figures first (vLLM order)' },
  { text: 'last', label: '4 MB, figures after the series' },
  { text: 'crafted', label: '4 MB crafted (one } at the end)' },
];

/** The serving child: `node bench/scrape.mjs --serve '{"ports":[..],"control":P,"text":"small"}'`. */
async function serve({ ports, control, text }) {
  const body = Buffer.from(texts()[text], 'latin1');
  const counts = { requests: 0 };
  for (const port of ports) {
    const server = createServer((req, res) => {
      counts.requests++;
      res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4' }).end(body);
    });
    await new Promise((r) => server.listen(port, '127.0.0.1', r));
  }
  const ctl = createServer((req, res) => res.end(JSON.stringify(counts)));
  await new Promise((r) => ctl.listen(control, '127.0.0.1', r));
}

async function countsOf(control) {
  const res = await fetch(`http://127.0.0.1:${control}/`, { signal: AbortSignal.timeout(3000) });
  return res.json();
}

/** One case: the gateway's CPU (share of one core) over `seconds`, and the scrapes asked for per second. */
async function runCase(ctx, c, cli) {
  const ports = [await freePort(), await freePort(), await freePort()];
  const control = await freePort();
  const child = startProcess(`metrics (${c.text})`, process.execPath, [
    SELF,
    '--serve',
    JSON.stringify({ ports, control, text: c.text }),
  ]);
  const started = [child];
  try {
    await waitFor(`metrics server (${c.text})`, () => countsOf(control), { child });
    const folder = join(ctx.dir, `scrape-${c.text}`);
    mkdirSync(folder, { recursive: true });
    const urls = ports.map((p) => `http://127.0.0.1:${p}`);
    writeFileSync(
      join(folder, 'chat.json'),
      JSON.stringify({
        apiVersion: 'serving.servegate.dev/v1alpha1',
        kind: 'ServingDeployment',
        metadata: { name: 'chat', namespace: 'bench' },
        spec: { type: 'model', modelServer: 'llm', backend: { urls } },
      }),
    );
    // Ready once each endpoint was scraped at least once.
    const ready = (g) =>
      waitFor('the gateway scraping', async () => (await countsOf(control)).requests >= 3, {
        child: g.child,
        timeoutMs: 20_000,
      });
    const gw = await startGateway(ctx.dir, ['--manifests', folder], {
      accessLog: false,
      name: `servegate-scrape-${c.text}`,
      ready,
      cli,
    });
    started.push(gw.child);
    await new Promise((r) => setTimeout(r, ctx.settleMs));
    const before = await countsOf(control);
    const cpu0 = groupCpuSeconds(gw.child.pid);
    const t0 = performance.now();
    await new Promise((r) => setTimeout(r, ctx.seconds * 1000));
    const cpu1 = groupCpuSeconds(gw.child.pid);
    const seconds = (performance.now() - t0) / 1000;
    const after = await countsOf(control);
    return {
      case: c.text,
      cpu: (cpu1 - cpu0) / seconds,
      scrapesPerSecond: (after.requests - before.requests) / seconds,
    };
  } finally {
    for (const p of started.reverse()) await stopProcess(p);
  }
}

/** Seconds this part may take at most (run.mjs adds it to the global time limit). */
export function timeBudgetSeconds(ctx) {
  return CASES.length * (ctx.scrapeSeconds + 30);
}

/** Runs the four cases; prints the table and resolves { rows, summary }. */
export async function runScrapeBench(ctx, cli = CLI) {
  const c2 = { dir: ctx.dir, seconds: ctx.scrapeSeconds, settleMs: 1000 };
  log(`  3 endpoints, scraped every 100 ms (the default), no requests; gateway CPU over ${c2.seconds} s per case`);
  const rows = [];
  for (const c of CASES) rows.push({ ...(await runCase(c2, c, cli)), label: c.label });
  table([
    ['metrics per endpoint', 'gateway CPU (one core)', 'scrapes/s (3 endpoints)'],
    ...rows.map((r) => [r.label, `${(r.cpu * 100).toFixed(1)} %`, r.scrapesPerSecond.toFixed(1)]),
  ]);
  const small = rows.find((r) => r.case === 'small');
  const big = rows.find((r) => r.case === 'first');
  return {
    rows,
    summary: [
      `F scrape: gateway CPU, 3 endpoints at 100 ms: small metrics ${(small.cpu * 100).toFixed(1)} %, 4 MB each ${(big.cpu * 100).toFixed(1)} % (figures last ${(rows[2].cpu * 100).toFixed(1)} %, crafted ${(rows[3].cpu * 100).toFixed(1)} %)`,
    ],
  };
}

// --- alone -----------------------------------------------------------------------------------------------------------

if (process.argv[1] === SELF) {
  const { values } = parseArgs({
    options: {
      serve: { type: 'string' },
      dist: { type: 'string' },
      seconds: { type: 'string', default: '10' },
    },
  });
  if (values.serve) await serve(JSON.parse(values.serve));
  else {
    installCleanup(CASES.length * (Number(values.seconds) + 30) * 1000);
    const dir = mkdtempSync(join(tmpdir(), 'servegate-scrape-'));
    const cli = values.dist ? join(resolve(ROOT, values.dist), 'cli', 'main.js') : CLI;
    log(`scrape cost: gateway ${cli}`);
    try {
      await runScrapeBench({ dir, scrapeSeconds: Number(values.seconds) }, cli);
    } finally {
      killAllSync();
      rmSync(dir, { recursive: true, force: true });
    }
  }
}
