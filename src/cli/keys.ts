// `servegate keys create|list|update|revoke`: API-key Secrets in a manifests folder (FilesKeyStore), in the cluster
// (ClusterKeyStore), or as a manifest on stdout (-o yaml|json). The key is printed once at creation; only its SHA-256
// is stored; list never shows the key or the hash.
import type { Command } from 'commander';
import { stringify } from 'yaml';
import { ownNamespace } from '../config/load.js';
import { KeyError, UsageError } from '../errors.js';
import {
  generateKey,
  keyNameProblem,
  keySecretManifest,
  keyFields,
  keySecretYaml,
  parseExpires,
  parseProjects,
  type KeyFieldOptions,
  type KeySummary,
} from '../keys/index.js';
import { ClusterKeyStore, FilesKeyStore, type KeyStore } from '../keys/store.js';
import { isDnsLabel } from '../routing/names.js';
import { shown } from '../routing/quote.js';
import { KEY_LABEL } from '../routing/types.js';
import { choice, command, count, processIo, run, subcommand, type CliIo } from './io.js';
import { kubeClients } from './kube.js';

export type { CliIo };
export { CommandError, UsageError } from '../errors.js';

const WHERE = `
Where the Secret goes (one of):
  --manifests DIR|FILE  files mode: write/remove apikey-<name>.yaml in DIR, or a document in FILE
                        (a running "servegate serve --manifests" picks the change up without a restart)
  -o, --output yaml     create only: print the Secret manifest to stdout (kubectl apply / GitOps), the key to stderr
  (default)             the cluster: KUBECONFIG, ~/.kube/config or in-cluster config; -n is the keys namespace
                        (default: POD_NAMESPACE, else "servegate")`;

interface StoreFlags {
  manifests?: string;
  namespace?: string;
  kubeconfig?: string;
}

function withStoreFlags(cmd: Command): Command {
  return cmd
    .option('--manifests <dir|file>', 'files mode: the manifests a "servegate serve --manifests" gateway reads')
    .option('-n, --namespace <ns>', 'the keys namespace (files mode: only keys of this namespace)')
    .option('--kubeconfig <file>', 'kubeconfig file to use (cluster mode)')
    .addHelpText('after', WHERE);
}

function checkNamespace(ns: string): void {
  if (!isDnsLabel(ns)) throw new KeyError(`invalid namespace "${ns}": a namespace is a DNS-1123 label`);
}

function checkName(name: string): string {
  const problem = keyNameProblem(name);
  if (problem) throw new KeyError(problem);
  return name;
}

function clusterNamespace(flags: StoreFlags, io: CliIo): string {
  const ns = flags.namespace ?? ownNamespace(io.env);
  checkNamespace(ns);
  return ns;
}

/** The store the flags name: files with --manifests, else the cluster. */
async function storeFor(flags: StoreFlags, io: CliIo): Promise<KeyStore> {
  if (flags.manifests !== undefined) {
    if (flags.kubeconfig !== undefined) throw new UsageError('--manifests and --kubeconfig cannot be used together');
    if (flags.namespace !== undefined) checkNamespace(flags.namespace);
    return new FilesKeyStore(flags.manifests, flags.namespace);
  }
  const ns = clusterNamespace(flags, io);
  return new ClusterKeyStore(
    await kubeClients(
      flags.kubeconfig,
      io.env,
      'to work without a cluster use --manifests DIR, or -o yaml to print the manifest',
    ),
    ns,
  );
}

