// API keys at the gateway (SPEC §4) and the identity headers the backend receives (SPEC §3).
import { afterAll, beforeAll, describe, test } from '@jest/globals';
import { expect } from '../../support/expect.js';
import { startPythonBackend, type RecordingBackend } from '../../support/backends.js';
import { eventually, newKey, rawHttp, rawRequest, send, startGateway, type Gateway } from '../../support/harness.js';

let py: RecordingBackend;
let gw: Gateway;
const k = (name: string) => gw.keys[name];
const secretOf = (key: string) => key.slice(key.indexOf('.') + 1);

beforeAll(async () => {
  py = await startPythonBackend();
  gw = await startGateway({
    // Keys in project namespaces (apikey-scoped*) are read: the opt-in of SPEC §11. The default is tested below.
    config: { auth: { projectNamespaceKeys: true } },
    deployments: [
      { namespace: 'demo', name: 'app', type: 'python', url: py.url },
      { namespace: 'other', name: 'app', type: 'python', url: py.url },
      { namespace: 'fraud-detection', name: 'fraud', project: 'fraud_detection', type: 'python', url: py.url },
    ],
    keys: [
      { name: 'apikey-demo', projects: 'demo' },
      { name: 'apikey-fraud', projects: 'fraud_detection' },
      { name: 'apikey-all', projects: '*' },
      { name: 'apikey-two', projects: 'demo, fraud_detection' },
      { name: 'apikey-expired', projects: 'demo', expiresAt: '2020-01-01T00:00:00Z' },
      { name: 'apikey-future', projects: 'demo', expiresAt: '2099-01-01T00:00:00Z' },
      { name: 'apikey-b64', projects: 'demo', base64: true },
      { name: 'apikey-nons', projects: 'demo', namespace: null },
      { name: 'apikey-scoped', projects: '*', namespace: 'demo' },
      { name: 'apikey-scoped-other', projects: 'other', namespace: 'demo' },
    ],
    files: {
      'key-broken.yaml': {
        apiVersion: 'v1',
        kind: 'Secret',
        metadata: {
          name: 'apikey-broken',
          namespace: 'servegate',
          labels: { 'serving.servegate.dev/api-key': 'true' },
        },
        stringData: { prefix: 'short', sha256: 'nothex', projects: 'demo' },
      },
    },
  });
});

afterAll(async () => {
  await gw?.close();
  await py?.close();
});

const get = (path: string, authorization?: string, headers: Record<string, string> = {}) =>
  send(`${gw.url}${path}`, { headers: authorization === undefined ? headers : { ...headers, authorization } });

