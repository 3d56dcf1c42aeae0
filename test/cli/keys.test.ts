// `servegate keys`: key format, --expires, the Secret manifest, and create/list/revoke in files and -o yaml modes.
import { createHash } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, test } from '@jest/globals';
import { expect } from '../support/expect.js';
import { parse as parseYaml, parseAllDocuments } from 'yaml';
import { keysCommand, type CliIo } from '../../src/cli/keys.js';
import {
  generateKey,
  hashKey,
  keySecretManifest,
  KeyError,
  parseExpires,
  parseProjects,
  secretFields,
} from '../../src/keys/index.js';
import { buildKeys } from '../../src/routing/build.js';
import type { KeySecretResource } from '../../src/routing/types.js';
import { parseManifests } from '../../src/sources/manifests.js';
import { FakeApiServer } from '../support/fake-apiserver.js';

const NOW = Date.parse('2026-06-01T12:00:00Z');
const KEY_RE = /^[A-Za-z0-9]{16}\.[A-Za-z0-9_-]{32,}$/;

function captureIo(env: NodeJS.ProcessEnv = {}): CliIo & { out: () => string; err: () => string } {
  let out = '';
  let err = '';
  return {
    stdout: (t) => void (out += t),
    stderr: (t) => void (err += t),
    env: { HOME: '/nonexistent-home', ...env },
    now: () => NOW,
    out: () => out,
    err: () => err,
  };
}

async function keys(argv: string[], env: NodeJS.ProcessEnv = {}) {
  const io = captureIo(env);
  const code = await keysCommand(argv, io);
  return { code, out: io.out(), err: io.err() };
}

/** A Secret document as the gateway's sources hand it to buildKeys. */
function asKeySecret(doc: Record<string, unknown>, defaultNamespace = 'servegate'): KeySecretResource {
  const meta = doc.metadata as { name: string; namespace?: string; labels?: Record<string, string> };
  return {
    metadata: { name: meta.name, namespace: meta.namespace ?? defaultNamespace, labels: meta.labels },
    data: secretFields(doc),
  };
}

const dirs: string[] = [];
function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'servegate-keys-'));
  dirs.push(d);
  return d;
}
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

describe('key material', () => {
  test('a generated key is a 16-character alphanumeric prefix, a dot and at least 32 url-safe characters', () => {
    const seen = new Set<string>();
    for (let i = 0; i < 200; i++) {
      const k = generateKey();
      expect(k.key).toMatch(KEY_RE);
      expect(k.key.startsWith(`${k.prefix}.`)).toBe(true);
      expect(k.sha256).toBe(createHash('sha256').update(k.key).digest('hex'));
      seen.add(k.prefix);
    }
    expect(seen.size).toBe(200);
  });

  test('the stored hash is the lowercase hex SHA-256 of the whole key', () => {
    expect(hashKey('AAAAAAAAAAAAAAAA.bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb')).toBe(
      createHash('sha256').update('AAAAAAAAAAAAAAAA.bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb').digest('hex'),
    );
  });

  test.each([
    ['90m', '2026-06-01T13:30:00.000Z'],
    ['12h', '2026-06-02T00:00:00.000Z'],
    ['30d', '2026-07-01T12:00:00.000Z'],
    ['2w', '2026-06-15T12:00:00.000Z'],
    ['2027-01-01T00:00:00Z', '2027-01-01T00:00:00.000Z'],
    ['2027-01-01T02:00:00+02:00', '2027-01-01T00:00:00.000Z'],
  ])('--expires %s means %s', (raw, iso) => {
    expect(parseExpires(raw, NOW).toISOString()).toBe(iso);
  });

  test.each(['0d', '30', 'd', '3x', '-5d', '2026-01-01', '2020-01-01T00:00:00Z', 'tomorrow', '1.5h'])(
    '--expires %s is refused',
    (raw) => {
      expect(() => parseExpires(raw, NOW)).toThrow(KeyError);
    },
  );

  test.each([
    ['a,b', ['a', 'b']],
    ['fraud_detection, demo', ['fraud_detection', 'demo']],
    ['*', '*'],
    ['x,x', ['x']],
  ])('--projects %s grants %j', (raw, want) => {
    expect(parseProjects(raw)).toEqual(want);
  });

  test.each(['', ' ', 'a,,b', 'a b', '*,a', '-a', 'a/b', 'x'.repeat(64)])('--projects %j is refused', (raw) => {
    expect(() => parseProjects(raw)).toThrow(KeyError);
  });

  test('the Secret manifest carries the label, prefix, hash, projects and expiry that buildKeys accepts', () => {
    const k = generateKey();
    const m = keySecretManifest({
      name: 'ci-bot',
      namespace: 'servegate',
      prefix: k.prefix,
      sha256: k.sha256,
      projects: ['fraud_detection', 'demo'],
      expiresAt: new Date('2027-01-01T00:00:00Z'),
    });
    expect(m.metadata).toEqual({
      name: 'ci-bot',
      namespace: 'servegate',
      labels: { 'serving.servegate.dev/api-key': 'true' },
    });
    expect(m.stringData).toEqual({
      prefix: k.prefix,
      sha256: k.sha256,
      projects: 'fraud_detection,demo',
      expiresAt: '2027-01-01T00:00:00Z',
    });
    const { keys: table, problems } = buildKeys([asKeySecret(m as unknown as Record<string, unknown>)], 'servegate');
    expect(problems).toEqual([]);
    const rec = table.get(k.prefix)![0];
    expect(rec.sha256.toString('hex')).toBe(hashKey(k.key));
    expect([...(rec.projects as Set<string>)].sort()).toEqual(['demo', 'fraud-detection']);
    expect(rec.expiresAt).toBe(Date.parse('2027-01-01T00:00:00Z'));
  });
});

