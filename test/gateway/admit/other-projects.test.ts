// What a key learns about projects it is not granted (SPEC §9, amended 2026-11-25: no answer reveals another project's
// deployments), and the dialect of the answers given before a route is known (SPEC §6: every error of the gateway is
// in the dialect of the route). Raw requests on loopback sockets, the legacy Host form included.
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import { startPythonBackend, type RecordingBackend } from '../../support/backends.js';
import { rawHttp, rawRequest, startGateway, type Gateway, type RawResponse } from '../../support/harness.js';

let backend: RecordingBackend;
let gw: Gateway;
let key: string;

beforeAll(async () => {
  backend = await startPythonBackend();
  gw = await startGateway({
    deployments: [
      { namespace: 'demo', name: 'chat', modelServer: 'llm', url: backend.url },
      { namespace: 'other', name: 'secret', modelServer: 'llm', url: backend.url },
      { namespace: 'other', name: 'iris', modelServer: 'sklearn', url: backend.url },
    ],
    keys: [{ name: 'k', projects: 'demo' }],
    // Every refusal below counts as a failed authentication; the limit is kept out of the way here.
    config: {
      auth: { failureLimit: { maxFailures: 1000, windowSeconds: 60 } },
      cors: { allowedOrigins: ['https://good.example'] },
    },
  });
  key = gw.keys.k;
});

afterAll(async () => {
  await gw?.close();
  await backend?.close();
});

const ask = (method: string, path: string, host: string, extra: Array<[string, string]> = []): Promise<RawResponse> =>
  rawRequest(
    gw.port,
    rawHttp(
      method,
      path,
      [['Host', host], ['Authorization', `ApiKey ${key}`], ...extra],
      method === 'POST' ? '{}' : undefined,
    ),
  );
const local = (): string => `127.0.0.1:${gw.port}`;
const bodyOf = (r: RawResponse): unknown => JSON.parse(r.text);

describe('a project the key is not granted: the same answer whether the deployment exists or not', () => {
  test.each([
    ['an OpenAI path', 'POST', '/v1/chat/completions'],
    ['a predictive path', 'POST', '/v1/models/iris:predict'],
    ['a plain path', 'GET', '/health'],
  ])('legacy Host form, %s', async (_what, method, path) => {
    const before = backend.requests.length;
    const existing = await ask(method, path, 'secret.other.serving.local');
    const predictive = await ask(method, path, 'iris.other.serving.local');
    const missing = await ask(method, path, 'nope.other.serving.local');
    expect(existing.status).toBe(403);
    for (const r of [predictive, missing]) {
      expect(r.status).toBe(existing.status);
      expect(bodyOf(r)).toEqual(bodyOf(existing));
    }
    expect(existing.text).toContain('does not grant access to project \\"other\\"');
    expect(backend.requests.length).toBe(before);
  });

  test.each([
    ['an OpenAI path', 'POST', '/v1/chat/completions'],
    ['a predictive path', 'POST', '/v1/models/iris:predict'],
    ['a plain path', 'GET', '/health'],
  ])('path form, %s', async (_what, method, rest) => {
    const existing = await ask(method, `/v1/other/secret${rest}`, local());
    const predictive = await ask(method, `/v1/other/iris${rest}`, local());
    const missing = await ask(method, `/v1/other/nope${rest}`, local());
    expect(existing.status).toBe(403);
    for (const r of [predictive, missing]) {
      expect(r.status).toBe(existing.status);
      expect(bodyOf(r)).toEqual(bodyOf(existing));
    }
  });

  test('a legacy Host that names no deployment, with a path to a deployment of an ungranted project: the same 404 whether that deployment exists or not', async () => {
    const existing = await ask('POST', '/v1/other/secret/v1/chat/completions', 'nope.demo.serving.local');
    const missing = await ask('POST', '/v1/other/nope/v1/chat/completions', 'nope.demo.serving.local');
    expect(existing.status).toBe(404);
    expect(missing.status).toBe(404);
    expect(bodyOf(missing)).toEqual(bodyOf(existing));
    // A granted project's deployment is still found by its path behind such a Host: served by its backend.
    const before = backend.requests.length;
    const granted = await ask('POST', '/v1/demo/chat/v1/chat/completions', 'nope.demo.serving.local');
    expect(granted.status).toBe(200);
    expect(backend.requests.slice(before).map((q) => q.url)).toEqual(['/v1/chat/completions']);
  });

  test('the dialect follows the path: an OpenAI path gets an OpenAI error object, a predictive one KServe form', async () => {
    const openai = bodyOf(await ask('POST', '/v1/chat/completions', 'nope.other.serving.local')) as {
      error: { code: string; type: string };
    };
    expect(openai.error).toMatchObject({ code: 'project_forbidden', type: 'permission_error' });
    const kserve = bodyOf(await ask('POST', '/v1/models/iris:predict', 'secret.other.serving.local'));
    expect(kserve).toEqual({ error: expect.stringContaining('does not grant access to project "other"') });
  });

  test('a granted project keeps the route dialect and a 404 for a deployment it does not have', async () => {
    const missing = await ask('GET', '/v1/chat/completions', 'nope.demo.serving.local');
    expect(missing.status).toBe(404);
    const health = await ask('GET', '/v1/demo/nope/health', local());
    expect(health.status).toBe(404);
    expect(bodyOf(health)).toEqual({ error: expect.stringContaining('not found') });
  });
});

