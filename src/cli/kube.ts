// Kubernetes access for the commands that read or write the cluster (`keys`, `url`): kubeconfig resolution as kubectl
// does it, and the API server's own message for an error.
import { existsSync } from 'node:fs';
import { homedir } from 'node:os';
import { delimiter, join } from 'node:path';
import { CommandError } from '../errors.js';
import { apiStatus } from '../kube/objects.js';

export interface KubeClients {
  core: import('@kubernetes/client-node').CoreV1Api;
  custom: import('@kubernetes/client-node').CustomObjectsApi;
  server: string;
}

/** KUBECONFIG / ~/.kube/config / in-cluster, or --kubeconfig FILE. Refuses the client's silent localhost fallback. */
/** `hint`: what the command offers instead of a cluster (each command its own). */
export async function kubeClients(
  kubeconfig: string | undefined,
  env: NodeJS.ProcessEnv,
  hint: string,
): Promise<KubeClients> {
  const k8s = await import('@kubernetes/client-node');
  const kc = new k8s.KubeConfig();
  if (kubeconfig) {
    if (!existsSync(kubeconfig)) throw new CommandError(`--kubeconfig ${kubeconfig}: no such file`, 'SG_CLUSTER');
    kc.loadFromFile(kubeconfig);
  } else if (env.KUBECONFIG) {
    // As kubectl: a list of files, the first one's current context wins.
    const files = env.KUBECONFIG.split(delimiter).filter(Boolean);
    for (const f of files)
      if (!existsSync(f)) throw new CommandError(`KUBECONFIG names ${f}, which does not exist`, 'SG_CLUSTER');
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
      `no cluster configured: set KUBECONFIG or pass --kubeconfig FILE (or run in a pod); ${hint}`,
      'SG_CLUSTER',
    );
  }
  const cluster = kc.getCurrentCluster();
  if (!cluster) throw new CommandError('the kubeconfig has no current cluster', 'SG_CLUSTER');
  return {
    core: kc.makeApiClient(k8s.CoreV1Api),
    custom: kc.makeApiClient(k8s.CustomObjectsApi),
    server: cluster.server,
  };
}

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
