// Upgrade requests (websockets): the same decision as any request, then the two sockets are joined.
import { request as httpRequest, type IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import { STATUS_CODES } from 'node:http';
import { decide } from './decide.js';
import { gatewayError, renderError, type GatewayError, type Dialect } from './errors.js';
import type { Gateway } from './gateway.js';
import { clientRequestId } from './headers.js';
import type { TargetPicker } from './upstream.js';
import { randomUUID } from 'node:crypto';
import { responseCorsHeaders } from './cors.js';

export function forwardUpgrade(gw: Gateway, picker: TargetPicker, req: IncomingMessage, socket: Socket, head: Buffer): void {
  const { deps } = gw;
  socket.on('error', () => socket.destroy());
  const requestId = clientRequestId(req.headers['x-request-id']) ?? randomUUID();
  const extra: Record<string, string> = { 'x-request-id': requestId, ...(responseCorsHeaders(gw.cors, req.headers.origin) ?? {}) };
  const d = decide(
    { method: req.method ?? 'GET', url: req.url ?? '/', host: req.headers.host, authorization: req.headers.authorization, contentType: undefined, now: Date.now() },
    deps.store.current(),
  );
  if (!d.ok) {
    if (d.authFailure) deps.metrics.authFailures.inc({ reason: d.authFailure });
    writeError(socket, d.error, d.dialect, extra);
    return;
  }
  if (d.route.kind === 'predictive') {
    writeError(socket, gatewayError('not_found', 'predictive deployments do not accept upgrade (websocket) requests'), d.dialect, extra);
    return;
  }
  const target = picker.pick(d.route.backend);
  if (!target) {
    writeError(socket, gatewayError('no_ready_endpoint', `deployment ${d.route.project}/${d.route.deployment} has no ready endpoint`, { 'retry-after': '5' }), d.dialect, extra);
    return;
  }
  const headers = gw.upstreamHeadersFor(req, d, target, requestId, { upgrade: true });
  const u = new URL(target.origin);
  const upstream = httpRequest({
    host: u.hostname.replace(/^\[|\]$/g, ''),
    port: Number(u.port || 80),
    method: req.method,
    path: target.basePath + d.upstreamPath,
    headers,
    timeout: d.route.timeoutMs,
  });
  const labels = { project: d.route.project, deployment: d.route.deployment };
  upstream.on('upgrade', (res, upSocket, upHead) => {
    let out = `HTTP/1.1 ${res.statusCode} ${res.statusMessage ?? STATUS_CODES[res.statusCode ?? 101]}\r\n`;
    for (let i = 0; i < res.rawHeaders.length; i += 2) out += `${res.rawHeaders[i]}: ${res.rawHeaders[i + 1]}\r\n`;
    out += '\r\n';
    socket.write(out);
    if (upHead.length) socket.write(upHead);
    if (head.length) upSocket.write(head);
    upSocket.on('error', () => socket.destroy());
    socket.on('close', () => upSocket.destroy());
    upSocket.on('close', () => socket.destroy());
    upSocket.pipe(socket);
    socket.pipe(upSocket);
    deps.metrics.requests.inc({ ...labels, status: '101' });
  });
  upstream.on('response', (res) => {
    // The backend declined the upgrade: pass its answer on as a normal response.
    let out = `HTTP/1.1 ${res.statusCode} ${res.statusMessage ?? ''}\r\n`;
    for (let i = 0; i < res.rawHeaders.length; i += 2) {
      const name = res.rawHeaders[i].toLowerCase();
      if (name === 'connection' || name === 'keep-alive' || name === 'transfer-encoding') continue;
      out += `${res.rawHeaders[i]}: ${res.rawHeaders[i + 1]}\r\n`;
    }
    const chunks: Buffer[] = [];
    res.on('data', (c: Buffer) => chunks.push(c));
    res.on('end', () => {
      const body = Buffer.concat(chunks);
      socket.end(`${out}content-length: ${body.length}\r\nconnection: close\r\n\r\n${body.toString('latin1')}`, 'latin1');
    });
    deps.metrics.requests.inc({ ...labels, status: String(res.statusCode) });
  });
  upstream.on('timeout', () => upstream.destroy(Object.assign(new Error('timeout'), { code: 'UND_ERR_HEADERS_TIMEOUT' })));
  upstream.on('error', (err: NodeJS.ErrnoException) => {
    if (socket.destroyed) return;
    const timeout = err.code === 'UND_ERR_HEADERS_TIMEOUT';
    deps.metrics.upstreamErrors.inc({ cause: timeout ? 'headers_timeout' : err.code === 'ECONNREFUSED' ? 'connect_refused' : 'reset' });
    const e = timeout
      ? gatewayError('backend_timeout', `deployment ${d.route.project}/${d.route.deployment} did not answer within ${d.route.timeoutMs / 1000}s`)
      : gatewayError('backend_unavailable', `deployment ${d.route.project}/${d.route.deployment}: the backend refused or broke the connection (${err.code ?? err.message})`);
    writeError(socket, e, d.dialect, extra);
  });
  socket.on('close', () => upstream.destroy());
  upstream.end();
}

function writeError(socket: Socket, err: GatewayError, dialect: Dialect, extra: Record<string, string>): void {
  const body = renderError(err, dialect);
  let out = `HTTP/1.1 ${err.status} ${STATUS_CODES[err.status] ?? ''}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n`;
  for (const [k, v] of Object.entries({ ...extra, ...err.headers })) out += `${k}: ${v}\r\n`;
  socket.end(`${out}\r\n${body}`);
}
