// `servegate url <project>/<deployment>`: prints a deployment's URLs and legacy hostname, computed by the same
// route builder the gateway uses (files mode) or read from the resource's status (cluster mode).
import { stringify } from 'yaml';
import { loadConfigFile, ownNamespace, ConfigError } from '../config/load.js';
import type { Config } from '../config/schema.js';
import { buildRouteTable } from '../routing/build.js';
import { deploymentUrls, projectNamespaceForm } from '../routing/names.js';
import type { DeploymentStatus, InferenceServiceResource, Route, ServingDeploymentResource, Snapshot } from '../routing/types.js';
import { API_GROUP } from '../routing/types.js';
import { FilesSource } from '../sources/files/index.js';
import { KSERVE_GROUP } from '../sources/manifests.js';
import {
  apiMessage,
  apiStatus,
  CommandError,
  kubeClients,
  parseFlags,
  processIo,
  runCommand,
  str,
  UsageError,
  type CliIo,
  type FlagSpec,
} from './keys.js';

const URL_USAGE = `Usage: servegate url <project>/<deployment> [flags]

Prints the URLs of a deployment: url (the base), inferenceUrl (predictive models), openaiUrl (LLMs),
endpointUrl (Python deployments) and the legacy hostname.

Where the deployment is read from (one of):
  --manifests DIR|FILE   the manifests a "servegate serve --manifests" gateway serves
  (default)              the cluster (KUBECONFIG, ~/.kube/config or in-cluster); the URLs the controller wrote to
                         the resource's status are printed as they are

Flags:
      --config FILE      the gateway configuration (publicUrl, serverlessDomain)
      --public-url URL   the gateway's public URL (overrides the configuration and, in the cluster, the status)
  -n, --namespace NS     cluster mode: look only in this namespace
      --kubeconfig FILE  kubeconfig file to use
  -o, --output FMT       text (default), json, yaml, or url (only the URL to call: inference, OpenAI or endpoint)
  -h, --help             show this help
`;

const FLAGS: FlagSpec = {
  manifests: {},
  config: {},
  'public-url': {},
  namespace: { short: 'n' },
  kubeconfig: {},
  output: { short: 'o' },
  help: { short: 'h', boolean: true },
};

export interface UrlResult {
  project: string;
  deployment: string;
  /** namespace/name of the resource serving it. */
  resource: string;
  kind: Route['kind'];
  modelServer?: string;
  url: string;
  inferenceUrl?: string;
  openaiUrl?: string;
  endpointUrl?: string;
  hostname?: string;
}

export async function urlCommand(argv: string[], io: CliIo = processIo()): Promise<number> {
  return runCommand(io, URL_USAGE, async () => {
    const { flags, positionals } = parseFlags(argv, FLAGS);
    if (flags.help) {
      io.stdout(URL_USAGE);
      return 0;
    }
    if (positionals.length === 0) throw new UsageError('give the deployment as <project>/<deployment>');
    if (positionals.length > 1) throw new UsageError(`unexpected argument "${positionals[1]}"`);
    const ref = positionals[0];
    const m = /^([^/\s]+)\/([^/\s]+)$/.exec(ref);
    if (!m) throw new UsageError(`"${ref}" is not <project>/<deployment>`);
    const [, project, deployment] = m;
    const output = str(flags, 'output') ?? 'text';
    if (!['text', 'json', 'yaml', 'url'].includes(output)) throw new UsageError(`-o must be text, json, yaml or url, got "${output}"`);
    const manifests = str(flags, 'manifests');
    if (manifests !== undefined && (flags.kubeconfig !== undefined || flags.namespace !== undefined)) {
      throw new UsageError('--manifests reads files: do not combine it with --kubeconfig or --namespace');
    }
    const publicUrlFlag = str(flags, 'public-url');
    const config = loadConfig(str(flags, 'config'), publicUrlFlag, io.env);

    const result =
      manifests !== undefined
        ? await fromManifests(manifests, project, deployment, config)
        : await fromCluster(project, deployment, config, publicUrlFlag !== undefined, flags, io);

    switch (output) {
      case 'json':
        io.stdout(`${JSON.stringify(result, null, 2)}\n`);
        break;
      case 'yaml':
        io.stdout(stringify(result));
        break;
      case 'url':
        io.stdout(`${result.inferenceUrl ?? result.openaiUrl ?? result.endpointUrl ?? result.url}\n`);
        break;
      default: {
        const rows: Array<[string, string | undefined]> = [
          ['url', result.url],
          ['inferenceUrl', result.inferenceUrl],
          ['openaiUrl', result.openaiUrl],
          ['endpointUrl', result.endpointUrl],
          ['hostname', result.hostname],
        ];
        const shown = rows.filter((r): r is [string, string] => r[1] !== undefined);
        const width = Math.max(...shown.map(([k]) => k.length)) + 1;
        io.stdout(shown.map(([k, v]) => `${`${k}:`.padEnd(width)} ${v}\n`).join(''));
      }
    }
    return 0;
  });
}

