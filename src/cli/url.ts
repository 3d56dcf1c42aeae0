// `servegate url <project>/<deployment>`: prints a deployment's URLs and legacy hostname, computed by the same
// route builder the gateway uses (files mode) or read from the resource's status (cluster mode).
import { stringify } from 'yaml';
import { readMeta } from '../kube/objects.js';
import { loadConfigFile, ownNamespace } from '../config/load.js';
import type { Config } from '../config/schema.js';
import { buildOptionsOf, buildRouteTable } from '../routing/build.js';
import { deploymentUrls, projectNamespaceForm } from '../routing/names.js';
import type {
  DeploymentStatus,
  InferenceServiceResource,
  Route,
  ServingDeploymentResource,
  Snapshot,
} from '../routing/types.js';
import { API_GROUP } from '../routing/types.js';
import { FilesSource } from '../sources/files/index.js';
import { KSERVE_GROUP } from '../sources/manifests.js';
import type { Command } from 'commander';
import { CommandError, UsageError } from '../errors.js';
import { apiStatus } from '../kube/objects.js';
import { choice, command, processIo, run, type CliIo } from './io.js';
import { apiMessage, kubeClients } from './kube.js';

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

interface UrlFlags {
  manifests?: string;
  config?: string;
  publicUrl?: string;
  namespace?: string;
  kubeconfig?: string;
  output: 'text' | 'json' | 'yaml' | 'url';
}

export function urlProgram(io: CliIo): Command {
  return command('url', io)
    .description(
      'Prints the URLs of a deployment that is served: url (the base), inferenceUrl (predictive models), openaiUrl (LLMs), ' +
        'endpointUrl (Python deployments) and the legacy hostname. A deployment that is not served is an error (exit 1).',
    )
    .argument('<project/deployment>', 'the deployment, e.g. fraud_detection/fraud')
    .option(
      '--manifests <dir|file>',
      'read the manifests a "servegate serve --manifests" gateway serves (default: the cluster)',
    )
    .option('--config <file>', 'the gateway configuration (publicUrl, serverlessDomain)')
    .option(
      '--public-url <url>',
      "the gateway's public URL (overrides the configuration and, in the cluster, the status)",
    )
    .option('-n, --namespace <ns>', 'cluster mode: look only in this namespace')
    .option('--kubeconfig <file>', 'kubeconfig file to use')
    .addOption(
      choice('-o, --output <format>', 'text, json, yaml, or url (only the URL to call)', [
        'text',
        'json',
        'yaml',
        'url',
      ]).default('text'),
    )
    .addHelpText(
      'after',
      "\nWithout --manifests the cluster is read (KUBECONFIG, ~/.kube/config or in-cluster) and the URLs the controller wrote\nto the resource's status are printed as they are.",
    )
    .action(async (ref: string, flags: UrlFlags) => {
      const m = /^([^/\s]+)\/([^/\s]+)$/.exec(ref);
      if (!m) throw new UsageError(`"${ref}" is not <project>/<deployment>`);
      const [, project, deployment] = m;
      if (flags.manifests !== undefined && (flags.kubeconfig !== undefined || flags.namespace !== undefined)) {
        throw new UsageError('--manifests reads files: do not combine it with --kubeconfig or --namespace');
      }
      const config = loadConfig(flags.config, flags.publicUrl, io.env);
      const result =
        flags.manifests !== undefined
          ? await fromManifests(flags.manifests, project, deployment, config)
          : await fromCluster(project, deployment, config, flags.publicUrl !== undefined, flags, io);
      print(result, flags.output, io);
    });
}

