// A stand-in for an OpenAI-compatible LLM server (what vLLM or TGI offer), in the exact OpenAI JSON shapes:
//   POST /v1/chat/completions, POST /v1/completions   ("stream": true → Server-Sent Events, ~50 ms per chunk, then [DONE])
//   POST /v1/embeddings                              (float arrays, or base64 float32 as the openai SDK asks by default)
//   GET  /v1/models, GET /v1/models/<id>, GET /health
// The "model" repeats the last user message. Node core only. Run `node llm-server.mjs 8082`, or import { start }.
// A client that hangs up stops its stream at once (stats.abortedStreams counts them).
import { createHash, randomBytes } from 'node:crypto';
import http from 'node:http';
import { closeServer, listen, readBody, runIfMain, send } from './lib.mjs';

/**
 * @param {number} port 0 for an ephemeral port
 * @param {{ host?: string, model?: string, chunkDelayMs?: number }} [options]
 * @returns {Promise<{ port: number, close(): Promise<void>, stats: { activeStreams: number, completedStreams: number, abortedStreams: number } }>}
 */
export async function start(port = 8082, options = {}) {
  const host = options.host ?? '127.0.0.1';
  const ctx = {
    model: options.model ?? 'chat',
    delay: options.chunkDelayMs ?? 50,
    created: Math.floor(Date.now() / 1000),
    stats: { activeStreams: 0, completedStreams: 0, abortedStreams: 0 },
  };
  const server = http.createServer((req, res) => {
    handle(req, res, ctx).catch((err) => sendError(res, 500, String(err?.message ?? err), 'server_error'));
  });
  await listen(server, port, host);
  return { port: server.address().port, close: () => closeServer(server), stats: ctx.stats };
}

async function handle(req, res, ctx) {
  const path = new URL(req.url ?? '/', 'http://localhost').pathname.replace(/\/+$/, '') || '/';
  if (req.method === 'GET' && (path === '/health' || path === '/')) return send(res, 200, { status: 'ok' });
  if (req.method === 'GET' && path === '/v1/models') {
    return send(res, 200, { object: 'list', data: [modelObject(ctx)] });
  }
  if (req.method === 'GET' && path.startsWith('/v1/models/')) {
    const id = decodeURIComponent(path.slice('/v1/models/'.length));
    if (id !== ctx.model)
      return sendError(res, 404, `The model \`${id}\` does not exist.`, 'invalid_request_error', 'model_not_found');
    return send(res, 200, modelObject(ctx));
  }
  const routes = { '/v1/chat/completions': chat, '/v1/completions': completions, '/v1/embeddings': embeddings };
  const route = routes[path];
  if (!route)
    return sendError(res, 404, `Unknown request URL: ${req.method} ${path}`, 'invalid_request_error', 'unknown_url');
  if (req.method !== 'POST')
    return sendError(res, 405, `Use POST for ${path}`, 'invalid_request_error', 'method_not_allowed');
  const raw = await readBody(req);
  if (raw === undefined) return sendError(res, 413, 'Request body too large', 'invalid_request_error');
  let body;
  try {
    body = JSON.parse(raw.toString('utf8'));
  } catch {
    return sendError(res, 400, 'We could not parse the JSON body of your request.', 'invalid_request_error');
  }
  if (!body || typeof body !== 'object' || Array.isArray(body))
    return sendError(res, 400, 'The body must be a JSON object.', 'invalid_request_error');
  return route(req, res, body, ctx);
}

function modelObject(ctx) {
  return { id: ctx.model, object: 'model', created: ctx.created, owned_by: 'servegate-demo' };
}

function chat(req, res, body, ctx) {
  if (!Array.isArray(body.messages) || body.messages.length === 0) {
    return sendError(
      res,
      400,
      "'messages' is a required property and must be a non-empty array",
      'invalid_request_error',
      null,
      'messages',
    );
  }
  const lastUser = [...body.messages].reverse().find((m) => m && m.role === 'user');
  const text = `You said: ${contentText(lastUser?.content) || '(nothing)'}`;
  const { pieces, finish } = limit(tokens(text), body.max_completion_tokens ?? body.max_tokens);
  const model = typeof body.model === 'string' && body.model ? body.model : ctx.model;
  const id = `chatcmpl-${randomBytes(12).toString('hex')}`;
  const created = Math.floor(Date.now() / 1000);
  const usage = {
    prompt_tokens: promptTokens(body.messages),
    completion_tokens: pieces.length,
    total_tokens: promptTokens(body.messages) + pieces.length,
  };
  if (!body.stream) {
    return send(res, 200, {
      id,
      object: 'chat.completion',
      created,
      model,
      choices: [
        {
          index: 0,
          message: { role: 'assistant', content: pieces.join(''), refusal: null },
          logprobs: null,
          finish_reason: finish,
        },
      ],
      usage,
      system_fingerprint: null,
    });
  }
  const base = { id, object: 'chat.completion.chunk', created, model, system_fingerprint: null };
  const chunks = [
    {
      ...base,
      choices: [{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }],
    },
    ...pieces.map((p) => ({
      ...base,
      choices: [{ index: 0, delta: { content: p }, logprobs: null, finish_reason: null }],
    })),
    { ...base, choices: [{ index: 0, delta: {}, logprobs: null, finish_reason: finish }] },
  ];
  if (body.stream_options?.include_usage) chunks.push({ ...base, choices: [], usage });
  return stream(req, res, chunks, ctx);
}

