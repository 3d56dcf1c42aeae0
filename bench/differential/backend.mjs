// The backends of the differential harness (bench/differential.mjs): one "modal" server whose behaviour the query
// string picks (so one deployment covers many upstream cases), one "plain" echo for fallbacks, and a dead port.
//   ?status=N      answer N (JSON body)          ?reset=1     destroy the socket before answering
//   ?resetmid=1    head + part of the body, then destroy            ?hang=1 never answer
//   ?chunked=1     a chunked answer with a trailer                   ?cookies=1 two set-cookie headers
//   ?bighead=N     an answer header of N bytes                       ?refuse=1 refuse a websocket upgrade
//   ?early=1       answer before reading the body
//   ?delay=ms      answer after ms                                   ?stall=ms (SSE) pause after the first event
//   /v1/chat/completions, /v1/completions: an OpenAI-style answer; "stream": true → SSE, usage when asked
// Every other request is echoed: method, url, the header list in order, the body.
import { createHash } from 'node:crypto';
import http from 'node:http';
import net from 'node:net';

const WS_GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11';

function readAll(req) {
  return new Promise((resolve) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => resolve({ body: Buffer.concat(chunks), complete: true }));
    req.on('error', () => resolve({ body: Buffer.concat(chunks), complete: false }));
    req.on('aborted', () => resolve({ body: Buffer.concat(chunks), complete: false }));
  });
}

function echoDoc(name, req, body) {
  return {
    backend: name,
    method: req.method,
    url: req.url,
    httpVersion: req.httpVersion,
    headers: req.rawHeaders,
    trailers: req.rawTrailers,
    bodyLength: body.length,
    body: body.toString('utf8'),
  };
}

function sendJson(res, status, doc, extra = {}) {
  const text = JSON.stringify(doc);
  res.writeHead(status, { 'content-type': 'application/json', 'x-backend': 'h4', ...extra });
  res.end(text);
}

async function chat(req, res, body, q) {
  let doc = {};
  try {
    doc = JSON.parse(body.toString('utf8'));
  } catch {
    return sendJson(res, 400, { error: { message: 'backend: bad json' } });
  }
  const model = doc.model ?? null;
  const usage = { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 };
  if (doc.stream !== true) {
    return sendJson(res, 200, {
      id: 'cmpl-h4',
      object: 'chat.completion',
      created: 1,
      model,
      choices: [{ index: 0, message: { role: 'assistant', content: 'one two three' }, finish_reason: 'stop' }],
      usage,
      echo: echoDoc('modal', req, body),
    });
  }
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', 'x-backend': 'h4' });
  const words = ['one', ' two', ' three'];
  for (const [i, w] of words.entries()) {
    res.write(
      `data: ${JSON.stringify({ id: 'cmpl-h4', object: 'chat.completion.chunk', created: 1, model, choices: [{ index: 0, delta: { content: w }, finish_reason: i === 2 ? 'stop' : null }] })}\n\n`,
    );
    await new Promise((r) => setTimeout(r, i === 0 && q.get('stall') ? Number(q.get('stall')) : 5));
    if (q.get('resetmid') === '1' && i === 1) return res.socket?.destroy();
  }
  if (doc.stream_options?.include_usage === true)
    res.write(
      `data: ${JSON.stringify({ id: 'cmpl-h4', object: 'chat.completion.chunk', created: 1, model, choices: [], usage })}\n\n`,
    );
  res.end('data: [DONE]\n\n');
}

function upgrade(req, socket, head) {
  const q = new URL(req.url ?? '/', 'http://x').searchParams;
  if (q.get('refuse') === '1') {
    socket.end('HTTP/1.1 403 Forbidden\r\ncontent-type: text/plain\r\ncontent-length: 7\r\n\r\nrefused');
    return;
  }
  const accept = createHash('sha1')
    .update(String(req.headers['sec-websocket-key']) + WS_GUID)
    .digest('base64');
  socket.write(
    `HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-accept: ${accept}\r\nx-backend: h4\r\n\r\n`,
  );
  // Not a websocket implementation: the bytes come back as sent, which is all a tunnel is judged by.
  if (head.length) socket.write(head);
  socket.on('data', (d) => socket.write(d));
  socket.on('end', () => socket.end());
  socket.on('error', () => {});
}