export function keysProgram(io: CliIo): Command {
  const keys = command('keys', io)
    .description(`Manage API keys. A key is stored as a Secret holding only its SHA-256 (label ${KEY_LABEL}: "true").`)
    .usage('<command> [flags]');

  withStoreFlags(
    withFieldFlags(
      subcommand(keys, 'create', io)
        .description('Create a key and print it ONCE (stdout). Keep it: it cannot be shown again.')
        .requiredOption('--name <name>', "the key's name (a Secret name; sent to backends as x-servegate-key)")
        .requiredOption('--projects <p1,p2|*>', 'the projects it grants, or "*" for every project')
        .option('--expires <when>', 'a duration like 90m, 12h, 30d, 2w, or an RFC 3339 time')
        .option('--rpm <n>', 'requests per minute for this key (0 = no limit; unset = the gateway default)', count)
        .option('--tpm <n>', 'tokens per minute for this key (0 = no limit; unset = the gateway default)', count),
    ).addOption(choice('-o, --output <format>', 'print the manifest instead of storing it', ['yaml', 'json'])),
  ).action(
    async (
      flags: StoreFlags & {
        name: string;
        projects: string;
        expires?: string;
        rpm?: number;
        tpm?: number;
        output?: 'yaml' | 'json';
      } & FieldFlags,
    ) => {
      const name = checkName(flags.name);
      const projects = parseProjects(flags.projects);
      const expiresAt = flags.expires === undefined ? undefined : parseExpires(flags.expires, io.now());
      if (flags.output !== undefined && flags.manifests !== undefined) {
        throw new UsageError('-o prints the manifest instead of writing it: do not combine it with --manifests');
      }
      const generated = generateKey();
      const grant =
        projects === '*' ? 'every project' : `project${projects.length > 1 ? 's' : ''} ${projects.join(', ')}`;
      const limits = [
        flags.rpm !== undefined ? `${flags.rpm} requests/min` : '',
        flags.tpm !== undefined ? `${flags.tpm} tokens/min` : '',
        budgetAbout(flags),
      ].filter(Boolean);
      const about = `${grant}${expiresAt ? `, expires ${keySecretManifestTime(expiresAt)}` : ', never expires'}${limits.length ? `, ${limits.join(', ')}` : ''}`;
      const manifestIn = (namespace: string | undefined) =>
        keySecretManifest({
          name,
          namespace,
          prefix: generated.prefix,
          sha256: generated.sha256,
          projects,
          expiresAt,
          rpm: flags.rpm,
          tpm: flags.tpm,
          fields: fieldOptions(flags),
        });

      if (flags.output !== undefined) {
        const manifest = manifestIn(clusterNamespace(flags, io));
        io.stdout(flags.output === 'json' ? `${JSON.stringify(manifest, null, 2)}\n` : keySecretYaml(manifest));
        io.stderr(`# API key "${name}" (${about}). Shown once; store it now:\n${generated.key}\n`);
        return;
      }
      const store = await storeFor(flags, io);
      const namespace = flags.manifests !== undefined ? flags.namespace : clusterNamespace(flags, io);
      const where = await store.create(manifestIn(namespace), io.now());
      io.stdout(`${generated.key}\n`);
      io.stderr(
        `created API key "${name}" (prefix ${generated.prefix}, ${about}) ${flags.manifests !== undefined ? 'in' : 'as'} ${where}\nThe key above is shown once; store it now.\n`,
      );
    },
  );

  withStoreFlags(
    subcommand(keys, 'list', io)
      .alias('ls')
      .description('List keys: name, prefix, projects, expiry, limits (never the key or its hash).')
      .addOption(choice('-o, --output <format>', 'output format', ['table', 'json', 'yaml']).default('table')),
  ).action(async (flags: StoreFlags & { output: 'table' | 'json' | 'yaml' }) => {
    const store = await storeFor(flags, io);
    const keys = await store.list(io.now());
    printKeys(keys, flags.output, flags.manifests !== undefined, store.describe, io);
  });

  withStoreFlags(
    withFieldFlags(
      subcommand(keys, 'update', io)
        .description(
          "Change a key's limits, budget or queueing fields (never the key itself); the gateway applies them at once.",
        )
        .requiredOption('--name <name>', 'the key to update')
        .option('--rpm <n>', 'requests per minute for this key (0 = no limit)', count)
        .option('--tpm <n>', 'tokens per minute for this key (0 = no limit)', count),
    ),
  ).action(async (flags: StoreFlags & { name: string; rpm?: number; tpm?: number } & FieldFlags) => {
    const name = checkName(flags.name);
    const fields = keyFields({ rpm: flags.rpm, tpm: flags.tpm, ...fieldOptions(flags) });
    if (Object.keys(fields).length === 0)
      throw new UsageError('nothing to update: give --rpm, --tpm, --budget-*, --tenant, --priority or --weight');
    const store = await storeFor(flags, io);
    const where = await store.update(name, fields, io.now());
    const what = Object.entries(fields)
      .map(([k, v]) => `${k}=${v}`)
      .join(', ');
    io.stderr(`updated API key "${name}" (${what}) in ${where}\n`);
  });

  withStoreFlags(
    subcommand(keys, 'revoke', io)
      .alias('delete')
      .description('Delete a key; the gateway refuses it at once.')
      .requiredOption('--name <name>', 'the key to revoke'),
  ).action(async (flags: StoreFlags & { name: string }) => {
    const name = checkName(flags.name);
    const store = await storeFor(flags, io);
    const where = await store.revoke(name, io.now());
    io.stderr(`revoked API key "${name}" (${where})\n`);
  });
  return keys;
}

