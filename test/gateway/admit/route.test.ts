// admit(): the whole pre-forwarding decision — path, route, 401 → 403 → 404 (SPEC §4), suffix, error dialect.
import { describe, expect, test } from '@jest/globals';
import { hostOnly } from '../../../src/gateway/admit/route.js';
import { admissionContext, admitNow, type RequestFacts } from '../../support/admission.js';
import type { RouteTable } from '../../../src/routing/types.js';
import { apiKey, sdep, buildOptions } from '../../support/fixtures.js';
import { build } from '../../support/units.js';

const keys = {
  fraud: apiKey('key-fraud', 'fraud_detection'),
  demo: apiKey('key-demo', 'demo'),
  all: apiKey('key-all', '*'),
  old: apiKey('key-old', '*', { expiresAt: '2025-01-01T00:00:00Z' }),
  team: apiKey('key-team', '*', { namespace: 'demo' }),
};
type KeyName = keyof typeof keys;

const { table } = build(
  {
    deployments: [
      sdep('fraud-detection/fraud').project('fraud_detection').sklearn().build(),
      sdep('demo/chat').llm().build(),
      sdep('demo/echo').python().build(),
      sdep('demo/flowers').tensorflow().build(),
    ],
    keySecrets: Object.values(keys).map((k) => k.secret),
  },
  // Some keys live in project namespaces (scoped keys): the opt-in of SPEC §11.
  { ...buildOptions, projectNamespaceKeys: true },
);
const NOW = Date.parse('2026-01-01T00:00:00Z');
const FRAUD_HOST = 'fraud.fraud-detection.serving.example.com';

function req(
  url: string,
  opts: { key?: KeyName; auth?: string; method?: string; host?: string; contentType?: string } = {},
): RequestFacts {
  return {
    method: opts.method ?? 'POST',
    url,
    host: opts.host ?? 'models.example.com',
    authorization: opts.auth ?? (opts.key ? `ApiKey ${keys[opts.key].key}` : undefined),
    contentType: opts.contentType ?? 'application/json',
    now: NOW,
  };
}
let authFailures: string[] = [];
const decide = (facts: RequestFacts, t: RouteTable) => {
  const { ctx, counted } = admissionContext(t);
  authFailures = counted.authFailures;
  const d = admitNow(facts, ctx);
  if (d.kind === 'by-model' || d.kind === 'preflight') throw new Error(`${facts.url} reads as ${d.kind}`);
  return d;
};
const run = (url: string, opts: Parameters<typeof req>[1] = {}) => decide(req(url, opts), table);
const statusOf = (d: ReturnType<typeof run>) => (d.ok ? 200 : d.error.status);

const PREDICT = '/v1/fraud_detection/fraud/v1/models/fraud:predict';
const CHAT = '/v1/demo/chat/v1/chat/completions';

