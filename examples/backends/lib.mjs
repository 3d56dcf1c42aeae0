// Small HTTP helpers shared by the sample servers (Node core only, no build step).
import { pathToFileURL } from 'node:url';

export const MAX_BODY = 32 * 1024 * 1024;

export function send(res, status, obj) {
  if (res.headersSent) return res.end();
  const body = JSON.stringify(obj);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

/** The whole request body, or undefined when it is larger than MAX_BODY. */
export function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let size = 0;
    req.on('data', (c) => {
      size += c.length;
      if (size > MAX_BODY) {
        resolve(undefined);
        req.destroy();
      } else chunks.push(c);
    });
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

export function listen(server, port, host) {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
}

export function closeServer(server) {
  return new Promise((resolve) => {
    server.close(() => resolve());
    server.closeAllConnections();
  });
}

/** `node file.mjs PORT`: starts the server of that file and stops it on SIGINT/SIGTERM. */
export async function runIfMain(meta, start, defaultPort, describe, options = {}) {
  if (!process.argv[1] || meta.url !== pathToFileURL(process.argv[1]).href) return;
  const port = Number(process.argv[2] ?? defaultPort);
  const s = await start(port, { host: process.env.HOST ?? '127.0.0.1', ...options });
  console.log(describe(s.port));
  const stop = () => s.close().then(() => process.exit(0));
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
}