export async function startBackend(name) {
  const sockets = new Set();
  const server = http.createServer(async (req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    const q = url.searchParams;
    if (q.get('reset') === '1') return req.socket.destroy();
    if (q.get('hang') === '1') return;
    if (q.get('delay')) await new Promise((r) => setTimeout(r, Number(q.get('delay'))));
    if (q.get('early') === '1')
      return sendJson(res, Number(q.get('status') ?? 200), { early: true, backend: name }, { 'x-backend': name });
    const { body } = await readAll(req);
    if (name === 'modal' && /\/v1\/(chat\/)?completions$/.test(url.pathname)) return chat(req, res, body, q);
    const doc = echoDoc(name, req, body);
    const status = Number(q.get('status') ?? 200);
    if (q.get('resetmid') === '1') {
      res.writeHead(status, { 'content-type': 'application/json', 'content-length': '1000' });
      res.write('{"partial":');
      setTimeout(() => res.socket?.destroy(), 20);
      return;
    }
    const extra = {};
    if (q.get('cookies') === '1') extra['set-cookie'] = ['a=1; Path=/', 'b=2; Path=/'];
    if (q.get('bighead')) extra['x-big'] = 'b'.repeat(Number(q.get('bighead')));
    if (q.get('chunked') === '1') {
      res.writeHead(status, { 'content-type': 'application/json', 'x-backend': name, trailer: 'x-tr', ...extra });
      res.write(JSON.stringify(doc).slice(0, 10));
      res.write(JSON.stringify(doc).slice(10));
      res.addTrailers({ 'x-tr': 'done' });
      return res.end();
    }
    sendJson(res, status, doc, { 'x-backend': name, ...extra });
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  server.on('upgrade', (req, socket, head) => upgrade(req, socket, head));
  server.keepAliveTimeout = 30_000;
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return {
    port: server.address().port,
    close: () =>
      new Promise((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

/** A loopback port that nothing listens on (bound, read, closed). */
export async function deadPort() {
  const s = net.createServer();
  await new Promise((r) => s.listen(0, '127.0.0.1', r));
  const { port } = s.address();
  await new Promise((r) => s.close(r));
  return port;
}

/** Raw answers no HTTP library would write: /<name> or ?raw=<name> → RAW[name] as bytes, then a close if `close`. */
export const RAW = {
  dupcl: { text: 'HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok' },
  tecl: { text: 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n2\r\nok\r\n0\r\n\r\n' },
  named: {
    text: 'HTTP/1.1 200 OK\r\nConnection: x-a, content-length, keep-alive\r\nX-A: 1\r\nX-B: 2\r\nContent-Length: 2\r\n\r\nok',
  },
  owned: {
    text: 'HTTP/1.1 200 OK\r\nX-Servegate-Project: evil\r\nx_servegate_key: k\r\nX-Request-Id: backend-id\r\nX-Servegate-Variant: v\r\nContent-Length: 2\r\n\r\nok',
  },
  closedelim: { text: 'HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nbody until close', close: true },
  early: {
    text: 'HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok',
  },
  cont: { text: 'HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok' },
  nc204: { text: 'HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n' },
  h10: { text: 'HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok', close: true },
  badstatus: { text: 'HTTP/1.1 2x0 OK\r\nContent-Length: 2\r\n\r\nok', close: true },
  fold: { text: 'HTTP/1.1 200 OK\r\nX-A: 1\r\n  folded\r\nContent-Length: 2\r\n\r\nok' },
  s999: { text: 'HTTP/1.1 999 Odd\r\nContent-Length: 2\r\n\r\nok' },
  s600: { text: 'HTTP/1.1 600 Odd\r\nContent-Length: 2\r\n\r\nok' },
  noreason: { text: 'HTTP/1.1 200\r\nContent-Length: 2\r\n\r\nok' },
  reason: { text: 'HTTP/1.1 200 Fine Thanks\r\nContent-Length: 2\r\n\r\nok' },
  gzsse: {
    text: 'HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Encoding: gzip\r\nContent-Length: 4\r\n\r\nabcd',
  },
  ssecut: {
    text: 'HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: {"a":1}\n\ndata: {"b"',
    close: true,
  },
  short: { text: 'HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc', close: true },
  chunkcut: { text: 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab', close: true },
  trailer: {
    text: 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: x-t\r\n\r\n2\r\nok\r\n0\r\nx-t: 1\r\n\r\n',
  },
  cookies: {
    text: 'HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\nset-cookie: b=2\r\nVary: Accept\r\nContent-Length: 2\r\n\r\nok',
  },
  utf8h: { text: 'HTTP/1.1 200 OK\r\nX-U: caf\xe9\r\nContent-Length: 2\r\n\r\nok' },
  cors: {
    text: 'HTTP/1.1 200 OK\r\nAccess-Control-Allow-Origin: *\r\nAccess-Control-Allow-Credentials: true\r\nVary: Origin\r\nContent-Length: 2\r\n\r\nok',
  },
  badws: { text: 'HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n' },
  s429: { text: 'HTTP/1.1 429 Too Many Requests\r\nRetry-After: 7\r\nContent-Length: 2\r\n\r\nno' },
};

export async function startRawBackend() {
  const sockets = new Set();
  const server = net.createServer((s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
    s.on('error', () => {});
    let got = '';
    let skip = 0;
    s.on('data', (d) => {
      got += d.toString('latin1');
      if (skip) {
        const n = Math.min(skip, got.length);
        skip -= n;
        got = got.slice(n);
      }
      const end = got.indexOf('\r\n\r\n');
      if (end < 0) return;
      // The request body (Content-Length framed, as the gateway sends bodies it read) is read past, not answered.
      const cl = Number(/\r\ncontent-length: *(\d+)/i.exec(got.slice(0, end))?.[1] ?? 0);
      const rest = got.slice(end + 4);
      skip = Math.max(0, cl - rest.length);
      const name =
        /[?&]raw=([a-z0-9]+)/.exec(got.slice(0, got.indexOf('\r\n')))?.[1] ??
        /^[A-Z]+ \/([a-z0-9]+)/.exec(got)?.[1] ??
        '';
      got = rest.slice(cl);
      const r = RAW[name] ?? { text: 'HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n' };
      s.write(Buffer.from(r.text, 'latin1'));
      if (r.close) s.end();
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return {
    port: server.address().port,
    close: () =>
      new Promise((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}
