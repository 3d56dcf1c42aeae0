// The one OpenAI base URL (SPEC §9) with the official openai SDK: `<publicUrl>/openai/v1` reaches every LLM
// deployment the key is granted, `model` picks it and is rewritten to the served name (bytes otherwise as sent),
// models.list lists exactly what the key may use, and unknown / ungranted / missing models are OpenAI-style errors.
import OpenAI from 'openai';
import http from 'node:http';
import { afterAll, beforeAll, beforeEach, describe, expect, test } from '@jest/globals';
import WebSocket from 'ws';
import {
  closedPort,
  startOpenAIBackend,
  startPythonBackend,
  type OpenAIBackend,
  type RecordingBackend,
} from '../../support/backends.js';
import { send, startGateway, type Gateway } from '../../support/harness.js';

let llama: OpenAIBackend;
let mistral: OpenAIBackend;
let research: OpenAIBackend;
/** Stands in for a realtime (websocket) LLM server: it echoes messages and records upgrades. */
let realtime: RecordingBackend;
let gw: Gateway;
let app: string;
let both: string;

const SERVED = 'meta-llama/Llama-3.1-8B-Instruct';
const ORIGIN = 'https://app.example.com';
const sdk = (apiKey: string) => new OpenAI({ baseURL: `${gw.url}/openai/v1`, apiKey, maxRetries: 0, timeout: 10_000 });
const backends = () => [llama, mistral, research];
const seen = () => backends().reduce((n, b) => n + b.requests.length, 0);

beforeAll(async () => {
  [llama, mistral, research, realtime] = await Promise.all([
    startOpenAIBackend(),
    startOpenAIBackend(),
    startOpenAIBackend(),
    startPythonBackend(),
  ]);
  const down = await closedPort();
  gw = await startGateway({
    config: { cors: { allowedOrigins: [ORIGIN] }, limits: { maxRequestBodyBytes: 65_536 } },
    deployments: [
      { namespace: 'genai', name: 'llama', modelServer: 'llm', modelName: SERVED, url: llama.url },
      { namespace: 'genai', name: 'mistral', modelServer: 'llm', url: mistral.url },
      { namespace: 'genai', name: 'fraud', modelServer: 'sklearn', url: llama.url },
      { namespace: 'genai', name: 'down', modelServer: 'llm', url: `http://127.0.0.1:${down}` },
      { namespace: 'research-lab', project: 'research_lab', name: 'llama', modelServer: 'llm', url: research.url },
      { namespace: 'secret', name: 'gpt', modelServer: 'llm', url: research.url },
      { namespace: 'genai', name: 'rt', modelServer: 'llm', modelName: 'gpt-realtime', url: realtime.url },
    ],
    keys: [
      { name: 'apikey-app', projects: 'genai' },
      { name: 'apikey-both', projects: 'genai,research_lab' },
    ],
  });
  app = gw.keys['apikey-app'];
  both = gw.keys['apikey-both'];
});

afterAll(async () => {
  await gw?.close();
  await Promise.all([...backends(), realtime].map((b) => b?.close()));
});

beforeEach(() => {
  for (const b of backends()) {
    b.clear();
    b.stream = { chunks: 3, delayMs: 5 };
  }
});

const chatTo = (apiKey: string, body: unknown, headers: Record<string, string> = {}) =>
  send(`${gw.url}/openai/v1/chat/completions`, {
    headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });

describe('models', () => {
  test('models.list lists exactly the LLM deployments the key may use, as "<project>/<deployment>"', async () => {
    const mine = await sdk(app).models.list();
    expect(mine.data.map((m) => m.id).sort()).toEqual(['genai/down', 'genai/llama', 'genai/mistral', 'genai/rt']);
    expect(
      mine.data.every((m) => m.object === 'model' && typeof m.created === 'number' && m.owned_by === 'genai'),
    ).toBe(true);
    const wider = await sdk(both).models.list();
    expect(wider.data.map((m) => m.id).sort()).toEqual([
      'genai/down',
      'genai/llama',
      'genai/mistral',
      'genai/rt',
      'research_lab/llama',
    ]);
    expect(seen()).toBe(0);
  });

  test('the list is the OpenAI list object, answered by the gateway with CORS and a request id', async () => {
    const r = await send(`${gw.url}/openai/v1/models`, { headers: { authorization: `ApiKey ${app}`, origin: ORIGIN } });
    expect(r.status).toBe(200);
    expect(r.headers['content-type']).toBe('application/json');
    const list = r.json();
    expect(Object.keys(list).sort()).toEqual(['data', 'object']);
    expect(list.object).toBe('list');
    const byId = [...list.data].sort((a: { id: string }, b: { id: string }) => a.id.localeCompare(b.id));
    expect(byId).toEqual(
      ['genai/down', 'genai/llama', 'genai/mistral', 'genai/rt'].map((id) => ({
        id,
        object: 'model',
        created: 0,
        owned_by: 'genai',
      })),
    );
    expect(r.headers['access-control-allow-origin']).toBe(ORIGIN);
    expect(r.headers['x-request-id']).toBeTruthy();
  });

  test('models.retrieve answers one model the key may use, and 404/403 for the others', async () => {
    const m = await sdk(app).models.retrieve('genai/llama');
    expect(m).toMatchObject({ id: 'genai/llama', object: 'model' });
    const missing = await sdk(app)
      .models.retrieve('genai/nope')
      .catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(OpenAI.NotFoundError);
    const denied = await sdk(app)
      .models.retrieve('secret/gpt')
      .catch((e: unknown) => e);
    expect(denied).toBeInstanceOf(OpenAI.PermissionDeniedError);
    expect(seen()).toBe(0);
  });

  test('without a key the list is 401 with WWW-Authenticate', async () => {
    const r = await send(`${gw.url}/openai/v1/models`);
    expect(r.status).toBe(401);
    expect(r.headers['www-authenticate']).toBe('ApiKey');
    expect(r.json().error.type).toBe('authentication_error');
  });
});

