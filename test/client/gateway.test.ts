// The Deployment client against a real servegate (files source) and real loopback backends, with a key made by
// `servegate keys create --manifests` into the gateway's own folder: the whole path a user takes.
import type OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import { keysCommand, type CliIo } from '../../src/cli/keys.js';
import { Deployment, GatewayError } from '../../src/client/index.js';
import {
  startOpenAIBackend,
  startPythonBackend,
  startV1Backend,
  type OpenAIBackend,
  type RecordingBackend,
} from '../support/backends.js';
import { eventually, startGateway, type Gateway } from '../support/harness.js';

async function createKey(dir: string, name: string, projects: string): Promise<string> {
  let out = '';
  const io: CliIo = { stdout: (t) => void (out += t), stderr: () => {}, env: {}, now: () => Date.now() };
  const code = await keysCommand(['create', '--name', name, '--projects', projects, '--manifests', dir], io);
  if (code !== 0) throw new Error(`keys create exited ${code}`);
  return out.trim();
}

describe('Deployment client through the gateway', () => {
  let gw: Gateway;
  let v1: RecordingBackend;
  let llm: OpenAIBackend;
  let py: RecordingBackend;
  let key: string;
  let otherProjectKey: string;

  beforeAll(async () => {
    [v1, llm, py] = await Promise.all([startV1Backend(), startOpenAIBackend(), startPythonBackend()]);
    gw = await startGateway({
      deployments: [
        {
          name: 'fraud',
          namespace: 'fraud-detection',
          project: 'fraud_detection',
          modelServer: 'sklearn',
          url: v1.url,
        },
        { name: 'mnist', namespace: 'demo', modelServer: 'tensorflow', modelName: 'digits', url: v1.url },
        { name: 'chat', namespace: 'demo', modelServer: 'llm', url: llm.url },
        { name: 'echo', namespace: 'demo', type: 'python', url: py.url },
      ],
    });
    key = await createKey(gw.dir, 'client-test', 'fraud_detection,demo');
    otherProjectKey = await createKey(gw.dir, 'other-project', 'elsewhere');
    // The files source picks the new key files up without a restart.
    await eventually(async () => {
      const res = await fetch(`${gw.url}/v1/demo/echo/ping`, { headers: { authorization: `ApiKey ${key}` } });
      expect(res.status).toBe(200);
    }, 5000);
  });
  afterAll(async () => {
    await gw?.close();
    await Promise.all([v1?.close(), llm?.close(), py?.close()]);
  });

  const dep = (o: Partial<ConstructorParameters<typeof Deployment>[0]> & { project: string; deployment: string }) =>
    new Deployment({ gatewayUrl: gw.url, apiKey: key, ...o });

  test('predict reaches an sklearn model at the seed URL and returns its JSON', async () => {
    const d = dep({ project: 'fraud_detection', deployment: 'fraud', modelServer: 'sklearn' });
    expect(d.getInferenceUrl()).toBe(`${gw.url}/v1/fraud_detection/fraud/v1/models/fraud:predict`);
    const out = await d.predict<{ path: string; received: unknown }>({ instances: [[1, 2, 3]] });
    expect(out.path).toBe('/v1/models/fraud:predict');
    expect(out.received).toEqual({ instances: [[1, 2, 3]] });
    const seen = v1.requests.at(-1)!;
    expect(seen.headers['x-servegate-key']).toBe('client-test');
    expect(seen.headers.authorization).toBeUndefined();
  });

  test('the namespace form of the project works too', async () => {
    const d = dep({ project: 'fraud-detection', deployment: 'fraud', modelServer: 'sklearn' });
    expect(((await d.predict({ inputs: [[1]] })) as { verb: string }).verb).toBe('predict');
  });

  test('classify and regress reach a tensorflow model under its model name', async () => {
    const d = dep({ project: 'demo', deployment: 'mnist', modelServer: 'tensorflow', modelName: 'digits' });
    expect(((await d.classify({ examples: [{ x: 1 }] })) as { path: string }).path).toBe('/v1/models/digits:classify');
    expect(((await d.regress({ examples: [{ x: 1 }] })) as { path: string }).path).toBe('/v1/models/digits:regress');
  });

  test('the openai SDK from openai() chats with an LLM deployment', async () => {
    const client = await dep({ project: 'demo', deployment: 'chat', modelServer: 'llm' }).openai<OpenAI>({
      maxRetries: 0,
    });
    const out = await client.chat.completions.create({
      model: 'tiny-llm',
      messages: [{ role: 'user', content: 'hello' }],
    });
    expect(out.choices[0].message.content).toBe('echo: hello');
    const stream = await client.chat.completions.create({
      model: 'tiny-llm',
      messages: [{ role: 'user', content: 'hi' }],
      stream: true,
    });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
    expect(text).toBe('tok0 tok1 tok2 ');
  });

  test('request() calls any path of a python deployment', async () => {
    const d = dep({ project: 'demo', deployment: 'echo', type: 'python' });
    const res = await d.request('/predict?debug=1', { method: 'PATCH', body: 'abc' });
    const body = (await res.json()) as { method: string; path: string; bodyLength: number };
    expect(body).toMatchObject({ method: 'PATCH', path: '/predict?debug=1', bodyLength: 3 });
  });

  test.each([
    [
      'a wrong key',
      { apiKey: 'AAAAAAAAAAAAAAAA.wrongwrongwrongwrongwrongwrongwrongwrong' },
      'fraud_detection',
      'fraud',
      401,
    ],
    ['a key for another project', { apiKey: '' }, 'fraud_detection', 'fraud', 403],
    ['an unknown deployment', {} as { apiKey?: string }, 'demo', 'nope', 404],
  ])('%s gives a GatewayError with status %i and the gateway message', async (_, o, project, deployment, status) => {
    const apiKey = o.apiKey === '' ? otherProjectKey : (o.apiKey ?? key);
    const err = (await dep({ project, deployment, modelServer: 'sklearn', apiKey })
      .predict({ instances: [[1]] })
      .catch((e: unknown) => e)) as GatewayError;
    expect(err).toBeInstanceOf(GatewayError);
    expect(err.status).toBe(status);
    expect(err.message.length).toBeGreaterThan(3);
    expect(err.message).not.toMatch(/^HTTP \d/);
  });

  test('a body the gateway refuses gives a GatewayError with status 400 (KServe dialect)', async () => {
    const err = (await dep({ project: 'demo', deployment: 'mnist', modelServer: 'tensorflow', modelName: 'digits' })
      .predict({ nothing: true })
      .catch((e: unknown) => e)) as GatewayError;
    expect(err).toBeInstanceOf(GatewayError);
    expect(err.status).toBe(400);
    expect(err.body).toMatch(/^\{"error":"/);
  });

  test('an OpenAI-dialect gateway error gives its message', async () => {
    const err = (await dep({ project: 'demo', deployment: 'chat', modelServer: 'llm', apiKey: otherProjectKey })
      .chatCompletions({ model: 'x', messages: [] })
      .catch((e: unknown) => e)) as GatewayError;
    expect(err).toBeInstanceOf(GatewayError);
    expect(err.status).toBe(403);
    expect(JSON.parse(err.body).error.message).toBe(err.message);
  });
});
