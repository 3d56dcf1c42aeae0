// Tokens are charged whatever the client writes: a stream flag spelled `1` or "true" (vLLM's request models coerce
// it), a per-deployment stream that never asks for usage, a client that hangs up before the usage event, an
// Accept-Encoding that would have the backend compress its answer. And `model` cannot be steered past the checks:
// case variants and repeats are refused, a deployment's own URL cannot name another deployment's model on a shared
// backend, and a bare name only an ungranted project has is answered as unknown and counts as a failed attempt.
import {
  createServer,
  request as httpRequest,
  type ClientRequest,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo } from 'node:net';
import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import { send, startGateway, type Gateway } from '../../support/harness.js';
import { metricValue } from '../../support/metrics.js';
import { waitFor } from '../../support/wait.js';
import { SCRAPER_USER_AGENT } from '../../../src/gateway/forward/endpoint-stats.js';

/** A vLLM-like backend: pydantic-style flags, usage only when asked, gzip when the client accepts it. */
interface Seen {
  path: string;
  headers: IncomingMessage['headers'];
  body: Record<string, unknown>;
}
const seen: Seen[] = [];
/** Streams: content events per answer, and the pause after each (a client can hang up in between). */
let events = 5;
let pauseMs = 0;
/** Content events the backend wrote in its latest stream (before it saw the gateway hang up, for a cut one). */
let written = 0;
const USAGE = { prompt_tokens: 11, completion_tokens: 5, total_tokens: 16 };

const flag = (v: unknown): boolean =>
  v === true || v === 1 || (typeof v === 'string' && ['1', 'true', 'yes', 'on', 't', 'y'].includes(v.toLowerCase()));

function backend(): Promise<Server> {
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    if (req.headers['user-agent'] === SCRAPER_USER_AGENT) return void res.writeHead(404).end(); // a scrape (SPEC §12)
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = JSON.parse(Buffer.concat(chunks).toString() || '{}') as Record<string, unknown>;
      seen.push({ path: req.url ?? '', headers: req.headers, body });
      const gzip = /\bgzip\b/.test(String(req.headers['accept-encoding'] ?? ''));
      if (!flag(body.stream)) {
        const text = JSON.stringify({ id: 'x', object: 'chat.completion', choices: [], usage: USAGE });
        const out = gzip ? gzipSync(text) : Buffer.from(text);
        res.writeHead(200, {
          'content-type': 'application/json',
          'content-length': out.length,
          ...(gzip ? { 'content-encoding': 'gzip' } : {}),
        });
        res.end(out);
        return;
      }
      const so = body.stream_options as Record<string, unknown> | undefined;
      const withUsage = so !== undefined && so !== null && flag(so.include_usage);
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      let i = 0;
      written = 0;
      const next = (): void => {
        if (res.destroyed) return;
        if (i < events) {
          const c = { id: 'x', object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content: `t${i}` } }] };
          res.write(`data: ${JSON.stringify(c)}\n\n`);
          written = ++i;
          setTimeout(next, pauseMs);
          return;
        }
        if (withUsage) res.write(`data: ${JSON.stringify({ id: 'x', choices: [], usage: USAGE })}\n\n`);
        res.end('data: [DONE]\n\n');
      };
      next();
    });
  });
  return new Promise((r) => server.listen(0, '127.0.0.1', () => r(server)));
}

let be: Server;
let gw: Gateway;
let url: string;

beforeAll(async () => {
  be = await backend();
  url = `http://127.0.0.1:${(be.address() as AddressInfo).port}`;
  gw = await startGateway({
    config: { auth: { failureLimit: { maxFailures: 2, windowSeconds: 60 } } },
    deployments: [
      { namespace: 'demo', name: 'chat', modelServer: 'llm', modelName: 'llama-a', url },
      // Another project's deployment on the same backend (one server, two models).
      { namespace: 'other', name: 'secret', modelServer: 'llm', modelName: 'llama-b', url },
    ],
    keys: [
      { name: 'k-flag', projects: 'demo' },
      { name: 'k-direct', projects: 'demo', tpm: 30 },
      { name: 'k-cut', projects: 'demo' },
      { name: 'k-gzip', projects: 'demo' },
      { name: 'k-model', projects: 'demo' },
      { name: 'k-probe', projects: 'demo' },
    ],
  });
});

afterAll(async () => {
  await gw?.close();
  await new Promise((r) => be?.close(r));
});

const auth = (k: string) => ({ authorization: `Bearer ${gw.keys[k]}` });
const metrics = async () => (await send(`${gw.adminUrl}/metrics`)).text;
const keyTokens = async (key: string, type: 'prompt' | 'completion') =>
  metricValue(await metrics(), 'servegate_llm_key_tokens_total', { key, type }) ?? 0;
const messages = [{ role: 'user', content: 'x' }];