describe('answers given before the route is known are in the dialect the target reads as', () => {
  const openaiObject = (r: RawResponse): void => {
    const b = bodyOf(r) as { error: unknown };
    expect(typeof b.error).toBe('object');
    expect(b.error).toMatchObject({ message: expect.any(String), type: expect.any(String), code: expect.any(String) });
  };
  const kserveForm = (r: RawResponse): void => expect(bodyOf(r)).toEqual({ error: expect.any(String) });

  test('TRACE: 405, an OpenAI object on an LLM path and on /openai/v1, KServe form elsewhere', async () => {
    const llm = await ask('TRACE', '/v1/demo/chat/v1/chat/completions', local());
    expect(llm.status).toBe(405);
    openaiObject(llm);
    const base = await ask('TRACE', '/openai/v1/models', local());
    expect(base.status).toBe(405);
    openaiObject(base);
    const predictive = await ask('TRACE', '/v1/other/iris/v1/models/iris:predict', local());
    expect(predictive.status).toBe(405);
    kserveForm(predictive);
  });

  test('Expect other than 100-continue: 417 as an OpenAI object on an LLM path', async () => {
    const r = await ask('POST', '/v1/demo/chat/v1/chat/completions', local(), [['Expect', 'foo']]);
    expect(r.status).toBe(417);
    openaiObject(r);
  });

  test.each([
    '/v1/demo/chat/v1//chat/completions',
    '/v1/demo/chat/v1/%2e%2e/v1/chat/completions',
    '/openai/v1//models',
  ])('a path that does not parse (%s): 400 as an OpenAI object', async (path) => {
    const r = await ask('POST', path, local());
    expect(r.status).toBe(400);
    openaiObject(r);
  });

  test("refused by Node's parser (Content-Length with Transfer-Encoding, a header over the size limit): an OpenAI object on an LLM path, KServe form elsewhere", async () => {
    const both = (path: string): Buffer =>
      Buffer.from(
        `POST ${path} HTTP/1.1\r\nHost: ${local()}\r\nAuthorization: ApiKey ${key}\r\n` +
          'Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n',
      );
    const smuggled = await rawRequest(gw.port, both('/v1/demo/chat/v1/chat/completions'));
    expect(smuggled.status).toBe(400);
    openaiObject(smuggled);
    const elsewhere = await rawRequest(gw.port, both('/v1/other/iris/v1/models/iris:predict'));
    expect(elsewhere.status).toBe(400);
    kserveForm(elsewhere);
    const huge = await ask('POST', '/openai/v1/chat/completions', local(), [['x-big', 'a'.repeat(80 * 1024)]]);
    expect(huge.status).toBe(431);
    openaiObject(huge);
  });

  test('too many header lines on an LLM path: 431 as an OpenAI object', async () => {
    const many = Array.from({ length: 150 }, (_, i) => [`x-h${i}`, 'v'] as [string, string]);
    const r = await ask('POST', '/v1/demo/chat/v1/chat/completions', local(), many);
    expect(r.status).toBe(431);
    openaiObject(r);
  });
});

describe("answers given before the route is known carry the CORS headers of an allowed origin (SPEC §5: the gateway's own errors included)", () => {
  const origin: [string, string] = ['Origin', 'https://good.example'];
  test.each([
    ['too many header lines (431)', 431, Array.from({ length: 150 }, (_, i) => [`x-h${i}`, 'v'] as [string, string])],
    ["one header over Node's size limit (431)", 431, [['x-big', 'a'.repeat(20 * 1024)]] as Array<[string, string]>],
    ['an Expect other than 100-continue (417)', 417, [['Expect', 'foo']] as Array<[string, string]>],
  ])('%s', async (_what, status, extra) => {
    const r = await ask('POST', '/v1/demo/chat/v1/chat/completions', local(), [origin, ...extra]);
    expect(r.status).toBe(status);
    expect(r.headers['access-control-allow-origin']).toBe('https://good.example');
    expect(r.headers.vary).toContain('Origin');
    const other = await ask('POST', '/v1/demo/chat/v1/chat/completions', local(), [
      ['Origin', 'https://evil.example'],
      ...extra,
    ]);
    expect(other.status).toBe(status);
    expect(other.headers['access-control-allow-origin']).toBeUndefined();
  });

  test('TRACE (405)', async () => {
    const r = await ask('TRACE', '/v1/demo/chat/v1/chat/completions', local(), [origin]);
    expect(r.status).toBe(405);
    expect(r.headers['access-control-allow-origin']).toBe('https://good.example');
  });
});