describe('authentication', () => {
  test('a request without authorization is 401 with WWW-Authenticate: ApiKey and never forwarded', async () => {
    const before = py.requests.length;
    const r = await get('/v1/demo/app/x');
    expect(r.status).toBe(401);
    expect(String(r.headers['www-authenticate'])).toMatch(/^ApiKey\b/i);
    expect(typeof r.json().error).toBe('string');
    expect(py.requests.length).toBe(before);
  });

  test.each([
    ['Basic credentials', () => `Basic ${Buffer.from('u:p').toString('base64')}`],
    ['the scheme word alone', () => 'ApiKey'],
    ['a key without a dot', () => `ApiKey ${k('apikey-demo').replace('.', '')}`],
    ['an unknown scheme', () => `Token ${k('apikey-demo')}`],
    ['no space after the scheme', () => `ApiKey${k('apikey-demo')}`],
    ['an empty value', () => ''],
  ])('a malformed header (%s) is 401 with WWW-Authenticate', async (_what, value) => {
    const before = py.requests.length;
    const r = await get('/v1/demo/app/x', value());
    expect(r.status).toBe(401);
    expect(String(r.headers['www-authenticate'])).toMatch(/^ApiKey\b/i);
    expect(py.requests.length).toBe(before);
  });

  test.each(['ApiKey', 'apikey', 'APIKEY', 'Bearer', 'bearer'])('the scheme %s is accepted', async (scheme) => {
    const r = await get('/v1/demo/app/scheme', `${scheme} ${k('apikey-demo')}`);
    expect(r.status).toBe(200);
    expect(py.last().url).toBe('/scheme');
  });

  test.each(['authorization', 'Authorization', 'AUTHORIZATION', 'aUtHoRiZaTiOn'])(
    'the header name %s is accepted (raw socket)',
    async (name) => {
      const r = await rawRequest(
        gw.port,
        rawHttp('GET', '/v1/demo/app/raw-name', [
          ['Host', `127.0.0.1:${gw.port}`],
          [name, `ApiKey ${k('apikey-demo')}`],
          ['Connection', 'close'],
        ]),
      );
      expect(r.status).toBe(200);
      expect(py.last().url).toBe('/raw-name');
    },
  );

  test.each([
    ['a wrong secret for a known prefix', () => `${k('apikey-demo').split('.')[0]}.${'A'.repeat(43)}`],
    ['an unknown prefix', () => newKey()],
    ['an expired key', () => k('apikey-expired')],
    [
      'the secret of one key with the prefix of another',
      () => `${k('apikey-all').split('.')[0]}.${secretOf(k('apikey-demo'))}`,
    ],
    ['a key whose Secret has bad fields', () => `short.${'b'.repeat(40)}`],
  ])('%s is 401 and never forwarded', async (_what, key) => {
    const before = py.requests.length;
    const r = await get('/v1/demo/app/x', `ApiKey ${key()}`);
    expect(r.status).toBe(401);
    expect(typeof r.json().error).toBe('string');
    expect(py.requests.length).toBe(before);
  });

  test.each([
    ['a key that expires in the future', 'apikey-future'],
    ['a key stored as base64 data', 'apikey-b64'],
    ['a key Secret without a namespace (the keys namespace)', 'apikey-nons'],
    ['a key granting "*"', 'apikey-all'],
    ['a key granting two projects', 'apikey-two'],
    // Outside the keys namespace a key is named with its namespace: two Secrets of one name stay apart.
    ["a key Secret in the project's own namespace", 'apikey-scoped', 'demo/apikey-scoped'],
  ])('%s is accepted', async (_what, name, shown = name) => {
    const r = await get('/v1/demo/app/ok', `ApiKey ${k(name)}`);
    expect(r.status).toBe(200);
    expect(py.last().headers['x-servegate-key']).toBe(shown);
  });

  test.each([
    ['apikey-demo', '/v1/other/app/x'],
    ['apikey-demo', '/v1/fraud_detection/fraud/x'],
    ['apikey-fraud', '/v1/demo/app/x'],
    ['apikey-scoped', '/v1/other/app/x'],
    ['apikey-scoped-other', '/v1/other/app/x'],
  ])('a valid key %s on a project it does not grant (%s) is 403 and never forwarded', async (name, path) => {
    const before = py.requests.length;
    const r = await get(path, `ApiKey ${k(name)}`);
    expect(r.status).toBe(403);
    expect(typeof r.json().error).toBe('string');
    expect(py.requests.length).toBe(before);
  });

  test.each(['/v1/fraud_detection/fraud/x', '/v1/fraud-detection/fraud/x'])(
    'a key granting fraud_detection works on %s',
    async (path) => {
      for (const name of ['apikey-fraud', 'apikey-two', 'apikey-all']) {
        const r = await get(path, `ApiKey ${k(name)}`);
        expect(r.status, name).toBe(200);
        expect(py.last().headers['x-servegate-project']).toBe('fraud_detection');
      }
    },
  );

  test('a granted project with an unknown deployment is 404', async () => {
    const r = await get('/v1/demo/nothing/x', `ApiKey ${k('apikey-demo')}`);
    expect(r.status).toBe(404);
  });
});

