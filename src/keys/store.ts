// Where API-key Secrets live, behind one interface: a manifests folder or file (what `servegate serve --manifests`
// reads; a running gateway picks changes up without a restart) or the cluster's keys namespace. `servegate keys`
// creates, lists and revokes through it, whichever store it is.
import { existsSync } from 'node:fs';
import { mkdir, readFile, rename, stat, unlink, writeFile } from 'node:fs/promises';
import { basename, join, relative } from 'node:path';
import { isScalar, parseAllDocuments } from 'yaml';
import type { KubeClients } from '../cli/kube.js';
import { apiMessage } from '../cli/kube.js';
import { CommandError } from '../errors.js';
import { apiStatus } from '../kube/objects.js';
import { KEY_LABEL } from '../routing/types.js';
import { listManifestFiles } from '../sources/files/walk.js';
import { keySecretYaml, summarizeKeySecret, type KeyFields, type KeySecretManifest, type KeySummary } from './index.js';

export interface KeyStore {
  /** Stores the Secret; returns where (a file, or Secret <ns>/<name>). Refuses a name already taken. */
  create(manifest: KeySecretManifest, now: number): Promise<string>;
  /** Every key Secret, sorted by name. */
  list(now: number): Promise<KeySummary[]>;
  /** Removes the key; returns where it was. */
  revoke(name: string, now: number): Promise<string>;
  /** Sets fields of an existing key's Secret (never the key or its hash); returns where it is. */
  update(name: string, fields: KeyFields, now: number): Promise<string>;
  /** Shown when there are no keys. */
  readonly describe: string;
}

/** Keys as manifest documents in a folder (one apikey-<name>.yaml each) or in the single file a gateway serves. */
export class FilesKeyStore implements KeyStore {
  constructor(
    private readonly target: string,
    /** Only keys of this namespace (undefined: every key, the gateway's keys namespace by default). */
    private readonly namespace: string | undefined,
  ) {}

  get describe(): string {
    return this.target;
  }

  async create(manifest: KeySecretManifest, now: number): Promise<string> {
    return writeKeyFile(this.target, manifest, now);
  }

  async list(now: number): Promise<KeySummary[]> {
    const ns = this.namespace;
    const docs = await readKeyDocs(this.target);
    return docs
      .map((d) => summarizeKeySecret(d.doc, now, relative(this.target, d.file) || basename(d.file)))
      .filter((k): k is KeySummary => !!k && (ns === undefined || k.namespace === undefined || k.namespace === ns))
      .sort(byName);
  }

  async revoke(name: string, now: number): Promise<string> {
    const ns = this.namespace;
    const docs = (await readKeyDocs(this.target)).filter((d) => {
      const k = summarizeKeySecret(d.doc, now);
      return k && k.name === name && (ns === undefined || k.namespace === undefined || k.namespace === ns);
    });
    if (docs.length === 0) throw new CommandError(`no API key named "${name}" in ${this.target}`, 'SG_NOT_FOUND');
    const listed = docs.find((d) => d.inList);
    if (listed)
      throw new CommandError(
        `API key "${name}" is an item of a List in ${listed.file}: remove it from that file by hand`,
      );
    const files = [...new Set(docs.map((d) => d.file))];
    const single = (await stat(this.target)).isFile();
    for (const file of files)
      await removeDocs(
        file,
        docs.filter((d) => d.file === file).map((d) => d.index),
        single,
      );
    return files.map((f) => relative(this.target, f) || f).join(', ');
  }

  async update(name: string, fields: KeyFields, now: number): Promise<string> {
    const ns = this.namespace;
    const docs = (await readKeyDocs(this.target)).filter((d) => {
      const k = summarizeKeySecret(d.doc, now);
      return k && k.name === name && (ns === undefined || k.namespace === undefined || k.namespace === ns);
    });
    if (docs.length === 0) throw new CommandError(`no API key named "${name}" in ${this.target}`, 'SG_NOT_FOUND');
    if (docs.length > 1 || docs[0].inList)
      throw new CommandError(`API key "${name}" is written more than once or in a List: edit ${docs[0].file} by hand`);
    const { file, index } = docs[0];
    const all = parseAllDocuments(await readFile(file, 'utf8'));
    if (!Array.isArray(all)) throw new CommandError(`cannot read ${file}`);
    const doc = all[index];
    for (const [k, v] of Object.entries(fields)) {
      // A field in base64 `data` would be shadowed by stringData anyway; it goes, so that one value is written.
      if (doc.hasIn(['data', k])) doc.deleteIn(['data', k]);
      doc.setIn(['stringData', k], doc.createNode(String(v)));
      const node = doc.getIn(['stringData', k], true);
      if (isScalar(node)) node.type = 'QUOTE_DOUBLE';
    }
    await atomicWrite(
      file,
      all
        .filter((d) => d.contents !== null)
        .map((d) => d.toString().replace(/^---[ \t]*\n/, ''))
        .join('---\n'),
    );
    return relative(this.target, file) || file;
  }
}