describe('keys create -o yaml', () => {
  test('prints the Secret manifest on stdout and the key once on stderr', async () => {
    const r = await keys([
      'create',
      '--name',
      'ci-bot',
      '--projects',
      'fraud_detection,demo',
      '--expires',
      '30d',
      '-o',
      'yaml',
    ]);
    expect(r.code).toBe(0);
    const doc = parseYaml(r.out);
    expect(doc.kind).toBe('Secret');
    expect(doc.metadata).toEqual({
      name: 'ci-bot',
      namespace: 'servegate',
      labels: { 'serving.servegate.dev/api-key': 'true' },
    });
    const key = r.err.split('\n').find((l) => KEY_RE.test(l))!;
    expect(key).toBeDefined();
    expect(r.out).not.toContain(key);
    expect(r.out).not.toContain(key.split('.')[1]);
    expect(doc.stringData.sha256).toBe(hashKey(key));
    expect(doc.stringData.prefix).toBe(key.slice(0, 16));
    expect(doc.stringData.expiresAt).toBe('2026-07-01T12:00:00Z');
    expect(r.out).toContain('expiresAt: "2026-07-01T12:00:00Z"');
  });

  test.each([
    [['-n', 'team-a'], {}, 'team-a'],
    [[], { POD_NAMESPACE: 'gw' }, 'gw'],
    [[], {}, 'servegate'],
  ])('namespace from %j with env %j is %s', async (flags, env, ns) => {
    const r = await keys(['create', '--name', 'k', '--projects', '*', '-o', 'yaml', ...flags], env);
    expect(r.code).toBe(0);
    expect(parseYaml(r.out).metadata.namespace).toBe(ns);
  });

  test('-o json prints the same manifest as JSON', async () => {
    const r = await keys(['create', '--name=k', '--projects=*', '-o', 'json']);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.out).stringData.projects).toBe('*');
  });
});

