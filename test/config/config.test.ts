// Configuration (SPEC §7): every key has a default, bad values stop start-up with a message naming the key.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, test } from '@jest/globals';
import { ConfigError, loadConfigFile, ownNamespace, parseConfig } from '../../src/config/load.js';
import { runtime } from '../support/units.js';

function errorOf(doc: unknown): ConfigError {
  try {
    parseConfig(doc, runtime);
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return err as ConfigError;
  }
  throw new Error('expected a ConfigError');
}

describe('defaults', () => {
  test.each([{}, null, undefined])('%j is a valid configuration with the SPEC §7 defaults', (doc) => {
    const c = parseConfig(doc, { port: 8080, namespace: 'platform' });
    expect(c.publicUrl).toBe('http://localhost:8080');
    expect(c.serverlessDomain).toBe('serving.local');
    expect(c.cors.allowedOrigins).toEqual([]);
    expect(c.cors.maxAgeSeconds).toBe(600);
    expect(c.auth.keysNamespace).toBe('platform');
    expect(c.limits).toMatchObject({
      maxRequestBodyBytes: 33_554_432,
      requestTimeoutSeconds: 60,
      streamIdleTimeoutSeconds: 300,
      headersTimeoutSeconds: 30,
    });
  });

  test('a watch silent for two and a half bookmark periods is restarted (the API server sends one a minute)', () => {
    // More than two periods: a late bookmark does not restart a healthy quiet watch; under three: a hung one (a proxy
    // or a partition that swallows its data) is found within 150 s, not the 300 s it took before.
    expect(parseConfig({}, runtime).kubernetes.watchIdleTimeoutSeconds).toBe(150);
  });

  test('the default publicUrl uses the listening port', () => {
    expect(parseConfig({}, { port: 18080, namespace: 'x' }).publicUrl).toBe('http://localhost:18080');
  });

  test('a partial section keeps the defaults of its other keys', () => {
    const c = parseConfig({ limits: { requestTimeoutSeconds: 5 }, cors: { allowedOrigins: ['*'] } }, runtime);
    expect(c.limits.requestTimeoutSeconds).toBe(5);
    expect(c.limits.maxRequestBodyBytes).toBe(33_554_432);
    expect(c.cors.maxAgeSeconds).toBe(600);
  });

  test.each([
    ['', 'servegate'],
    ['keys', 'keys'],
  ])('keysNamespace %j → %s', (keysNamespace, expected) => {
    expect(parseConfig({ auth: { keysNamespace } }, runtime).auth.keysNamespace).toBe(expected);
  });

  test.each([
    ['https://models.example.com', 'https://models.example.com'],
    ['https://models.example.com/', 'https://models.example.com'],
    ['https://example.com/gateway/', 'https://example.com/gateway'],
    ['http://10.0.0.1:8080', 'http://10.0.0.1:8080'],
  ])('publicUrl %s is used as %s', (publicUrl, expected) => {
    expect(parseConfig({ publicUrl }, runtime).publicUrl).toBe(expected);
  });

  test('the SPEC §7 example is valid', () => {
    const c = parseConfig(
      {
        publicUrl: 'https://models.example.com',
        serverlessDomain: 'serving.example.com',
        cors: { allowedOrigins: ['https://app.example.com', 'https://*.example.com'], maxAgeSeconds: 600 },
        auth: { keysNamespace: '' },
        limits: {
          maxRequestBodyBytes: 33554432,
          requestTimeoutSeconds: 60,
          streamIdleTimeoutSeconds: 300,
          headersTimeoutSeconds: 30,
        },
      },
      runtime,
    );
    expect(c.cors.allowedOrigins).toEqual(['https://app.example.com', 'https://*.example.com']);
  });
});