/** Keys as Secrets in one namespace of the cluster. */
export class ClusterKeyStore implements KeyStore {
  constructor(
    private readonly clients: KubeClients,
    private readonly namespace: string,
  ) {}

  get describe(): string {
    return `namespace ${this.namespace}`;
  }

  async create(manifest: KeySecretManifest): Promise<string> {
    const ns = this.namespace;
    const name = manifest.metadata.name;
    try {
      await this.clients.core.createNamespacedSecret({
        namespace: ns,
        body: { ...manifest, metadata: { ...manifest.metadata, namespace: ns } },
      });
    } catch (err) {
      const status = apiStatus(err);
      if (status === 409)
        throw new CommandError(
          `a Secret named "${name}" already exists in namespace ${ns}; revoke it first or choose another --name`,
          'SG_EXISTS',
        );
      if (status === 404) throw new CommandError(`namespace ${ns} not found (${apiMessage(err)})`, 'SG_NOT_FOUND');
      if (status === 403)
        throw new CommandError(`not allowed to create Secrets in namespace ${ns}: ${apiMessage(err)}`, 'SG_CLUSTER');
      if (status === 422) throw new CommandError(`the API server refused the Secret: ${apiMessage(err)}`, 'SG_CLUSTER');
      throw new CommandError(`cannot create Secret ${ns}/${name}: ${apiMessage(err)}`, 'SG_CLUSTER');
    }
    return `Secret ${ns}/${name}`;
  }

  async list(now: number): Promise<KeySummary[]> {
    const ns = this.namespace;
    let list: { items: unknown[] };
    try {
      list = (await this.clients.core.listNamespacedSecret({
        namespace: ns,
        labelSelector: `${KEY_LABEL}=true`,
      })) as unknown as { items: unknown[] };
    } catch (err) {
      if (apiStatus(err) === 403)
        throw new CommandError(`not allowed to list Secrets in namespace ${ns}: ${apiMessage(err)}`, 'SG_CLUSTER');
      throw new CommandError(`cannot list key Secrets in namespace ${ns}: ${apiMessage(err)}`, 'SG_CLUSTER');
    }
    return list.items
      .map((item) => summarizeKeySecret({ kind: 'Secret', ...(item as object) }, now))
      .filter((k): k is KeySummary => !!k)
      .sort(byName);
  }

  async revoke(name: string): Promise<string> {
    const ns = this.namespace;
    const core = this.clients.core;
    let secret: { metadata?: { labels?: Record<string, string> } };
    try {
      secret = (await core.readNamespacedSecret({ name, namespace: ns })) as typeof secret;
    } catch (err) {
      if (apiStatus(err) === 404)
        throw new CommandError(`no API key named "${name}" in namespace ${ns}`, 'SG_NOT_FOUND');
      throw new CommandError(`cannot read Secret ${ns}/${name}: ${apiMessage(err)}`, 'SG_CLUSTER');
    }
    if (secret.metadata?.labels?.[KEY_LABEL] !== 'true') {
      throw new CommandError(
        `Secret ${ns}/${name} is not an API key (it has no ${KEY_LABEL}: "true" label); not deleting it`,
      );
    }
    try {
      await core.deleteNamespacedSecret({ name, namespace: ns });
    } catch (err) {
      if (apiStatus(err) === 404)
        throw new CommandError(`no API key named "${name}" in namespace ${ns}`, 'SG_NOT_FOUND');
      throw new CommandError(`cannot delete Secret ${ns}/${name}: ${apiMessage(err)}`, 'SG_CLUSTER');
    }
    return `Secret ${ns}/${name} deleted`;
  }

  async update(name: string, fields: KeyFields): Promise<string> {
    const ns = this.namespace;
    const core = this.clients.core;
    let secret: {
      metadata?: { labels?: Record<string, string> };
      data?: Record<string, string>;
      stringData?: Record<string, string>;
    };
    try {
      secret = (await core.readNamespacedSecret({ name, namespace: ns })) as typeof secret;
    } catch (err) {
      if (apiStatus(err) === 404)
        throw new CommandError(`no API key named "${name}" in namespace ${ns}`, 'SG_NOT_FOUND');
      throw new CommandError(`cannot read Secret ${ns}/${name}: ${apiMessage(err)}`, 'SG_CLUSTER');
    }
    if (secret.metadata?.labels?.[KEY_LABEL] !== 'true')
      throw new CommandError(`Secret ${ns}/${name} is not an API key (it has no ${KEY_LABEL}: "true" label)`);
    const data = { ...(secret.data ?? {}) };
    for (const [k, v] of Object.entries(fields)) data[k] = Buffer.from(String(v)).toString('base64');
    try {
      // A replace with the read resourceVersion: a concurrent change is refused (409), never overwritten.
      await core.replaceNamespacedSecret({
        name,
        namespace: ns,
        body: { ...secret, data, stringData: undefined } as never,
      });
    } catch (err) {
      if (apiStatus(err) === 409)
        throw new CommandError(
          `Secret ${ns}/${name} changed while it was updated; run the command again`,
          'SG_CLUSTER',
        );
      throw new CommandError(`cannot update Secret ${ns}/${name}: ${apiMessage(err)}`, 'SG_CLUSTER');
    }
    return `Secret ${ns}/${name}`;
  }
}

