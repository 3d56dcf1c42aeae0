// `servegate keys create|list|revoke`: API-key Secrets in a manifests folder, as YAML on stdout, or in the cluster.
// The key is printed once at creation; only its SHA-256 is stored; list never shows the key or the hash.
import { existsSync } from 'node:fs';
import { mkdir, readFile, rename, stat, unlink, writeFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { basename, delimiter, join, relative } from 'node:path';
import { parseAllDocuments, stringify } from 'yaml';
import { ownNamespace } from '../config/load.js';
import {
  generateKey,
  keyNameProblem,
  keySecretManifest,
  keySecretYaml,
  KeyError,
  parseExpires,
  parseProjects,
  summarizeKeySecret,
  type KeySummary,
} from '../keys/index.js';
import { apiStatus } from '../kube/objects.js';
import { isDnsLabel } from '../routing/names.js';
import { KEY_LABEL } from '../routing/types.js';
import { listManifestFiles } from '../sources/files/walk.js';

/** Where a command writes; tests pass their own. */
export interface CliIo {
  stdout: (text: string) => void;
  stderr: (text: string) => void;
  env: NodeJS.ProcessEnv;
  now: () => number;
}

export function processIo(): CliIo {
  return {
    stdout: (t) => void process.stdout.write(t),
    stderr: (t) => void process.stderr.write(t),
    env: process.env,
    now: () => Date.now(),
  };
}

/** A wrong command line: printed with a hint to use --help, exit code 2. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}

/** A command that could not do what was asked (exit code 1). */
export class CommandError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'CommandError';
  }
}

export type FlagSpec = Record<string, { short?: string; boolean?: boolean }>;

/** `--flag value`, `--flag=value`, `-f value`; booleans take no value; `--` ends flags. Unknown flags are errors. */
export function parseFlags(argv: readonly string[], spec: FlagSpec): { flags: Record<string, string | true>; positionals: string[] } {
  const flags: Record<string, string | true> = {};
  const positionals: string[] = [];
  const byShort = new Map(Object.entries(spec).filter(([, s]) => s.short).map(([name, s]) => [s.short!, name]));
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === '--') {
      positionals.push(...argv.slice(i + 1));
      break;
    }
    let name: string | undefined;
    let inline: string | undefined;
    if (arg.startsWith('--')) {
      const eq = arg.indexOf('=');
      name = eq >= 0 ? arg.slice(2, eq) : arg.slice(2);
      inline = eq >= 0 ? arg.slice(eq + 1) : undefined;
      if (!spec[name]) throw new UsageError(`unknown flag --${name}`);
    } else if (arg.startsWith('-') && arg.length > 1) {
      const eq = arg.indexOf('=');
      const short = eq >= 0 ? arg.slice(1, eq) : arg.slice(1);
      inline = eq >= 0 ? arg.slice(eq + 1) : undefined;
      name = byShort.get(short);
      if (!name) throw new UsageError(`unknown flag ${arg}`);
    } else {
      positionals.push(arg);
      continue;
    }
    if (spec[name].boolean) {
      if (inline !== undefined) throw new UsageError(`flag --${name} takes no value`);
      flags[name] = true;
      continue;
    }
    const value = inline ?? argv[++i];
    if (value === undefined) throw new UsageError(`flag --${name} needs a value`);
    flags[name] = value;
  }
  return { flags, positionals };
}

export function str(flags: Record<string, string | true>, name: string): string | undefined {
  const v = flags[name];
  return typeof v === 'string' ? v : undefined;
}

