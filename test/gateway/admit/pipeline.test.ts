// The admission pipeline as a table (facts in, the whole decision out), in the order docs/gateway.md draws: head,
// method, preflight, route, key, failed-auth throttle, grant, kind rules, per-second and per-minute limits. Each row
// runs its requests through one fresh context and compares the last decision, and what admission counted, whole.
import { describe, expect, test } from '@jest/globals';
import { gatewayError } from '../../../src/gateway/http/errors.js';
import { admitModel, type Admission, type RequestFacts } from '../../../src/gateway/admit/pipeline.js';
import { admissionContext, admitNow, type AdmissionOptions, type Counted } from '../../support/admission.js';
import { apiKey, sdep, buildOptions } from '../../support/fixtures.js';
import { build } from '../../support/units.js';

const demo = apiKey('key-demo', 'demo');
const other = apiKey('key-other', 'other');
const limited = apiKey('key-limited', 'demo');
limited.secret.data!.rpm = '1';
const { table } = build(
  {
    deployments: [
      sdep('demo/chat').llm().modelName('meta-llama/Llama-3.1-8B-Instruct').build(),
      sdep('demo/iris').sklearn().build(),
      sdep('demo/echo').python().build(),
    ],
    keySecrets: [demo.secret, other.secret, limited.secret],
  },
  buildOptions,
);
const NOW = Date.parse('2026-01-01T00:00:00Z');
const ORIGIN = 'https://app.example.com';

const facts = (url: string, o: Partial<RequestFacts> & { key?: string } = {}): RequestFacts => ({
  method: 'POST',
  url,
  host: 'models.example.com',
  authorization: o.key === undefined ? undefined : `ApiKey ${o.key}`,
  contentType: 'application/json',
  now: NOW,
  client: '192.0.2.1',
  ...o,
});

/** The decision as plain data: the route and key by name, the error by its status, code, message and headers. */
function plain(a: Admission): Record<string, unknown> {
  if (a.kind === 'preflight') return { kind: a.kind, headers: a.headers };
  if (a.kind === 'refused') {
    const e = a.error;
    return {
      kind: a.kind,
      error: { status: e.status, code: e.code, message: e.message, headers: e.headers },
      dialect: a.dialect,
      route: a.route?.id,
      key: a.key?.name,
      close: a.close,
      headers: a.headers,
    };
  }
  if (a.kind === 'by-model')
    return { kind: a.kind, key: a.key.name, rest: a.rest, search: a.search, modelId: a.modelId, headers: a.headers };
  return {
    kind: a.kind,
    route: a.route.id,
    key: a.key.name,
    upstreamPath: a.upstreamPath,
    check: a.check,
    dialect: a.dialect,
    project: a.project,
    headers: a.headers,
    charge: a.charge,
  };
}

const CHAT = '/v1/demo/chat/v1/chat/completions';
const PREDICT = '/v1/demo/iris/v1/models/iris:predict';
const WWW = { 'www-authenticate': 'ApiKey' };
// What every answer carries when CORS is on for the origin (a named origin is allowed credentials).
const CORS = [
  'access-control-allow-origin',
  ORIGIN,
  'access-control-expose-headers',
  'x-request-id, retry-after, www-authenticate, x-should-retry, x-servegate-deployment, x-servegate-variant, ' +
    'x-ratelimit-limit-requests, x-ratelimit-remaining-requests, x-ratelimit-reset-requests, ' +
    'x-ratelimit-limit-tokens, x-ratelimit-remaining-tokens, x-ratelimit-reset-tokens, ' +
    'x-servegate-budget-limit-tokens, x-servegate-budget-remaining-tokens, x-servegate-budget-reset-tokens, ' +
    'x-servegate-budget-limit-cost, x-servegate-budget-remaining-cost, x-servegate-budget-reset-cost',
  'access-control-allow-credentials',
  'true',
  'vary',
  'Origin',
];
const err = (code: Parameters<typeof gatewayError>[0], message: string, headers: Record<string, string> = {}) => {
  const e = gatewayError(code, message, headers);
  return { status: e.status, code: e.code, message: e.message, headers: e.headers };
};

type Row = [
  name: string,
  options: AdmissionOptions,
  requests: RequestFacts[],
  decision: Record<string, unknown>,
  counted: Counted,
];
const none: Counted = { authFailures: [], rateLimited: [] };

