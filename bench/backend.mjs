// Fallback benchmark backend when nginx is not installed: a Node cluster answering every request with a
// fixed JSON 200. Usage: node bench/backend.mjs <port> [workers]
import cluster from 'node:cluster';
import { createServer } from 'node:http';

const port = Number(process.argv[2]);
const workers = Number(process.argv[3] ?? 2);
const body = Buffer.from('{"predictions":[1]}');

if (cluster.isPrimary) {
  for (let i = 0; i < workers; i++) cluster.fork();
  const stop = () => {
    for (const w of Object.values(cluster.workers ?? {})) w?.kill();
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
} else {
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': body.length });
      res.end(body);
    });
  });
  server.keepAliveTimeout = 120_000;
  server.listen(port, '127.0.0.1');
}
