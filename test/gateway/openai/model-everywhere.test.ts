// Every way an OpenAI request names its model is checked alike (found by a hostile review): a JSON body's `model`,
// the query's `model=` (the realtime websocket's, and any request's), and a multipart form's `model` field, on the
// per-deployment URL and on /openai/v1. Another project's model on the same backend is 403 and never forwarded.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { WebSocket, WebSocketServer } from 'ws';
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import { formModel } from '../../../src/gateway/openai/form-model.js';
import { send, startGateway, type Gateway } from '../../support/harness.js';
import { SCRAPER_USER_AGENT } from '../../../src/gateway/forward/endpoint-stats.js';

/** What the vLLM-like backend served: the model each request named, by the way it named it. */
interface Seen {
  path: string;
  model: string | null;
}
const seen: Seen[] = [];
const SERVED = new Set(['llama-a', 'llama-b']);

/** Reads the model as a vLLM server does: the form (parsed by undici's Request, not the gateway's reader), the JSON body. */
async function modelOf(req: IncomingMessage, body: Buffer): Promise<string | null> {
  const ct = String(req.headers['content-type'] ?? '');
  if (ct.startsWith('multipart/form-data')) {
    const form = await new Request('http://x/', { method: 'POST', headers: { 'content-type': ct }, body }).formData();
    return form.get('model') as string | null;
  }
  if (body.length) return (JSON.parse(body.toString()) as { model?: string }).model ?? null;
  return new URL(req.url ?? '/', 'http://x').searchParams.get('model');
}

function backend(): Promise<Server> {
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    if (req.headers['user-agent'] === SCRAPER_USER_AGENT) return void res.writeHead(404).end(); // a scrape (SPEC §12)
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      // A body the backend cannot read is its 400 (a malformed form reaching it is what the tests look for).
      modelOf(req, Buffer.concat(chunks)).then(
        (model) => {
          const query = new URL(req.url ?? '/', 'http://x').searchParams.get('model');
          seen.push({ path: req.url ?? '', model });
          // A model the server does not serve, in the body or the query: vLLM's 404.
          const unknown = [model, query].find((m) => m !== null && !SERVED.has(m));
          const status = unknown !== undefined ? 404 : 200;
          const answer =
            status === 404
              ? { error: { message: `The model \`${unknown}\` does not exist.`, code: 'model_not_found' } }
              : { model, query };
          res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(answer));
        },
        () => {
          seen.push({ path: req.url ?? '', model: null });
          res.writeHead(400, { 'content-type': 'application/json' }).end('{"error":{"code":"unreadable"}}');
        },
      );
    });
  });
  const wss = new WebSocketServer({ noServer: true });
  server.on('upgrade', (req: IncomingMessage, socket, head) => {
    const model = new URL(req.url ?? '/', 'http://x').searchParams.get('model');
    seen.push({ path: req.url ?? '', model });
    if (model !== null && SERVED.has(model))
      return wss.handleUpgrade(req, socket, head, (ws) => wss.emit('connection', ws));
    const body = JSON.stringify({
      error: { message: `The model \`${model}\` does not exist.`, code: 'model_not_found' },
    });
    socket.end(
      `HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`,
    );
  });
  wss.on('connection', (ws) => ws.send('hello'));
  return new Promise((r) => server.listen(0, '127.0.0.1', () => r(server)));
}

let be: Server;
let gw: Gateway;

beforeAll(async () => {
  be = await backend();
  const url = `http://127.0.0.1:${(be.address() as AddressInfo).port}`;
  gw = await startGateway({
    deployments: [
      { namespace: 'demo', name: 'chat', modelServer: 'llm', modelName: 'llama-a', url },
      { namespace: 'other', name: 'secret', modelServer: 'llm', modelName: 'llama-b', url },
    ],
    keys: [{ name: 'k-demo', projects: 'demo' }],
  });
});

afterAll(async () => {
  await gw?.close();
  await new Promise((r) => be?.close(r));
});

const auth = () => ({ authorization: `Bearer ${gw.keys['k-demo']}` });
const BOUNDARY = '----servegate7MA4YWxkTrZu0gW';
/** A transcription upload as the OpenAI SDKs send it (the file first, as the Node SDK does). */
const form = (model: string) =>
  Buffer.from(
    `--${BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\nContent-Type: audio/wav\r\n\r\n` +
      `RIFF\0\0\0\0WAVE\r\n--${BOUNDARY}\r\nContent-Disposition: form-data; name="model"\r\n\r\n${model}\r\n--${BOUNDARY}--\r\n`,
    'latin1',
  );