/** Runs a command body, turning errors into a message and an exit code. */
export async function runCommand(io: CliIo, usage: string, body: () => Promise<number>): Promise<number> {
  try {
    return await body();
  } catch (err) {
    if (err instanceof UsageError) {
      io.stderr(`error: ${err.message}\n\n${usage}`);
      return 2;
    }
    if (err instanceof CommandError || err instanceof KeyError) {
      io.stderr(`error: ${err.message}\n`);
      return 1;
    }
    io.stderr(`error: ${(err as Error)?.message ?? String(err)}\n`);
    return 1;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Kubernetes access shared by `keys` and `url`.

export interface KubeClients {
  core: import('@kubernetes/client-node').CoreV1Api;
  custom: import('@kubernetes/client-node').CustomObjectsApi;
  server: string;
}

/** KUBECONFIG / ~/.kube/config / in-cluster, or --kubeconfig FILE. Refuses the client's silent localhost fallback. */
export async function kubeClients(kubeconfig: string | undefined, env: NodeJS.ProcessEnv): Promise<KubeClients> {
  const k8s = await import('@kubernetes/client-node');
  const kc = new k8s.KubeConfig();
  if (kubeconfig) {
    if (!existsSync(kubeconfig)) throw new CommandError(`--kubeconfig ${kubeconfig}: no such file`);
    kc.loadFromFile(kubeconfig);
  } else if (env.KUBECONFIG) {
    // As kubectl: a list of files, the first one's current context wins.
    const files = env.KUBECONFIG.split(delimiter).filter(Boolean);
    for (const f of files) if (!existsSync(f)) throw new CommandError(`KUBECONFIG names ${f}, which does not exist`);
    kc.loadFromFile(files[0]);
    for (const f of files.slice(1)) {
      const more = new k8s.KubeConfig();
      more.loadFromFile(f);
      kc.mergeConfig(more);
    }
  } else if (existsSync(join(env.HOME || homedir(), '.kube', 'config'))) {
    kc.loadFromFile(join(env.HOME || homedir(), '.kube', 'config'));
  } else if (env.KUBERNETES_SERVICE_HOST && existsSync('/var/run/secrets/kubernetes.io/serviceaccount/token')) {
    kc.loadFromCluster();
  } else {
    throw new CommandError(
      'no cluster configured: set KUBECONFIG or pass --kubeconfig FILE (or run in a pod); ' +
        'to work without a cluster use --manifests DIR, or -o yaml to print the manifest',
    );
  }
  const cluster = kc.getCurrentCluster();
  if (!cluster) throw new CommandError('the kubeconfig has no current cluster');
  return { core: kc.makeApiClient(k8s.CoreV1Api), custom: kc.makeApiClient(k8s.CustomObjectsApi), server: cluster.server };
}

export { apiStatus };

/** The API server's own message (Status.message) or the error's. */
export function apiMessage(err: unknown): string {
  const body = (err as { body?: unknown })?.body;
  let parsed: unknown = body;
  if (typeof body === 'string') {
    try {
      parsed = JSON.parse(body);
    } catch {
      parsed = body;
    }
  }
  if (parsed && typeof parsed === 'object' && typeof (parsed as { message?: unknown }).message === 'string') {
    return (parsed as { message: string }).message;
  }
  if (typeof parsed === 'string' && parsed) return parsed.slice(0, 300);
  const status = apiStatus(err);
  const msg = (err as Error)?.message ?? String(err);
  return status ? `HTTP ${status}` : msg;
}

// ---------------------------------------------------------------------------------------------------------------

const KEYS_USAGE = `Usage: servegate keys <command> [flags]

Manage API keys. A key is stored as a Secret holding only its SHA-256 (label ${KEY_LABEL}: "true").

Commands:
  create --name NAME --projects P1,P2|'*' [--expires 30d|12h|90m|2w|RFC3339]
         Create a key and print it ONCE (stdout). Keep it: it cannot be shown again.
  list   List keys: name, prefix, projects, expiry (never the key or its hash).
  revoke --name NAME
         Delete a key; the gateway refuses it at once.

Where the Secret goes (one of):
  --manifests DIR|FILE files mode: write/remove apikey-<name>.yaml in DIR, or a document in FILE
                       (a running "servegate serve --manifests" picks the change up without a restart)
  -o, --output yaml    create only: print the Secret manifest to stdout (for kubectl apply / GitOps), the key to stderr
  (default)            the cluster: KUBECONFIG, ~/.kube/config or in-cluster config

Flags:
  -n, --namespace NS   the keys namespace (default: POD_NAMESPACE, else "servegate";
                       in files mode default: none, i.e. the gateway's keys namespace)
      --kubeconfig F   kubeconfig file to use
  -o, --output FMT     create: yaml|json; list: table|json|yaml
  -h, --help           show this help
`;

const FLAGS: FlagSpec = {
  name: {},
  projects: {},
  expires: {},
  namespace: { short: 'n' },
  output: { short: 'o' },
  manifests: {},
  kubeconfig: {},
  help: { short: 'h', boolean: true },
};

export async function keysCommand(argv: string[], io: CliIo = processIo()): Promise<number> {
  return runCommand(io, KEYS_USAGE, async () => {
    const { flags, positionals } = parseFlags(argv, FLAGS);
    const sub = positionals[0];
    if (flags.help || sub === 'help' || sub === undefined) {
      if (sub === undefined && !flags.help) {
        io.stderr(KEYS_USAGE);
        return 2;
      }
      io.stdout(KEYS_USAGE);
      return 0;
    }
    if (positionals.length > 1) throw new UsageError(`unexpected argument "${positionals[1]}"`);
    const manifests = str(flags, 'manifests');
    const output = str(flags, 'output');
    const kubeconfig = str(flags, 'kubeconfig');
    if (manifests !== undefined && kubeconfig !== undefined) throw new UsageError('--manifests and --kubeconfig cannot be used together');
    switch (sub) {
      case 'create':
        return createKey(flags, io);
      case 'list':
      case 'ls':
        if (flags.name || flags.projects || flags.expires) throw new UsageError('list takes no --name, --projects or --expires');
        if (output !== undefined && !['table', 'json', 'yaml'].includes(output)) throw new UsageError(`list -o must be table, json or yaml, got "${output}"`);
        return listKeys(flags, io);
      case 'revoke':
      case 'delete':
        if (flags.projects || flags.expires) throw new UsageError('revoke takes only --name');
        if (output !== undefined) throw new UsageError('revoke takes no -o');
        return revokeKey(flags, io);
      default:
        throw new UsageError(`unknown keys command "${sub}" (create, list, revoke)`);
    }
  });
}

function requireName(flags: Record<string, string | true>): string {
  const name = str(flags, 'name');
  if (name === undefined) throw new UsageError('--name is required');
  const problem = keyNameProblem(name);
  if (problem) throw new KeyError(problem);
  return name;
}

function clusterNamespace(flags: Record<string, string | true>, io: CliIo): string {
  const ns = str(flags, 'namespace') ?? ownNamespace(io.env);
  checkNamespace(ns);
  return ns;
}

function checkNamespace(ns: string): void {
  if (!isDnsLabel(ns)) throw new KeyError(`invalid namespace "${ns}": a namespace is a DNS-1123 label`);
}

async function createKey(flags: Record<string, string | true>, io: CliIo): Promise<number> {
  const name = requireName(flags);
  const projects = parseProjects(str(flags, 'projects'));
  const expiresRaw = str(flags, 'expires');
  const expiresAt = expiresRaw === undefined ? undefined : parseExpires(expiresRaw, io.now());
  const output = str(flags, 'output');
  const manifests = str(flags, 'manifests');
  if (output !== undefined && output !== 'yaml' && output !== 'json') throw new UsageError(`create -o must be yaml or json, got "${output}"`);
  if (output !== undefined && manifests !== undefined) throw new UsageError('-o prints the manifest instead of writing it: do not combine it with --manifests');

  const generated = generateKey();
  const grant = projects === '*' ? 'every project' : `project${projects.length > 1 ? 's' : ''} ${projects.join(', ')}`;
  const expiry = expiresAt ? `, expires ${expiresAt.toISOString().replace(/\.\d{3}Z$/, 'Z')}` : ', never expires';

  if (output !== undefined) {
    const ns = clusterNamespace(flags, io);
    const manifest = keySecretManifest({ name, namespace: ns, prefix: generated.prefix, sha256: generated.sha256, projects, expiresAt });
    io.stdout(output === 'json' ? `${JSON.stringify(manifest, null, 2)}\n` : keySecretYaml(manifest));
    io.stderr(`# API key "${name}" (${grant}${expiry}). Shown once; store it now:\n${generated.key}\n`);
    return 0;
  }

  if (manifests !== undefined) {
    const ns = str(flags, 'namespace');
    if (ns !== undefined) checkNamespace(ns);
    const manifest = keySecretManifest({ name, namespace: ns, prefix: generated.prefix, sha256: generated.sha256, projects, expiresAt });
    const file = await writeKeyFile(manifests, manifest, io.now());
    io.stdout(`${generated.key}\n`);
    io.stderr(`created API key "${name}" (prefix ${generated.prefix}, ${grant}${expiry}) in ${file}\nThe key above is shown once; store it now.\n`);
    return 0;
  }

  const ns = clusterNamespace(flags, io);
  const { core } = await kubeClients(str(flags, 'kubeconfig'), io.env);
  const manifest = keySecretManifest({ name, namespace: ns, prefix: generated.prefix, sha256: generated.sha256, projects, expiresAt });
  try {
    await core.createNamespacedSecret({ namespace: ns, body: manifest });
  } catch (err) {
    const status = apiStatus(err);
    if (status === 409) throw new CommandError(`a Secret named "${name}" already exists in namespace ${ns}; revoke it first or choose another --name`);
    if (status === 404) throw new CommandError(`namespace ${ns} not found (${apiMessage(err)})`);
    if (status === 403) throw new CommandError(`not allowed to create Secrets in namespace ${ns}: ${apiMessage(err)}`);
    if (status === 422) throw new CommandError(`the API server refused the Secret: ${apiMessage(err)}`);
    throw new CommandError(`cannot create Secret ${ns}/${name}: ${apiMessage(err)}`);
  }
  io.stdout(`${generated.key}\n`);
  io.stderr(`created API key "${name}" (prefix ${generated.prefix}, ${grant}${expiry}) as Secret ${ns}/${name}\nThe key above is shown once; store it now.\n`);
  return 0;
}

async function listKeys(flags: Record<string, string | true>, io: CliIo): Promise<number> {
  const manifests = str(flags, 'manifests');
  const output = str(flags, 'output') ?? 'table';
  let keys: KeySummary[];
  if (manifests !== undefined) {
    const ns = str(flags, 'namespace');
    const docs = await readKeyDocs(manifests);
    keys = docs
      .map((d) => summarizeKeySecret(d.doc, io.now(), relative(manifests, d.file) || basename(d.file)))
      .filter((k): k is KeySummary => !!k && (ns === undefined || (k.namespace ?? '') === ns || k.namespace === undefined));
  } else {
    const ns = clusterNamespace(flags, io);
    const { core } = await kubeClients(str(flags, 'kubeconfig'), io.env);
    let list: { items: unknown[] };
    try {
      list = (await core.listNamespacedSecret({ namespace: ns, labelSelector: `${KEY_LABEL}=true` })) as unknown as { items: unknown[] };
    } catch (err) {
      if (apiStatus(err) === 403) throw new CommandError(`not allowed to list Secrets in namespace ${ns}: ${apiMessage(err)}`);
      throw new CommandError(`cannot list key Secrets in namespace ${ns}: ${apiMessage(err)}`);
    }
    keys = list.items
      .map((item) => summarizeKeySecret({ kind: 'Secret', ...(item as object) }, io.now()))
      .filter((k): k is KeySummary => !!k);
  }
  keys.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const rows = keys.map((k) => {
    const row: Record<string, unknown> = { name: k.name };
    if (k.namespace !== undefined) row.namespace = k.namespace;
    row.prefix = k.prefix;
    row.projects = k.projects;
    row.expiresAt = k.expiresAt ?? null;
    row.expired = k.expired;
    if (k.origin !== undefined) row.file = k.origin;
    return row;
  });
  if (output === 'json') {
    io.stdout(`${JSON.stringify(rows, null, 2)}\n`);
    return 0;
  }
  if (output === 'yaml') {
    io.stdout(stringify(rows));
    return 0;
  }
  if (keys.length === 0) {
    io.stderr(manifests !== undefined ? `no API keys in ${manifests}\n` : 'no API keys found\n');
    return 0;
  }
  const header = manifests !== undefined ? ['NAME', 'PREFIX', 'PROJECTS', 'EXPIRES', 'FILE'] : ['NAME', 'PREFIX', 'PROJECTS', 'EXPIRES'];
  const table = keys.map((k) => {
    const expires = k.expiresAt ? `${k.expiresAt}${k.expired ? ' (expired)' : ''}` : 'never';
    const cells = [k.name, k.prefix, k.projects, expires];
    if (manifests !== undefined) cells.push(k.origin ?? '');
    return cells;
  });
  io.stdout(formatTable([header, ...table]));
  return 0;
}

async function revokeKey(flags: Record<string, string | true>, io: CliIo): Promise<number> {
  const name = requireName(flags);
  const manifests = str(flags, 'manifests');
  if (manifests !== undefined) {
    const ns = str(flags, 'namespace');
    const docs = (await readKeyDocs(manifests)).filter((d) => {
      const k = summarizeKeySecret(d.doc, io.now());
      return k && k.name === name && (ns === undefined || k.namespace === undefined || k.namespace === ns);
    });
    if (docs.length === 0) throw new CommandError(`no API key named "${name}" in ${manifests}`);
    const listed = docs.find((d) => d.inList);
    if (listed) throw new CommandError(`API key "${name}" is an item of a List in ${listed.file}: remove it from that file by hand`);
    const files = [...new Set(docs.map((d) => d.file))];
    const single = (await stat(manifests)).isFile();
    for (const file of files) await removeDocs(file, docs.filter((d) => d.file === file).map((d) => d.index), single);
    io.stderr(`revoked API key "${name}" (${files.map((f) => relative(manifests, f) || f).join(', ')})\n`);
    return 0;
  }
  const ns = clusterNamespace(flags, io);
  const { core } = await kubeClients(str(flags, 'kubeconfig'), io.env);
  let secret: { metadata?: { labels?: Record<string, string> } };
  try {
    secret = (await core.readNamespacedSecret({ name, namespace: ns })) as typeof secret;
  } catch (err) {
    if (apiStatus(err) === 404) throw new CommandError(`no API key named "${name}" in namespace ${ns}`);
    throw new CommandError(`cannot read Secret ${ns}/${name}: ${apiMessage(err)}`);
  }
  if (secret.metadata?.labels?.[KEY_LABEL] !== 'true') {
    throw new CommandError(`Secret ${ns}/${name} is not an API key (it has no ${KEY_LABEL}: "true" label); not deleting it`);
  }
  try {
    await core.deleteNamespacedSecret({ name, namespace: ns });
  } catch (err) {
    if (apiStatus(err) === 404) throw new CommandError(`no API key named "${name}" in namespace ${ns}`);
    throw new CommandError(`cannot delete Secret ${ns}/${name}: ${apiMessage(err)}`);
  }
  io.stderr(`revoked API key "${name}" (Secret ${ns}/${name} deleted)\n`);
  return 0;
}

function formatTable(rows: string[][]): string {
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => r[i].length)));
  return rows.map((r) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]))).join('   ').trimEnd() + '\n').join('');
}

// ---------------------------------------------------------------------------------------------------------------
// Files mode.

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
        if (Array.isArray(items)) for (const item of items) if (summarizeKeySecret(item)) out.push({ file, index, doc: item, inList: true });
      } else if (summarizeKeySecret(doc)) out.push({ file, index, doc });
    });
  }
  return out;
}

function isList(doc: unknown): boolean {
  return !!doc && typeof doc === 'object' && (doc as { kind?: unknown }).kind === 'List';
}

async function writeKeyFile(target: string, manifest: ReturnType<typeof keySecretManifest>, now: number): Promise<string> {
  const st = await stat(target).catch(() => undefined);
  if (!st) await mkdir(target, { recursive: true });
  const name = manifest.metadata.name;
  const ns = manifest.metadata.namespace;
  for (const d of await readKeyDocs(target)) {
    const k = summarizeKeySecret(d.doc)!;
    if (k.name === name && (k.namespace === undefined || ns === undefined || k.namespace === ns)) {
      throw new CommandError(`an API key named "${name}" already exists in ${relative(target, d.file) || d.file}; revoke it first or choose another --name`);
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
  if (existsSync(file)) throw new CommandError(`${file} already exists; choose another --name`);
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
