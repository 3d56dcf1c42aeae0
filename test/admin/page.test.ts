// The deployments page's snippets: ready to run with the key as a placeholder, the right URL and body per kind.
import { describe, expect, test } from '@jest/globals';
import { deploymentsPage, snippets } from '../../src/admin/page.js';
import type { DeploymentStatus, Route } from '../../src/routing/types.js';

const base = {
  namespace: 'demo',
  resourceKind: 'ServingDeployment' as const,
  verbs: [],
  backend: { kind: 'url' as const, url: 'http://x' },
  timeoutMs: 1000,
  balancing: { policy: 'round-robin' as const, metricsPath: '/metrics', metricsPort: 0 },
};
const llm: Route = {
  ...base,
  id: 'demo/chat',
  name: 'chat',
  project: 'demo',
  deployment: 'chat',
  kind: 'llm',
  modelServer: 'llm',
};
const iris: Route = {
  ...base,
  id: 'demo/iris',
  name: 'iris',
  project: 'demo',
  deployment: 'iris',
  kind: 'predictive',
  modelServer: 'sklearn',
  modelName: 'iris',
  verbs: ['predict'],
};
const status = (r: Route, extra: Partial<DeploymentStatus>): DeploymentStatus => ({
  id: r.id,
  namespace: r.namespace,
  name: r.name,
  resourceKind: 'ServingDeployment',
  ready: true,
  reason: 'Routed',
  message: '',
  ...extra,
});

describe('snippets', () => {
  test("LLM: streamed chat completion with curl, servegate's Python client and the OpenAI SDK on the openai base URL", () => {
    const s = snippets(
      llm,
      status(llm, { url: 'https://m.example.com/v1/demo/chat', openaiUrl: 'https://m.example.com/v1/demo/chat/v1' }),
    )!;
    expect(s.curl).toBe(
      `curl -sN 'https://m.example.com/v1/demo/chat/v1/chat/completions' \\\n  -H "authorization: ApiKey $SERVEGATE_KEY" \\\n  -H 'content-type: application/json' \\\n` +
        `  -d '{"model":"chat","messages":[{"role":"user","content":"Hello!"}],"stream":true}'`,
    );
    expect(s.openai).toContain(
      'OpenAI(base_url="https://m.example.com/v1/demo/chat/v1", api_key=os.environ["SERVEGATE_KEY"])',
    );
    expect(s.python).toBe(
      [
        "# pip install ./clients/python   (servegate's Python client, from a servegate checkout)",
        'import os',
        'from servegate import Deployment',
        '',
        'd = Deployment(',
        '    gateway_url="https://m.example.com",',
        '    project="demo",',
        '    deployment="chat",',
        '    model_server="llm",',
        '    api_key=os.environ["SERVEGATE_KEY"],',
        ')',
        'r = d.chat_completions(model="chat", messages=[{"role": "user", "content": "Hello!"}])',
        'print(r["choices"][0]["message"]["content"])',
      ].join('\n'),
    );
  });

  test('predictive: a V1 predict call; no OpenAI snippet', () => {
    const s = snippets(
      iris,
      status(iris, {
        url: 'https://m.example.com/serving/v1/demo/iris',
        inferenceUrl: 'https://m.example.com/serving/v1/demo/iris/v1/models/iris:predict',
      }),
    )!;
    expect(s.curl).toMatch(
      /^curl -s 'https:\/\/m\.example\.com\/serving\/v1\/demo\/iris\/v1\/models\/iris:predict' \\\n/,
    );
    expect(s.curl).toContain(`-d '{"instances": [[1.0, 2.0, 3.0, 4.0]]}'`);
    expect(s.openai).toBeUndefined();
    // The gateway URL keeps publicUrl's path prefix; the model name is explicit.
    expect(s.python).toContain(
      '    gateway_url="https://m.example.com/serving",\n    project="demo",\n    deployment="iris",\n' +
        '    model_server="sklearn",\n    model_name="iris",\n',
    );
    expect(s.python.split('\n').at(-1)).toBe('print(d.predict(instances=[[1.0, 2.0, 3.0, 4.0]]))');
  });

  test('predictive V2: infer() with one input tensor', () => {
    const v2: Route = { ...iris, protocol: 'v2' };
    const s = snippets(
      v2,
      status(v2, {
        url: 'https://m.example.com/v1/demo/iris',
        inferenceUrl: 'https://m.example.com/v1/demo/iris/v2/models/iris/infer',
      }),
    )!;
    expect(s.python).toContain('    protocol="v2",\n');
    expect(s.python.split('\n').at(-1)).toMatch(/^print\(d\.infer\(\[\{"name": "input-0"/);
  });

  test('python deployment: any path with request(), the status and text printed', () => {
    const echo: Route = { ...iris, id: 'demo/echo', name: 'echo', deployment: 'echo', kind: 'python', verbs: [] };
    delete echo.modelServer;
    delete echo.modelName;
    const s = snippets(
      echo,
      status(echo, { url: 'https://m.example.com/v1/demo/echo', endpointUrl: 'https://m.example.com/v1/demo/echo' }),
    )!;
    expect(s.python).toContain(
      '    deployment="echo",\n    type="python",\n    api_key=os.environ["SERVEGATE_KEY"],\n)',
    );
    expect(s.python).not.toContain('model_');
    expect(s.python.split('\n').slice(-2)).toEqual([
      'r = d.request("GET", "/", raise_on_error=False)',
      'print(r.status, r.text)',
    ]);
  });

  test('a quote in a URL cannot break out of the shell word', () => {
    const s = snippets(iris, status(iris, { inferenceUrl: "https://m/it's" }))!;
    expect(s.curl).toContain(`'https://m/it'\\''s'`);
  });
});

describe('deploymentsPage', () => {
  test('names, reasons and messages are escaped; not-ready deployments get no snippet', () => {
    const bad = status(iris, { ready: false, reason: 'InvalidSpec', message: '<script>alert(1)</script>' });
    const html = deploymentsPage({
      statuses: [bad],
      routes: new Map([[iris.id, iris]]),
      synced: true,
      stalenessMs: 0,
      problems: [],
    });
    expect(html).toContain('&lt;script&gt;alert(1)&lt;/script&gt;');
    expect(html).not.toContain('<script>alert(1)');
    expect(html).not.toContain('<details>');
    expect(html).toMatch(/0 of 1 deployments served/);
    expect(html).not.toMatch(/<(link|img)\b|src="http|href="http/); // no external assets
    expect(html).not.toContain('key-problems');
  });

  test('key Secrets that are not used are listed with why, escaped', () => {
    const html = deploymentsPage({
      statuses: [],
      routes: new Map(),
      synced: true,
      stalenessMs: 0,
      problems: [],
      keyProblems: [
        { id: 'servegate/apikey-bad', message: 'prefix must be 16 characters [A-Za-z0-9]' },
        { id: 'demo/<b>', message: 'ignored: it is in namespace "demo"' },
      ],
    });
    expect(html).toContain('<b>2 key Secrets not used:</b>');
    expect(html).toContain('<li><code>servegate/apikey-bad</code>: prefix must be 16 characters [A-Za-z0-9]</li>');
    expect(html).toContain('<li><code>demo/&lt;b&gt;</code>: ignored: it is in namespace &quot;demo&quot;</li>');
  });
});