describe('what the backend receives', () => {
  test('no authorization, but the project, the key name (never the secret) and a request id', async () => {
    const key = k('apikey-demo');
    const r = await get('/v1/demo/app/identity', `ApiKey ${key}`);
    expect(r.status).toBe(200);
    const h = py.last().headers;
    expect(h.authorization).toBeUndefined();
    expect(h['x-servegate-project']).toBe('demo');
    expect(h['x-servegate-key']).toBe('apikey-demo');
    expect(typeof h['x-request-id']).toBe('string');
    expect(String(h['x-request-id']).length).toBeGreaterThan(0);
    expect(JSON.stringify(py.last().rawHeaders)).not.toContain(secretOf(key));
  });

  test('each request gets its own x-request-id when the client sends none', async () => {
    await get('/v1/demo/app/id1', `ApiKey ${k('apikey-demo')}`);
    const a = py.last().headers['x-request-id'];
    await get('/v1/demo/app/id2', `ApiKey ${k('apikey-demo')}`);
    const b = py.last().headers['x-request-id'];
    expect(a).toBeTruthy();
    expect(b).toBeTruthy();
    expect(a).not.toBe(b);
  });

  test("the client's x-request-id is kept", async () => {
    await get('/v1/demo/app/rid', `ApiKey ${k('apikey-demo')}`, { 'x-request-id': 'client-chosen-id-123' });
    expect(py.last().headers['x-request-id']).toBe('client-chosen-id-123');
  });

  test('X-Forwarded-For/-Proto/-Host are set by the gateway and client values are not trusted', async () => {
    await get('/v1/demo/app/xff', `ApiKey ${k('apikey-demo')}`, {
      'x-forwarded-for': '6.6.6.6',
      'x-forwarded-proto': 'https',
      'x-forwarded-host': 'evil.example.com',
    });
    const h = py.last().headers;
    expect(h['x-forwarded-for']).toBe('127.0.0.1');
    expect(h['x-forwarded-proto']).toBe('http');
    expect(h['x-forwarded-host']).toBe(`127.0.0.1:${gw.port}`);
  });

  test('X-Forwarded-* are set when the client sends none', async () => {
    await get('/v1/demo/app/xff2', `ApiKey ${k('apikey-demo')}`);
    const h = py.last().headers;
    expect(h['x-forwarded-for']).toBe('127.0.0.1');
    expect(h['x-forwarded-proto']).toBe('http');
    expect(h['x-forwarded-host']).toBe(`127.0.0.1:${gw.port}`);
  });

  test('identity headers sent by the client are replaced, not passed on', async () => {
    await get('/v1/demo/app/spoof', `ApiKey ${k('apikey-demo')}`, {
      'x-servegate-key': 'apikey-admin',
      'x-servegate-project': 'other',
    });
    const h = py.last().headers;
    expect(h['x-servegate-key']).toBe('apikey-demo');
    expect(h['x-servegate-project']).toBe('demo');
  });
});

describe('trusted forwarding headers (trustForwardedHeaders: true)', () => {
  let trusting: Gateway;
  beforeAll(async () => {
    trusting = await startGateway({
      config: { trustForwardedHeaders: true },
      deployments: [{ namespace: 'demo', name: 'app', type: 'python', url: py.url }],
      keys: [{ name: 'apikey-lb', projects: 'demo' }],
    });
  });
  afterAll(async () => {
    await trusting?.close();
  });

  test("the client's X-Forwarded-* are kept and the client address is appended", async () => {
    const r = await send(`${trusting.url}/v1/demo/app/lb`, {
      headers: {
        authorization: `ApiKey ${trusting.keys['apikey-lb']}`,
        'x-forwarded-for': '203.0.113.7',
        'x-forwarded-proto': 'https',
        'x-forwarded-host': 'models.example.com',
      },
    });
    expect(r.status).toBe(200);
    const h = py.last().headers;
    expect(h['x-forwarded-for']).toBe('203.0.113.7, 127.0.0.1');
    expect(h['x-forwarded-proto']).toBe('https');
    expect(h['x-forwarded-host']).toBe('models.example.com');
  });
});

describe('a configured keys namespace (auth.keysNamespace)', () => {
  let custom: Gateway;
  beforeAll(async () => {
    custom = await startGateway({
      config: { auth: { keysNamespace: 'platform-keys' } },
      deployments: [{ namespace: 'demo', name: 'app', type: 'python', url: py.url }],
      keys: [
        { name: 'apikey-platform', projects: 'demo', namespace: 'platform-keys' },
        { name: 'apikey-default-ns', projects: 'demo', namespace: null },
        { name: 'apikey-elsewhere', projects: 'demo', namespace: 'servegate' },
      ],
    });
  });
  afterAll(async () => {
    await custom?.close();
  });
  const call = (name: string) =>
    send(`${custom.url}/v1/demo/app/kns`, { headers: { authorization: `ApiKey ${custom.keys[name]}` } });

  test('a key Secret in the keys namespace grants its projects', async () => {
    expect((await call('apikey-platform')).status).toBe(200);
  });

  test('a key Secret without a namespace belongs to the keys namespace', async () => {
    expect((await call('apikey-default-ns')).status).toBe(200);
  });

  test('a key Secret in another namespace is not read (auth.projectNamespaceKeys is off): 401, never forwarded', async () => {
    const before = py.requests.length;
    expect((await call('apikey-elsewhere')).status).toBe(401);
    expect(py.requests.length).toBe(before);
  });
});