function print(result: UrlResult, output: UrlFlags['output'], io: CliIo): void {
  switch (output) {
    case 'json':
      return io.stdout(`${JSON.stringify(result, null, 2)}\n`);
    case 'yaml':
      return io.stdout(stringify(result));
    case 'url':
      return io.stdout(`${result.inferenceUrl ?? result.openaiUrl ?? result.endpointUrl ?? result.url}\n`);
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
}

/** `servegate url ...` with `argv` after "url". */
export async function urlCommand(argv: string[], io: CliIo = processIo()): Promise<number> {
  return run(command('servegate', io).addCommand(urlProgram(io)), ['url', ...argv], io);
}

function loadConfig(file: string | undefined, publicUrl: string | undefined, env: NodeJS.ProcessEnv): Config {
  let config = loadConfigFile(file, { port: 8080, namespace: ownNamespace(env) });
  if (publicUrl !== undefined) {
    if (!/^https?:\/\/[^/?#\s]+(\/[^?#\s]*)?$/.test(publicUrl))
      throw new UsageError(`--public-url "${publicUrl}" must be an http(s) URL`);
    config = { ...config, publicUrl: publicUrl.replace(/\/+$/, '') };
  }
  return config;
}

/** Files mode: the same reading (FilesSource) and build as `servegate serve --manifests`. */
async function fromManifests(path: string, project: string, deployment: string, config: Config): Promise<UrlResult> {
  const source = new FilesSource(path, { keysNamespace: config.auth.keysNamespace, watch: false });
  let snapshot: Snapshot | undefined;
  try {
    await source.start((s) => (snapshot = s));
  } catch (err) {
    throw new CommandError((err as Error).message, 'SG_NOT_FOUND');
  } finally {
    await source.stop();
  }
  if (!snapshot) throw new CommandError(`could not read manifests at ${path}`, 'SG_NOT_FOUND');
  return resolve(snapshot, project, deployment, config, path);
}

function resolve(snapshot: Snapshot, project: string, deployment: string, config: Config, where: string): UrlResult {
  const { table, statuses } = buildRouteTable(snapshot, buildOptionsOf(config));
  const route =
    table.byPath.get(`${project}/${deployment}`) ?? table.byPath.get(`${projectNamespaceForm(project)}/${deployment}`);
  if (route?.notReady)
    throw new CommandError(`${route.resourceKind} ${route.id} is not served now: ${route.notReady}`, 'SG_NOT_SERVED');
  if (route) {
    const urls = deploymentUrls(
      config.publicUrl,
      route.project,
      route.deployment,
      route.kind,
      route.modelName,
      route.protocol,
    );
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
  const claims = [...snapshot.deployments, ...snapshot.inferenceServices].filter((r) =>
    claimsRef(r, project, deployment),
  );
  for (const c of claims) {
    const st = statuses.find((s) => s.id === `${c.metadata.namespace}/${c.metadata.name}` && s.resourceKind === c.kind);
    if (st && !st.ready)
      throw new CommandError(`${c.kind} ${st.id} is not served: ${st.reason}: ${st.message}`, 'SG_NOT_SERVED');
  }
  const known = table.routes.map((r) => `${r.project}/${r.deployment}`);
  const hint = known.length
    ? ` (deployments there: ${known.slice(0, 20).join(', ')}${known.length > 20 ? ', ...' : ''})`
    : '';
  throw new CommandError(`no deployment ${project}/${deployment} in ${where}${hint}`, 'SG_NOT_FOUND');
}

function claimsRef(
  r: ServingDeploymentResource | InferenceServiceResource,
  project: string,
  deployment: string,
): boolean {
  if (r.metadata.name !== deployment) return false;
  const spec = r.spec as { project?: unknown } | undefined;
  const p =
    r.kind === 'ServingDeployment' && typeof spec?.project === 'string' && spec.project
      ? spec.project
      : r.metadata.namespace;
  return projectNamespaceForm(p) === projectNamespaceForm(project);
}

/** Cluster mode: ServingDeployments (and InferenceServices when kserve is enabled) from the API server. */
async function fromCluster(
  project: string,
  deployment: string,
  config: Config,
  publicUrlGiven: boolean,
  flags: UrlFlags,
  io: CliIo,
): Promise<UrlResult> {
  const { custom, server } = await kubeClients(
    flags.kubeconfig,
    io.env,
    'to read manifests instead use --manifests DIR',
  );
  const namespace = flags.namespace;
  const list = async (group: string, version: string, plural: string): Promise<unknown[]> => {
    try {
      const res = (
        namespace
          ? await custom.listNamespacedCustomObject({ group, version, namespace, plural })
          : await custom.listClusterCustomObject({ group, version, plural })
      ) as { items?: unknown[] };
      return res.items ?? [];
    } catch (err) {
      const status = apiStatus(err);
      if (status === 404) {
        if (group === API_GROUP)
          throw new CommandError(
            `the ServingDeployment CRD is not installed in the cluster at ${server} (install the chart or crds/)`,
            'SG_CLUSTER',
          );
        return [];
      }
      // InferenceServices are looked for whenever the cluster has them; not being allowed to list them hides only them.
      if (status === 403 && group !== API_GROUP) return [];
      if (status === 403) {
        throw new CommandError(
          `not allowed to list ${plural}${namespace ? ` in namespace ${namespace}` : ' in all namespaces (try -n NAMESPACE)'}: ${apiMessage(err)}`,
          'SG_CLUSTER',
        );
      }
      throw new CommandError(`cannot list ${plural} from ${server}: ${apiMessage(err)}`, 'SG_CLUSTER');
    }
  };
  const deployments = (await list(API_GROUP, 'v1alpha1', 'servingdeployments')).map((o) =>
    toResource<ServingDeploymentResource>(o, 'ServingDeployment'),
  );
  // InferenceServices too, whether or not this machine's configuration enables KServe (a gateway's may).
  const inferenceServices = (await list(KSERVE_GROUP, 'v1beta1', 'inferenceservices')).map((o) =>
    toResource<InferenceServiceResource>(o, 'InferenceService'),
  );
  const snapshot: Snapshot = { source: 'kubernetes', deployments, inferenceServices, keySecrets: [] };
  const result = resolve(snapshot, project, deployment, config, server);
  const res = deployments.find((d) => `${d.metadata.namespace}/${d.metadata.name}` === result.resource);
  const ready = readyCondition(res?.status);
  // The controller's verdict wins over this command's own reading (it sees Services and endpoints): a deployment it
  // reports not Ready is not served.
  if (ready && ready.status !== 'True') {
    throw new CommandError(
      `${result.resource} is not served: ${[ready.reason, ready.message].filter(Boolean).join(': ') || 'its Ready condition is not True'}`,
      'SG_NOT_SERVED',
    );
  }
  if (!res && !config.kubernetes.kserve.enabled)
    io.stderr(
      `note: ${result.resource} is an InferenceService: a gateway serves it only with kubernetes.kserve.enabled (the chart's kserve.enabled)\n`,
    );
  // The controller writes no status to InferenceServices (they are KServe's): their URLs are computed.
  if (publicUrlGiven || !res) return result;
  const status = statusUrls(res?.status);
  if (!status) {
    io.stderr(
      `note: ${result.resource} has no URLs in its status yet (is the servegate controller running?); computed from ${config.publicUrl}\n`,
    );
    return result;
  }
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
  const obj = (o ?? {}) as { apiVersion?: string; spec?: unknown; status?: unknown };
  return {
    apiVersion: obj.apiVersion ?? '',
    kind,
    metadata: readMeta(o) ?? { name: '', namespace: '' },
    spec: obj.spec,
    status: obj.status,
    origin: 'kubernetes',
  } as T;
}

function statusUrls(
  status: unknown,
):
  | (Pick<DeploymentStatus, 'url' | 'inferenceUrl' | 'openaiUrl' | 'endpointUrl' | 'hostname'> & { url: string })
  | undefined {
  if (!status || typeof status !== 'object') return undefined;
  const s = status as Record<string, unknown>;
  if (typeof s.url !== 'string' || !s.url) return undefined;
  const pick = (k: string) => (typeof s[k] === 'string' && s[k] ? (s[k] as string) : undefined);
  return {
    url: s.url,
    inferenceUrl: pick('inferenceUrl'),
    openaiUrl: pick('openaiUrl'),
    endpointUrl: pick('endpointUrl'),
    hostname: pick('hostname'),
  };
}

function readyCondition(status: unknown): { status?: string; reason?: string; message?: string } | undefined {
  const conds = (status as { conditions?: unknown } | undefined)?.conditions;
  if (!Array.isArray(conds)) return undefined;
  return conds.find((c) => c && typeof c === 'object' && (c as { type?: unknown }).type === 'Ready');
}
