// Raw-socket exchange and HTTP/1.1 response parsing for the differential harness.
import net from 'node:net';

/**
 * Runs one script on a fresh connection: steps are { write: string|Buffer }, { pause: ms }, { waitBytes: n }
 * (until n bytes came back, bounded), { half: true } (end our side). Then waits until the server closes or sends
 * nothing for idleMs. Returns the bytes and how the connection ended.
 */
export function exchange(port, steps, { idleMs = 300, maxMs = 10_000, delayMs = 0 } = {}) {
  return new Promise((resolve) => setTimeout(resolve, delayMs)).then(() => talk(port, steps, idleMs, maxMs));
}

function talk(port, steps, idleMs, maxMs) {
  return new Promise((resolve) => {
    const sock = net.connect(port, '127.0.0.1');
    const chunks = [];
    let received = 0;
    let ended = 'open';
    let done = false;
    let idleTimer;
    let waiter;
    const finish = () => {
      if (done) return;
      done = true;
      clearTimeout(idleTimer);
      clearTimeout(hard);
      sock.destroy();
      resolve({ bytes: Buffer.concat(chunks), ended });
    };
    const hard = setTimeout(finish, maxMs);
    // Before the first byte, at least 1.5 s: on a loaded machine a first answer can take longer than the quiet that
    // ends an exchange once bytes have come.
    const armIdle = () => {
      clearTimeout(idleTimer);
      idleTimer = setTimeout(finish, received === 0 ? Math.max(idleMs, 1500) : idleMs);
    };
    sock.on('data', (d) => {
      chunks.push(d);
      received += d.length;
      if (waiter) waiter();
      if (stepsDone) armIdle();
    });
    sock.on('end', () => {
      ended = ended === 'open' ? 'fin' : ended;
      if (waiter) waiter();
      if (stepsDone) finish();
    });
    let connected = false;
    sock.once('connect', () => (connected = true));
    sock.on('error', (e) => {
      ended = e.code === 'ECONNRESET' ? 'reset' : `error:${e.code}`;
      if (waiter) waiter();
      if (stepsDone || !connected) finish();
    });
    sock.on('close', () => {
      if (ended === 'open') ended = 'closed';
      if (waiter) waiter();
      if (stepsDone) finish();
    });
    let stepsDone = false;
    const run = async () => {
      await new Promise((r) => sock.once('connect', r));
      for (const s of steps) {
        if (done) return;
        if (s.write !== undefined) {
          if (!sock.destroyed) sock.write(s.write);
        } else if (s.pause !== undefined) await new Promise((r) => setTimeout(r, s.pause));
        else if (s.waitBytes !== undefined) {
          const until = Date.now() + (s.maxMs ?? 3000);
          while (received < s.waitBytes && ended === 'open' && Date.now() < until) {
            await new Promise((r) => {
              waiter = r;
              setTimeout(r, 50);
            });
            waiter = undefined;
          }
        } else if (s.half) sock.end();
      }
      stepsDone = true;
      if (ended !== 'open' && ended !== 'fin') finish();
      else armIdle();
    };
    run().catch(() => finish());
  });
}

/**
 * Splits a byte stream into responses. methods: the request methods in order (HEAD answers carry no body). A 101
 * ends parsing: the rest is tunnel bytes.
 */
export function parseResponses(buf, methods) {
  const out = [];
  let pos = 0;
  let mi = 0;
  while (pos < buf.length) {
    const headEnd = buf.indexOf('\r\n\r\n', pos);
    if (headEnd < 0) {
      out.push({ incomplete: buf.subarray(pos).toString('latin1') });
      break;
    }
    const lines = buf.subarray(pos, headEnd).toString('latin1').split('\r\n');
    const statusLine = lines[0];
    const headers = lines.slice(1).map((l) => {
      const i = l.indexOf(':');
      return i < 0 ? [l, null] : [l.slice(0, i), l.slice(i + 1).trim()];
    });
    pos = headEnd + 4;
    const status = Number(statusLine.split(' ')[1]);
    const r = { statusLine, headers };
    out.push(r);
    if (status === 101) {
      r.tunnel = buf.subarray(pos).toString('latin1');
      break;
    }
    if (status >= 100 && status < 200) continue;
    const method = methods[mi++] ?? 'GET';
    const get = (n) => headers.filter(([k]) => k.toLowerCase() === n).map(([, v]) => v);
    const te = get('transfer-encoding').join(',').toLowerCase();
    if (method === 'HEAD' || status === 204 || status === 304) continue;
    if (te.includes('chunked')) {
      const parts = [];
      let ok = false;
      for (;;) {
        const le = buf.indexOf('\r\n', pos);
        if (le < 0) break;
        const size = parseInt(buf.subarray(pos, le).toString('latin1'), 16);
        if (Number.isNaN(size)) break;
        pos = le + 2;
        if (size === 0) {
          const te2 = buf.indexOf('\r\n\r\n', pos - 2);
          if (te2 < 0) break;
          const trailer = buf.subarray(pos, te2 + 2).toString('latin1');
          if (trailer) r.trailers = trailer;
          pos = te2 + 4;
          ok = true;
          break;
        }
        if (pos + size + 2 > buf.length) {
          parts.push(buf.subarray(pos, Math.min(buf.length, pos + size)));
          pos = buf.length;
          break;
        }
        parts.push(buf.subarray(pos, pos + size));
        pos += size + 2;
      }
      r.body = Buffer.concat(parts).toString('latin1');
      r.framing = ok ? 'chunked' : 'chunked-truncated';
    } else if (get('content-length').length) {
      const n = Number(get('content-length')[0]);
      r.body = buf.subarray(pos, pos + n).toString('latin1');
      r.framing = pos + n > buf.length ? `length-truncated(${buf.length - pos}/${n})` : 'length';
      pos = Math.min(buf.length, pos + n);
    } else {
      r.body = buf.subarray(pos).toString('latin1');
      r.framing = 'close';
      pos = buf.length;
    }
  }
  return out;
}