describe('keys command-line errors', () => {
  test.each([
    [['create', '--projects', 'a', '-o', 'yaml'], 2, "error[SG_USAGE]: required option '--name <name>' not specified"],
    [['create', '--name', 'Bad_Name', '--projects', 'a', '-o', 'yaml'], 1, 'DNS-1123 subdomain'],
    [['create', '--name', '-x', '--projects', 'a', '-o', 'yaml'], 1, 'DNS-1123 subdomain'],
    [
      ['create', '--name', 'k', '-o', 'yaml'],
      2,
      "error[SG_USAGE]: required option '--projects <p1,p2|*>' not specified",
    ],
    [['create', '--name', 'k', '--projects', 'a b', '-o', 'yaml'], 1, 'invalid project name "a b"'],
    [['create', '--name', 'k', '--projects', 'a', '--expires', 'soon', '-o', 'yaml'], 1, 'invalid --expires "soon"'],
    [
      ['create', '--name', 'k', '--projects', 'a', '-o', 'xml'],
      2,
      "argument 'xml' is invalid. Allowed choices are yaml, json",
    ],
    [['create', '--name', 'k', '--projects', 'a', '--frob'], 2, "error[SG_USAGE]: unknown option '--frob'"],
    [
      ['create', '--name', 'k', '--projects', 'a', '--rpm', 'lots', '-o', 'yaml'],
      2,
      'must be a whole number 0 or more, got "lots"',
    ],
    [['create', '--name'], 2, "option '--name <name>' argument missing"],
    [['rotate'], 2, "error[SG_USAGE]: unknown command 'rotate'"],
    [['revok', '--name', 'x'], 2, '(Did you mean revoke?)'],
    [['create', '--name', 'k', '--projects', 'a'], 1, 'error[SG_CLUSTER]: no cluster configured'],
    [['list'], 1, 'error[SG_CLUSTER]: no cluster configured'],
  ])('keys %j exits %i saying %s', async (argv, code, message) => {
    const r = await keys(argv);
    expect(r.code).toBe(code);
    expect(r.err).toContain(message);
    expect(r.out).toBe('');
  });

  test.each([[['--help']], [['-h']], [['create', '--help']], [['list', '--help']], [['revoke', '-h']]])(
    'keys %j prints the usage',
    async (argv) => {
      const r = await keys(argv);
      expect(r.code).toBe(0);
      expect(r.out).toContain('Usage: servegate keys');
      expect(r.err).toBe('');
    },
  );

  test('keys without a command prints its usage to stderr and exits 2', async () => {
    const r = await keys([]);
    expect(r.code).toBe(2);
    expect(r.err).toContain('Usage: servegate keys');
    expect(r.out).toBe('');
  });

  test('create --rpm/--tpm writes the limits into the Secret, where the gateway reads them', async () => {
    const r = await keys([
      'create',
      '--name',
      'limited',
      '--projects',
      'demo',
      '--rpm',
      '60',
      '--tpm',
      '100000',
      '-o',
      'json',
    ]);
    expect(r.code, r.err).toBe(0);
    const manifest = JSON.parse(r.out);
    expect(manifest.stringData).toMatchObject({ rpm: '60', tpm: '100000' });
    expect(r.err).toContain('60 requests/min, 100000 tokens/min');
  });

  test('create --budget-* --tenant --priority --weight write the fields the gateway reads; bad values are refused', async () => {
    const r = await keys(
      ['create', '--name', 'team', '--projects', 'demo', '--budget-tokens', '2000000', '--budget-cost', '50'].concat([
        '--budget-period',
        'day',
        '--tenant',
        'team-a',
        '--priority',
        'critical',
        '--weight',
        '2',
        '-o',
        'json',
      ]),
    );
    expect(r.code, r.err).toBe(0);
    const manifest = JSON.parse(r.out);
    expect(manifest.stringData).toMatchObject({
      budgetTokens: '2000000',
      budgetCost: '50',
      budgetPeriod: 'day',
      tenant: 'team-a',
      priority: 'critical',
      weight: '2',
    });
    expect(r.err).toContain('budget 2000000 tokens and cost 50 per day');
    const { keys: table, problems } = buildKeys([asKeySecret(manifest)], 'servegate');
    expect(problems).toEqual([]);
    expect([...table.values()][0][0]).toMatchObject({
      budget: { tokens: 2_000_000, cost: 50, period: { kind: 'day' } },
      tenant: 'team-a',
      priority: 'critical',
      weight: 2,
    });
    for (const [flag, value, message] of [
      ['--budget-period', 'fortnight', 'budgetPeriod must be "day", "month" or a rolling duration'],
      ['--budget-cost', '1e3', '--budget-cost must be a decimal 0 or more'],
      ['--priority', 'urgent', '--priority must be critical, standard or sheddable'],
    ]) {
      const bad = await keys(['create', '--name', 'k', '--projects', 'a', flag, value, '-o', 'yaml']);
      expect(bad.code).not.toBe(0);
      expect(bad.err).toContain(message);
    }
  });

  test('update without a field to change is a usage error', async () => {
    const r = await keys(['update', '--name', 'k', '--manifests', tempDir()]);
    expect(r.code).toBe(2);
    expect(r.err).toContain('nothing to update');
  });
});