function loadConfig(file: string | undefined, publicUrl: string | undefined, env: NodeJS.ProcessEnv): Config {
  let config: Config;
  try {
    config = loadConfigFile(file, { port: 8080, namespace: ownNamespace(env) });
  } catch (err) {
    if (err instanceof ConfigError) throw new CommandError(err.message);
    throw err;
  }
  if (publicUrl !== undefined) {
    if (!/^https?:\/\/[^/?#\s]+(\/[^?#\s]*)?$/.test(publicUrl)) throw new UsageError(`--public-url "${publicUrl}" must be an http(s) URL`);
    config = { ...config, publicUrl: publicUrl.replace(/\/+$/, '') };
  }
  return config;
}

function buildOptions(config: Config) {
  return {
    publicUrl: config.publicUrl,
    serverlessDomain: config.serverlessDomain,
    keysNamespace: config.auth.keysNamespace,
    defaultTimeoutMs: Math.round(config.limits.requestTimeoutSeconds * 1000),
  };
}

/** Files mode: the same reading (FilesSource) and build as `servegate serve --manifests`. */
async function fromManifests(path: string, project: string, deployment: string, config: Config): Promise<UrlResult> {
  const source = new FilesSource(path, { keysNamespace: config.auth.keysNamespace, watch: false });
  let snapshot: Snapshot | undefined;
  try {
    await source.start((s) => (snapshot = s));
  } catch (err) {
    throw new CommandError((err as Error).message);
  } finally {
    await source.stop();
  }
  if (!snapshot) throw new CommandError(`could not read manifests at ${path}`);
  return resolve(snapshot, project, deployment, config, path);
}

function resolve(snapshot: Snapshot, project: string, deployment: string, config: Config, where: string): UrlResult {
  const { table, statuses } = buildRouteTable(snapshot, buildOptions(config));
  const route = table.byPath.get(`${project}/${deployment}`) ?? table.byPath.get(`${projectNamespaceForm(project)}/${deployment}`);
  if (route) {
    const urls = deploymentUrls(config.publicUrl, route.project, route.deployment, route.kind, route.modelName);
    return {
      project: route.project,
      deployment: route.deployment,
      resource: route.id,
      kind: route.kind,
      modelServer: route.modelServer,
      ...urls,
      hostname: route.hostname,
    };
  }
  // Not routed: say why if a resource claims that name.
  const claims = [...snapshot.deployments, ...snapshot.inferenceServices].filter((r) => claimsRef(r, project, deployment));
  for (const c of claims) {
    const st = statuses.find((s) => s.id === `${c.metadata.namespace}/${c.metadata.name}` && s.resourceKind === c.kind);
    if (st && !st.ready) throw new CommandError(`${c.kind} ${st.id} is not served: ${st.reason}: ${st.message}`);
  }
  const known = table.routes.map((r) => `${r.project}/${r.deployment}`);
  const hint = known.length ? ` (deployments there: ${known.slice(0, 20).join(', ')}${known.length > 20 ? ', ...' : ''})` : '';
  throw new CommandError(`no deployment ${project}/${deployment} in ${where}${hint}`);
}

function claimsRef(r: ServingDeploymentResource | InferenceServiceResource, project: string, deployment: string): boolean {
  if (r.metadata.name !== deployment) return false;
  const spec = r.spec as { project?: unknown } | undefined;
  const p = r.kind === 'ServingDeployment' && typeof spec?.project === 'string' && spec.project ? spec.project : r.metadata.namespace;
  return projectNamespaceForm(p) === projectNamespaceForm(project);
}

/** Cluster mode: ServingDeployments (and InferenceServices when kserve is enabled) from the API server. */
async function fromCluster(
  project: string,
  deployment: string,
  config: Config,
  publicUrlGiven: boolean,
  flags: Record<string, string | true>,
  io: CliIo,
): Promise<UrlResult> {
  const { custom, server } = await kubeClients(str(flags, 'kubeconfig'), io.env);
  const namespace = str(flags, 'namespace');
  const list = async (group: string, version: string, plural: string): Promise<unknown[]> => {
    try {
      const res = (namespace
        ? await custom.listNamespacedCustomObject({ group, version, namespace, plural })
        : await custom.listClusterCustomObject({ group, version, plural })) as { items?: unknown[] };
      return res.items ?? [];
    } catch (err) {
      const status = apiStatus(err);
      if (status === 404) {
        if (group === API_GROUP) throw new CommandError(`the ServingDeployment CRD is not installed in the cluster at ${server} (install the chart or crds/)`);
        return [];
      }
      if (status === 403) {
        throw new CommandError(`not allowed to list ${plural}${namespace ? ` in namespace ${namespace}` : ' in all namespaces (try -n NAMESPACE)'}: ${apiMessage(err)}`);
      }
      throw new CommandError(`cannot list ${plural} from ${server}: ${apiMessage(err)}`);
    }
  };
  const deployments = (await list(API_GROUP, 'v1alpha1', 'servingdeployments')).map((o) => toResource<ServingDeploymentResource>(o, 'ServingDeployment'));
  const inferenceServices = config.kubernetes.kserve.enabled
    ? (await list(KSERVE_GROUP, 'v1beta1', 'inferenceservices')).map((o) => toResource<InferenceServiceResource>(o, 'InferenceService'))
    : [];
  const snapshot: Snapshot = { source: 'kubernetes', deployments, inferenceServices, keySecrets: [] };
  const result = resolve(snapshot, project, deployment, config, server);
  if (publicUrlGiven) return result;
  const res = deployments.find((d) => `${d.metadata.namespace}/${d.metadata.name}` === result.resource);
  const status = statusUrls(res?.status);
  if (!status) {
    io.stderr(`note: ${result.resource} has no URLs in its status yet (is the servegate controller running?); computed from ${config.publicUrl}\n`);
    return result;
  }
  const ready = readyCondition(res?.status);
  if (ready && ready.status !== 'True') io.stderr(`warning: ${result.resource} is not Ready: ${ready.reason ?? ''} ${ready.message ?? ''}\n`);
  // Status fields win; a field the status lacks is filled in only when both agree on the base URL.
  const same = status.url === result.url;
  return {
    ...result,
    url: status.url,
    inferenceUrl: status.inferenceUrl ?? (same ? result.inferenceUrl : undefined),
    openaiUrl: status.openaiUrl ?? (same ? result.openaiUrl : undefined),
    endpointUrl: status.endpointUrl ?? (same ? result.endpointUrl : undefined),
    hostname: status.hostname ?? result.hostname,
  };
}

function toResource<T extends ServingDeploymentResource | InferenceServiceResource>(o: unknown, kind: T['kind']): T {
  const obj = (o ?? {}) as { apiVersion?: string; metadata?: Record<string, unknown>; spec?: unknown; status?: unknown };
  const md = obj.metadata ?? {};
  const ts = md.creationTimestamp;
  return {
    apiVersion: obj.apiVersion ?? '',
    kind,
    metadata: {
      name: String(md.name ?? ''),
      namespace: String(md.namespace ?? ''),
      generation: typeof md.generation === 'number' ? md.generation : undefined,
      creationTimestamp: ts instanceof Date ? ts.toISOString() : typeof ts === 'string' ? ts : undefined,
    },
    spec: obj.spec,
    status: obj.status,
    origin: 'kubernetes',
  } as T;
}

function statusUrls(status: unknown): Pick<DeploymentStatus, 'url' | 'inferenceUrl' | 'openaiUrl' | 'endpointUrl' | 'hostname'> & { url: string } | undefined {
  if (!status || typeof status !== 'object') return undefined;
  const s = status as Record<string, unknown>;
  if (typeof s.url !== 'string' || !s.url) return undefined;
  const pick = (k: string) => (typeof s[k] === 'string' && s[k] ? (s[k] as string) : undefined);
  return { url: s.url, inferenceUrl: pick('inferenceUrl'), openaiUrl: pick('openaiUrl'), endpointUrl: pick('endpointUrl'), hostname: pick('hostname') };
}

function readyCondition(status: unknown): { status?: string; reason?: string; message?: string } | undefined {
  const conds = (status as { conditions?: unknown } | undefined)?.conditions;
  if (!Array.isArray(conds)) return undefined;
  return conds.find((c) => c && typeof c === 'object' && (c as { type?: unknown }).type === 'Ready');
}