const formType = `multipart/form-data; boundary=${BOUNDARY}`;

type Way = 'json' | 'query' | 'form' | 'urlencoded' | 'websocket';

/** One request naming `model` the given way; the status the client saw and the error code, if any. */
async function ask(base: string, way: Way, model: string): Promise<{ status: number; code?: string }> {
  const path = `${base}/${way === 'form' ? 'audio/transcriptions' : way === 'websocket' ? 'realtime' : 'chat/completions'}`;
  if (way === 'websocket') {
    const ws = new WebSocket(`${gw.url.replace('http', 'ws')}${path}?model=${encodeURIComponent(model)}`, {
      headers: auth(),
    });
    return new Promise((resolve, reject) => {
      ws.once('open', () => {
        ws.close();
        resolve({ status: 101 });
      });
      ws.once('unexpected-response', (_q, res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString();
          let code: string | undefined;
          try {
            code = (JSON.parse(text) as { error?: { code?: string } }).error?.code;
          } catch {
            code = undefined;
          }
          resolve({ status: res.statusCode ?? 0, code });
        });
      });
      ws.once('error', (e) => (ws.readyState === WebSocket.CLOSED ? undefined : reject(e)));
    });
  }
  // On the per-deployment URL the body names the served model; on /openai/v1, "<project>/<deployment>".
  const own = base.startsWith('/openai') ? 'demo/chat' : 'llama-a';
  const r =
    way === 'json'
      ? await send(`${gw.url}${path}`, { headers: auth(), body: { model, messages: [] } })
      : way === 'query'
        ? await send(`${gw.url}${path}?model=${encodeURIComponent(model)}`, {
            headers: auth(),
            body: { model: own, messages: [] },
          })
        : way === 'form'
          ? await send(`${gw.url}${path}`, { headers: { ...auth(), 'content-type': formType }, body: form(model) })
          : await send(`${gw.url}${path}`, {
              headers: { ...auth(), 'content-type': 'application/x-www-form-urlencoded' },
              body: `model=${encodeURIComponent(model)}&messages=`,
            });
  return {
    status: r.status,
    code: r.status === 200 ? undefined : (r.json() as { error: { code: string } }).error.code,
  };
}

const WAYS: Way[] = ['json', 'query', 'form', 'websocket'];
// base URL, how the key's own model, another project's and an unknown one are named there.
const BASES = [
  ['/v1/demo/chat/v1', 'llama-a', 'llama-b', 'llama-x'],
  ['/openai/v1', 'demo/chat', 'other/secret', 'demo/nothing'],
] as const;
const CASES = BASES.flatMap(([base, own, theirs, unknown]) =>
  WAYS.flatMap((way) => [
    [base, way, 'own', own, way === 'websocket' ? 101 : 200, undefined],
    [base, way, "another project's", theirs, 403, 'model_forbidden'],
    [base, way, 'an unknown', unknown, 404, 'model_not_found'],
  ]),
) as Array<[string, Way, string, string, number, string | undefined]>;

