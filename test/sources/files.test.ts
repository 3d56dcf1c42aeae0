// The files source: a folder or a file of manifests, reloaded within a second of any change.
import { createHash } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rename, rm, symlink, unlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { afterEach, describe, expect, test } from '@jest/globals';
import { parseConfig } from '../../src/config/load.js';
import { createLogger } from '../../src/log.js';
import { buildRouteTable } from '../../src/routing/build.js';
import type { Snapshot } from '../../src/routing/types.js';
import { FilesSource, listManifestFiles, type FilesSourceOptions } from '../../src/sources/files/index.js';
import { parseManifests } from '../../src/sources/manifests.js';
import { waitFor } from '../support/wait.js';

/** The reload contract: a change shows up in a snapshot within one second. */
const CONTRACT_MS = 1000;

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function tempDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'servegate-files-'));
  cleanups.push(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

function sdepYaml(name: string, opts: { ns?: string; port?: number; project?: string } = {}): string {
  return `apiVersion: serving.servegate.dev/v1alpha1
kind: ServingDeployment
metadata:
  name: ${name}
${opts.ns ? `  namespace: ${opts.ns}\n` : ''}spec:
  project: ${opts.project ?? 'demo'}
  type: model
  modelServer: sklearn
  backend:
    url: http://127.0.0.1:${opts.port ?? 8081}
`;
}

function keyYaml(name: string, prefix = 'AbCdEfGh12345678'): string {
  return `apiVersion: v1
kind: Secret
metadata:
  name: ${name}
  labels: {serving.servegate.dev/api-key: "true"}
stringData:
  prefix: ${prefix}
  sha256: ${'a'.repeat(64)}
  projects: demo
`;
}

/** Records snapshots and waits, with a bounded timeout, for one that satisfies a predicate. */
class Recorder {
  snapshots: Snapshot[] = [];
  private waiters: Array<() => void> = [];
  readonly on = (s: Snapshot): void => {
    this.snapshots.push(s);
    for (const w of this.waiters.splice(0)) w();
  };
  get last(): Snapshot {
    return this.snapshots[this.snapshots.length - 1];
  }
  async until(pred: (s: Snapshot) => boolean, what: string, timeoutMs = CONTRACT_MS): Promise<Snapshot> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      if (this.last && pred(this.last)) return this.last;
      const left = deadline - Date.now();
      if (left <= 0)
        throw new Error(
          `no snapshot with ${what} within ${timeoutMs} ms; last: ${JSON.stringify(this.last && summary(this.last))}`,
        );
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, left);
        this.waiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
  }
}

function summary(s: Snapshot) {
  return {
    deployments: s.deployments.map((d) => `${d.metadata.namespace}/${d.metadata.name}@${d.origin}`),
    keys: s.keySecrets.map((k) => `${k.metadata.namespace}/${k.metadata.name}`),
    readErrors: s.readErrors,
  };
}

const names = (s: Snapshot) => s.deployments.map((d) => d.metadata.name).sort();
const urlOf = (s: Snapshot, name: string) =>
  (s.deployments.find((d) => d.metadata.name === name)?.spec as { backend?: { url?: string } } | undefined)?.backend
    ?.url;

async function startSource(
  path: string,
  opts: Partial<FilesSourceOptions> = {},
): Promise<{ source: FilesSource; rec: Recorder }> {
  const rec = new Recorder();
  const source = new FilesSource(path, { keysNamespace: 'servegate', ...opts });
  cleanups.push(() => source.stop());
  await source.start(rec.on);
  return { source, rec };
}