const rows: Row[] = [
  [
    '1. a Host problem found reading the head: 400, the connection closes, with the CORS headers of an allowed origin',
    { allowedOrigins: [ORIGIN] },
    [
      facts(CHAT, {
        key: demo.key,
        origin: ORIGIN,
        headProblem: gatewayError('bad_request', 'more than one Host header'),
      }),
    ],
    {
      kind: 'refused',
      error: err('bad_request', 'more than one Host header'),
      // In the dialect the target reads as (SPEC §6): an LLM route's chat path.
      dialect: 'openai',
      route: undefined,
      key: undefined,
      close: true,
      // SPEC §5: the gateway's own errors carry the CORS headers too.
      headers: CORS,
    },
    none,
  ],
  [
    '2. an Expect other than 100-continue: 417, the connection closes',
    {},
    [facts(CHAT, { key: demo.key, expectation: 'fancy' })],
    {
      kind: 'refused',
      error: err('expectation_failed', 'Expect: fancy is not supported (only 100-continue)'),
      // In the dialect the target reads as (SPEC §6): an LLM route's chat path.
      dialect: 'openai',
      route: undefined,
      key: undefined,
      close: true,
      headers: [],
    },
    none,
  ],
  [
    '2. TRACE is never forwarded: 405 with Allow, before any key is asked for',
    {},
    [facts(CHAT, { method: 'TRACE' })],
    {
      kind: 'refused',
      error: err('method_not_allowed', 'TRACE is not allowed', {
        allow: 'GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS',
      }),
      // In the dialect the target reads as (SPEC §6): an LLM route's chat path.
      dialect: 'openai',
      route: undefined,
      key: undefined,
      close: false,
      headers: [],
    },
    none,
  ],
  [
    '3. a CORS preflight is answered without a key',
    { allowedOrigins: [ORIGIN] },
    [facts(CHAT, { method: 'OPTIONS', origin: ORIGIN, preflight: true, acrHeaders: 'authorization, content-type' })],
    {
      kind: 'preflight',
      headers: [
        'access-control-allow-origin',
        ORIGIN,
        'access-control-allow-methods',
        'GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS',
        'access-control-max-age',
        '600',
        'access-control-allow-credentials',
        'true',
        'vary',
        'Origin, Access-Control-Request-Method, Access-Control-Request-Headers',
        'access-control-allow-headers',
        'authorization, content-type',
      ],
    },
    none,
  ],
  [
    '4. an ambiguous path: 400 before the key, with the CORS headers',
    { allowedOrigins: [ORIGIN] },
    [facts('/v1/demo/../other/x', { key: demo.key, origin: ORIGIN })],
    {
      kind: 'refused',
      error: err('bad_path', 'dot segments ("." or "..") are not allowed in the path'),
      dialect: 'kserve',
      route: undefined,
      key: undefined,
      close: false,
      headers: CORS,
    },
    none,
  ],
  [
    "6. no key: 401 in the route's dialect, counted as a failure of this address",
    {},
    [facts(CHAT)],
    {
      kind: 'refused',
      error: err('missing_api_key', 'missing API key: send the header "authorization: ApiKey <key>"', WWW),
      dialect: 'openai',
      route: 'demo/chat',
      key: undefined,
      close: false,
      headers: [],
    },
    { authFailures: ['missing'], rateLimited: [] },
  ],
  [
    '6. past the failed-auth limit a failing request from the address gets 429 instead of 401',
    { maxFailures: 1 },
    [facts(CHAT, { key: 'AAAAAAAAAAAAAAAA.bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb' }), facts(CHAT), facts(CHAT)],
    {
      kind: 'refused',
      error: err('rate_limit_exceeded', 'too many failed authentications from 192.0.2.1; retry after 60 s', {
        'retry-after': '60',
      }),
      dialect: 'openai',
      route: 'demo/chat',
      key: undefined,
      close: false,
      headers: [],
    },
    {
      authFailures: ['unknown', 'missing', 'missing'],
      rateLimited: [{ scope: 'client', kind: 'auth_failures', reason: 'failed_auth' }],
    },
  ],
  [
    '6. a valid key from a throttled address is served (one NAT hides many clients)',
    { maxFailures: 1 },
    [
      facts(CHAT, { key: 'AAAAAAAAAAAAAAAA.bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb' }),
      facts(CHAT),
      facts(CHAT, { key: demo.key }),
    ],
    {
      kind: 'route',
      route: 'demo/chat',
      key: 'key-demo',
      upstreamPath: '/v1/chat/completions',
      check: 'json',
      dialect: 'openai',
      project: 'demo',
      headers: [],
      charge: undefined,
    },
    { authFailures: ['unknown', 'missing'], rateLimited: [] },
  ],
  [
    '7. a key for another project: 403, counted as forbidden',
    {},
    [facts(CHAT, { key: other.key })],
    {
      kind: 'refused',
      error: err('project_forbidden', 'API key "key-other" does not grant access to project "demo"'),
      dialect: 'openai',
      route: 'demo/chat',
      key: 'key-other',
      close: false,
      headers: [],
    },
    { authFailures: ['forbidden'], rateLimited: [] },
  ],
  [
    '7. an unknown deployment of a granted project: 404',
    {},
    [facts('/v1/demo/nope/x', { key: demo.key })],
    {
      kind: 'refused',
      error: err('not_found', 'deployment "nope" not found in project "demo"'),
      dialect: 'kserve',
      route: undefined,
      key: 'key-demo',
      close: false,
      headers: [],
    },
    none,
  ],
  [
    "8. a verb the kind does not offer: 405 from the kind's rules",
    {},
    [facts(PREDICT, { key: demo.key, method: 'GET' })],
    {
      kind: 'refused',
      error: err('method_not_allowed', 'GET is not allowed on :predict; use POST', { allow: 'POST' }),
      dialect: 'kserve',
      route: 'demo/iris',
      key: 'key-demo',
      close: false,
      headers: [],
    },
    none,
  ],
  [
    '8. a websocket to a predictive deployment: 404',
    {},
    [facts('/v1/demo/iris/v1/models/iris', { key: demo.key, method: 'GET', upgrade: true, contentType: undefined })],
    {
      kind: 'refused',
      error: err('not_found', 'predictive deployments do not accept upgrade (websocket) requests'),
      dialect: 'kserve',
      route: 'demo/iris',
      key: 'key-demo',
      close: false,
      headers: [],
    },
    none,
  ],
  [
    '9. admitted: the route, the path to forward, the body check, CORS headers, no charge without token limits',
    { allowedOrigins: [ORIGIN] },
    [facts(CHAT + '?x=1', { key: demo.key, origin: ORIGIN })],
    {
      kind: 'route',
      route: 'demo/chat',
      key: 'key-demo',
      upstreamPath: '/v1/chat/completions?x=1',
      check: 'json',
      dialect: 'openai',
      project: 'demo',
      headers: CORS,
      charge: undefined,
    },
    none,
  ],
  [
    "9. the key's per-second bucket: the request past the burst gets 429 with Retry-After",
    { perSecond: 1 },
    [facts(PREDICT, { key: demo.key }), facts(PREDICT, { key: demo.key })],
    {
      kind: 'refused',
      error: err('rate_limit_exceeded', 'rate limit of 1 requests/s for this API key exceeded', { 'retry-after': '1' }),
      dialect: 'kserve',
      route: 'demo/iris',
      key: 'key-demo',
      close: false,
      headers: [],
    },
    { authFailures: [], rateLimited: [{ scope: 'key', kind: 'requests', reason: 'per_second' }] },
  ],
  [
    "9. per minute: admitted with OpenAI's x-ratelimit headers and the token charge",
    { perMinute: { requestsPerMinute: 0, tokensPerMinute: 1000 } },
    [facts(CHAT, { key: limited.key })],
    {
      kind: 'route',
      route: 'demo/chat',
      key: 'key-limited',
      upstreamPath: '/v1/chat/completions',
      check: 'json',
      dialect: 'openai',
      project: 'demo',
      headers: [
        'x-ratelimit-limit-requests',
        '1',
        'x-ratelimit-remaining-requests',
        '0',
        'x-ratelimit-reset-requests',
        '1m0s',
        'x-ratelimit-limit-tokens',
        '1000',
        'x-ratelimit-remaining-tokens',
        '1000',
        'x-ratelimit-reset-tokens',
        '0ms',
      ],
      charge: { tokens: [{ id: 'key:servegate/key-limited:tpm', limit: 1000 }] },
    },
    none,
  ],
  [
    "9. per minute: the key's rpm spent, 429 with the headers",
    {},
    [facts(CHAT, { key: limited.key }), facts(CHAT, { key: limited.key })],
    {
      kind: 'refused',
      error: err(
        'rate_limit_exceeded',
        'rate limit exceeded: 1 requests per minute for API key servegate/key-limited; retry after 60 s',
        {
          'x-ratelimit-limit-requests': '1',
          'x-ratelimit-remaining-requests': '0',
          'x-ratelimit-reset-requests': '1m0s',
          'retry-after': '60',
        },
      ),
      dialect: 'openai',
      route: 'demo/chat',
      key: 'key-limited',
      close: false,
      headers: [],
    },
    { authFailures: [], rateLimited: [{ scope: 'key', kind: 'requests', reason: 'per_minute' }] },
  ],
  [
    "the OpenAI base URL: the key's per-minute limits apply before the body is read",
    {},
    [
      facts('/openai/v1/chat/completions', { key: limited.key }),
      facts('/openai/v1/chat/completions', { key: limited.key }),
    ],
    {
      kind: 'refused',
      error: err(
        'rate_limit_exceeded',
        'rate limit exceeded: 1 requests per minute for API key servegate/key-limited; retry after 60 s',
        {
          'x-ratelimit-limit-requests': '1',
          'x-ratelimit-remaining-requests': '0',
          'x-ratelimit-reset-requests': '1m0s',
          'retry-after': '60',
        },
      ),
      dialect: 'openai',
      route: undefined,
      key: 'key-limited',
      close: false,
      headers: [],
    },
    { authFailures: [], rateLimited: [{ scope: 'key', kind: 'requests', reason: 'per_minute' }] },
  ],
  [
    'the OpenAI base URL: key checked, the deployment left to `model`',
    {},
    [facts('/openai/v1/chat/completions', { key: demo.key })],
    { kind: 'by-model', key: 'key-demo', rest: '/v1/chat/completions', search: '', modelId: undefined, headers: [] },
    none,
  ],
  [
    'the OpenAI base URL, a websocket: `?model=` names the deployment and is rewritten to the served name',
    {},
    [facts('/openai/v1/realtime?model=demo%2Fchat', { key: demo.key, method: 'GET', upgrade: true })],
    {
      kind: 'route',
      route: 'demo/chat',
      key: 'key-demo',
      upstreamPath: '/v1/realtime?model=meta-llama%2FLlama-3.1-8B-Instruct',
      check: 'json',
      dialect: 'openai',
      project: 'demo',
      headers: [],
      charge: undefined,
    },
    none,
  ],
];

