// servegate/client: URL helpers in the seed's formats, request helpers, and GatewayError from both error dialects,
// against a real loopback HTTP server.
import type OpenAI from 'openai';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import { Deployment, errorMessage, GatewayError, type DeploymentOptions } from '../../src/client/index.js';

const KEY = 'Rc0uebjeAbSzEyRH.abcdefghijklmnopqrstuvwxyz012345678';
const GW = 'https://models.example.com';

describe('URL helpers', () => {
  const base = `${GW}/v1/fraud_detection/fraud`;
  test.each<[string, Partial<DeploymentOptions>, string | null, string | null, string | null]>([
    ['sklearn', { modelServer: 'sklearn' }, `${base}/v1/models/fraud:predict`, null, null],
    ['python model server', { modelServer: 'python' }, `${base}/v1/models/fraud:predict`, null, null],
    ['tensorflow', { modelServer: 'tensorflow' }, `${base}/v1/models/fraud:predict`, null, null],
    [
      'sklearn with a model name',
      { modelServer: 'sklearn', modelName: 'fraud-v2' },
      `${base}/v1/models/fraud-v2:predict`,
      null,
      null,
    ],
    ['llm', { modelServer: 'llm' }, null, `${base}/v1`, null],
    ['python deployment', { type: 'python' }, null, null, base],
    [
      '"scikit-learn" (another spelling)',
      { modelServer: 'scikit-learn' as never },
      `${base}/v1/models/fraud:predict`,
      null,
      null,
    ],
    ['"TensorFlow" (any case)', { modelServer: 'TensorFlow' as never }, `${base}/v1/models/fraud:predict`, null, null],
  ])('%s: inference, OpenAI and endpoint URLs', (_, opts, inference, openai, endpoint) => {
    const d = new Deployment({ gatewayUrl: GW, project: 'fraud_detection', deployment: 'fraud', apiKey: KEY, ...opts });
    expect(d.getInferenceUrl()).toBe(inference);
    expect(d.getOpenaiUrl()).toBe(openai);
    expect(d.getEndpointUrl()).toBe(endpoint);
    expect(d.getBaseUrl()).toBe(base);
  });

  test.each(['https://models.example.com/', 'https://models.example.com//'])(
    'a trailing slash on the gateway URL %s is ignored',
    (gw) => {
      const d = new Deployment({ gatewayUrl: gw, project: 'p', deployment: 'd', type: 'python', apiKey: KEY });
      expect(d.getEndpointUrl()).toBe('https://models.example.com/v1/p/d');
    },
  );

  test('a gateway under a path prefix keeps it', () => {
    const d = new Deployment({
      gatewayUrl: 'http://10.0.0.1:8080/serving',
      project: 'p',
      deployment: 'd',
      modelServer: 'llm',
      apiKey: KEY,
    });
    expect(d.getOpenaiUrl()).toBe('http://10.0.0.1:8080/serving/v1/p/d/v1');
  });

  test.each<[string, Partial<DeploymentOptions>, RegExp]>([
    ['no model server', {}, /needs modelServer/],
    ['an unknown model server', { modelServer: 'pytorch' as never }, /needs modelServer/],
    ['a model server on a python deployment', { type: 'python', modelServer: 'sklearn' }, /only for type "model"/],
    ['a gateway URL that is not a URL', { modelServer: 'sklearn', gatewayUrl: 'models.example.com' }, /not a URL/],
    ['a gateway URL with a query', { modelServer: 'sklearn', gatewayUrl: 'https://x.example.com/?a=1' }, /query/],
    ['no key', { modelServer: 'sklearn', apiKey: '' }, /apiKey is required/],
    ['a project with a slash', { modelServer: 'sklearn', project: 'a/b' }, /project/],
  ])('%s is refused', (_, opts, msg) => {
    expect(() => new Deployment({ gatewayUrl: GW, project: 'p', deployment: 'd', apiKey: KEY, ...opts })).toThrow(msg);
  });

  test('fromResource reads the spec and takes the gateway URL from status.url', () => {
    const d = Deployment.fromResource(
      {
        metadata: { name: 'fraud', namespace: 'fraud-detection' },
        spec: { project: 'fraud_detection', type: 'model', modelServer: 'tensorflow', modelName: 'm1' },
        status: { url: 'https://gw.example.com/v1/fraud_detection/fraud' },
      },
      { apiKey: KEY },
    );
    expect(d.getInferenceUrl()).toBe('https://gw.example.com/v1/fraud_detection/fraud/v1/models/m1:predict');
    expect(d.getVerbUrl('regress')).toBe('https://gw.example.com/v1/fraud_detection/fraud/v1/models/m1:regress');
  });

  test('fromResource defaults the project to the namespace and needs a gateway URL without status', () => {
    const res = { metadata: { name: 'echo', namespace: 'demo' }, spec: { type: 'python' } };
    expect(() => Deployment.fromResource(res, { apiKey: KEY })).toThrow(/gatewayUrl/);
    expect(Deployment.fromResource(res, { apiKey: KEY, gatewayUrl: GW }).getEndpointUrl()).toBe(`${GW}/v1/demo/echo`);
  });

  test('JSON of a Deployment never carries the key', () => {
    const d = new Deployment({ gatewayUrl: GW, project: 'p', deployment: 'd', type: 'python', apiKey: KEY });
    expect(JSON.stringify(d)).not.toContain(KEY.split('.')[1]);
  });
});