function completions(req, res, body, ctx) {
  const prompt = Array.isArray(body.prompt)
    ? body.prompt.map(String).join('\n')
    : typeof body.prompt === 'string'
      ? body.prompt
      : '';
  const text = ` You said: ${prompt || '(nothing)'}`;
  const { pieces, finish } = limit(tokens(text), body.max_tokens ?? 16);
  const model = typeof body.model === 'string' && body.model ? body.model : ctx.model;
  const id = `cmpl-${randomBytes(12).toString('hex')}`;
  const created = Math.floor(Date.now() / 1000);
  const usage = {
    prompt_tokens: tokens(prompt).length,
    completion_tokens: pieces.length,
    total_tokens: tokens(prompt).length + pieces.length,
  };
  if (!body.stream) {
    return send(res, 200, {
      id,
      object: 'text_completion',
      created,
      model,
      choices: [{ text: pieces.join(''), index: 0, logprobs: null, finish_reason: finish }],
      usage,
      system_fingerprint: null,
    });
  }
  const base = { id, object: 'text_completion', created, model, system_fingerprint: null };
  const chunks = [
    ...pieces.map((p) => ({ ...base, choices: [{ text: p, index: 0, logprobs: null, finish_reason: null }] })),
    { ...base, choices: [{ text: '', index: 0, logprobs: null, finish_reason: finish }] },
  ];
  if (body.stream_options?.include_usage) chunks.push({ ...base, choices: [], usage });
  return stream(req, res, chunks, ctx);
}

function embeddings(req, res, body, ctx) {
  const input = body.input;
  let inputs;
  if (typeof input === 'string') inputs = [input];
  else if (Array.isArray(input) && input.length > 0)
    inputs = input.map((x) => (typeof x === 'string' ? x : JSON.stringify(x)));
  else
    return sendError(res, 400, "'input' must be a string or a non-empty array", 'invalid_request_error', null, 'input');
  const dims =
    Number.isInteger(body.dimensions) && body.dimensions > 0 && body.dimensions <= 4096 ? body.dimensions : 16;
  const base64 = body.encoding_format === 'base64';
  const data = inputs.map((text, index) => {
    const v = vector(text, dims);
    return {
      object: 'embedding',
      index,
      embedding: base64 ? Buffer.from(new Float32Array(v).buffer).toString('base64') : v,
    };
  });
  const n = inputs.reduce((a, t) => a + tokens(t).length, 0);
  return send(res, 200, {
    object: 'list',
    data,
    model: typeof body.model === 'string' && body.model ? body.model : ctx.model,
    usage: { prompt_tokens: n, total_tokens: n },
  });
}

/** Writes each chunk as an SSE event, ctx.delay ms apart, then [DONE]; stops at once if the client hangs up. */
function stream(req, res, chunks, ctx) {
  res.writeHead(200, {
    'content-type': 'text/event-stream; charset=utf-8',
    'cache-control': 'no-cache',
    'x-accel-buffering': 'no',
  });
  res.flushHeaders();
  ctx.stats.activeStreams++;
  let i = 0;
  let timer;
  let done = false;
  const finish = (aborted) => {
    if (done) return;
    done = true;
    clearTimeout(timer);
    ctx.stats.activeStreams--;
    if (aborted) ctx.stats.abortedStreams++;
    else ctx.stats.completedStreams++;
  };
  res.on('close', () => finish(!res.writableEnded));
  const next = () => {
    if (done) return;
    if (i < chunks.length) {
      res.write(`data: ${JSON.stringify(chunks[i++])}\n\n`);
      timer = setTimeout(next, ctx.delay);
    } else {
      res.end('data: [DONE]\n\n');
      finish(false);
    }
  };
  next();
}

function contentText(content) {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) return content.map((p) => (p && typeof p.text === 'string' ? p.text : '')).join(' ');
  return '';
}

/** Word-ish tokens that keep their leading space, so joining them gives the text back. */
function tokens(text) {
  return text.match(/\s*\S+/g) ?? [];
}

function limit(pieces, max) {
  if (Number.isInteger(max) && max > 0 && max < pieces.length)
    return { pieces: pieces.slice(0, max), finish: 'length' };
  return { pieces, finish: 'stop' };
}

function promptTokens(messages) {
  return messages.reduce((n, m) => n + tokens(contentText(m?.content)).length, 0);
}

/** A deterministic unit vector from the text's SHA-256. */
function vector(text, dims) {
  const v = [];
  let block = createHash('sha256').update(text).digest();
  for (let i = 0; i < dims; i++) {
    if (i > 0 && i % 32 === 0) block = createHash('sha256').update(block).digest();
    v.push(block[i % 32] / 127.5 - 1);
  }
  const norm = Math.hypot(...v) || 1;
  return v.map((x) => Math.fround(x / norm));
}

function sendError(res, status, message, type, code = null, param = null) {
  send(res, status, { error: { message, type, param, code } });
}

await runIfMain(import.meta, start, 8082, (p) => `OpenAI-compatible LLM server listening on http://127.0.0.1:${p}/v1`, {
  model: process.env.MODEL,
});