function byName(a: KeySummary, b: KeySummary): number {
  return a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
}

// ---------------------------------------------------------------------------------------------------------------
// Files.

interface KeyDoc {
  file: string;
  index: number;
  doc: unknown;
  /** An item of a `kind: List` document: listed, but not removed by revoke. */
  inList?: boolean;
}

/** Every Secret document carrying the key label in the manifests folder. Unparsable files are skipped. */
async function readKeyDocs(dir: string): Promise<KeyDoc[]> {
  const out: KeyDoc[] = [];
  // Exactly the files `servegate serve --manifests` reads (its skip rules and .servegateignore included).
  for (const file of await listManifestFiles(dir)) {
    let text: string;
    try {
      text = await readFile(file, 'utf8');
    } catch {
      continue;
    }
    const docs = parseAllDocuments(text);
    if (!Array.isArray(docs)) continue;
    docs.forEach((d, index) => {
      if (d.errors.length > 0) return;
      const doc = d.toJS() as unknown;
      if (isList(doc)) {
        const items = (doc as { items?: unknown }).items;
        if (Array.isArray(items))
          for (const item of items) if (summarizeKeySecret(item)) out.push({ file, index, doc: item, inList: true });
      } else if (summarizeKeySecret(doc)) out.push({ file, index, doc });
    });
  }
  return out;
}

function isList(doc: unknown): boolean {
  return !!doc && typeof doc === 'object' && (doc as { kind?: unknown }).kind === 'List';
}

async function writeKeyFile(target: string, manifest: KeySecretManifest, now: number): Promise<string> {
  const st = await stat(target).catch(() => undefined);
  if (!st) await mkdir(target, { recursive: true });
  const name = manifest.metadata.name;
  const ns = manifest.metadata.namespace;
  for (const d of await readKeyDocs(target)) {
    const k = summarizeKeySecret(d.doc)!;
    if (k.name === name && (k.namespace === undefined || ns === undefined || k.namespace === ns)) {
      throw new CommandError(
        `an API key named "${name}" already exists in ${relative(target, d.file) || d.file}; revoke it first or choose another --name`,
        'SG_EXISTS',
      );
    }
  }
  const header = `# API key "${name}" created by servegate keys create at ${new Date(now).toISOString()}. Only the key's SHA-256 is stored.\n`;
  if (st?.isFile()) {
    // A gateway serving one file: the key becomes one more document of it.
    const text = await readFile(target, 'utf8');
    const sep = text.trim() === '' ? '' : `${text.replace(/\s*$/, '')}\n---\n`;
    await atomicWrite(target, sep + header + keySecretYaml(manifest));
    return target;
  }
  const fileName = name.startsWith('apikey-') ? `${name}.yaml` : `apikey-${name}.yaml`;
  const file = join(target, fileName);
  if (existsSync(file)) throw new CommandError(`${file} already exists; choose another --name`, 'SG_EXISTS');
  await atomicWrite(file, header + keySecretYaml(manifest));
  return file;
}

/** Writes beside the target under a hidden name, then renames: a watching gateway never sees half a file. */
async function atomicWrite(file: string, text: string): Promise<void> {
  const tmp = join(file, '..', `.${basename(file)}.${process.pid}.tmp`);
  const mode = (await stat(file).catch(() => undefined))?.mode ?? 0o644;
  await writeFile(tmp, text, { mode: mode & 0o777 });
  try {
    await rename(tmp, file);
  } catch (err) {
    await unlink(tmp).catch(() => undefined);
    throw err;
  }
}

/**
 * Removes documents by index; other documents keep their text. A file left with no document is deleted, unless it is
 * the single file a gateway serves (`keepFile`): then it is left empty.
 */
async function removeDocs(file: string, indexes: number[], keepFile: boolean): Promise<void> {
  const text = await readFile(file, 'utf8');
  const docs = parseAllDocuments(text);
  if (!Array.isArray(docs)) return;
  const keep = docs.filter((d, i) => !indexes.includes(i) && d.contents !== null);
  if (keep.length === 0) {
    if (keepFile) await atomicWrite(file, '');
    else await unlink(file);
    return;
  }
  await atomicWrite(file, keep.map((d) => d.toString().replace(/^---[ \t]*\n/, '')).join('---\n'));
}
