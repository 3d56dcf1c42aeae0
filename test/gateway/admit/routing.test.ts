// Path and legacy host routing through a running gateway (SPEC §3), checked at real loopback backends.
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import {
  startOpenAIBackend,
  startV1Backend,
  type OpenAIBackend,
  type RecordingBackend,
} from '../../support/backends.js';
import { send, startGateway, type Gateway } from '../../support/harness.js';

let v1: RecordingBackend;
let secretBackend: RecordingBackend;
let llm: OpenAIBackend;
let gw: Gateway;
let key: string;
const auth = () => ({ authorization: `ApiKey ${key}` });

beforeAll(async () => {
  v1 = await startV1Backend();
  secretBackend = await startV1Backend();
  llm = await startOpenAIBackend();
  gw = await startGateway({
    config: { publicUrl: 'https://models.example.com', serverlessDomain: 'serving.example.com' },
    deployments: [
      { namespace: 'fraud-detection', name: 'fraud', project: 'fraud_detection', modelServer: 'sklearn', url: v1.url },
      { namespace: 'demo', name: 'iris', modelServer: 'sklearn', url: v1.url },
      { namespace: 'demo', name: 'pymodel', modelServer: 'python', modelName: 'pym', url: v1.url },
      { namespace: 'demo', name: 'tf', modelServer: 'tensorflow', modelName: 'flowers', url: v1.url },
      { namespace: 'demo', name: 'chat', modelServer: 'llm', url: llm.url },
      { namespace: 'demo', name: 'prefixed', modelServer: 'sklearn', url: `${v1.url}/serving/base` },
      { namespace: 'other', name: 'secret', modelServer: 'sklearn', url: secretBackend.url },
    ],
    keys: [{ name: 'apikey-routing', projects: 'fraud_detection,demo' }],
  });
  key = gw.keys['apikey-routing'];
});

afterAll(async () => {
  await gw?.close();
  await v1?.close();
  await secretBackend?.close();
  await llm?.close();
});

