// nginx for the benchmark: the fixed-JSON backend and the comparison reverse proxy (path strip + API-key map).
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { request } from 'undici';
import { startProcess, waitFor } from './procs.mjs';

/** The body every backend answers with. */
export const BACKEND_BODY = '{"predictions":[1]}';

function common(dir, name, workers) {
  const tmp = join(dir, `${name}-tmp`);
  mkdirSync(tmp, { recursive: true });
  return `
${process.getuid?.() === 0 ? 'user root;' : ''}
worker_processes ${workers};
daemon off;
master_process on;
pid ${join(dir, `${name}.pid`)};
error_log ${join(dir, `${name}-error.log`)} warn;
events { worker_connections 4096; multi_accept on; }
`;
}

function httpCommon(dir, name, accessLog) {
  const tmp = join(dir, `${name}-tmp`);
  return `${accessLog ? accessLogLines(accessLog) : '\n  access_log off;'}
  client_body_temp_path ${tmp}/body;
  proxy_temp_path ${tmp}/proxy;
  fastcgi_temp_path ${tmp}/fastcgi;
  uwsgi_temp_path ${tmp}/uwsgi;
  scgi_temp_path ${tmp}/scgi;
  keepalive_requests 10000000;
  keepalive_timeout 120s;
`;
}

/** nginx answering every request with a fixed JSON 200: a backend that is never the bottleneck. */
export function backendConfig(dir, port, workers) {
  return `${common(dir, 'backend', workers)}
http {${httpCommon(dir, 'backend')}
  server {
    listen 127.0.0.1:${port} reuseport;
    location / {
      default_type application/json;
      return 200 '${BACKEND_BODY}';
    }
  }
}
`;
}

/**
 * One JSON line per request, about what servegate's access log says (time, request id, method, path, status,
 * duration); written as nginx is usually tuned for load, through a 64 KB buffer flushed at least every second.
 */
function accessLogLines(file) {
  return `
  log_format sg_json escape=json '{"time":"$time_iso8601","requestId":"$request_id","method":"$request_method",'
    '"path":"$uri","status":$status,"ms":$request_time,"upstreamMs":"$upstream_response_time","msg":"request"}';
  access_log ${file} sg_json buffer=64k flush=1s;`;
}

/** The API-key check both proxies make: `$sg_key_ok` is 1 for `ApiKey <key>` or `Bearer <key>`, else 0. */
const keyMap = (key) => `
  map_hash_bucket_size 256;
  map $http_authorization $sg_key_ok {
    default 0;
    "ApiKey ${key}" 1;
    "Bearer ${key}" 1;
  }`;

/** How both proxies forward: keep-alive HTTP/1.1 upstream, the key not passed on, X-Forwarded-* and a request id. */
const FORWARDING = `
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Authorization "";
      proxy_set_header X-Forwarded-For $remote_addr;
      proxy_set_header X-Forwarded-Proto $scheme;
      proxy_set_header X-Forwarded-Host $host;
      proxy_set_header X-Request-Id $request_id;`;

/**
 * nginx doing the gateway's job in its simplest form: one worker, `/v1/<project>/<deployment>` stripped,
 * an API-key check by `map` on the Authorization header (401 otherwise), the key not forwarded,
 * X-Forwarded-* set, keep-alive to the backend. With `accessLog` (a file), one JSON line per request there.
 * With `stream` ({ deployment, port }), a second location `/v1/<project>/<stream.deployment>/` does the same to an
 * SSE backend on that port with `proxy_buffering off` (each chunk passed on as it comes).
 */
export function proxyConfig(dir, port, backendPort, { project, deployment, key, name = 'proxy', accessLog, stream }) {
  const location = (prefix, upstream, extra = '') => `
    location ${prefix} {
      if ($sg_key_ok = 0) {
        return 401 '{"error":"missing or invalid API key"}';
      }
      proxy_pass http://${upstream}/;${FORWARDING}${extra}
    }`;
  return `${common(dir, name, 1)}
http {${httpCommon(dir, name, accessLog)}${keyMap(key)}
  upstream sg_backend {
    server 127.0.0.1:${backendPort};
    keepalive 128;
    keepalive_requests 10000000;
  }${
    stream
      ? `
  upstream sg_stream {
    server 127.0.0.1:${stream.port};
    keepalive 32;
    keepalive_requests 10000000;
  }`
      : ''
  }
  server {
    listen 127.0.0.1:${port};${location(`/v1/${project}/${deployment}/`, 'sg_backend')}${
      stream ? location(`/v1/${project}/${stream.deployment}/`, 'sg_stream', '\n      proxy_buffering off;') : ''
    }
    location / {
      return 404 '{"error":"unknown deployment"}';
    }
  }
}
`;
}

/**
 * nginx as the reference of Part B (many routes against one): one prefix location per route (`routes`: { prefix,
 * upstream }, the prefix stripped), each to the upstream of its namespace (one upstream per namespace, keep-alive, all
 * to the same backend, as the gateway's routes go to one Service per namespace); the API-key `map` and the forwarded
 * headers of proxyConfig, set once for the server; 404 for any other path.
 */
export function routesConfig(dir, port, backendPort, { routes, key, name }) {
  const upstreams = [...new Set(routes.map((r) => r.upstream))];
  return `${common(dir, name, 1)}
http {${httpCommon(dir, name)}${keyMap(key)}
${upstreams
  .map(
    (u) => `  upstream ${u} {
    server 127.0.0.1:${backendPort};
    keepalive 64;
    keepalive_requests 10000000;
  }
`,
  )
  .join('')}  server {
    listen 127.0.0.1:${port};
    if ($sg_key_ok = 0) {
      return 401 '{"error":"missing or invalid API key"}';
    }${FORWARDING}
${routes.map((r) => `    location ${r.prefix} { proxy_pass http://${r.upstream}/; }\n`).join('')}    location / {
      return 404 '{"error":"unknown deployment"}';
    }
  }
}
`;
}

/** Writes the config, checks it with `nginx -t`, starts nginx, waits until `probePath` answers. */
export async function startNginx(nginxBin, dir, name, config, port, probe) {
  const file = join(dir, `${name}.conf`);
  writeFileSync(file, config);
  const child = startProcess(`nginx ${name}`, nginxBin, ['-p', dir, '-c', file, '-e', join(dir, `${name}-error.log`)]);
  await waitFor(
    `nginx ${name} on port ${port}`,
    async () => {
      const res = await request(`http://127.0.0.1:${port}${probe.path}`, {
        method: probe.method ?? 'GET',
        headers: probe.headers,
        body: probe.body,
      });
      await res.body.dump();
      return res.statusCode === (probe.status ?? 200);
    },
    { child, timeoutMs: 10_000 },
  );
  return child;
}