describe('chat through the one base URL', () => {
  test('"<project>/<deployment>" reaches that deployment; the backend sees the model it serves, and nothing of the key', async () => {
    const params = { model: 'genai/llama', messages: [{ role: 'user' as const, content: 'ping' }], temperature: 0.5 };
    const r = await sdk(app).chat.completions.create(params);
    expect(r.choices[0].message.content).toBe('echo: ping');
    expect(r.model).toBe(SERVED);
    expect(mistral.requests).toHaveLength(0);
    const rec = llama.last();
    expect(rec.url).toBe('/v1/chat/completions');
    expect(rec.body.toString()).toBe(JSON.stringify({ ...params, model: SERVED }));
    expect(rec.headers['content-length']).toBe(String(rec.body.length));
    expect(rec.headers.authorization).toBeUndefined();
    expect(rec.headers['x-servegate-project']).toBe('genai');
    expect(rec.headers['x-servegate-deployment']).toBe('llama');
    expect(rec.headers['x-servegate-key']).toBe('apikey-app');
  });

  test('only the model value changes: spacing, key order and a big integer reach the backend as sent', async () => {
    const sent =
      '{ "seed" : 123456789012345678901234567890,\n  "model" :  "genai/mistral" , "messages":[{"role":"user","content":"h\\u00e9"}], "model_x": 1 }';
    const r = await chatTo(app, sent);
    expect(r.status).toBe(200);
    const rec = mistral.last();
    expect(rec.body.toString()).toBe(sent.replace('"genai/mistral"', '"mistral"'));
    expect(rec.headers['content-length']).toBe(String(rec.body.length));
  });

  test('a chunked request body is forwarded with its new length', async () => {
    const body = JSON.stringify({ model: 'genai/llama', messages: [{ role: 'user', content: 'chunked' }] });
    const r = await send(`${gw.url}/openai/v1/chat/completions`, {
      headers: { authorization: `Bearer ${app}`, 'content-type': 'application/json', 'transfer-encoding': 'chunked' },
      body,
    });
    expect(r.status).toBe(200);
    const rec = llama.last();
    expect(JSON.parse(rec.body.toString()).model).toBe(SERVED);
    expect(rec.headers['content-length']).toBe(String(rec.body.length));
    expect(rec.headers['transfer-encoding']).toBeUndefined();
  });

  test("a bare deployment name works when one of the key's projects has it; the name the backend serves is then the same", async () => {
    const sent = JSON.stringify({ model: 'mistral', messages: [{ role: 'user', content: 'bare' }] });
    const r = await chatTo(app, sent);
    expect(r.status).toBe(200);
    expect(mistral.last().body.toString()).toBe(sent);
    // "llama" is one deployment for this key, two for a key with both projects.
    expect((await chatTo(app, { model: 'llama', messages: [] })).status).toBe(200);
    expect(JSON.parse(llama.last().body.toString()).model).toBe(SERVED);
  });

  test('the project may be written in its namespace form', async () => {
    const r = await chatTo(both, { model: 'research-lab/llama', messages: [{ role: 'user', content: 'ns' }] });
    expect(r.status).toBe(200);
    expect(JSON.parse(research.last().body.toString()).model).toBe('llama');
    expect(research.last().headers['x-servegate-project']).toBe('research_lab');
  });

  test('completions and embeddings go the same way', async () => {
    const c = await sdk(app).completions.create({ model: 'genai/mistral', prompt: 'p' });
    expect(c.choices[0].text).toBe('echo: p');
    expect(mistral.last().url).toBe('/v1/completions');
    const e = await sdk(app).embeddings.create({ model: 'genai/llama', input: 'abc', encoding_format: 'float' });
    expect(e.data[0].embedding).toEqual([0.25, -0.5, 0.125]);
    expect(llama.last().url).toBe('/v1/embeddings');
    expect(JSON.parse(llama.last().body.toString()).model).toBe(SERVED);
  });

  test("a streamed chat arrives chunk by chunk, and the text is the backend's", async () => {
    llama.stream = { chunks: 5, delayMs: 5 };
    const stream = await sdk(app).chat.completions.create({
      model: 'genai/llama',
      messages: [{ role: 'user', content: 'go' }],
      stream: true,
    });
    let text = '';
    let finish: string | null = null;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
      expect(chunk.model).toBe(SERVED);
    }
    expect(text).toBe('tok0 tok1 tok2 tok3 tok4 ');
    expect(finish).toBe('stop');
  });

  test('a client that aborts a stream ends the backend request', async () => {
    llama.stream = { chunks: 50, delayMs: 50 };
    const ac = new AbortController();
    const stream = await sdk(app).chat.completions.create(
      { model: 'genai/llama', messages: [{ role: 'user', content: 'long' }], stream: true },
      { signal: ac.signal },
    );
    let got = 0;
    const read = (async () => {
      for await (const chunk of stream) {
        if (chunk.choices[0]?.delta?.content) got++;
        if (got === 2) ac.abort();
      }
    })().catch((e: unknown) => e);
    await read;
    const rec = llama.last();
    await rec.closed;
    expect(rec.aborted).toBe(true);
    expect(rec.sent.length).toBeLessThan(50);
  });

  test('a backend that refuses connections is a 502 OpenAI error object', async () => {
    const err = await sdk(app)
      .chat.completions.create({ model: 'genai/down', messages: [{ role: 'user', content: 'x' }] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect((err as InstanceType<typeof OpenAI.APIError>).status).toBe(502);
  });

  test('the per-deployment URL keeps forwarding the body unchanged', async () => {
    const sent = JSON.stringify({ model: 'whatever-the-client-says', messages: [{ role: 'user', content: 'direct' }] });
    const r = await send(`${gw.url}/v1/genai/llama/v1/chat/completions`, {
      headers: { authorization: `Bearer ${app}`, 'content-type': 'application/json' },
      body: sent,
    });
    expect(r.status).toBe(200);
    expect(llama.last().body.toString()).toBe(sent);
  });

  test('CORS: a preflight is answered without a key, and answers carry the CORS headers', async () => {
    const pre = await send(`${gw.url}/openai/v1/chat/completions`, {
      method: 'OPTIONS',
      headers: {
        origin: ORIGIN,
        'access-control-request-method': 'POST',
        'access-control-request-headers': 'authorization, content-type',
      },
    });
    expect(pre.status).toBe(204);
    expect(pre.headers['access-control-allow-origin']).toBe(ORIGIN);
    const ok = await chatTo(app, { model: 'genai/mistral', messages: [] }, { origin: ORIGIN });
    expect(ok.status).toBe(200);
    expect(ok.headers['access-control-allow-origin']).toBe(ORIGIN);
    const missing = await chatTo(app, { model: 'genai/nope', messages: [] }, { origin: ORIGIN });
    expect(missing.status).toBe(404);
    expect(missing.headers['access-control-allow-origin']).toBe(ORIGIN);
  });
});

describe('refusals name the model and never reach a backend', () => {
  test.each([
    ['an unknown deployment', 'genai/nope', 404, 'model_not_found', OpenAI.NotFoundError],
    ['an unknown bare name', 'nope', 404, 'model_not_found', OpenAI.NotFoundError],
    ['a deployment that is not an LLM', 'genai/fraud', 404, 'model_not_found', OpenAI.NotFoundError],
    ['a project the key does not grant', 'secret/gpt', 403, 'model_forbidden', OpenAI.PermissionDeniedError],
    [
      'a project the key does not grant, deployment unknown',
      'secret/nope',
      403,
      'model_forbidden',
      OpenAI.PermissionDeniedError,
    ],
    // Answered exactly like an unknown name: no answer tells which other projects have a deployment of that name.
    ['a bare name only an ungranted project has', 'gpt', 404, 'model_not_found', OpenAI.NotFoundError],
  ] as const)('%s (%s) → %i', async (_what, model, status, code, errorClass) => {
    const r = await chatTo(app, { model, messages: [{ role: 'user', content: 'x' }] });
    expect(r.status).toBe(status);
    const e = r.json().error;
    expect(e.code).toBe(code);
    expect(e.type).toBe(status === 404 ? 'not_found_error' : 'permission_error');
    expect(e.message).toContain(`"${model}"`);
    const sdkErr = await sdk(app)
      .chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }] })
      .catch((x: unknown) => x);
    expect(sdkErr).toBeInstanceOf(errorClass);
    expect((sdkErr as Error).message).toContain(`"${model}"`);
    expect(seen()).toBe(0);
  });

  test.each([
    ['no model', { messages: [] }, /provide a "model"/],
    ['an empty model', { model: '', messages: [] }, /provide a "model"/],
    ['a model that is not a string', { model: 42, messages: [] }, /"model" must be a string/],
    ['a JSON array', [{ model: 'genai/llama' }], /JSON object/],
    ['a body that is not JSON', '{"model": "genai/llama",', /not valid JSON/],
    ['no body at all', '', /provide a "model"/],
  ])('%s → 400', async (_what, body, message) => {
    const r = await chatTo(app, typeof body === 'string' ? body : JSON.stringify(body));
    expect(r.status).toBe(400);
    expect(r.json().error.type).toBe('invalid_request_error');
    expect(r.json().error.message).toMatch(message);
    expect(seen()).toBe(0);
  });

  test("a bare name two of the key's projects have is 400 naming both", async () => {
    const r = await chatTo(both, { model: 'llama', messages: [] });
    expect(r.status).toBe(400);
    const m: string = r.json().error.message;
    expect(m).toContain('"genai/llama"');
    expect(m).toContain('"research_lab/llama"');
    expect(seen()).toBe(0);
  });

  test('a wrong key is 401 before the body is looked at', async () => {
    const bad = `${app.slice(0, 17)}${'x'.repeat(app.length - 17)}`;
    const err = await sdk(bad)
      .chat.completions.create({ model: 'genai/llama', messages: [{ role: 'user', content: 'x' }] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.AuthenticationError);
    expect(seen()).toBe(0);
  });

  test('a body over the limit is 413, whatever its model', async () => {
    const r = await chatTo(app, { model: 'genai/llama', messages: [{ role: 'user', content: 'x'.repeat(70_000) }] });
    expect(r.status).toBe(413);
    const chunked = await send(`${gw.url}/openai/v1/chat/completions`, {
      headers: { authorization: `Bearer ${app}`, 'content-type': 'application/json', 'transfer-encoding': 'chunked' },
      body: JSON.stringify({ model: 'genai/llama', messages: [{ role: 'user', content: 'x'.repeat(70_000) }] }),
    });
    expect(chunked.status).toBe(413);
    expect(seen()).toBe(0);
  });

  test('an upload other than a form (audio/wav) names no model: 400 pointing at the deployment URL', async () => {
    const r = await send(`${gw.url}/openai/v1/audio/transcriptions`, {
      headers: { authorization: `Bearer ${app}`, 'content-type': 'audio/wav' },
      body: 'RIFF\0\0\0\0WAVE',
    });
    expect(r.status).toBe(400);
    expect(r.json().error.message).toMatch(/deployment's own URL/);
    expect(seen()).toBe(0);
  });

  test('POST on /models is 405', async () => {
    const r = await send(`${gw.url}/openai/v1/models`, {
      method: 'POST',
      headers: { authorization: `Bearer ${app}` },
      body: {},
    });
    expect(r.status).toBe(405);
    expect(r.headers.allow).toBe('GET, HEAD');
  });
});

