// Prometheus metrics of the status controller and leader election, read from their counters at scrape time.
import { Counter, Gauge, type Registry } from 'prom-client';
import type { StatusController } from './controller.js';
import type { LeaderElector } from './leader.js';

export function registerControllerMetrics(
  registry: Registry,
  handle: { controller: StatusController; elector?: LeaderElector; isLeader(): boolean },
): void {
  const { controller, elector } = handle;
  const counter = (name: string, help: string, read: () => number) =>
    new Counter({
      name,
      help,
      registers: [registry],
      collect() {
        this.reset();
        this.inc(read());
      },
    });
  counter('servegate_status_writes_total', 'Status subresource writes that succeeded', () => controller.stats.writes);
  counter(
    'servegate_status_write_failures_total',
    'Status writes that failed (each retry counts; 409 Conflict included)',
    () => controller.stats.failures,
  );
  counter(
    'servegate_status_write_conflicts_total',
    'Status writes answered 409 Conflict',
    () => controller.stats.conflicts,
  );
  new Gauge({
    name: 'servegate_status_queue_depth',
    help: 'Status writes waiting (queued or backing off after a failure)',
    registers: [registry],
    collect() {
      this.set(controller.queueDepth());
    },
  });
  new Gauge({
    name: 'servegate_leader',
    help: '1 while this replica is the elected status writer',
    registers: [registry],
    collect() {
      this.set(handle.isLeader() ? 1 : 0);
    },
  });
  counter(
    'servegate_leader_transitions_total',
    'Times this replica became leader',
    () => elector?.stats.acquisitions ?? 0,
  );
  counter(
    'servegate_leader_election_errors_total',
    'Lease requests that failed (network, 5xx, timeouts)',
    () => elector?.stats.errors ?? 0,
  );
}
