// A stand-in for a user's own Python server (a `type: python` deployment): it answers every method and path with
// what it received, so you can see what the gateway forwards (path after /v1/<project>/<deployment>, query,
// x-servegate-project, x-servegate-key, x-request-id, x-forwarded-*):
//   ANY  /<anything>  → {"method", "path", "query", "headers", "body"}
//   GET  /health      → {"status": "ok"}
//   GET  /ws          → a websocket that echoes every message (handshake and frames done here, Node core only)
// Run `node echo-server.mjs 8083`, or import { start }.
import { createHash } from 'node:crypto';
import http from 'node:http';
import { listen, readBody, runIfMain, send } from './lib.mjs';

const MAX_FRAME = 16 * 1024 * 1024;
const WS_GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11';

/**
 * @param {number} port 0 for an ephemeral port
 * @param {{ host?: string }} [options]
 * @returns {Promise<{ port: number, close(): Promise<void> }>}
 */
export async function start(port = 8083, options = {}) {
  const host = options.host ?? '127.0.0.1';
  const sockets = new Set();
  const server = http.createServer((req, res) => {
    handle(req, res).catch((err) => send(res, 500, { error: String(err?.message ?? err) }));
  });
  server.on('upgrade', (req, socket, head) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    upgrade(req, socket, head);
  });
  await listen(server, port, host);
  return {
    port: server.address().port,
    close: () =>
      new Promise((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

async function handle(req, res) {
  const url = new URL(req.url ?? '/', 'http://localhost');
  if (url.pathname === '/health') return send(res, 200, { status: 'ok' });
  const raw = await readBody(req);
  if (raw === undefined) return send(res, 413, { error: 'request body too large' });
  const query = {};
  for (const [k, v] of url.searchParams) query[k] = k in query ? [].concat(query[k], v) : v;
  return send(res, 200, {
    method: req.method,
    path: url.pathname,
    query,
    headers: req.headers,
    body: raw.toString('utf8'),
  });
}

// ---- websocket echo (RFC 6455, no extensions) ----

function upgrade(req, socket, head) {
  socket.on('error', () => socket.destroy());
  const url = new URL(req.url ?? '/', 'http://localhost');
  const key = req.headers['sec-websocket-key'];
  if (url.pathname !== '/ws' || String(req.headers.upgrade).toLowerCase() !== 'websocket' || typeof key !== 'string') {
    const body = '{"error":"websockets are served at /ws"}';
    socket.end(
      `HTTP/1.1 404 Not Found\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`,
    );
    return;
  }
  const accept = createHash('sha1')
    .update(key + WS_GUID)
    .digest('base64');
  const lines = [
    'HTTP/1.1 101 Switching Protocols',
    'Upgrade: websocket',
    'Connection: Upgrade',
    `Sec-WebSocket-Accept: ${accept}`,
  ];
  const protocol = String(req.headers['sec-websocket-protocol'] ?? '')
    .split(',')[0]
    .trim();
  if (protocol) lines.push(`Sec-WebSocket-Protocol: ${protocol}`);
  socket.write(`${lines.join('\r\n')}\r\n\r\n`);

  let buf = head && head.length ? Buffer.from(head) : Buffer.alloc(0);
  const onData = (data) => {
    buf = buf.length ? Buffer.concat([buf, data]) : data;
    for (;;) {
      const frame = readFrame(buf);
      if (frame === 'incomplete') return;
      if (frame.error) {
        socket.end(encodeFrame(true, 0x8, closePayload(frame.error, frame.reason)));
        return;
      }
      buf = buf.subarray(frame.size);
      const { fin, opcode, payload } = frame;
      if (opcode === 0x8) {
        socket.end(encodeFrame(true, 0x8, payload.subarray(0, 2)));
        return;
      }
      if (opcode === 0x9) socket.write(encodeFrame(true, 0xa, payload));
      else if (opcode === 0x0 || opcode === 0x1 || opcode === 0x2) socket.write(encodeFrame(fin, opcode, payload));
    }
  };
  socket.on('data', onData);
  if (buf.length) onData(Buffer.alloc(0));
}

/** Parses one client frame from buf: 'incomplete', an error (close code), or the unmasked frame and its size. */
function readFrame(buf) {
  if (buf.length < 2) return 'incomplete';
  const fin = (buf[0] & 0x80) !== 0;
  const opcode = buf[0] & 0x0f;
  const masked = (buf[1] & 0x80) !== 0;
  let len = buf[1] & 0x7f;
  let off = 2;
  if (len === 126) {
    if (buf.length < 4) return 'incomplete';
    len = buf.readUInt16BE(2);
    off = 4;
  } else if (len === 127) {
    if (buf.length < 10) return 'incomplete';
    const big = buf.readBigUInt64BE(2);
    if (big > BigInt(MAX_FRAME)) return { error: 1009, reason: 'message too big' };
    len = Number(big);
    off = 10;
  }
  if (len > MAX_FRAME) return { error: 1009, reason: 'message too big' };
  if (!masked) return { error: 1002, reason: 'client frames must be masked' };
  if (buf.length < off + 4 + len) return 'incomplete';
  const mask = buf.subarray(off, off + 4);
  const payload = Buffer.from(buf.subarray(off + 4, off + 4 + len));
  for (let i = 0; i < payload.length; i++) payload[i] ^= mask[i & 3];
  return { fin, opcode, payload, size: off + 4 + len };
}

function encodeFrame(fin, opcode, payload) {
  const len = payload.length;
  let header;
  if (len < 126) {
    header = Buffer.from([(fin ? 0x80 : 0) | opcode, len]);
  } else if (len < 65536) {
    header = Buffer.alloc(4);
    header[0] = (fin ? 0x80 : 0) | opcode;
    header[1] = 126;
    header.writeUInt16BE(len, 2);
  } else {
    header = Buffer.alloc(10);
    header[0] = (fin ? 0x80 : 0) | opcode;
    header[1] = 127;
    header.writeBigUInt64BE(BigInt(len), 2);
  }
  return Buffer.concat([header, payload]);
}

function closePayload(code, reason) {
  const p = Buffer.alloc(2 + Buffer.byteLength(reason));
  p.writeUInt16BE(code, 0);
  p.write(reason, 2);
  return p;
}

// ---- plumbing ----

await runIfMain(
  import.meta,
  start,
  8083,
  (p) => `echo server listening on http://127.0.0.1:${p} (any path; websocket at /ws)`,
);