interface FieldFlags {
  budgetTokens?: number;
  budgetCost?: string;
  budgetPeriod?: string;
  tenant?: string;
  priority?: string;
  weight?: string;
}

/** The budget (SPEC §14) and queueing flags of create and update. */
function withFieldFlags(cmd: Command): Command {
  return cmd
    .option('--budget-tokens <n>', 'tokens this key may spend per budget period (0 = no budget)', count)
    .option('--budget-cost <x>', 'cost this key may spend per period, in the currency of spec.pricing (0 = none)')
    .option(
      '--budget-period <p>',
      'day or month (calendar, UTC), or a rolling window such as 12h or 7d (default month)',
    )
    .option('--tenant <name>', "the fair-share group of a saturated deployment's queue (default: the key itself)")
    .option('--priority <p>', "critical, standard or sheddable (default: the deployment's spec.priority)")
    .option('--weight <w>', "its tenant's share against others' in a saturated deployment (default 1)");
}

function fieldOptions(f: FieldFlags): KeyFieldOptions {
  return {
    budgetTokens: f.budgetTokens,
    budgetCost: f.budgetCost,
    budgetPeriod: f.budgetPeriod,
    tenant: f.tenant,
    priority: f.priority,
    weight: f.weight,
  };
}

function budgetAbout(f: FieldFlags): string {
  const what = [f.budgetTokens ? `${f.budgetTokens} tokens` : '', f.budgetCost ? `cost ${f.budgetCost}` : '']
    .filter(Boolean)
    .join(' and ');
  return what ? `budget ${what} per ${f.budgetPeriod ?? 'month'}` : '';
}

function keySecretManifestTime(d: Date): string {
  return d.toISOString().replace(/\.\d{3}Z$/, 'Z');
}

function printKeys(
  keys: KeySummary[],
  output: 'table' | 'json' | 'yaml',
  files: boolean,
  where: string,
  io: CliIo,
): void {
  const rows = keys.map((k) => {
    const row: Record<string, unknown> = { name: k.name };
    if (k.namespace !== undefined) row.namespace = k.namespace;
    row.prefix = k.prefix;
    row.projects = k.projects;
    row.expiresAt = k.expiresAt ?? null;
    row.expired = k.expired;
    if (k.rpm !== undefined) row.rpm = k.rpm;
    if (k.tpm !== undefined) row.tpm = k.tpm;
    if (k.budget !== undefined) row.budget = k.budget;
    if (k.origin !== undefined) row.file = k.origin;
    return row;
  });
  if (output === 'json') return io.stdout(`${JSON.stringify(rows, null, 2)}\n`);
  if (output === 'yaml') return io.stdout(stringify(rows));
  if (keys.length === 0) return io.stderr(files ? `no API keys in ${where}\n` : 'no API keys found\n');
  const header = ['NAME', 'PREFIX', 'PROJECTS', 'EXPIRES', 'LIMITS', ...(files ? ['FILE'] : [])];
  const table = keys.map((k) => {
    const expires = k.expiresAt ? `${k.expiresAt}${k.expired ? ' (expired)' : ''}` : 'never';
    const limits =
      [k.rpm !== undefined ? `${k.rpm} rpm` : '', k.tpm !== undefined ? `${k.tpm} tpm` : '', k.budget ?? '']
        .filter(Boolean)
        .join(', ') || 'default';
    // A cell is one line of bounded width: a Secret's field may hold anything (newlines, a megabyte); -o json shows it.
    return [k.name, k.prefix, k.projects, expires, limits, ...(files ? [k.origin ?? ''] : [])].map((c) =>
      shown(c, 256),
    );
  });
  io.stdout(formatTable([header, ...table]));
}

function formatTable(rows: string[][]): string {
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => r[i].length)));
  return rows
    .map(
      (r) =>
        r
          .map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i])))
          .join('   ')
          .trimEnd() + '\n',
    )
    .join('');
}

/** `servegate keys ...` with `argv` after "keys". */
export async function keysCommand(argv: string[], io: CliIo = processIo()): Promise<number> {
  return run(command('servegate', io).addCommand(keysProgram(io)), ['keys', ...argv], io);
}