describe('the stream flag as the servers read it (/openai/v1)', () => {
  test.each([
    ['1', 1],
    ['"true"', 'true'],
    ['"Yes"', 'Yes'],
  ])('"stream": %s is a stream: usage asked for, charged, and taken out of the answer', async (_s, value) => {
    const before = await keyTokens('k-flag', 'prompt');
    const r = await send(`${gw.url}/openai/v1/chat/completions`, {
      headers: auth('k-flag'),
      body: { model: 'demo/chat', messages, stream: value },
    });
    expect(r.status).toBe(200);
    expect(seen.at(-1)!.body).toMatchObject({
      model: 'llama-a',
      stream: true,
      stream_options: { include_usage: true },
    });
    expect(r.text).not.toContain('"usage"');
    expect(r.text.endsWith('data: [DONE]\n\n')).toBe(true);
    await waitFor(async () => (await keyTokens('k-flag', 'prompt')) === before + 11);
    expect(await keyTokens('k-flag', 'prompt')).toBe(before + 11);
  });
});

describe("a deployment's own URL: the body as sent, the tokens charged all the same", () => {
  test('a stream that never asks for usage is charged an estimate, and the key tpm trips on it', async () => {
    events = 20;
    try {
      const body = { model: 'llama-a', messages: [{ role: 'user', content: 'y'.repeat(40) }], stream: true };
      const first = await send(`${gw.url}/v1/demo/chat/v1/chat/completions`, { headers: auth('k-direct'), body });
      expect(first.status).toBe(200);
      // Forwarded as sent: no usage was asked for, none came.
      expect(seen.at(-1)!.body).toEqual(body);
      expect(first.text).not.toContain('"usage"');
      // 69 bytes of messages → 18 prompt tokens; 20 text events → 20 completion tokens; 38 > tpm 30.
      await waitFor(async () => (await keyTokens('k-direct', 'completion')) === 20);
      expect(await keyTokens('k-direct', 'prompt')).toBe(18);
      // The access log is written in batches: wait for this request's line.
      const lineOf = () => gw.logs.map((l) => JSON.parse(l)).find((l) => l.msg === 'request' && l.key === 'k-direct');
      await waitFor(() => lineOf() !== undefined);
      expect(lineOf()).toMatchObject({ promptTokens: 18, completionTokens: 20, tokensEstimated: true });
      const second = await send(`${gw.url}/v1/demo/chat/v1/chat/completions`, { headers: auth('k-direct'), body });
      expect(second.status).toBe(429);
      expect(second.json().error.code).toBe('rate_limit_exceeded');
    } finally {
      events = 5;
    }
  });
});