describe('401 → 403 → 404, in that order (SPEC §4)', () => {
  test.each([
    ['no authorization header', PREDICT, {}, 401, 'missing_api_key'],
    ['no header on an unknown deployment', '/v1/nope/nope/x', {}, 401, 'missing_api_key'],
    ['no header on a path outside /v1', '/healthz', {}, 401, 'missing_api_key'],
    ['an empty header', PREDICT, { auth: '' }, 401, 'missing_api_key'],
    ['Basic credentials', PREDICT, { auth: 'Basic dXNlcjpwYXNz' }, 401, 'invalid_api_key'],
    ['a key that is not <prefix>.<secret>', PREDICT, { auth: 'ApiKey sk-not-a-servegate-key' }, 401, 'invalid_api_key'],
    ['an unknown key', PREDICT, { auth: `ApiKey ${apiKey('x', '*').key}` }, 401, 'invalid_api_key'],
    [
      'a known prefix with a wrong secret',
      PREDICT,
      { auth: `ApiKey ${keys.all.key.slice(0, 17)}${'z'.repeat(40)}` },
      401,
      'invalid_api_key',
    ],
    ['an expired key', PREDICT, { key: 'old' as KeyName }, 401, 'expired_api_key'],
    [
      'an expired key on an unknown deployment',
      '/v1/fraud_detection/nope/x',
      { key: 'old' as KeyName },
      401,
      'expired_api_key',
    ],
    ['a key for project A on project B', CHAT, { key: 'fraud' as KeyName }, 403, 'project_forbidden'],
    [
      'a key for project A on an unknown deployment of project B',
      '/v1/demo/nope/v1/chat/completions',
      { key: 'fraud' as KeyName },
      403,
      'project_forbidden',
    ],
    [
      'a key for project A on an unknown project',
      '/v1/other/x/y',
      { key: 'fraud' as KeyName },
      403,
      'project_forbidden',
    ],
    [
      'a granted project, unknown deployment',
      '/v1/fraud_detection/nope/v1/models/nope:predict',
      { key: 'fraud' as KeyName },
      404,
      'not_found',
    ],
    [
      'a granted project in namespace form, unknown deployment',
      '/v1/fraud-detection/nope/x',
      { key: 'fraud' as KeyName },
      404,
      'not_found',
    ],
    ['a "*" key, unknown project', '/v1/other/x/y', { key: 'all' as KeyName }, 404, 'not_found'],
    [
      'a valid key on a path outside /v1/<project>/<deployment>',
      '/healthz',
      { key: 'all' as KeyName },
      404,
      'not_found',
    ],
    ['a valid key on /v1/<project> only', '/v1/fraud_detection', { key: 'all' as KeyName }, 404, 'not_found'],
    [
      'a granted deployment, verb not offered',
      '/v1/fraud_detection/fraud/v1/models/fraud:classify',
      { key: 'fraud' as KeyName },
      404,
      'unknown_verb',
    ],
  ])('%s → %i %s', (_what, url, opts, status, code) => {
    const d = run(url, opts);
    expect(d.ok).toBe(false);
    if (d.ok) return;
    expect(d.error.status).toBe(status);
    expect(d.error.code).toBe(code);
  });

  test.each([
    ['missing', {}],
    ['malformed', { auth: 'Bearer' }],
    ['unknown', { auth: `ApiKey ${apiKey('x', '*').key}` }],
    ['expired', { key: 'old' as KeyName }],
  ])('every 401 (%s) carries WWW-Authenticate: ApiKey and names the failure for metrics', (failure, opts) => {
    const d = run(PREDICT, opts);
    expect(d.ok).toBe(false);
    if (d.ok) return;
    expect(d.error.headers['www-authenticate']).toBe('ApiKey');
    expect(authFailures).toEqual([failure]);
  });

  test('a 401 never echoes the key', () => {
    const sent = `${keys.all.key.slice(0, 17)}${'z'.repeat(40)}`;
    const d = run(PREDICT, { auth: `ApiKey ${sent}` });
    expect(d.ok).toBe(false);
    if (!d.ok) expect(d.error.message).not.toContain(sent.slice(17));
  });

  test('a 403 names the key and the project, not the secret', () => {
    const d = run(CHAT, { key: 'fraud' });
    expect(d.ok).toBe(false);
    if (d.ok) return;
    expect(d.error.message).toContain('key-fraud');
    expect(d.error.message).toContain('demo');
    expect(d.error.message).not.toContain(keys.fraud.key.slice(17));
  });
});

