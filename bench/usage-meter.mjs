// What the event-stream usage meter costs per event, this build against another built copy, in one run:
//   npm run build; node bench/usage-meter.mjs [<other dist dir, e.g. .bench-tmp/dist-before>]
// Streams of 50 OpenAI-style chat chunks (one whole event per chunk, as backends write them) go through
// SseUsageMeter in the mode of an OpenAI SDK stream (the gateway asked for the usage the client did not: strip), in
// two shapes: chunks with no usage member (vLLM) and chunks carrying `"usage": null` (OpenAI's API and servers that
// copy its chunks, once usage is asked for). Each build runs in its own child process, alternating, three rounds
// each; CPU time per event (ns) and the output bytes (the same in every row, or the builds disagree).
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const STREAMS = 40_000;
const EVENTS = 50;

if (process.argv[2] === 'child') {
  const { SseUsageMeter } = await import(`${resolve(process.argv[3])}/gateway/openai/usage-meter.js`);
  const shape = process.argv[4];
  const event = (i) =>
    Buffer.from(
      `data: ${JSON.stringify({
        id: 'chatcmpl-1',
        object: 'chat.completion.chunk',
        created: 1,
        model: 'm',
        choices: [{ index: 0, delta: { content: `tok${i % 10}` }, finish_reason: null }],
        ...(shape === 'null' ? { usage: null } : {}),
      })}\n\n`,
    );
  const events = Array.from({ length: EVENTS }, (_, i) => event(i));
  const run = () => {
    let bytes = 0;
    for (let s = 0; s < STREAMS; s++) {
      const m = new SseUsageMeter(true);
      for (const e of events) bytes += m.push(e, 1)?.length ?? 0;
      bytes += m.end()?.length ?? 0;
    }
    return bytes;
  };
  run(); // warm-up
  const t0 = process.cpuUsage();
  const bytes = run();
  const t = process.cpuUsage(t0);
  process.stdout.write(JSON.stringify({ ns: ((t.user + t.system) * 1000) / (STREAMS * EVENTS), bytes }));
  process.exit(0);
}

const root = fileURLToPath(new URL('../', import.meta.url));
const builds = { new: resolve(root, 'dist') };
if (process.argv[2]) builds.old = resolve(process.argv[2]);
for (const [name, dir] of Object.entries(builds)) {
  if (!existsSync(`${dir}/gateway/openai/usage-meter.js`)) {
    process.stderr.write(`${name}: no built usage meter in ${dir} (npm run build)\n`);
    process.exit(2);
  }
}
const self = fileURLToPath(import.meta.url);
const median = (a) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];
for (const shape of ['plain', 'null']) {
  const ns = Object.fromEntries(Object.keys(builds).map((k) => [k, []]));
  const bytes = new Set();
  for (let round = 0; round < 3; round++) {
    for (const [name, dir] of Object.entries(builds)) {
      const r = JSON.parse(execFileSync(process.execPath, [self, 'child', dir, shape], { encoding: 'utf8' }));
      ns[name].push(r.ns);
      bytes.add(r.bytes);
    }
  }
  const row = Object.entries(ns)
    .map(([name, v]) => `${name} ${median(v).toFixed(0)} ns/event (rounds ${v.map((x) => x.toFixed(0)).join(', ')})`)
    .join('; ');
  const ratio = builds.old ? `; new ÷ old ${(median(ns.new) / median(ns.old)).toFixed(2)}×` : '';
  const same = bytes.size === 1 ? '' : '; WARNING: the builds wrote different bytes';
  console.log(`${shape === 'null' ? 'chunks with "usage": null' : 'chunks without usage     '}: ${row}${ratio}${same}`);
}