// A keep-alive connection must survive the gateway's own answers on the base URL (body read, not left in the pipe).
test('a refused request with a body does not poison the next request on the same connection', async () => {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const post = (body: string) =>
    new Promise<{ status: number; text: string }>((resolve, reject) => {
      const req = http.request(
        `${gw.url}/openai/v1/chat/completions`,
        {
          method: 'POST',
          agent,
          headers: {
            authorization: `Bearer ${app}`,
            'content-type': 'application/json',
            'content-length': Buffer.byteLength(body),
          },
        },
        (res) => {
          let text = '';
          res.on('data', (c: Buffer) => (text += c));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
        },
      );
      req.on('error', reject);
      req.end(body);
    });
  expect((await post(JSON.stringify({ model: 'genai/nope', messages: [] }))).status).toBe(404);
  expect(
    (await post(JSON.stringify({ model: 'genai/mistral', messages: [{ role: 'user', content: 'after' }] }))).status,
  ).toBe(200);
  agent.destroy();
});

describe('websockets (the realtime API) name the model in the query', () => {
  const open = (url: string) => {
    const ws = new WebSocket(url, { headers: { authorization: `Bearer ${app}` } });
    return new Promise<{ ws: WebSocket; status: number }>((resolve, reject) => {
      ws.once('open', () => resolve({ ws, status: 101 }));
      ws.once('unexpected-response', (_req, res) => resolve({ ws, status: res.statusCode ?? 0 }));
      ws.once('error', reject);
    });
  };

  test('?model=<project>/<deployment> reaches the deployment, with the model rewritten', async () => {
    const { ws, status } = await open(`ws://127.0.0.1:${gw.port}/openai/v1/realtime?model=genai%2Frt&x=1`);
    try {
      expect(status).toBe(101);
      const echo = new Promise<string>((resolve) => ws.once('message', (d) => resolve(String(d))));
      ws.send('hello realtime');
      expect(await echo).toBe('hello realtime');
    } finally {
      ws.close();
    }
    const up = realtime.upgrades.at(-1)!;
    expect(up.url).toBe('/v1/realtime?model=gpt-realtime&x=1');
    expect(up.headers['x-servegate-deployment']).toBe('rt');
  });

  test('an unknown or missing model is refused before any upgrade', async () => {
    const before = realtime.upgrades.length;
    for (const [query, want] of [
      ['?model=genai%2Fnope', 404],
      ['?model=secret%2Fgpt', 403],
      ['', 400],
    ] as const) {
      const { ws, status } = await open(`ws://127.0.0.1:${gw.port}/openai/v1/realtime${query}`);
      ws.terminate();
      expect(status).toBe(want);
    }
    expect(realtime.upgrades.length).toBe(before);
  });
});
