// Wires the status controller to leader election, for the kubernetes serve path.
import type { KubeConfig } from '@kubernetes/client-node';
import type { Config } from '../config/schema.js';
import { silentLogger, type Logger } from '../log.js';
import type { RouteStore } from '../routing/store.js';
import { kubeStatusWriter, StatusController, type StatusWriter } from './controller.js';
import { alwaysLeader, defaultIdentity, LeaderElector, leaderTimingsFromConfig, type LeaderTimings } from './leader.js';

export {
  StatusController,
  kubeStatusWriter,
  type StatusWriter,
  type StatusControllerOptions,
  type StatusControllerStats,
} from './controller.js';
export {
  LeaderElector,
  alwaysLeader,
  defaultIdentity,
  leaderTimingsFromConfig,
  checkLeaderTimings,
  type Leadership,
  type LeaderTimings,
} from './leader.js';
export {
  desiredStatus,
  statusNeedsWrite,
  statusMergePatch,
  type ServingDeploymentStatus,
  type Condition,
} from './status.js';
export { registerControllerMetrics } from './metrics.js';

export interface ControllerHandle {
  controller: StatusController;
  /** Undefined when leader election is disabled (this replica always writes). */
  elector?: LeaderElector;
  isLeader(): boolean;
  /** Stops writing and, when leading, releases the Lease. */
  stop(): Promise<void>;
}

export interface StartControllerOptions {
  store: RouteStore;
  kubeConfig: KubeConfig;
  /** Where the Lease lives: the gateway's own namespace (POD_NAMESPACE). */
  namespace: string;
  leaderElection: Config['kubernetes']['leaderElection'];
  /** Default: POD_NAME, else the hostname. */
  identity?: string;
  logger?: Logger;
  /** Overrides the config timings (tests use sub-second periods). */
  timings?: LeaderTimings;
  /** Default: the status subresource over kubeConfig. */
  writer?: StatusWriter;
  retryBaseMs?: number;
}

/**
 * Starts the status controller and, when enabled, leader election. Call it BEFORE the route source starts,
 * so that the controller sees the first build. Throws when the leader-election timings are unsafe.
 */
export function startStatusController(opts: StartControllerOptions): ControllerHandle {
  const logger = opts.logger ?? silentLogger;
  const writer = opts.writer ?? kubeStatusWriter(opts.kubeConfig);
  const le = opts.leaderElection;
  let elector: LeaderElector | undefined;
  const leadership = { isLeader: () => (elector ? elector.isLeader() : true) };
  const controller = new StatusController({
    store: opts.store,
    writer,
    leadership: le.enabled ? leadership : alwaysLeader,
    logger,
    retryBaseMs: opts.retryBaseMs,
  });
  if (le.enabled) {
    elector = new LeaderElector({
      api: opts.kubeConfig,
      namespace: opts.namespace,
      name: le.leaseName,
      identity: opts.identity ?? defaultIdentity(),
      ...(opts.timings ?? leaderTimingsFromConfig(le)),
      logger,
      onStartedLeading: () => controller.startedLeading(),
      onStoppedLeading: () => controller.stoppedLeading(),
    });
  }
  controller.start();
  if (elector) elector.start();
  else controller.startedLeading();
  return {
    controller,
    elector,
    isLeader: () => leadership.isLeader(),
    async stop() {
      await elector?.stop();
      await controller.stop();
    },
  };
}
