// Streaming check: an OpenAI-style SSE backend (in this process) that sends one event every `gapMs`, and a client
// that times each event's arrival, to tell whether a proxy passes the chunks as they come or buffers them.
import { createServer } from 'node:http';
import { performance } from 'node:perf_hooks';
import { request } from 'undici';

/** Starts the SSE backend on 127.0.0.1 (any path, any method): `chunks` events `gapMs` apart, then [DONE]. */
export function startSseBackend({ chunks = 40, gapMs = 20 } = {}) {
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      let n = 0;
      const timer = setInterval(() => {
        if (n === chunks) {
          clearInterval(timer);
          res.end('data: [DONE]\n\n');
          return;
        }
        res.write(`data: {"id":"bench","choices":[{"index":0,"delta":{"content":"token ${n++}"}}]}\n\n`);
      }, gapMs);
      res.on('close', () => clearInterval(timer));
    });
  });
  return new Promise((resolve, reject) => {
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => resolve({ server, port: server.address().port, chunks, gapMs }));
  });
}

/**
 * One streamed request: the arrival time (ms after the request was sent) of each complete SSE event.
 * Resolves { status, arrivals, firstMs, gaps } (gaps: between consecutive events).
 */
export async function timeStream(url, headers, body) {
  const t0 = performance.now();
  const res = await request(url, { method: 'POST', headers, body });
  const arrivals = [];
  let pending = '';
  for await (const chunk of res.body) {
    const now = performance.now() - t0;
    pending += chunk.toString('utf8');
    let end;
    while ((end = pending.indexOf('\n\n')) !== -1) {
      arrivals.push(now);
      pending = pending.slice(end + 2);
    }
  }
  const gaps = arrivals.slice(1).map((t, i) => t - arrivals[i]);
  return { status: res.statusCode, arrivals, firstMs: arrivals[0], gaps };
}

/** Median of a list of numbers (NaN when empty). */
export function median(values) {
  const s = [...values].sort((a, b) => a - b);
  return s.length ? (s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2) : NaN;
}

/**
 * The `data: {...}` events of an OpenAI-style stream as they arrive: yields { now, data } (performance.now() of the
 * chunk that completed the event, the parsed JSON); `[DONE]` and other lines are skipped. `state.rest` keeps what
 * followed the last event (an error body, when the status was not 200).
 */
export async function* chatStreamEvents(body, state = {}) {
  let pending = '';
  for await (const chunk of body) {
    const now = performance.now();
    pending += chunk.toString('utf8');
    let end;
    while ((end = pending.indexOf('\n\n')) !== -1) {
      const ev = pending.slice(0, end);
      pending = pending.slice(end + 2);
      if (ev.startsWith('data: {')) yield { now, data: JSON.parse(ev.slice(6)) };
    }
    state.rest = pending;
  }
}