describe('key Secrets outside the keys namespace (auth.projectNamespaceKeys, SPEC §11)', () => {
  let off: Gateway;
  beforeAll(async () => {
    off = await startGateway({
      deployments: [{ namespace: 'demo', name: 'app', type: 'python', url: py.url }],
      keys: [
        { name: 'apikey-home', projects: 'demo' },
        { name: 'apikey-in-project', projects: 'demo', namespace: 'demo' },
      ],
    });
  });
  afterAll(async () => {
    await off?.close();
  });

  test('off by default: a key Secret in a project namespace grants nothing (401, never forwarded)', async () => {
    const before = py.requests.length;
    const r = await send(`${off.url}/v1/demo/app/pnk`, {
      headers: { authorization: `ApiKey ${off.keys['apikey-in-project']}` },
    });
    expect(r.status).toBe(401);
    expect(py.requests.length).toBe(before);
    expect(
      (await send(`${off.url}/v1/demo/app/pnk`, { headers: { authorization: `ApiKey ${off.keys['apikey-home']}` } }))
        .status,
    ).toBe(200);
  });

  test('the ignored Secret is listed as a key problem that names the setting', async () => {
    const body = (await send(`${off.adminUrl}/deployments`)).json() as {
      keyProblems: { id: string; message: string }[];
    };
    expect(body.keyProblems).toEqual([
      expect.objectContaining({
        id: 'demo/apikey-in-project',
        message: expect.stringContaining('auth.projectNamespaceKeys: true'),
      }),
    ]);
  });
});

describe('keys change without a restart', () => {
  test('a deleted key Secret stops working', async () => {
    const key = gw.writeKey({ name: 'apikey-temp', projects: 'demo' });
    await eventually(async () => expect((await get('/v1/demo/app/t', `ApiKey ${key}`)).status).toBe(200));
    gw.removeKey('apikey-temp');
    await eventually(async () => expect((await get('/v1/demo/app/t', `ApiKey ${key}`)).status).toBe(401));
  });

  test('a new key Secret starts working', async () => {
    const key = newKey();
    expect((await get('/v1/demo/app/n', `ApiKey ${key}`)).status).toBe(401);
    gw.writeKey({ name: 'apikey-new', projects: 'demo', key });
    await eventually(async () => expect((await get('/v1/demo/app/n', `ApiKey ${key}`)).status).toBe(200));
    expect(py.last().headers['x-servegate-key']).toBe('apikey-new');
  });

  test('a rotated key Secret accepts the new key and refuses the old one', async () => {
    const oldKey = gw.writeKey({ name: 'apikey-rot', projects: 'demo' });
    await eventually(async () => expect((await get('/v1/demo/app/r', `ApiKey ${oldKey}`)).status).toBe(200));
    const newOne = gw.writeKey({ name: 'apikey-rot', projects: 'demo' });
    await eventually(async () => expect((await get('/v1/demo/app/r', `ApiKey ${newOne}`)).status).toBe(200));
    expect((await get('/v1/demo/app/r', `ApiKey ${oldKey}`)).status).toBe(401);
  });

  test('a key stops working when its expiresAt passes, without any change to the folder', async () => {
    const expiresAt = new Date(Date.now() + 2500).toISOString();
    const key = gw.writeKey({ name: 'apikey-short', projects: 'demo', expiresAt });
    await eventually(async () => expect((await get('/v1/demo/app/s', `ApiKey ${key}`)).status).toBe(200), 2000);
    await eventually(async () => expect((await get('/v1/demo/app/s', `ApiKey ${key}`)).status).toBe(401), 4000);
    expect(Date.now()).toBeGreaterThanOrEqual(Date.parse(expiresAt));
  });

  test('a key whose projects are edited loses the project it no longer grants', async () => {
    const key = gw.writeKey({ name: 'apikey-edit', projects: 'demo,other' });
    await eventually(async () => expect((await get('/v1/other/app/e', `ApiKey ${key}`)).status).toBe(200));
    gw.writeKey({ name: 'apikey-edit', projects: 'demo', key });
    await eventually(async () => expect((await get('/v1/other/app/e', `ApiKey ${key}`)).status).toBe(403));
    expect((await get('/v1/demo/app/e', `ApiKey ${key}`)).status).toBe(200);
  });
});

describe('logs', () => {
  test('no key secret appears in the logs', async () => {
    const all = gw.logs.join('\n');
    for (const [name, key] of Object.entries(gw.keys)) {
      expect(all.includes(secretOf(key)), `secret of ${name} logged`).toBe(false);
    }
  });
});