describe('accepted requests', () => {
  test.each([
    ['ApiKey, project as written', PREDICT, 'fraud', 'fraud_detection'],
    [
      'ApiKey, project in namespace form',
      '/v1/fraud-detection/fraud/v1/models/fraud:predict',
      'fraud',
      'fraud-detection',
    ],
    ['a "*" key', PREDICT, 'all', 'fraud_detection'],
    ['a "*" key on another project', CHAT, 'all', 'demo'],
  ] as const)('%s', (_what, url, key, project) => {
    const d = run(url, { key });
    expect(d.ok).toBe(true);
    if (!d.ok) return;
    expect(d.project).toBe(project);
    expect(d.key.name).toBe(keys[key].secret.metadata.name);
  });

  test('Bearer works like ApiKey (OpenAI SDKs)', () => {
    const d = run(CHAT, { auth: `Bearer ${keys.demo.key}` });
    expect(d.ok).toBe(true);
    if (d.ok) expect(d.route.id).toBe('demo/chat');
  });

  test.each([
    [PREDICT, '/v1/models/fraud:predict', 'predict'],
    [`${PREDICT}?verbose=1&x=%2F`, '/v1/models/fraud:predict?verbose=1&x=%2F', 'predict'],
    ['/v1/demo/flowers/v1/models/flowers:regress', '/v1/models/flowers:regress', 'regress'],
    [CHAT, '/v1/chat/completions', 'json'],
    ['/v1/demo/echo', '/', 'none'],
    ['/v1/demo/echo/', '/', 'none'],
    ['/v1/demo/echo/a/b/?q=1', '/a/b/?q=1', 'none'],
    ['http://models.example.com/v1/demo/echo/x', '/x', 'none'],
  ])('%s goes upstream as %s (body check %s)', (url, upstreamPath, check) => {
    const d = run(url, { key: 'all' });
    expect(d.ok).toBe(true);
    if (!d.ok) return;
    expect(d.upstreamPath).toBe(upstreamPath);
    expect(d.check).toBe(check);
  });

  test('a python deployment accepts any method', () => {
    for (const method of ['GET', 'PUT', 'DELETE', 'PATCH'])
      expect(run('/v1/demo/echo/items/1', { key: 'demo', method }).ok).toBe(true);
  });

  test('GET on :predict is refused with 405', () => {
    expect(statusOf(run(PREDICT, { key: 'fraud', method: 'GET' }))).toBe(405);
  });
});

describe('scoped keys (a key Secret in a project namespace)', () => {
  test.each([
    ['a deployment in its namespace', CHAT, 200],
    ['another deployment in its namespace', '/v1/demo/echo/x', 200],
    ['a deployment in another namespace', PREDICT, 403],
    ['an unknown deployment of its namespace project', '/v1/demo/nope/x', 404],
    ['an unknown deployment of another project', '/v1/other/nope/x', 403],
    ['an unknown deployment of a project in another namespace', '/v1/fraud_detection/nope/x', 403],
  ])('a "*" key from namespace demo on %s → %i', (_what, url, status) => {
    expect(statusOf(run(url, { key: 'team' }))).toBe(status);
  });
});

describe('paths that could reach another deployment are refused before routing', () => {
  test.each([
    '/v1/demo/chat/../../fraud_detection/fraud/v1/models/fraud:predict',
    '/v1/demo/chat/%2e%2e/%2e%2e/fraud_detection/fraud/v1/models/fraud:predict',
    '/v1/demo%2Fchat/v1/chat/completions',
    '/v1/demo/chat%2F..%2F..%2Ffraud_detection/fraud',
    '/v1/demo\\chat/v1/chat/completions',
    '/v1//demo/chat/v1/chat/completions',
    '/v1/demo/chat%00/v1/chat/completions',
    '/v1/demo/%63hat/..%5c..%5cx',
  ])('%s → 400 bad_path, even with a "*" key', (url) => {
    const d = run(url, { key: 'all' });
    expect(d.ok).toBe(false);
    if (!d.ok) expect(d.error.code).toBe('bad_path');
  });
});