describe('keys in files mode (--manifests DIR)', () => {
  test('create writes one Secret file the gateway accepts and prints the key once on stdout', async () => {
    const dir = tempDir();
    const r = await keys(['create', '--name', 'ci-bot', '--projects', 'demo', '--manifests', dir]);
    expect(r.code).toBe(0);
    const key = r.out.trim();
    expect(key).toMatch(KEY_RE);
    expect(r.err).not.toContain(key);
    const files = readdirSync(dir);
    expect(files).toEqual(['apikey-ci-bot.yaml']);
    const text = readFileSync(join(dir, files[0]), 'utf8');
    expect(text).not.toContain(key.split('.')[1]);
    expect(parseYaml(text).metadata.namespace).toBeUndefined();
    // Read exactly as `servegate serve --manifests` reads it.
    const parsed = parseManifests(text, { origin: files[0], keysNamespace: 'servegate' });
    expect(parsed.errors).toEqual([]);
    expect(parsed.keySecrets[0].metadata).toMatchObject({ name: 'ci-bot', namespace: 'servegate' });
    const { keys: table, problems } = buildKeys(parsed.keySecrets, 'servegate');
    expect(problems).toEqual([]);
    expect(table.get(key.slice(0, 16))![0].sha256.toString('hex')).toBe(hashKey(key));
  });

  test('a second key with the same name is refused, naming it', async () => {
    const dir = tempDir();
    expect((await keys(['create', '--name', 'ci-bot', '--projects', 'demo', '--manifests', dir])).code).toBe(0);
    const r = await keys(['create', '--name', 'ci-bot', '--projects', 'other', '--manifests', dir]);
    expect(r.code).toBe(1);
    expect(r.err).toContain('"ci-bot" already exists');
    expect(r.out).toBe('');
    expect(readdirSync(dir)).toEqual(['apikey-ci-bot.yaml']);
  });

  test('list shows name, prefix, projects and expiry but never the key or its hash', async () => {
    const dir = tempDir();
    const a = await keys([
      'create',
      '--name',
      'alpha',
      '--projects',
      'demo,fraud_detection',
      '--expires',
      '12h',
      '--manifests',
      dir,
    ]);
    const b = await keys(['create', '--name', 'beta', '--projects', '*', '--manifests', dir]);
    const r = await keys(['list', '--manifests', dir]);
    expect(r.code).toBe(0);
    const lines = r.out.trim().split('\n');
    expect(lines[0]).toMatch(/^NAME\s+PREFIX\s+PROJECTS\s+EXPIRES/);
    expect(lines[1]).toMatch(
      new RegExp(`^alpha\\s+${a.out.slice(0, 16)}\\s+demo,fraud_detection\\s+2026-06-02T00:00:00Z`),
    );
    expect(lines[2]).toMatch(new RegExp(`^beta\\s+${b.out.slice(0, 16)}\\s+\\*\\s+never`));
    for (const created of [a, b]) {
      const key = created.out.trim();
      expect(r.out).not.toContain(key.split('.')[1]);
      expect(r.out).not.toContain(hashKey(key));
    }
    const json = JSON.parse((await keys(['list', '--manifests', dir, '-o', 'json'])).out);
    expect(json.map((k: { name: string }) => k.name)).toEqual(['alpha', 'beta']);
    expect(JSON.stringify(json)).not.toContain(hashKey(a.out.trim()));
  });

  test('list marks an expired key', async () => {
    const dir = tempDir();
    const m = keySecretManifest({
      name: 'old',
      prefix: 'A'.repeat(16),
      sha256: 'a'.repeat(64),
      projects: ['x'],
      expiresAt: new Date('2026-01-01T00:00:00Z'),
    });
    writeFileSync(join(dir, 'old.yaml'), JSON.stringify(m));
    const r = await keys(['list', '--manifests', dir]);
    expect(r.out).toMatch(/old\s+A{16}\s+x\s+2026-01-01T00:00:00Z \(expired\)/);
  });

  test('revoke removes the key file; revoking again says there is no such key', async () => {
    const dir = tempDir();
    await keys(['create', '--name', 'ci-bot', '--projects', 'demo', '--manifests', dir]);
    await keys(['create', '--name', 'keep', '--projects', 'demo', '--manifests', dir]);
    const r = await keys(['revoke', '--name', 'ci-bot', '--manifests', dir]);
    expect(r.code).toBe(0);
    expect(readdirSync(dir)).toEqual(['apikey-keep.yaml']);
    const again = await keys(['revoke', '--name', 'ci-bot', '--manifests', dir]);
    expect(again.code).toBe(1);
    expect(again.err).toContain('no API key named "ci-bot"');
  });

  test('revoke of a key kept in a file with other documents removes only that document', async () => {
    const dir = tempDir();
    const key = keySecretManifest({ name: 'shared', prefix: 'B'.repeat(16), sha256: 'b'.repeat(64), projects: '*' });
    const other = {
      apiVersion: 'serving.servegate.dev/v1alpha1',
      kind: 'ServingDeployment',
      metadata: { name: 'iris' },
      spec: { type: 'python', backend: { url: 'http://127.0.0.1:9' } },
    };
    writeFileSync(join(dir, 'all.yaml'), `# my manifests\n${JSON.stringify(other)}\n---\n${JSON.stringify(key)}\n`);
    const r = await keys(['revoke', '--name', 'shared', '--manifests', dir]);
    expect(r.code).toBe(0);
    const docs = parseAllDocuments(readFileSync(join(dir, 'all.yaml'), 'utf8'));
    expect(Array.isArray(docs) && docs.map((d) => d.toJS())).toEqual([other]);
  });

  test('with a single manifests file, create appends the key as one more document and revoke takes it out', async () => {
    const dir = tempDir();
    const file = join(dir, 'all.yaml');
    const other = {
      apiVersion: 'serving.servegate.dev/v1alpha1',
      kind: 'ServingDeployment',
      metadata: { name: 'iris', namespace: 'demo' },
      spec: { type: 'python', backend: { url: 'http://127.0.0.1:9' } },
    };
    writeFileSync(file, JSON.stringify(other) + '\n');
    const r = await keys(['create', '--name', 'ci-bot', '--projects', 'demo', '--manifests', file]);
    expect(r.code, r.err).toBe(0);
    expect(readdirSync(dir)).toEqual(['all.yaml']);
    const parsed = parseManifests(readFileSync(file, 'utf8'), { origin: file, keysNamespace: 'servegate' });
    expect(parsed.errors).toEqual([]);
    expect(parsed.deployments.map((d) => d.metadata.name)).toEqual(['iris']);
    expect(parsed.keySecrets[0].data.sha256).toBe(hashKey(r.out.trim()));
    expect((await keys(['create', '--name', 'ci-bot', '--projects', 'demo', '--manifests', file])).code).toBe(1);
    expect((await keys(['revoke', '--name', 'ci-bot', '--manifests', file])).code).toBe(0);
    const after = parseManifests(readFileSync(file, 'utf8'), { origin: file, keysNamespace: 'servegate' });
    expect(after.keySecrets).toEqual([]);
    expect(after.deployments).toHaveLength(1);
  });

  test('revoking the last key of a single served file leaves the file, empty', async () => {
    const file = join(tempDir(), 'keys.yaml');
    writeFileSync(file, '');
    expect((await keys(['create', '--name', 'only', '--projects', 'demo', '--manifests', file])).code).toBe(0);
    expect((await keys(['revoke', '--name', 'only', '--manifests', file])).code).toBe(0);
    expect(readFileSync(file, 'utf8')).toBe('');
  });

  test('a key inside a kind: List is listed, and revoke asks for a hand edit instead of rewriting the List', async () => {
    const dir = tempDir();
    const key = keySecretManifest({
      name: 'in-list',
      prefix: 'C'.repeat(16),
      sha256: 'c'.repeat(64),
      projects: ['demo'],
    });
    writeFileSync(join(dir, 'list.yaml'), JSON.stringify({ apiVersion: 'v1', kind: 'List', items: [key] }));
    expect((await keys(['list', '--manifests', dir])).out).toMatch(/in-list\s+C{16}\s+demo/);
    const r = await keys(['revoke', '--name', 'in-list', '--manifests', dir]);
    expect(r.code).toBe(1);
    expect(r.err).toContain('item of a List');
    expect(readdirSync(dir)).toEqual(['list.yaml']);
  });

  test('revoke refuses a Secret without the key label', async () => {
    const dir = tempDir();
    writeFileSync(
      join(dir, 's.yaml'),
      'apiVersion: v1\nkind: Secret\nmetadata: {name: db-password}\nstringData: {password: x}\n',
    );
    const r = await keys(['revoke', '--name', 'db-password', '--manifests', dir]);
    expect(r.code).toBe(1);
    expect(readdirSync(dir)).toEqual(['s.yaml']);
  });
});