describe('the model named in a JSON body, the query, a form field or a websocket query', () => {
  test.each(CASES)('%s, %s: %s model (%s) gets %d %s', async (base, way, _what, model, status, code) => {
    const n = seen.length;
    const r = await ask(base, way, model);
    expect(r).toEqual({ status, code });
    // A refusal by the gateway is never forwarded; an unknown model on a deployment's URL is the backend's 404.
    if (status === 403 || (status === 404 && base.startsWith('/openai'))) expect(seen.length).toBe(n);
    else expect(seen.length).toBe(n + 1);
  });

  test.each(BASES.map(([base, own]) => [base, own]))(
    '%s: a form upload reaches the backend with the served model name',
    async (base, own) => {
      const r = await send(`${gw.url}${base}/audio/transcriptions`, {
        headers: { ...auth(), 'content-type': formType },
        body: form(own),
      });
      expect(r.status).toBe(200);
      expect(r.json()).toEqual({ model: 'llama-a', query: null });
    },
  );

  test('/openai/v1: the query is forwarded with the served name; a query naming another deployment than the body is 400', async () => {
    const ok = await send(`${gw.url}/openai/v1/chat/completions?model=demo%2Fchat`, {
      headers: auth(),
      body: { model: 'demo/chat', messages: [] },
    });
    expect(ok.json()).toEqual({ model: 'llama-a', query: 'llama-a' });
    const n = seen.length;
    const two = await send(`${gw.url}/openai/v1/chat/completions?model=demo/chat&model=other/secret`, {
      headers: auth(),
      body: { model: 'demo/chat', messages: [] },
    });
    expect(two.status).toBe(403);
    expect(seen.length).toBe(n);
  });

  test.each([['/v1/demo/chat/v1'], ['/openai/v1']])(
    '%s: a form-urlencoded body is not accepted (400 invalid_json), so it names nothing',
    async (base) => {
      const n = seen.length;
      for (const model of ['llama-a', 'llama-b', 'demo/chat', 'other/secret']) {
        const r = await ask(base, 'urlencoded', model);
        expect(r).toEqual({ status: 400, code: 'invalid_json' });
      }
      expect(seen.length).toBe(n);
    },
  );

  test.each([
    ['no boundary', 'multipart/form-data', form('llama-a')],
    ['no closing delimiter', formType, form('llama-a').subarray(0, -10)],
    ['model twice', formType, Buffer.concat([form('llama-a').subarray(0, -4), Buffer.from('\r\n'), form('llama-b')])],
    [
      'a base64 model part',
      formType,
      Buffer.from(
        `--${BOUNDARY}\r\nContent-Disposition: form-data; name="model"\r\nContent-Transfer-Encoding: base64\r\n\r\nbGxhbWEtYg==\r\n--${BOUNDARY}--\r\n`,
      ),
    ],
    ['"MODEL"', formType, Buffer.from(form('llama-b').toString('latin1').replace('name="model"', 'name="MODEL"'))],
  ])('a malformed or ambiguous form (%s) is 400 in the OpenAI dialect, never forwarded', async (_why, ct, body) => {
    for (const base of ['/v1/demo/chat/v1', '/openai/v1']) {
      const n = seen.length;
      const r = await send(`${gw.url}${base}/audio/transcriptions`, {
        headers: { ...auth(), 'content-type': ct },
        body,
      });
      expect(r.status).toBe(400);
      expect(r.json().error).toMatchObject({ type: 'invalid_request_error', code: 'invalid_body' });
      expect(seen.length).toBe(n);
    }
  });
});

describe('formModel', () => {
  const at = (body: string, ct = formType) => {
    const m = formModel(Buffer.from(body, 'latin1'), ct);
    return m instanceof Error ? `400: ${m.message}` : m && m.value;
  };
  test.each([
    [
      'a preamble, an empty part head, a quoted boundary',
      `pre\r\n--B\r\n\r\nx\r\n--B\r\nContent-Disposition: form-data; name=model\r\n\r\nm1\r\n--B--`,
      'multipart/form-data; boundary="B"',
      'm1',
    ],
    [
      'no model field',
      `--B\r\nContent-Disposition: form-data; name="file"\r\n\r\n--B-\r\n--B--\r\n`,
      'multipart/form-data; boundary=B',
      undefined,
    ],
    [
      'an empty model',
      `--B\r\nContent-Disposition: form-data; name="model"\r\n\r\n\r\n--B--`,
      'multipart/form-data; boundary=B',
      '',
    ],
    [
      'an escaped quote in another name',
      `--B\r\nContent-Disposition: form-data; name="a\\"b"\r\n\r\nv\r\n--B\r\nContent-Disposition: form-data; name="model"\r\n\r\nm2\r\n--B--`,
      'multipart/form-data; BOUNDARY=B',
      'm2',
    ],
  ])('%s', (_what, body, ct, want) => {
    expect(at(body, ct)).toBe(want);
  });
  test.each([
    ['a folded header', `--B\r\nContent-Disposition: form-data;\r\n name="model"\r\n\r\nm\r\n--B--`],
    ['name*=', `--B\r\nContent-Disposition: form-data; name*=utf-8''model\r\n\r\nm\r\n--B--`],
    ['a delimiter run on', `--Bx\r\nContent-Disposition: form-data; name="model"\r\n\r\nm\r\n--B--`],
    [
      'a part head that never ends',
      `--B\r\nContent-Disposition: form-data; name="model"\r\n${'x: y\r\n'.repeat(2000)}`,
    ],
  ])('%s is refused', (_what, body) => {
    expect(at(body, 'multipart/form-data; boundary=B')).toMatch(/^400: /);
  });
});