describe('invalid values name the key', () => {
  test.each([
    [{ cors: { allowedOrigins: ['ftp://x.example.com'] } }, 'cors.allowedOrigins.0'],
    [{ cors: { allowedOrigins: ['*', 'https://app.example.com/path'] } }, 'cors.allowedOrigins.1'],
    [{ cors: { allowedOrigins: 'https://app.example.com' } }, 'cors.allowedOrigins'],
    [{ cors: { maxAgeSeconds: -1 } }, 'cors.maxAgeSeconds'],
    [{ limits: { maxRequestBodyBytes: -1 } }, 'limits.maxRequestBodyBytes'],
    [{ limits: { maxRequestBodyBytes: 0 } }, 'limits.maxRequestBodyBytes'],
    [{ limits: { maxRequestBodyBytes: 1.5 } }, 'limits.maxRequestBodyBytes'],
    [{ limits: { maxRequestBodyBytes: '32MB' } }, 'limits.maxRequestBodyBytes'],
    [{ limits: { requestTimeoutSeconds: 0 } }, 'limits.requestTimeoutSeconds'],
    [{ limits: { streamIdleTimeoutSeconds: -5 } }, 'limits.streamIdleTimeoutSeconds'],
    [{ limits: { headersTimeoutSeconds: 'soon' } }, 'limits.headersTimeoutSeconds'],
    [{ limits: { foo: 1 } }, 'limits.foo'],
    [{ bogus: true }, 'bogus'],
    [{ publicUrl: 'models.example.com' }, 'publicUrl'],
    [{ publicUrl: 'https://models.example.com/?x=1' }, 'publicUrl'],
    [{ serverlessDomain: 'Serving.Example.com' }, 'serverlessDomain'],
    [{ serverlessDomain: 'serving..local' }, 'serverlessDomain'],
    [{ auth: { keysNamespace: 7 } }, 'auth.keysNamespace'],
    [{ cors: 'yes' }, 'cors'],
    [{ limits: { redis: { url: 'localhost:6379' } } }, 'limits.redis.url'],
    [{ limits: { redis: { failOpen: 'yes' } } }, 'limits.redis.failOpen'],
    [{ limits: { perKey: { tokensPerMinute: -1 } } }, 'limits.perKey.tokensPerMinute'],
    [{ limits: { perKey: { requestsPerMinute: 2.5 } } }, 'limits.perKey.requestsPerMinute'],
    [{ auth: { failureLimit: { maxFailures: -1 } } }, 'auth.failureLimit.maxFailures'],
    [{ auth: { failureLimit: { windowSeconds: 0 } } }, 'auth.failureLimit.windowSeconds'],
    [{ tls: { certFile: '/tls/tls.crt' } }, 'tls.keyFile'],
    [{ tls: { httpPort: 8081 } }, 'tls.httpPort'],
    [{ tls: { certFile: 'a', keyFile: 'b', httpPort: 70000 } }, 'tls.httpPort'],
    [{ tls: { secretName: 'x' } }, 'tls.secretName'],
  ])('%j → message names %s', (doc, key) => {
    const err = errorOf(doc);
    expect(err.message).toMatch(new RegExp(`(^|\\s)${key.replace(/\./g, '\\.')}:`));
  });

  test('an unknown key is called unknown', () => {
    expect(errorOf({ limits: { foo: 1 } }).message).toMatch(/limits\.foo: unknown key/);
  });

  test('a huge or multi-line key is shown escaped and cut: it can neither flood the message nor forge a line of it', () => {
    const key = `${'k'.repeat(5000)}\n  limits.fake: looks like another problem`;
    for (const doc of [{ [key]: 1 }, { limits: { [key]: 1 } }, { limits: { projects: { [key]: {} } } }]) {
      const m = errorOf(doc).message;
      expect(m.length).toBeLessThan(400);
      // One line of heading, one per problem: the key's newline stays escaped.
      expect(m.split('\n')).toHaveLength(2);
      expect(m).toContain(`(${key.length} characters)`);
    }
  });

  test('every bad key is named at once', () => {
    const m = errorOf({ limits: { maxRequestBodyBytes: -1, requestTimeoutSeconds: 0 } }).message;
    expect(m).toContain('limits.maxRequestBodyBytes');
    expect(m).toContain('limits.requestTimeoutSeconds');
  });

  test.each([[[1, 2]], ['text'], [42]])('a document that is not a mapping (%j) is refused', (doc) => {
    expect(errorOf(doc).message).toMatch(/mapping/);
  });
});

describe('loadConfigFile', () => {
  const dir = mkdtempSync(join(tmpdir(), 'servegate-config-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const file = (name: string, text: string) => {
    const p = join(dir, name);
    writeFileSync(p, text);
    return p;
  };

  test('no file gives the defaults', () => {
    expect(loadConfigFile(undefined, runtime).publicUrl).toBe('http://localhost:8080');
  });

  test('an empty file gives the defaults', () => {
    expect(loadConfigFile(file('empty.yaml', ''), runtime).serverlessDomain).toBe('serving.local');
  });

  test('a YAML file is read', () => {
    const c = loadConfigFile(
      file('ok.yaml', 'publicUrl: https://m.example.com\ncors:\n  allowedOrigins: ["*"]\n'),
      runtime,
    );
    expect(c.publicUrl).toBe('https://m.example.com');
    expect(c.cors.allowedOrigins).toEqual(['*']);
  });

  test('a bad value names the file and the key', () => {
    const p = file('bad.yaml', 'limits:\n  maxRequestBodyBytes: lots\n');
    expect(() => loadConfigFile(p, runtime)).toThrow(ConfigError);
    expect(() => loadConfigFile(p, runtime)).toThrow(/bad\.yaml[\s\S]*limits\.maxRequestBodyBytes/);
  });

  test.each([
    ['a missing file', join(dir, 'nope.yaml'), /cannot read/],
    ['invalid YAML', 'invalid', /not valid YAML/],
  ])('%s is a ConfigError', (_what, p, message) => {
    const path = p === 'invalid' ? file('invalid.yaml', 'a: [1, 2\n') : p;
    expect(() => loadConfigFile(path, runtime)).toThrow(message);
  });
});

describe('ownNamespace', () => {
  test.each([
    [{ POD_NAMESPACE: 'platform' }, 'platform'],
    [{ POD_NAMESPACE: '  ' }, 'servegate'],
    [{}, 'servegate'],
  ])('%j → %s', (env, ns) => {
    expect(ownNamespace(env as NodeJS.ProcessEnv)).toBe(ns);
  });
});
