// A stand-in for a predictive model server speaking the KServe V1 protocol (sklearn, tensorflow, python model servers):
//   POST /v1/models/<name>:predict | :classify | :regress   → {"predictions": [...]}
//   GET  /v1/models/<name>                                   → {"name": "<name>", "ready": true}
//   GET  /v1/models                                          → {"models": [...]}
// Node core only, no build step. Run it alone with `node v1-server.mjs 8081`, or import { start }.
// The "model" is arithmetic, not learning: predict answers the index of the largest input value of each instance
// (an iris row [5.1, 3.5, 1.4, 0.2] gives class 0), classify adds softmax scores, regress answers the mean.
import http from 'node:http';
import { closeServer, listen, readBody, runIfMain, send } from './lib.mjs';

/**
 * Starts the server. `models` limits the model names served (others get 404, as KServe answers); default: any name.
 * @param {number} port 0 for an ephemeral port
 * @param {{ host?: string, models?: string[] }} [options]
 * @returns {Promise<{ port: number, close(): Promise<void> }>}
 */
export async function start(port = 8081, options = {}) {
  const host = options.host ?? '127.0.0.1';
  const models = options.models ? new Set(options.models) : undefined;
  const server = http.createServer((req, res) => {
    handle(req, res, models).catch((err) => send(res, 500, { error: String(err?.message ?? err) }));
  });
  await listen(server, port, host);
  return { port: server.address().port, close: () => closeServer(server) };
}

async function handle(req, res, models) {
  const url = new URL(req.url ?? '/', 'http://localhost');
  const path = url.pathname;
  if (req.method === 'GET' && (path === '/' || path === '/health' || path === '/v1/health'))
    return send(res, 200, { status: 'alive' });
  if (req.method === 'GET' && path === '/v1/models') return send(res, 200, { models: models ? [...models] : [] });

  const m = /^\/v1\/models\/([^/:]+)(?::([a-z]+))?$/.exec(path);
  if (!m)
    return send(res, 404, {
      error: `no route ${req.method} ${path}; this server offers /v1/models/<name>:predict|:classify|:regress`,
    });
  const name = decodeURIComponent(m[1]);
  const verb = m[2];
  if (models && !models.has(name)) return send(res, 404, { error: `Model with name ${name} does not exist.` });

  if (!verb) {
    if (req.method !== 'GET') return send(res, 405, { error: 'use GET for model readiness' });
    return send(res, 200, { name, ready: true });
  }
  if (req.method !== 'POST') return send(res, 405, { error: `use POST for :${verb}` });
  if (!['predict', 'classify', 'regress'].includes(verb))
    return send(res, 404, { error: `unknown verb :${verb}; use :predict, :classify or :regress` });

  const raw = await readBody(req);
  if (raw === undefined) return send(res, 413, { error: 'request body too large' });
  let body;
  try {
    body = JSON.parse(raw.toString('utf8'));
  } catch {
    return send(res, 400, { error: 'Unrecognized request format: the body is not valid JSON' });
  }
  const instances = body?.instances ?? body?.inputs ?? (verb !== 'predict' ? body?.examples : undefined);
  if (!Array.isArray(instances)) {
    return send(res, 400, {
      error: `Expected "instances" or "inputs" to be a list${verb !== 'predict' ? ' (or "examples")' : ''}`,
    });
  }
  const predictions = instances.map((instance) => {
    const values = numbers(instance);
    if (verb === 'regress') return values.length ? values.reduce((a, b) => a + b, 0) / values.length : 0;
    const best = argmax(values);
    if (verb === 'classify') return { class: best, scores: softmax(values) };
    return best;
  });
  return send(res, 200, { predictions });
}

function numbers(v, out = []) {
  if (typeof v === 'number' && Number.isFinite(v)) out.push(v);
  else if (Array.isArray(v)) for (const x of v) numbers(x, out);
  else if (v && typeof v === 'object') for (const x of Object.values(v)) numbers(x, out);
  return out;
}

function argmax(values) {
  let best = 0;
  for (let i = 1; i < values.length; i++) if (values[i] > values[best]) best = i;
  return best;
}

function softmax(values) {
  if (values.length === 0) return [];
  const max = Math.max(...values);
  const exps = values.map((v) => Math.exp(v - max));
  const sum = exps.reduce((a, b) => a + b, 0);
  return exps.map((e) => Math.round((e / sum) * 1e6) / 1e6);
}

await runIfMain(
  import.meta,
  start,
  8081,
  (p) => `V1 model server listening on http://127.0.0.1:${p} (POST /v1/models/<name>:predict)`,
);