describe('keys in the cluster (fake API server over HTTP)', () => {
  let fake: FakeApiServer;
  let kubeconfig: string;
  beforeAll(async () => {
    fake = await FakeApiServer.start();
    const dir = mkdtempSync(join(tmpdir(), 'servegate-kc-'));
    kubeconfig = join(dir, 'config');
    writeFileSync(kubeconfig, fake.kubeConfig().exportConfig());
  });
  afterAll(async () => {
    await fake.stop();
    rmSync(join(kubeconfig, '..'), { recursive: true, force: true });
  });

  test('create makes a labelled Secret in the keys namespace that buildKeys accepts; the key is printed once', async () => {
    const r = await keys([
      'create',
      '--name',
      'ci-bot',
      '--projects',
      'fraud_detection',
      '--expires',
      '30d',
      '--kubeconfig',
      kubeconfig,
    ]);
    expect(r.code, r.err).toBe(0);
    const key = r.out.trim();
    expect(key).toMatch(KEY_RE);
    const stored = fake.get('v1', 'Secret', 'servegate', 'ci-bot')!;
    expect(stored.metadata.labels).toEqual({ 'serving.servegate.dev/api-key': 'true' });
    expect(JSON.stringify(stored)).not.toContain(key.split('.')[1]);
    const { keys: table, problems } = buildKeys([asKeySecret(stored)], 'servegate');
    expect(problems).toEqual([]);
    expect(table.get(key.slice(0, 16))![0].sha256.toString('hex')).toBe(hashKey(key));
  });

  test('KUBECONFIG and POD_NAMESPACE choose the cluster and the namespace', async () => {
    const r = await keys(['create', '--name', 'from-env', '--projects', '*'], {
      KUBECONFIG: kubeconfig,
      POD_NAMESPACE: 'gw',
    });
    expect(r.code, r.err).toBe(0);
    expect(fake.get('v1', 'Secret', 'gw', 'from-env')).toBeDefined();
  });

  test('a duplicate name is refused, naming the Secret', async () => {
    await keys(['create', '--name', 'dup', '--projects', 'a', '-n', 'team', '--kubeconfig', kubeconfig]);
    const r = await keys(['create', '--name', 'dup', '--projects', 'a', '-n', 'team', '--kubeconfig', kubeconfig]);
    expect(r.code).toBe(1);
    expect(r.err).toContain('"dup" already exists in namespace team');
    expect(r.out).toBe('');
  });

  test('list shows the keys of the namespace without secrets; revoke deletes one', async () => {
    const a = await keys(['create', '--name', 'one', '--projects', 'x,y', '-n', 'listing', '--kubeconfig', kubeconfig]);
    await keys([
      'create',
      '--name',
      'two',
      '--projects',
      '*',
      '--expires',
      '2030-01-01T00:00:00Z',
      '-n',
      'listing',
      '--kubeconfig',
      kubeconfig,
    ]);
    fake.create({
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: 'db', namespace: 'listing' },
      stringData: { password: 'hunter2' },
    });
    const r = await keys(['list', '-n', 'listing', '--kubeconfig', kubeconfig]);
    expect(r.code, r.err).toBe(0);
    const lines = r.out.trim().split('\n');
    expect(lines).toHaveLength(3);
    expect(lines[1]).toMatch(new RegExp(`^one\\s+${a.out.slice(0, 16)}\\s+x,y\\s+never\\s+default$`));
    expect(lines[2]).toMatch(/^two\s+[A-Za-z0-9]{16}\s+\*\s+2030-01-01T00:00:00Z\s+default$/);
    expect(r.out).not.toContain(hashKey(a.out.trim()));

    expect((await keys(['revoke', '--name', 'one', '-n', 'listing', '--kubeconfig', kubeconfig])).code).toBe(0);
    expect(fake.get('v1', 'Secret', 'listing', 'one')).toBeUndefined();
    const gone = await keys(['revoke', '--name', 'one', '-n', 'listing', '--kubeconfig', kubeconfig]);
    expect(gone.code).toBe(1);
    expect(gone.err).toContain('no API key named "one" in namespace listing');
  });

  test('revoke will not delete a Secret that is not an API key', async () => {
    fake.create({
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: 'tls', namespace: 'servegate' },
      stringData: { crt: 'x' },
    });
    const r = await keys(['revoke', '--name', 'tls', '--kubeconfig', kubeconfig]);
    expect(r.code).toBe(1);
    expect(r.err).toContain('is not an API key');
    expect(fake.get('v1', 'Secret', 'servegate', 'tls')).toBeDefined();
  });

  test('an API server error is reported with its message', async () => {
    fake.failNext(1, 403);
    const r = await keys(['create', '--name', 'denied', '--projects', 'a', '--kubeconfig', kubeconfig]);
    expect(r.code).toBe(1);
    expect(r.err).toContain('not allowed to create Secrets in namespace servegate');
  });
});