describe('admission, whole decisions', () => {
  test.each(rows)('%s', (_name, options, requests, decision, counted) => {
    const { ctx, counted: seen } = admissionContext(table, { now: () => NOW, ...options });
    let last: Admission | undefined;
    for (const r of requests) last = admitNow(r, ctx);
    expect(plain(last!)).toEqual(decision);
    expect(seen).toEqual(counted);
  });
});

describe('the OpenAI base URL: the rate-limit headers report, per kind, the bucket with the least left', () => {
  const five = apiKey('key-five', 'demo');
  five.secret.data!.rpm = '5';
  const deployment = (name: string, rpm: number) => {
    const d = sdep(`demo/${name}`).llm().build();
    (d.spec as Record<string, unknown>).limits = { requestsPerMinute: rpm };
    return d;
  };
  const limited = build(
    { deployments: [deployment('tight', 2), deployment('loose', 100)], keySecrets: [five.secret] },
    buildOptions,
  ).table;
  // One request taken from a bucket that refills `limit` a minute: full again in 60 / limit seconds.
  const requests = (limit: number, remaining: number) => [
    'x-ratelimit-limit-requests',
    String(limit),
    'x-ratelimit-remaining-requests',
    String(remaining),
    'x-ratelimit-reset-requests',
    `${60 / limit}s`,
  ];

  test.each<[string, string, number, number]>([
    // The key's bucket (5 a minute, 4 left) against the deployment's (2 a minute, 1 left): the deployment's is reported.
    ["the deployment's bucket has less left: its figures replace the key's", 'demo/tight', 2, 1],
    // Against 100 a minute, 99 left: the key's stays.
    ["the key's bucket has less left: its figures stay", 'demo/loose', 5, 4],
  ])('%s', (_name, id, limit, remaining) => {
    const { ctx } = admissionContext(limited, { now: () => NOW });
    const b = admitNow(facts('/openai/v1/chat/completions', { key: five.key }), ctx);
    if (b.kind !== 'by-model') throw new Error(`expected by-model, got ${b.kind}`);
    expect(b.headers).toEqual(requests(5, 4));
    const route = limited.routes.find((r) => r.id === id)!;
    const a = admitModel(b, route, '', ctx);
    if (a instanceof Promise || a.kind !== 'route') throw new Error('expected an accepted request at once');
    // One line per name, in the order the key's admission wrote them; only the values change.
    expect(a.headers).toEqual(requests(limit, remaining));
  });
});