describe('error bodies', () => {
  test.each([
    ['{"error":"project not granted"}', 'project not granted', undefined],
    ['{"error":{"message":"bad body","type":"invalid_request_error","code":"bad_json"}}', 'bad body', 'bad_json'],
    ['{"message":"from a python server"}', 'from a python server', undefined],
    ['{"detail":"Not Found"}', 'Not Found', undefined],
    ['plain words', 'plain words', undefined],
    ['', 'HTTP 503 Service Unavailable', undefined],
    ['<html>oops</html>', 'HTTP 503 Service Unavailable', undefined],
  ])('%s gives the message %s', (body, message, code) => {
    const e = errorMessage(503, body, 'Service Unavailable');
    expect(e.message).toBe(message);
    expect(e.code).toBe(code);
  });
});

describe('requests against a loopback server', () => {
  interface Seen {
    method: string;
    url: string;
    headers: IncomingMessage['headers'];
    body: string;
  }
  let server: Server;
  let gw: string;
  const seen: Seen[] = [];
  /** path → handler; unknown paths echo. */
  const replies: Record<string, (req: Seen, res: ServerResponse) => void> = {
    '/v1/p/skl/v1/models/skl:predict': (_req, res) => json(res, 200, { predictions: [1] }),
    '/v1/p/tf/v1/models/tf:classify': (_req, res) => json(res, 200, { result: [['a', 0.9]] }),
    '/v1/p/tf/v1/models/tf:regress': (_req, res) => json(res, 200, { result: [0.5] }),
    '/v1/p/denied/v1/models/denied:predict': (_req, res) =>
      json(res, 403, { error: 'key "ci" may not call project p' }, { 'x-request-id': 'rid-1' }),
    '/v1/p/chat/v1/chat/completions': (req, res) => {
      const body = JSON.parse(req.body);
      if (body.model === 'bad')
        return json(res, 400, {
          error: { message: 'model not found', type: 'invalid_request_error', code: 'model_not_found' },
        });
      json(res, 200, {
        id: 'c1',
        object: 'chat.completion',
        created: 1,
        model: body.model,
        choices: [{ index: 0, finish_reason: 'stop', message: { role: 'assistant', content: 'hi there' } }],
      });
    },
    '/v1/p/slow/v1/models/slow:predict': () => {
      /* never answers */
    },
  };

  function json(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) {
    res.writeHead(status, { 'content-type': 'application/json', ...headers });
    res.end(JSON.stringify(body));
  }

  beforeAll(async () => {
    server = createServer((req, res) => {
      let body = '';
      req.setEncoding('utf8');
      req.on('data', (c) => (body += c));
      req.on('end', () => {
        const s: Seen = { method: req.method!, url: req.url!, headers: req.headers, body };
        seen.push(s);
        const path = req.url!.split('?')[0];
        const h = replies[path];
        if (h) return h(s, res);
        json(res, path.startsWith('/v1/p/py/missing') ? 404 : 200, { method: s.method, url: s.url, body });
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    gw = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
  });

  const dep = (deployment: string, o: Partial<DeploymentOptions>) =>
    new Deployment({ gatewayUrl: gw, project: 'p', deployment, apiKey: KEY, ...o });
  const last = () => seen[seen.length - 1];

  test('predict POSTs JSON to the inference URL with authorization: ApiKey <key>', async () => {
    const out = await dep('skl', { modelServer: 'sklearn' }).predict({ instances: [[1, 2]] });
    expect(out).toEqual({ predictions: [1] });
    expect(last().method).toBe('POST');
    expect(last().url).toBe('/v1/p/skl/v1/models/skl:predict');
    expect(last().headers.authorization).toBe(`ApiKey ${KEY}`);
    expect(last().headers['content-type']).toBe('application/json');
    expect(JSON.parse(last().body)).toEqual({ instances: [[1, 2]] });
  });

  test('classify and regress reach a tensorflow model', async () => {
    const tf = dep('tf', { modelServer: 'tensorflow' });
    expect(await tf.classify({ examples: [{ x: 1 }] })).toEqual({ result: [['a', 0.9]] });
    expect(await tf.regress({ examples: [{ x: 1 }] })).toEqual({ result: [0.5] });
  });

  test.each(['classify', 'regress'] as const)(
    '%s on an sklearn model fails without sending a request',
    async (verb) => {
      const before = seen.length;
      await expect(dep('skl', { modelServer: 'sklearn' })[verb]({ instances: [] })).rejects.toThrow(
        /offers only :predict/,
      );
      expect(seen.length).toBe(before);
    },
  );

  test('predict on an LLM or python deployment fails without a request', async () => {
    const before = seen.length;
    await expect(dep('chat', { modelServer: 'llm' }).predict({})).rejects.toThrow(/not a predictive model/);
    await expect(dep('py', { type: 'python' }).predict({})).rejects.toThrow(/not a predictive model/);
    expect(seen.length).toBe(before);
  });

  test('a KServe-dialect error becomes a GatewayError with status, message and request id', async () => {
    const err = (await dep('denied', { modelServer: 'sklearn' })
      .predict({ instances: [] })
      .catch((e: unknown) => e)) as GatewayError;
    expect(err).toBeInstanceOf(GatewayError);
    expect(err.status).toBe(403);
    expect(err.message).toBe('key "ci" may not call project p');
    expect(err.requestId).toBe('rid-1');
  });

  test('an OpenAI-dialect error becomes a GatewayError with its message and code', async () => {
    const err = (await dep('chat', { modelServer: 'llm' })
      .chatCompletions({ model: 'bad', messages: [] })
      .catch((e: unknown) => e)) as GatewayError;
    expect(err).toBeInstanceOf(GatewayError);
    expect(err.status).toBe(400);
    expect(err.message).toBe('model not found');
    expect(err.code).toBe('model_not_found');
  });

  test('request() calls a path of a python deployment with any method and the key', async () => {
    const py = dep('py', { type: 'python' });
    const res = await py.request('/echo?x=1', { method: 'PUT', body: 'hello' });
    expect(await res.json()).toEqual({ method: 'PUT', url: '/v1/p/py/echo?x=1', body: 'hello' });
    expect(last().headers.authorization).toBe(`ApiKey ${KEY}`);
    expect(((await (await py.request('health')).json()) as { url: string }).url).toBe('/v1/p/py/health');
  });

  test('request() throws GatewayError on 404 unless throwOnError is false', async () => {
    const py = dep('py', { type: 'python' });
    await expect(py.request('/missing')).rejects.toMatchObject({ name: 'GatewayError', status: 404 });
    const res = await py.request('/missing', { throwOnError: false });
    expect(res.status).toBe(404);
  });

  test('request() refuses a full URL, so the key is never sent elsewhere', async () => {
    await expect(dep('py', { type: 'python' }).request('http://evil.example.com/x')).rejects.toThrow(/relative/);
  });

  test('openai() returns a client whose chat completions go to the OpenAI URL with the key as Bearer', async () => {
    const client = await dep('chat', { modelServer: 'llm' }).openai<OpenAI>({ maxRetries: 0 });
    const out = await client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'hello' }] });
    expect(out.choices[0].message.content).toBe('hi there');
    expect(last().url).toBe('/v1/p/chat/v1/chat/completions');
    expect(last().headers.authorization).toBe(`Bearer ${KEY}`);
  });

  test('openai() on a non-LLM deployment fails', async () => {
    await expect(dep('skl', { modelServer: 'sklearn' }).openai()).rejects.toThrow(/not an LLM deployment/);
  });

  test('timeoutMs aborts a request that gets no answer', async () => {
    const err = (await dep('slow', { modelServer: 'sklearn', timeoutMs: 200 })
      .predict({ instances: [] })
      .catch((e: unknown) => e)) as GatewayError;
    // fetch's own DOMException (not an instance of the test realm's Error under jest's vm modules)
    expect(err).toHaveProperty('name', expect.stringMatching(/^(TimeoutError|AbortError)$/));
  });
});

describe('packaging', () => {
  test('the client loads without the gateway, the Kubernetes client or openai: its only runtime import is routing/names', async () => {
    const { readFileSync } = await import('node:fs');
    const src = readFileSync(new URL('../../src/client/index.ts', import.meta.url), 'utf8');
    const runtimeImports = [...src.matchAll(/^import\s+(?!type\b)[^;]*?from\s+'([^']+)'/gm)].map((m) => m[1]);
    expect(runtimeImports).toEqual(['../routing/names.js']);
    const names = readFileSync(new URL('../../src/routing/names.ts', import.meta.url), 'utf8');
    expect([...names.matchAll(/^import\s+(?!type\b)[^;]*?from\s+'([^']+)'/gm)]).toEqual([]);
  });
});
