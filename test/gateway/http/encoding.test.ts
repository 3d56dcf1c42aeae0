// Request bodies with a Content-Encoding on routes whose body the gateway reads: checked decoded, forwarded as sent
// (byte for byte, with their Content-Encoding); a bomb stops at the body limit (413); a corrupt body is 400; an unknown
// coding 415; /openai/v1 forwards its rewritten body decoded. Routes that forward bodies unread pass any coding.
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import { brotliCompressSync, deflateRawSync, deflateSync, gzipSync } from 'node:zlib';
import {
  sha256,
  startOpenAIBackend,
  startPythonBackend,
  startV1Backend,
  type OpenAIBackend,
  type RecordingBackend,
} from '../../support/backends.js';
import { send, startGateway, type Gateway } from '../../support/harness.js';

let v1: RecordingBackend;
let llm: OpenAIBackend;
let py: RecordingBackend;
let gw: Gateway;
let key: string;
const LIMIT = 64 * 1024;

beforeAll(async () => {
  [v1, llm, py] = await Promise.all([startV1Backend(), startOpenAIBackend(), startPythonBackend()]);
  gw = await startGateway({
    config: { limits: { maxRequestBodyBytes: LIMIT } },
    deployments: [
      { namespace: 'demo', name: 'iris', modelServer: 'sklearn', url: v1.url },
      { namespace: 'demo', name: 'chat', modelServer: 'llm', modelName: 'served-name', url: llm.url },
      { namespace: 'demo', name: 'echo', type: 'python', url: py.url },
    ],
    keys: [{ name: 'apikey-enc', projects: 'demo' }],
  });
  key = gw.keys['apikey-enc'];
});

afterAll(async () => {
  await gw?.close();
  await Promise.all([v1, llm, py].map((b) => b?.close()));
});

const PREDICT = '/v1/demo/iris/v1/models/iris:predict';
const post = (path: string, body: Buffer, encoding?: string) =>
  send(`${gw.url}${path}`, {
    method: 'POST',
    headers: {
      authorization: `ApiKey ${key}`,
      'content-type': 'application/json',
      ...(encoding ? { 'content-encoding': encoding } : {}),
    },
    body,
  });
const json = Buffer.from(JSON.stringify({ instances: [[6.8, 2.8, 4.8, 1.4]] }));

describe('a checked route (V1 predict)', () => {
  test.each([
    ['gzip', gzipSync(json)],
    ['x-gzip', gzipSync(json)],
    ['deflate', deflateSync(json)],
    ['deflate', deflateRawSync(json)],
    ['br', brotliCompressSync(json)],
    ['GZIP', gzipSync(json)],
  ])('%s: checked decoded, forwarded as sent with its Content-Encoding', async (coding, wire) => {
    const before = v1.requests.length;
    const r = await post(PREDICT, wire, coding);
    expect(r.status).toBe(200);
    expect(v1.requests.length).toBe(before + 1);
    const got = v1.requests.at(-1)!;
    expect(sha256(got.body)).toBe(sha256(wire));
    expect(got.headers['content-encoding']).toBe(coding);
    expect(Number(got.headers['content-length'])).toBe(wire.length);
  });

  test('a gzip body that is not JSON once decoded is the usual 400', async () => {
    const r = await post(PREDICT, gzipSync('not json'), 'gzip');
    expect(r.status).toBe(400);
    expect(r.json().error).toMatch(/not valid JSON/);
  });

  test('a decompression bomb stops at the body limit: 413, nothing forwarded', async () => {
    const before = v1.requests.length;
    const bomb = gzipSync(Buffer.alloc(50 * 1024 * 1024, 0x20)); // 50 MB of spaces in about 50 KB
    expect(bomb.length).toBeLessThan(LIMIT);
    const r = await post(PREDICT, bomb, 'gzip');
    expect(r.status).toBe(413);
    expect(r.json().error).toBe(`the gzip-decoded body is larger than the limit of ${LIMIT} bytes`);
    expect(v1.requests.length).toBe(before);
  });

  test.each([
    ['gzip', Buffer.from('definitely not gzip'), /^the body is not valid gzip: /, 400],
    ['br', Buffer.from([1, 2, 3, 4, 5]), /^the body is not valid br: /, 400],
    [
      'compress',
      Buffer.from('x'),
      /^content-encoding "compress" is not supported on this route: send the body as identity, gzip, deflate or br$/,
      415,
    ],
    ['gzip, gzip', gzipSync(gzipSync(json)), /^content-encoding "gzip, gzip" is not supported/, 415],
  ])('%s with a body it cannot decode: %p', async (coding, wire, message, status) => {
    const before = v1.requests.length;
    const r = await post(PREDICT, wire, coding);
    expect(r.status).toBe(status);
    expect(r.json().error).toMatch(message);
    expect(v1.requests.length).toBe(before);
  });
});

describe('/openai/v1 (the body is rewritten)', () => {
  test('a gzip body is decoded, its model rewritten, and forwarded decoded without the Content-Encoding', async () => {
    const body = Buffer.from(JSON.stringify({ model: 'demo/chat', messages: [{ role: 'user', content: 'hi' }] }));
    const r = await post('/openai/v1/chat/completions', gzipSync(body), 'gzip');
    expect(r.status).toBe(200);
    const got = llm.requests.at(-1)!;
    expect(got.headers['content-encoding']).toBeUndefined();
    expect(JSON.parse(got.body.toString()).model).toBe('served-name');
    expect(Number(got.headers['content-length'])).toBe(got.body.length);
  });

  test('an unknown coding is an OpenAI-style 415', async () => {
    const r = await post('/openai/v1/chat/completions', Buffer.from('x'), 'zstd');
    expect(r.status).toBe(415);
    expect(r.json().error).toMatchObject({ code: 'unsupported_media_type', type: 'invalid_request_error' });
  });

  test('two "model" members are refused: the gateway and the backend could read different ones', async () => {
    const before = llm.requests.length;
    const r = await post(
      '/openai/v1/chat/completions',
      Buffer.from('{"model":"demo/chat","messages":[],"model":"demo/chat"}'),
    );
    expect(r.status).toBe(400);
    expect(r.json().error.message).toBe('the request body has more than one "model" member; send exactly one');
    expect(llm.requests.length).toBe(before);
  });
});

test('a route that forwards bodies unread passes any coding untouched', async () => {
  const wire = Buffer.from('opaque bytes in a coding the gateway does not know');
  const r = await post('/v1/demo/echo/upload', wire, 'zstd');
  expect(r.status).toBe(200);
  const got = py.requests.at(-1)!;
  expect(sha256(got.body)).toBe(sha256(wire));
  expect(got.headers['content-encoding']).toBe('zstd');
});
