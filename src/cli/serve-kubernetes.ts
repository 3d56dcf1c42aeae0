// `servegate serve --kubernetes`: the Kubernetes route source, EndpointSlice balancing and the status controller.
import { KubeConfig } from '@kubernetes/client-node';
import { ownNamespace } from '../config/load.js';
import type { Config } from '../config/schema.js';
import { registerControllerMetrics, startStatusController, type ControllerHandle } from '../controller/index.js';
import type { Metrics } from '../observe/metrics.js';
import type { Logger } from '../log.js';
import { startServegate, type Servegate } from '../server.js';
import { KubernetesSource, kubernetesSourceOptions } from '../sources/kubernetes/index.js';
import type { ServeArgs } from './serve.js';

/** In-cluster configuration when running in a pod, else KUBECONFIG (or ~/.kube/config). */
export function loadKubeConfig(): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromDefault();
  if (!kc.getCurrentCluster()) {
    throw new Error('no Kubernetes configuration found: run in a pod (in-cluster config) or set KUBECONFIG');
  }
  return kc;
}

export function startKubernetes(config: Config, args: ServeArgs, logger: Logger): Promise<Servegate> {
  return startKubernetesWith(loadKubeConfig(), config, {
    port: args.port,
    adminPort: args.adminPort,
    host: args.host,
    adminHost: args.adminHost,
    logger,
  });
}

export interface KubernetesServeOptions {
  port: number;
  adminPort: number;
  host?: string;
  adminHost?: string;
  logger: Logger;
  /** The gateway's own namespace (Lease); default POD_NAMESPACE, else "servegate". */
  namespace?: string;
  /** Lease holder identity; default POD_NAME, else the hostname. */
  identity?: string;
  processMetrics?: boolean;
  /** Tests shorten the watch backoff. */
  backoff?: { initialMs: number; maxMs: number };
}

export async function startKubernetesWith(
  kc: KubeConfig,
  config: Config,
  opts: KubernetesServeOptions,
): Promise<Servegate> {
  let metrics: Metrics | undefined;
  let controller: ControllerHandle | undefined;
  const source = new KubernetesSource(
    kc,
    kubernetesSourceOptions(config, {
      logger: opts.logger,
      backoff: opts.backoff,
      onWatchRestart: (kind, reason) => metrics?.watchRestarts.inc({ kind, reason }),
      onStatusChange: (deployment) => controller?.controller.statusChanged(deployment),
    }),
  );
  return startServegate({
    config,
    source,
    endpoints: source,
    port: opts.port,
    adminPort: opts.adminPort,
    host: opts.host,
    adminHost: opts.adminHost,
    logger: opts.logger,
    processMetrics: opts.processMetrics,
    attach: ({ store, metrics: m, logger }) => {
      metrics = m;
      const ctl = startStatusController({
        store,
        kubeConfig: kc,
        namespace: opts.namespace ?? ownNamespace(),
        identity: opts.identity,
        leaderElection: config.kubernetes.leaderElection,
        logger,
      });
      registerControllerMetrics(m.registry, ctl);
      controller = ctl;
      return ctl;
    },
  });
}