describe('predictive deployments', () => {
  test.each([
    ['python model server', 'pymodel', 'pym'],
    ['sklearn', 'iris', 'iris'],
    ['tensorflow', 'tf', 'flowers'],
  ])('predict on a %s deployment reaches its model server with the prefix stripped', async (_kind, dep, model) => {
    const before = v1.requests.length;
    const body = { instances: [[5.1, 3.5, 1.4, 0.2]] };
    const r = await send(`${gw.url}/v1/demo/${dep}/v1/models/${model}:predict`, { headers: auth(), body });
    expect(r.status).toBe(200);
    expect(r.json()).toMatchObject({ backend: 'v1', model, verb: 'predict', received: body });
    expect(v1.requests.length).toBe(before + 1);
    const rec = v1.last();
    expect(rec.method).toBe('POST');
    expect(rec.url).toBe(`/v1/models/${model}:predict`);
    expect(JSON.parse(rec.body.toString())).toEqual(body);
  });

  test('predict accepts "inputs" as well as "instances"', async () => {
    const r = await send(`${gw.url}/v1/demo/iris/v1/models/iris:predict`, {
      headers: auth(),
      body: { inputs: [[1, 2, 3, 4]] },
    });
    expect(r.status).toBe(200);
    expect(r.json().received).toEqual({ inputs: [[1, 2, 3, 4]] });
  });

  test.each([
    ['classify', { examples: [{ x: 1 }] }],
    ['regress', { examples: [{ x: 1 }] }],
    ['classify', { instances: [[1]] }],
    ['regress', { inputs: [[1]] }],
  ])('a tensorflow deployment also answers :%s (body %j)', async (verb, body) => {
    const r = await send(`${gw.url}/v1/demo/tf/v1/models/flowers:${verb}`, { headers: auth(), body });
    expect(r.status).toBe(200);
    expect(r.json()).toMatchObject({ verb, received: body });
    expect(v1.last().url).toBe(`/v1/models/flowers:${verb}`);
  });

  test.each([
    ['sklearn', 'iris', 'iris', 'classify'],
    ['sklearn', 'iris', 'iris', 'regress'],
    ['python model server', 'pymodel', 'pym', 'classify'],
  ])('%s does not offer :%s: 404 naming the verbs it offers, backend never called', async (_k, dep, model, verb) => {
    const before = v1.requests.length;
    const r = await send(`${gw.url}/v1/demo/${dep}/v1/models/${model}:${verb}`, {
      headers: auth(),
      body: { instances: [[1]] },
    });
    expect(r.status).toBe(404);
    const err = r.json().error;
    expect(typeof err).toBe('string');
    expect(err).toMatch(/predict/);
    expect(v1.requests.length).toBe(before);
  });

  test('an unknown verb on tensorflow is 404 naming predict, classify and regress', async () => {
    const before = v1.requests.length;
    const r = await send(`${gw.url}/v1/demo/tf/v1/models/flowers:explain`, {
      headers: auth(),
      body: { instances: [[1]] },
    });
    expect(r.status).toBe(404);
    const err: string = r.json().error;
    for (const v of ['predict', 'classify', 'regress']) expect(err).toContain(v);
    expect(v1.requests.length).toBe(before);
  });

  test.each([
    ['not JSON at all', 'instances=1'],
    ['truncated JSON', '{"instances": [[1, 2]'],
    ['empty body', ''],
  ])('a predict body that is %s is 400 before forwarding', async (_what, body) => {
    const before = v1.requests.length;
    const r = await send(`${gw.url}/v1/demo/iris/v1/models/iris:predict`, {
      headers: { ...auth(), 'content-type': 'application/json' },
      body,
    });
    expect(r.status).toBe(400);
    expect(typeof r.json().error).toBe('string');
    expect(v1.requests.length).toBe(before);
  });

  test.each([
    [
      'an object without instances or inputs',
      { data: [[1]] },
      'a :predict body needs "instances" (a list) or "inputs"',
    ],
    ['a JSON array', [[1, 2]], 'request body must be a JSON object with "instances" or "inputs"'],
    ['a JSON string', 'instances', 'request body must be a JSON object with "instances" or "inputs"'],
  ])('a predict body that is %s is 400', async (_what, body, error) => {
    const before = v1.requests.length;
    const r = await send(`${gw.url}/v1/demo/iris/v1/models/iris:predict`, {
      headers: { ...auth(), 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    expect(r.status).toBe(400);
    expect(r.json()).toEqual({ error });
    expect(v1.requests.length).toBe(before);
  });

  test('a :predict GET is refused with 405 (Allow: POST) without reaching the backend', async () => {
    const before = v1.requests.length;
    const r = await send(`${gw.url}/v1/demo/iris/v1/models/iris:predict`, { headers: auth() });
    expect(r.status).toBe(405);
    expect(r.headers.allow).toBe('POST');
    expect(r.json()).toEqual({ error: 'GET is not allowed on :predict; use POST' });
    expect(v1.requests.length).toBe(before);
  });

  test('many concurrent requests each get their own answer', async () => {
    const deps = [
      ['iris', 'iris'],
      ['pymodel', 'pym'],
      ['tf', 'flowers'],
    ];
    const replies = await Promise.all(
      Array.from({ length: 30 }, (_, i) => {
        const [dep, model] = deps[i % 3];
        return send(`${gw.url}/v1/demo/${dep}/v1/models/${model}:predict?i=${i}`, {
          headers: auth(),
          body: { instances: [[i]] },
        }).then((r) => ({ i, model, r }));
      }),
    );
    for (const { i, model, r } of replies) {
      expect(r.status).toBe(200);
      expect(r.json()).toMatchObject({
        model,
        path: `/v1/models/${model}:predict?i=${i}`,
        received: { instances: [[i]] },
      });
    }
  });

  test('the query string is forwarded unchanged', async () => {
    const r = await send(`${gw.url}/v1/demo/iris/v1/models/iris:predict?trace=1&x=a%20b&y=%2F`, {
      headers: auth(),
      body: { instances: [[1]] },
    });
    expect(r.status).toBe(200);
    expect(v1.last().url).toBe('/v1/models/iris:predict?trace=1&x=a%20b&y=%2F');
  });

  test('a backend.url with a path prefix keeps it in front of the forwarded path', async () => {
    const r = await send(`${gw.url}/v1/demo/prefixed/v1/models/prefixed:predict?a=1`, {
      headers: auth(),
      body: { instances: [[1]] },
    });
    expect(r.status).toBe(200);
    expect(v1.last().url).toBe('/serving/base/v1/models/prefixed:predict?a=1');
  });

  test.each(['fraud_detection', 'fraud-detection'])(
    'project written as %s routes to the same deployment',
    async (project) => {
      const r = await send(`${gw.url}/v1/${project}/fraud/v1/models/fraud:predict`, {
        headers: auth(),
        body: { instances: [[0.3]] },
      });
      expect(r.status).toBe(200);
      expect(v1.last().url).toBe('/v1/models/fraud:predict');
    },
  );

  test('an unknown deployment in a granted project is 404', async () => {
    const before = v1.requests.length + llm.requests.length;
    const r = await send(`${gw.url}/v1/demo/nope/v1/models/nope:predict`, {
      headers: auth(),
      body: { instances: [[1]] },
    });
    expect(r.status).toBe(404);
    expect(r.json()).toHaveProperty('error');
    expect(v1.requests.length + llm.requests.length).toBe(before);
  });

  test.each(['/', '/v1', '/v1/demo', '/v2/demo/iris/v1/models/iris:predict'])(
    'a path that names no deployment (%s) is 404, not forwarded',
    async (path) => {
      const before = v1.requests.length + llm.requests.length;
      const r = await send(`${gw.url}${path}`, { headers: auth(), body: { instances: [[1]] } });
      expect(r.status).toBe(404);
      expect(v1.requests.length + llm.requests.length).toBe(before);
    },
  );
});

describe('conflicts', () => {
  let a: RecordingBackend;
  let b: RecordingBackend;
  let c: RecordingBackend;
  let d: RecordingBackend;
  let conflicted: Gateway;
  beforeAll(async () => {
    [a, b, c, d] = await Promise.all([startV1Backend(), startV1Backend(), startV1Backend(), startV1Backend()]);
    conflicted = await startGateway({
      deployments: [
        // Two projects that meet in one form ("team-a").
        { namespace: 'ns-one', name: 'model', project: 'team_a', modelServer: 'sklearn', url: a.url },
        { namespace: 'ns-two', name: 'model', project: 'team-a', modelServer: 'sklearn', url: b.url },
        // Two resources claiming the same project/deployment.
        { namespace: 'ns-three', name: 'dup', project: 'shared', modelServer: 'sklearn', url: c.url },
        { namespace: 'ns-four', name: 'dup', project: 'shared', modelServer: 'sklearn', url: d.url },
      ],
      keys: [{ name: 'apikey-conflicts', projects: '*' }],
    });
  });
  afterAll(async () => {
    await conflicted?.close();
    await Promise.all([a, b, c, d].map((x) => x?.close()));
  });
  const hit = (path: string) =>
    send(`${conflicted.url}${path}`, {
      headers: { authorization: `ApiKey ${conflicted.keys['apikey-conflicts']}` },
      body: { instances: [[1]] },
    });

  test('two projects meeting in one form never split traffic between two backends', async () => {
    for (const p of ['team_a', 'team-a', 'team_a', 'team-a'])
      expect((await hit(`/v1/${p}/model/v1/models/model:predict`)).status).toBe(200);
    const counts = [a.requests.length, b.requests.length];
    expect(counts.sort()).toEqual([0, 4]);
  });

  test('two resources claiming one project/deployment: exactly one serves it', async () => {
    for (let i = 0; i < 3; i++) expect((await hit('/v1/shared/dup/v1/models/dup:predict')).status).toBe(200);
    const counts = [c.requests.length, d.requests.length];
    expect(counts.sort()).toEqual([0, 3]);
  });
});

describe('LLM deployments', () => {
  const base = () => `${gw.url}/v1/demo/chat`;

  test('POST /v1/chat/completions is forwarded and answered in the OpenAI format', async () => {
    const body = { model: 'tiny-llm', messages: [{ role: 'user', content: 'hello' }] };
    const r = await send(`${base()}/v1/chat/completions`, { headers: auth(), body });
    expect(r.status).toBe(200);
    expect(r.json()).toMatchObject({ object: 'chat.completion', choices: [{ message: { content: 'echo: hello' } }] });
    expect(llm.last().url).toBe('/v1/chat/completions');
    expect(JSON.parse(llm.last().body.toString())).toEqual(body);
  });

  test('POST /v1/completions is forwarded', async () => {
    const r = await send(`${base()}/v1/completions`, { headers: auth(), body: { model: 'tiny-llm', prompt: 'once' } });
    expect(r.status).toBe(200);
    expect(r.json()).toMatchObject({ object: 'text_completion', choices: [{ text: 'echo: once' }] });
    expect(llm.last().url).toBe('/v1/completions');
  });

  test('GET /v1/models is forwarded', async () => {
    const r = await send(`${base()}/v1/models`, { headers: auth() });
    expect(r.status).toBe(200);
    expect(r.json()).toMatchObject({ object: 'list', data: [{ id: 'tiny-llm' }] });
    expect(llm.last().method).toBe('GET');
    expect(llm.last().url).toBe('/v1/models');
  });

  test('POST /v1/embeddings is forwarded', async () => {
    const r = await send(`${base()}/v1/embeddings`, { headers: auth(), body: { model: 'tiny-llm', input: 'abc' } });
    expect(r.status).toBe(200);
    expect(r.json().data[0].embedding).toEqual([0.25, -0.5, 0.125]);
    expect(llm.last().url).toBe('/v1/embeddings');
  });

  test('invalid JSON on an LLM route is 400 as an OpenAI error object, before forwarding', async () => {
    const before = llm.requests.length;
    const r = await send(`${base()}/v1/chat/completions`, {
      headers: { ...auth(), 'content-type': 'application/json' },
      body: '{"model": "tiny-llm", "messages": [',
    });
    expect(r.status).toBe(400);
    const err = r.json().error;
    expect(typeof err.message).toBe('string');
    expect(typeof err.type).toBe('string');
    expect(err).toHaveProperty('code');
    expect(llm.requests.length).toBe(before);
  });

  test('a path outside /v1/ of an LLM deployment is 404 and not forwarded', async () => {
    const before = llm.requests.length;
    const r = await send(`${base()}/metrics`, { headers: auth() });
    expect(r.status).toBe(404);
    expect(llm.requests.length).toBe(before);
  });
});

describe('legacy host routing', () => {
  test.each([
    ['lower case, no port', 'fraud.fraud-detection.serving.example.com'],
    ['with a port', 'fraud.fraud-detection.serving.example.com:8080'],
    ['mixed case', 'Fraud.FRAUD-Detection.Serving.Example.COM'],
    ['mixed case with port', 'FRAUD.fraud-detection.SERVING.example.com:31380'],
  ])('Host <deployment>.<project>.<domain> (%s) routes with the path as given', async (_what, host) => {
    const r = await send(`${gw.url}/v1/models/fraud:predict?src=host`, {
      headers: { ...auth(), host },
      body: { instances: [[1, 2]] },
    });
    expect(r.status).toBe(200);
    expect(r.json()).toMatchObject({ backend: 'v1', model: 'fraud', verb: 'predict' });
    expect(v1.last().url).toBe('/v1/models/fraud:predict?src=host');
  });

  test('host routing reaches a project without an underscore too', async () => {
    const r = await send(`${gw.url}/v1/models/flowers:classify`, {
      headers: { ...auth(), host: 'tf.demo.serving.example.com' },
      body: { instances: [[1]] },
    });
    expect(r.status).toBe(200);
    expect(v1.last().url).toBe('/v1/models/flowers:classify');
  });

  test('host routing to an LLM deployment serves the OpenAI routes', async () => {
    const r = await send(`${gw.url}/v1/chat/completions`, {
      headers: { ...auth(), host: 'chat.demo.serving.example.com' },
      body: { model: 'tiny-llm', messages: [{ role: 'user', content: 'via host' }] },
    });
    expect(r.status).toBe(200);
    expect(r.json().choices[0].message.content).toBe('echo: via host');
    expect(llm.last().url).toBe('/v1/chat/completions');
  });

  test('host routing still needs a key', async () => {
    const before = v1.requests.length;
    const r = await send(`${gw.url}/v1/models/fraud:predict`, {
      headers: { host: 'fraud.fraud-detection.serving.example.com' },
      body: { instances: [[1]] },
    });
    expect(r.status).toBe(401);
    expect(v1.requests.length).toBe(before);
  });

  test('host routing checks the verb too', async () => {
    const before = v1.requests.length;
    const r = await send(`${gw.url}/v1/models/fraud:classify`, {
      headers: { ...auth(), host: 'fraud.fraud-detection.serving.example.com' },
      body: { instances: [[1]] },
    });
    expect(r.status).toBe(404);
    expect(v1.requests.length).toBe(before);
  });

  test('a legacy Host naming a deployment the key does not grant is 403, whatever the path says', async () => {
    const before = v1.requests.length;
    const r = await send(`${gw.url}/v1/demo/iris/v1/models/iris:predict`, {
      headers: { ...auth(), host: 'secret.other.serving.example.com' },
      body: { instances: [[1]] },
    });
    expect(r.status).toBe(403);
    expect(secretBackend.requests.length).toBe(0);
    expect(v1.requests.length).toBe(before);
  });

  test('a Host outside the serverless domain leaves path routing alone', async () => {
    const r = await send(`${gw.url}/v1/demo/iris/v1/models/iris:predict`, {
      headers: { ...auth(), host: 'models.example.com' },
      body: { instances: [[1]] },
    });
    expect(r.status).toBe(200);
    expect(v1.last().url).toBe('/v1/models/iris:predict');
  });

  test('an unknown hostname under the serverless domain is 404, not routed anywhere', async () => {
    const before = v1.requests.length;
    const r = await send(`${gw.url}/v1/models/fraud:predict`, {
      headers: { ...auth(), host: 'nope.fraud-detection.serving.example.com' },
      body: { instances: [[1]] },
    });
    // No fallback to path routing (which would read "models" as a project): the legacy host names no deployment.
    expect(r.status).toBe(404);
    expect(r.json().error).toMatch(/^no deployment is served at host "nope\.fraud-detection\.serving\.example\.com"/);
    expect(v1.requests.length).toBe(before);
    expect(secretBackend.requests.length).toBe(0);
  });
});