describe('a client that hangs up before the usage event', () => {
  test('is charged the prompt guess and a token for each text event it was sent', async () => {
    events = 50;
    pauseMs = 20;
    try {
      const before = await keyTokens('k-cut', 'completion');
      const got = await new Promise<number>((resolve, reject) => {
        const body = JSON.stringify({ model: 'demo/chat', messages, stream: true });
        const req = post(`${gw.url}/openai/v1/chat/completions`, body, auth('k-cut'));
        let textEvents = 0;
        req.on('response', (res) => {
          res.on('data', (c: Buffer) => {
            textEvents += (c.toString().match(/"content":"t/g) ?? []).length;
            // Hang up after a few tokens, long before the stream's end.
            if (textEvents >= 3) {
              req.destroy();
              resolve(textEvents);
            }
          });
        });
        req.on('error', () => undefined);
        setTimeout(() => reject(new Error('no tokens')), 5000).unref();
      });
      await waitFor(async () => (await keyTokens('k-cut', 'completion')) > before);
      const charged = (await keyTokens('k-cut', 'completion')) - before;
      // At least what the client read; at most what the backend wrote before the gateway hung up on it (a token an
      // event: 2-byte texts weigh less at 4 bytes a token), which is well short of the whole stream.
      expect(charged).toBeGreaterThanOrEqual(got);
      expect(charged).toBeLessThanOrEqual(written);
      expect(written).toBeLessThan(50);
      expect(await keyTokens('k-cut', 'prompt')).toBeGreaterThan(0);
    } finally {
      events = 5;
      pauseMs = 0;
    }
  });
});

describe('Accept-Encoding: gzip', () => {
  test('the backend is asked for an uncompressed answer, so its usage is read', async () => {
    const before = await keyTokens('k-gzip', 'completion');
    const r = await send(`${gw.url}/v1/demo/chat/v1/chat/completions`, {
      headers: { ...auth('k-gzip'), 'accept-encoding': 'gzip, br' },
      body: { model: 'llama-a', messages },
    });
    expect(r.status).toBe(200);
    expect(seen.at(-1)!.headers['accept-encoding']).toBe('identity');
    expect(r.headers['content-encoding']).toBeUndefined();
    expect(r.json().usage).toEqual(USAGE);
    await waitFor(async () => (await keyTokens('k-gzip', 'completion')) === before + 5);
  });
});

describe('`model` cannot be smuggled', () => {
  test.each([
    ['/openai/v1/chat/completions', { model: 'demo/chat', MODEL: 'llama-b', messages }, 'MODEL'],
    ['/openai/v1/chat/completions', { model: 'demo/chat', Model: 'demo/chat', messages }, 'Model'],
    ['/v1/demo/chat/v1/chat/completions', { Model: 'llama-b', messages }, 'Model'],
    ['/v1/demo/chat/v1/chat/completions', { model: 'llama-a', messages, Stream: true }, 'Stream'],
  ])('%s with %j: 400 naming the member, never forwarded', async (path, body, member) => {
    const n = seen.length;
    const r = await send(`${gw.url}${path}`, { headers: auth('k-model'), body });
    expect(r.status).toBe(400);
    expect(r.json().error.message).toBe(
      `the request body has a member "${member}": write it "${member.toLowerCase()}" (in lower case), exactly once`,
    );
    expect(seen.length).toBe(n);
  });

  test.each([
    ['{"model":"llama-a","messages":[],"stream":false,"\u017ftream":true}', 'ſtream', 'stream'],
    [
      '{"model":"llama-a","messages":[],"stream":true,"stream_options":{"include_usage":true,"INCLUDE_USAGE":false}}',
      'stream_options.INCLUDE_USAGE',
      'include_usage',
    ],
  ])('a spelling Go folds to a member the gateway reads (%s) is refused', async (raw, member, want) => {
    const n = seen.length;
    const r = await send(`${gw.url}/v1/demo/chat/v1/chat/completions`, {
      headers: { ...auth('k-model'), 'content-type': 'application/json' },
      body: raw,
    });
    expect(r.status).toBe(400);
    expect(r.json().error.message).toBe(
      `the request body has a member "${member}": write it "${want}" (in lower case), exactly once`,
    );
    expect(seen.length).toBe(n);
  });

  test('a repeated "stream" is refused (servers differ on which one they keep)', async () => {
    const n = seen.length;
    const raw = '{"model":"llama-a","messages":[],"stream":false,"stream":true}';
    const r = await send(`${gw.url}/v1/demo/chat/v1/chat/completions`, {
      headers: { ...auth('k-model'), 'content-type': 'application/json' },
      body: raw,
    });
    expect(r.status).toBe(400);
    expect(r.json().error.message).toBe('the request body has more than one "stream" member; send exactly one');
    expect(seen.length).toBe(n);
  });

  test("a deployment's URL naming another deployment's model on the same backend: 403, never forwarded", async () => {
    const n = seen.length;
    const r = await send(`${gw.url}/v1/demo/chat/v1/chat/completions`, {
      headers: auth('k-model'),
      body: { model: 'llama-b', messages },
    });
    expect(r.status).toBe(403);
    expect(r.json().error).toMatchObject({
      code: 'model_forbidden',
      message: 'the model "llama-b" is served by another deployment; this URL serves "llama-a"',
    });
    expect(seen.length).toBe(n);
    // Any other name is forwarded as sent (the per-deployment URL does not rewrite bodies).
    const ok = await send(`${gw.url}/v1/demo/chat/v1/chat/completions`, {
      headers: auth('k-model'),
      body: { model: 'whatever', messages },
    });
    expect(ok.status).toBe(200);
    expect(seen.at(-1)!.body.model).toBe('whatever');
  });
});

describe('bare model names do not reveal other projects', () => {
  test('a name only an ungranted project has is 404 like an unknown one, and counts toward the failed-auth limit', async () => {
    const ask = (model: string) =>
      send(`${gw.url}/openai/v1/chat/completions`, { headers: auth('k-probe'), body: { model, messages } });
    const hidden = await ask('secret');
    const unknown = await ask('nothing-here');
    expect([hidden.status, unknown.status]).toEqual([404, 404]);
    expect(hidden.json().error.code).toBe(unknown.json().error.code);
    expect(hidden.json().error.message).toBe(
      'the model "secret" does not exist (GET /openai/v1/models lists the models this key may use)',
    );
    const retrieve = await send(`${gw.url}/openai/v1/models/secret`, { headers: auth('k-probe') });
    expect(retrieve.status).toBe(404);
    // Three hidden names from this address (maxFailures 2): the next failing request is throttled.
    await ask('secret');
    const throttled = await send(`${gw.url}/openai/v1/chat/completions`, {
      headers: { authorization: 'Bearer AAAAAAAAAAAAAAAA.bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb' },
      body: { model: 'demo/chat', messages },
    });
    expect(throttled.status).toBe(429);
  });
});

/** A POST with node:http, to hang up on it mid-answer. */
function post(target: string, body: string, headers: Record<string, string>): ClientRequest {
  const u = new URL(target);
  const req = httpRequest({
    host: u.hostname,
    port: u.port,
    path: u.pathname,
    method: 'POST',
    headers: { ...headers, 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)) },
  });
  req.end(body);
  return req;
}