describe('FilesSource', () => {
  test('the first snapshot holds every manifest of the folder tree and start() resolves after it', async () => {
    const dir = await tempDir();
    await mkdir(join(dir, 'team-a', 'nested'), { recursive: true });
    await writeFile(join(dir, 'iris.yaml'), sdepYaml('iris', { ns: 'demo' }));
    await writeFile(join(dir, 'team-a', 'nested', 'mnist.yml'), sdepYaml('mnist'));
    await writeFile(join(dir, 'team-a', 'key.json'), JSON.stringify(parseYamlKey(keyYaml('k1'))));
    const { source, rec } = await startSource(dir);

    expect(rec.snapshots).toHaveLength(1);
    const s = rec.last;
    expect(s.source).toBe('files');
    expect(s.services).toBeUndefined();
    expect(s.readErrors).toEqual([]);
    expect(summary(s).deployments).toEqual([
      `demo/iris@${join(dir, 'iris.yaml')}#1`,
      `default/mnist@${join(dir, 'team-a', 'nested', 'mnist.yml')}#1`,
    ]);
    expect(summary(s).keys).toEqual(['servegate/k1']);
    expect(source.health()).toEqual({ synced: true, stalenessMs: 0, problems: [] });
  });

  test('dotfiles, editor temp files, other extensions and node_modules are not read', async () => {
    const dir = await tempDir();
    const broken = 'kind: [this is not yaml';
    await writeFile(join(dir, 'good.yaml'), sdepYaml('good'));
    for (const f of [
      '.hidden.yaml',
      'good.yaml~',
      '.#good.yaml',
      '.good.yaml.swp',
      'good.yaml.swp',
      '#good.yaml#',
      'notes.txt',
      'README.md',
    ]) {
      await writeFile(join(dir, f), broken);
    }
    await mkdir(join(dir, '.git'));
    await writeFile(join(dir, '.git', 'x.yaml'), sdepYaml('from-git'));
    await mkdir(join(dir, 'node_modules', 'pkg'), { recursive: true });
    await writeFile(join(dir, 'node_modules', 'pkg', 'package.json'), broken);
    const { rec } = await startSource(dir);
    expect(rec.last.readErrors).toEqual([]);
    expect(names(rec.last)).toEqual(['good']);
  });

  test('a .servegateignore pattern keeps a folder out', async () => {
    const dir = await tempDir();
    await mkdir(join(dir, 'cluster'));
    await writeFile(join(dir, 'local.yaml'), sdepYaml('iris'));
    await writeFile(join(dir, 'cluster', 'iris.yaml'), sdepYaml('iris', { port: 9999 }));
    await writeFile(join(dir, '.servegateignore'), '# not for the files source\ncluster/\n');
    const { rec } = await startSource(dir);
    expect(rec.last.readErrors).toEqual([]);
    expect(summary(rec.last).deployments).toEqual([`default/iris@${join(dir, 'local.yaml')}#1`]);
  });

  test.each([
    [
      'an edited file',
      async (dir: string) => writeFile(join(dir, 'a.yaml'), sdepYaml('a', { port: 9001 })),
      (s: Snapshot) => urlOf(s, 'a') === 'http://127.0.0.1:9001' && names(s).join() === 'a,b',
    ],
    [
      'an added file',
      async (dir: string) => writeFile(join(dir, 'sub', 'c.yaml'), sdepYaml('c')),
      (s: Snapshot) => names(s).join() === 'a,b,c',
    ],
    [
      'a deleted file',
      async (dir: string) => unlink(join(dir, 'sub', 'b.yaml')),
      (s: Snapshot) => names(s).join() === 'a',
    ],
    [
      'a renamed file (same resources, new origin)',
      async (dir: string) => rename(join(dir, 'sub', 'b.yaml'), join(dir, 'sub', 'b2.yml')),
      (s: Snapshot) =>
        s.deployments.some((d) => d.origin?.endsWith(join('sub', 'b2.yml#1'))) && names(s).join() === 'a,b',
    ],
    [
      'a file renamed to a non-manifest name',
      async (dir: string) => rename(join(dir, 'sub', 'b.yaml'), join(dir, 'sub', 'b.yaml.disabled')),
      (s: Snapshot) => names(s).join() === 'a',
    ],
    [
      'an editor-style save (write a temp file, rename it over the original)',
      async (dir: string) => {
        await writeFile(join(dir, '.a.yaml.tmp'), sdepYaml('a', { port: 9002 }));
        await rename(join(dir, '.a.yaml.tmp'), join(dir, 'a.yaml'));
      },
      (s: Snapshot) => urlOf(s, 'a') === 'http://127.0.0.1:9002',
    ],
  ])('%s is reflected within one second', async (_name, change, done) => {
    const dir = await tempDir();
    await mkdir(join(dir, 'sub'));
    await writeFile(join(dir, 'a.yaml'), sdepYaml('a'));
    await writeFile(join(dir, 'sub', 'b.yaml'), sdepYaml('b'));
    const { rec } = await startSource(dir);
    expect(done(rec.last)).toBe(false);
    await change(dir);
    await rec.until(done, 'the change');
  });

  test('the stat poll alone sees an edit within one second (when fs.watch reports nothing)', async () => {
    const dir = await tempDir();
    await writeFile(join(dir, 'a.yaml'), sdepYaml('a'));
    const { rec } = await startSource(dir, { watch: false, pollIntervalMs: 200 });
    await writeFile(join(dir, 'a.yaml'), sdepYaml('a', { port: 9003 }));
    await rec.until((s) => urlOf(s, 'a') === 'http://127.0.0.1:9003', 'the edit');
  });

  test('fs.watch alone (poll slowed to a minute) follows files in a folder created after start', async () => {
    const dir = await tempDir();
    await writeFile(join(dir, 'a.yaml'), sdepYaml('a'));
    const { rec } = await startSource(dir, { pollIntervalMs: 60_000 });
    await mkdir(join(dir, 'later'));
    await writeFile(join(dir, 'later', 'b.yaml'), sdepYaml('b'));
    await rec.until((s) => names(s).join() === 'a,b', 'the file in the new folder');
    await writeFile(join(dir, 'later', 'b.yaml'), sdepYaml('b', { port: 9300 }));
    await rec.until((s) => urlOf(s, 'b') === 'http://127.0.0.1:9300', 'the edit in the new folder');
    await rm(join(dir, 'later'), { recursive: true });
    await rec.until((s) => names(s).join() === 'a', 'the folder removed');
  });

  test('two edits of the same size in quick succession end on the last content', async () => {
    const dir = await tempDir();
    await writeFile(join(dir, 'a.yaml'), sdepYaml('a', { port: 9000 }));
    const { rec } = await startSource(dir, { watch: false, pollIntervalMs: 100 });
    await writeFile(join(dir, 'a.yaml'), sdepYaml('a', { port: 9001 }));
    await writeFile(join(dir, 'a.yaml'), sdepYaml('a', { port: 9002 }));
    await rec.until((s) => urlOf(s, 'a') === 'http://127.0.0.1:9002', 'the second edit');
  });

  test('a bad document is reported with file and document index while the good ones are served', async () => {
    const dir = await tempDir();
    const lines: string[] = [];
    const logger = createLogger('debug', new Writable({ write: (c, _e, cb) => (lines.push(String(c)), cb()) }));
    const bad =
      'apiVersion: serving.servegate.dev/v1alpha1\nkind: ServingDeployment\nmetadata: {namespace: demo}\nspec: {}\n';
    await writeFile(join(dir, 'app.yaml'), `${sdepYaml('one')}---\n${bad}---\n${sdepYaml('three')}`);
    const { source, rec } = await startSource(dir, { logger });

    expect(names(rec.last)).toEqual(['one', 'three']);
    const origin = `${join(dir, 'app.yaml')}#2`;
    expect(rec.last.readErrors).toEqual([{ origin, message: expect.stringMatching(/metadata\.name/) }]);
    expect(source.health().problems).toEqual([expect.stringContaining(`${origin}: `)]);
    const logged = lines.map((l) => JSON.parse(l) as Record<string, unknown>).find((l) => l.origin === origin);
    expect(logged).toMatchObject({
      level: 'warn',
      file: join(dir, 'app.yaml'),
      document: 2,
      reason: expect.stringMatching(/metadata\.name/),
    });

    // Fixing the document clears the problem.
    await writeFile(join(dir, 'app.yaml'), `${sdepYaml('one')}---\n${sdepYaml('three')}`);
    await rec.until((s) => s.readErrors?.length === 0, 'no read errors');
    expect(source.health().problems).toEqual([]);
  });

  test('a half-written (invalid YAML) file keeps its last good documents, and its next good version applies', async () => {
    const dir = await tempDir();
    await writeFile(join(dir, 'a.yaml'), `${sdepYaml('a')}---\n${sdepYaml('a2')}`);
    await writeFile(join(dir, 'other.yaml'), sdepYaml('other'));
    const { source, rec } = await startSource(dir);

    // Half of a new version: valid first document, cut in the middle of the second.
    const full = `${sdepYaml('a', { port: 9100 })}---\n${sdepYaml('a2', { port: 9101 })}`;
    await writeFile(
      join(dir, 'a.yaml'),
      `${full.slice(0, full.indexOf('backend:', full.indexOf('a2')))}backend: {url: "http://127.0.0.1:91`,
    );
    const broken = await rec.until(
      (s) => (s.readErrors ?? []).some((e) => e.origin.startsWith(join(dir, 'a.yaml'))),
      'the YAML error',
    );
    expect(broken.readErrors![0].message).toMatch(/not valid YAML.*last good version \(2 resources\) stays in use/);
    expect(names(broken)).toEqual(['a', 'a2', 'other']);
    expect(urlOf(broken, 'a')).toBe('http://127.0.0.1:8081'); // nothing of the broken text applied
    expect(source.health().problems).toHaveLength(1);

    await writeFile(join(dir, 'a.yaml'), full);
    const fixed = await rec.until((s) => urlOf(s, 'a2') === 'http://127.0.0.1:9101', 'the complete file');
    expect(fixed.readErrors).toEqual([]);
    expect(urlOf(fixed, 'a')).toBe('http://127.0.0.1:9100');
  });

  test('a new file that is invalid YAML from the start contributes nothing and is reported', async () => {
    const dir = await tempDir();
    await writeFile(join(dir, 'a.yaml'), sdepYaml('a'));
    await writeFile(join(dir, 'b.yaml'), 'kind: ServingDeployment\nmetadata: {name: b');
    const { rec } = await startSource(dir);
    expect(names(rec.last)).toEqual(['a']);
    expect(rec.last.readErrors).toEqual([
      { origin: `${join(dir, 'b.yaml')}#1`, message: expect.stringMatching(/nothing from this file is used/) },
    ]);
  });

  test('an API-key Secret added and removed shows up and disappears, in the keys namespace', async () => {
    const dir = await tempDir();
    await writeFile(join(dir, 'a.yaml'), sdepYaml('a'));
    const { rec } = await startSource(dir, { keysNamespace: 'keys-here' });
    expect(rec.last.keySecrets).toEqual([]);
    await writeFile(join(dir, 'key.yaml'), keyYaml('ci-bot'));
    const added = await rec.until((s) => s.keySecrets.length === 1, 'the key');
    expect(added.keySecrets[0]).toMatchObject({
      metadata: { name: 'ci-bot', namespace: 'keys-here' },
      data: { prefix: 'AbCdEfGh12345678', projects: 'demo' },
    });
    await unlink(join(dir, 'key.yaml'));
    await rec.until((s) => s.keySecrets.length === 0, 'no key');
  });

  test('identical content produces no new snapshot', async () => {
    const dir = await tempDir();
    const text = sdepYaml('a');
    await writeFile(join(dir, 'a.yaml'), text);
    const { source, rec } = await startSource(dir, { pollIntervalMs: 100 });
    await writeFile(join(dir, 'a.yaml'), text); // same bytes, new mtime
    await writeFile(join(dir, 'a.yaml~'), 'editor backup'); // ignored file
    // refresh() reads every file again and resolves once that read is published (or found unchanged): the rewrites
    // above have been read before the marker is written, instead of hoping the watcher or poll did in a fixed time.
    await source.refresh();
    expect(rec.snapshots).toHaveLength(1);
    await writeFile(join(dir, 'b.yaml'), sdepYaml('b'));
    await rec.until((s) => names(s).join() === 'a,b', 'the marker file');
    expect(rec.snapshots).toHaveLength(2);
  });

  test('single-file mode: edits, atomic replacement and deletion of the file are followed', async () => {
    const dir = await tempDir();
    const file = join(dir, 'only.yaml');
    await writeFile(join(dir, 'sibling.yaml'), sdepYaml('sibling')); // not part of the source
    await writeFile(file, sdepYaml('a'));
    const { rec } = await startSource(file);
    expect(summary(rec.last).deployments).toEqual([`default/a@${file}#1`]);

    await writeFile(file, `${sdepYaml('a')}---\n${sdepYaml('b')}`);
    await rec.until((s) => names(s).join() === 'a,b', 'the edit');

    await writeFile(join(dir, 'tmp.new'), sdepYaml('c'));
    await rename(join(dir, 'tmp.new'), file);
    await rec.until((s) => names(s).join() === 'c', 'the replaced file');

    await unlink(file);
    const gone = await rec.until((s) => s.deployments.length === 0, 'no deployments');
    expect(gone.readErrors).toEqual([{ origin: file, message: expect.stringMatching(/does not exist/) }]);

    await writeFile(file, sdepYaml('d'));
    await rec.until((s) => names(s).join() === 'd' && s.readErrors?.length === 0, 'the file back');
  });

  test('ConfigMap-style folders (files are symlinks into a swapped ..data folder) reload on the swap', async () => {
    const dir = await tempDir();
    await mkdir(join(dir, '..v1'));
    await writeFile(join(dir, '..v1', 'app.yaml'), sdepYaml('a'));
    await symlink('..v1', join(dir, '..data'));
    await symlink(join('..data', 'app.yaml'), join(dir, 'app.yaml'));
    const { rec } = await startSource(dir);
    expect(summary(rec.last).deployments).toEqual([`default/a@${join(dir, 'app.yaml')}#1`]);

    // What the kubelet does: write a new timestamped folder, then atomically repoint ..data.
    await mkdir(join(dir, '..v2'));
    await writeFile(join(dir, '..v2', 'app.yaml'), sdepYaml('a', { port: 9200 }));
    await symlink('..v2', join(dir, '..data_tmp'));
    await rename(join(dir, '..data_tmp'), join(dir, '..data'));
    await rec.until((s) => urlOf(s, 'a') === 'http://127.0.0.1:9200', 'the new ConfigMap content');
  });

  test('a missing path is an error from start() that names it', async () => {
    const dir = await tempDir();
    const missing = join(dir, 'nope');
    const source = new FilesSource(missing, { keysNamespace: 'servegate' });
    await expect(source.start(() => undefined)).rejects.toThrow(`manifests path "${missing}" does not exist`);
  });

  test('after stop() no snapshot is delivered', async () => {
    const dir = await tempDir();
    await writeFile(join(dir, 'a.yaml'), sdepYaml('a'));
    const { source, rec } = await startSource(dir, { pollIntervalMs: 100 });
    // A second source on the same folder, still running: when it has seen the change, the stopped one would have too.
    const control = await startSource(dir, { pollIntervalMs: 100 });
    await source.stop();
    await writeFile(join(dir, 'b.yaml'), sdepYaml('b'));
    await control.rec.until((s) => names(s).join() === 'a,b', 'the change, in the running source');
    // Stays: proving nothing arrives needs a window; two poll periods past the control's snapshot, anchored on it.
    await new Promise((r) => setTimeout(r, 200));
    expect(rec.snapshots).toHaveLength(1);
  });

  test('a callback that throws does not stop later reloads', async () => {
    const dir = await tempDir();
    await writeFile(join(dir, 'a.yaml'), sdepYaml('a'));
    const seen: Snapshot[] = [];
    const source = new FilesSource(dir, { keysNamespace: 'servegate' });
    cleanups.push(() => source.stop());
    await source.start((s) => {
      seen.push(s);
      throw new Error('consumer bug');
    });
    await writeFile(join(dir, 'b.yaml'), sdepYaml('b'));
    await waitFor(() => seen.length >= 2, 'the snapshot after the throwing one', CONTRACT_MS);
    expect(seen.map(names)).toEqual([['a'], ['a', 'b']]);
  });

  test('the same resource in two files: the later file (path order) wins and the earlier one is reported', async () => {
    const dir = await tempDir();
    await writeFile(join(dir, '1.yaml'), sdepYaml('a', { port: 9001 }));
    await writeFile(join(dir, '2.yaml'), sdepYaml('a', { port: 9002 }));
    const { rec } = await startSource(dir);
    expect(urlOf(rec.last, 'a')).toBe('http://127.0.0.1:9002');
    expect(rec.last.readErrors).toEqual([
      { origin: `${join(dir, '1.yaml')}#1`, message: expect.stringMatching(/defined again at .*2\.yaml#1/) },
    ]);
  });
});

function parseYamlKey(text: string): unknown {
  const r = parseManifests(text, { origin: 'x', keysNamespace: 'servegate' });
  const k = r.keySecrets[0];
  return {
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: { name: k.metadata.name, labels: k.metadata.labels },
    stringData: k.data,
  };
}

// ---- the shipped examples ----

const EXAMPLES = new URL('../../examples/', import.meta.url).pathname;
const DEMO_KEY = 'DemoKeyDoNotUse1.this-is-the-public-demo-key-never-use-it';

describe('examples/', () => {
  const config = parseConfig({}, { port: 8080, namespace: 'servegate' });
  const options = {
    publicUrl: config.publicUrl,
    serverlessDomain: config.serverlessDomain,
    keysNamespace: config.auth.keysNamespace,
    defaultTimeoutMs: config.limits.requestTimeoutSeconds * 1000,
  };

  test('the files source reads examples/ with no read error, and every deployment is ready', async () => {
    const { rec } = await startSource(EXAMPLES, { keysNamespace: config.auth.keysNamespace });
    const s = rec.last;
    expect(s.readErrors).toEqual([]);
    expect(names(s)).toEqual(['chat', 'echo', 'fleet', 'iris', 'mnist']);
    const { statuses, keyProblems, table } = buildRouteTable(s, options);
    expect(keyProblems).toEqual([]);
    expect(statuses.map((st) => [st.name, st.ready, st.message])).toEqual(statuses.map((st) => [st.name, true, '']));
    expect(table.routes.map((r) => `${r.project}/${r.deployment}:${r.kind}`)).toEqual([
      'demo/chat:llm',
      'demo/echo:python',
      'demo/fleet:llm',
      'demo/iris:predictive',
      'demo/mnist:predictive',
    ]);
  });

  test('listManifestFiles gives the CLI the same files the source reads', async () => {
    expect(await listManifestFiles(EXAMPLES)).toEqual(
      ['config.yaml', 'deployments.yaml', join('keys', 'demo-key.yaml')].map((f) => join(EXAMPLES, f)),
    );
    expect(await listManifestFiles(join(EXAMPLES, 'deployments.yaml'))).toEqual([join(EXAMPLES, 'deployments.yaml')]);
    expect(await listManifestFiles(join(EXAMPLES, 'missing'))).toEqual([]);
  });

  test('the cluster variant parses with no read error, uses Services only, and every deployment is ready', async () => {
    const file = join(EXAMPLES, 'cluster', 'demo.yaml');
    const parsed = parseManifests(await readFile(file, 'utf8'), { origin: file, keysNamespace: 'servegate' });
    expect(parsed.syntaxError).toBeUndefined();
    expect(parsed.errors).toEqual([]);
    expect(parsed.deployments.map((d) => d.metadata.name)).toEqual(['iris', 'mnist', 'chat', 'echo', 'fleet']);
    for (const d of parsed.deployments) expect((d.spec as { backend: object }).backend).not.toHaveProperty('url');
    const snapshot: Snapshot = {
      source: 'kubernetes',
      deployments: parsed.deployments,
      inferenceServices: [],
      keySecrets: [],
    };
    expect(buildRouteTable(snapshot, options).statuses.every((st) => st.ready)).toBe(true);
  });

  test('the documented demo key matches the example Secret and grants project demo', async () => {
    const file = join(EXAMPLES, 'keys', 'demo-key.yaml');
    const [secret] = parseManifests(await readFile(file, 'utf8'), {
      origin: file,
      keysNamespace: 'servegate',
    }).keySecrets;
    const [prefix] = DEMO_KEY.split('.');
    expect(secret.data.prefix).toBe(prefix);
    expect(secret.data.sha256).toBe(createHash('sha256').update(DEMO_KEY).digest('hex'));
    const { table } = buildRouteTable(
      { source: 'files', deployments: [], inferenceServices: [], keySecrets: [secret] },
      options,
    );
    expect([...(table.keys.get(prefix)?.[0].projects as Set<string>)]).toEqual(['demo']);
    expect(await readFile(join(EXAMPLES, 'README.md'), 'utf8')).toContain(DEMO_KEY);
  });

  test('examples/config.yaml is a valid configuration', async () => {
    const { loadConfigFile } = await import('../../src/config/load.js');
    const c = loadConfigFile(join(EXAMPLES, 'config.yaml'), { port: 8080, namespace: 'servegate' });
    expect(c.cors.allowedOrigins).toEqual(['http://localhost:3000']);
  });
});