describe('legacy host routing (SPEC §3)', () => {
  test.each([[FRAUD_HOST], [`${FRAUD_HOST}:8080`], ['FRAUD.Fraud-Detection.Serving.Example.COM'], [`${FRAUD_HOST}.`]])(
    'Host %s routes /v1/models/fraud:predict to the deployment, path as given',
    (host) => {
      const d = run('/v1/models/fraud:predict?x=1', { key: 'fraud', host });
      expect(d.ok).toBe(true);
      if (!d.ok) return;
      expect(d.route.id).toBe('fraud-detection/fraud');
      expect(d.upstreamPath).toBe('/v1/models/fraud:predict?x=1');
      expect(d.project).toBe('fraud_detection');
    },
  );

  test('the Host route takes precedence over a /v1/<project>/<deployment> path', () => {
    const d = run(CHAT, { key: 'all', host: FRAUD_HOST });
    expect(d.ok).toBe(false);
    if (d.ok) return;
    expect(d.route?.id).toBe('fraud-detection/fraud');
    expect(d.error.status).toBe(404);
  });

  test('a key for another project is refused on the Host route, whatever the path says', () => {
    expect(statusOf(run(CHAT, { key: 'demo', host: FRAUD_HOST }))).toBe(403);
  });

  test('a Host route still needs a key', () => {
    expect(statusOf(run('/v1/models/fraud:predict', { host: FRAUD_HOST }))).toBe(401);
  });

  test('an unknown Host falls back to path routing', () => {
    const d = run(CHAT, { key: 'demo', host: 'nope.demo.serving.example.com' });
    expect(d.ok).toBe(true);
    if (d.ok) expect(d.route.id).toBe('demo/chat');
  });

  test.each<[KeyName]>([['demo'], ['all']])(
    'an unknown legacy Host with a legacy path is a 404 naming the host, not project "models" (key %s)',
    (key) => {
      const d = run('/v1/models/nope:predict', { key, host: 'nope.demo.serving.example.com:8080' });
      expect(d.ok).toBe(false);
      if (d.ok) return;
      expect(d.error.status).toBe(404);
      expect(d.error.message).toBe(
        'no deployment is served at host "nope.demo.serving.example.com": legacy hostnames are <deployment>.<project>.serving.example.com of a deployment that is served',
      );
    },
  );

  test('an unknown legacy Host still needs a key first', () => {
    expect(statusOf(run('/v1/models/nope:predict', { host: 'nope.demo.serving.example.com' }))).toBe(401);
  });

  test.each([
    ['Example.COM:8080', 'example.com'],
    ['example.com.', 'example.com'],
    ['[::1]:8080', '[::1]'],
    ['  a.b  ', 'a.b'],
    [undefined, undefined],
    ['', undefined],
  ])('hostOnly(%j) = %j', (host, expected) => {
    expect(hostOnly(host)).toBe(expected);
  });
});

describe('error dialect (SPEC §6)', () => {
  test.each([
    ['401 on an LLM route', CHAT, {}, 'openai'],
    ['403 on an LLM route', CHAT, { key: 'fraud' as KeyName }, 'openai'],
    ['404 on an LLM route (suffix)', '/v1/demo/chat/chat/completions', { key: 'demo' as KeyName }, 'openai'],
    [
      '404, unknown deployment with an OpenAI suffix',
      '/v1/demo/nope/v1/chat/completions',
      { key: 'demo' as KeyName },
      'openai',
    ],
    ['401 on a predictive route', PREDICT, {}, 'kserve'],
    [
      '404 verb on a predictive route',
      '/v1/fraud_detection/fraud/v1/models/fraud:regress',
      { key: 'fraud' as KeyName },
      'kserve',
    ],
    ['401 on a python route', '/v1/demo/echo/v1/chat/completions', {}, 'kserve'],
    ['400 bad path', '/v1/demo/chat/../x', { key: 'all' as KeyName }, 'kserve'],
  ])('%s → %s', (_what, url, opts, dialect) => {
    const d = run(url, opts);
    expect(d.ok).toBe(false);
    expect(d.dialect).toBe(dialect);
  });

  test('accepted LLM requests carry the openai dialect for later errors', () => {
    expect(run(CHAT, { key: 'demo' }).dialect).toBe('openai');
    expect(run(PREDICT, { key: 'fraud' }).dialect).toBe('kserve');
  });
});

describe('the table in use is the one given', () => {
  test('a deleted key is refused as soon as the table no longer has it', () => {
    const { table: without } = build({ deployments: [sdep('demo/chat').llm().build()] });
    expect(decide(req(CHAT, { key: 'demo' }), without).ok).toBe(false);
    expect(decide(req(CHAT, { key: 'demo' }), table).ok).toBe(true);
  });
});
