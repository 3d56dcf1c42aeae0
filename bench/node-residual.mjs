// What a bare node:http server keeps after a burst of connections, with no servegate and no undici code in the process:
// to read beside bench Part E's "RSS back to its baseline" (docs/performance.md, Part E).
//   ulimit -n "$(ulimit -Hn)"; node --expose-gc bench/node-residual.mjs [connections=5000]
//   (as the image runs it: LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2 MALLOC_CONF=<the Dockerfile's>)
// One process: an HTTP server on 127.0.0.1 and N raw client sockets, each with one request whose answer stays open (as
// a stream would); then every answer ends and every socket closes. RSS and V8's heap are read after forced full GCs:
// at the baseline (after 3 s idle), with every connection open, and 16 s after they closed.
import http from 'node:http';
import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

if (typeof globalThis.gc !== 'function') {
  process.stderr.write('usage: node --expose-gc bench/node-residual.mjs [connections]\n');
  process.exit(2);
}
const N = Number(process.argv[2] ?? 5000);
if (!Number.isInteger(N) || N < 1) {
  process.stderr.write(`node-residual: connections must be a whole number of at least 1, not "${process.argv[2]}"\n`);
  process.exit(2);
}
const mb = (b) => `${(b / 1048576).toFixed(1)} MB`;
const collect = async () => {
  for (let i = 0; i < 3; i++) {
    globalThis.gc();
    await sleep(50);
  }
};
const report = (what) => {
  const m = process.memoryUsage();
  console.log(
    `${what}: RSS ${mb(m.rss)}, V8 heap used ${mb(m.heapUsed)} of ${mb(m.heapTotal)}, external ${mb(m.external)}`,
  );
  return m.rss;
};

const open = [];
const server = http.createServer((req, res) => {
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  res.write('data: x\n\n');
  open.push(res);
});
await new Promise((r) => server.listen(0, '127.0.0.1', r));
const { port } = server.address();
await sleep(3000);
await collect();
const base = report('baseline');
const sockets = [];
const deadline = Date.now() + 60_000 + N * 10;
for (let i = 0; i < N; i++) {
  const s = net.connect(port, '127.0.0.1');
  s.on('error', () => undefined);
  s.on('data', () => undefined);
  s.write('GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
  sockets.push(s);
  if (i % 200 === 199) await sleep(1);
}
while (open.length < N) {
  if (Date.now() > deadline) throw new Error(`only ${open.length} of ${N} connections answered (ulimit -n?)`);
  await sleep(50);
}
await collect();
report(`${N} connections open`);
for (const res of open) res.end();
open.length = 0;
await sleep(1000);
for (const s of sockets) s.destroy();
sockets.length = 0;
await sleep(1000);
for (let i = 0; i < 8; i++) {
  await sleep(2000);
  await collect();
}
const after = report('16 s after they closed');
console.log(`RSS after − baseline: ${mb(after - base)} (${(((after - base) / base) * 100).toFixed(1)} %)`);
server.close();
process.exit(0);
