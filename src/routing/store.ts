// Holds the route table in use. A swap is one reference assignment: requests in flight keep the table they started with.
import { BuildCache, buildRouteTable, emptyRouteTable } from './build.js';
import type { BuildOptions, BuildResult, DeploymentStatus, KeyProblem, RouteTable, Snapshot } from './types.js';

export interface AppliedBuild {
  /** False when the new table hashed the same as the running one (the swap was skipped). */
  changed: boolean;
  result: BuildResult;
}

export type BuildListener = (applied: AppliedBuild, snapshot: Snapshot) => void;

export class RouteStore {
  private table: RouteTable;
  /** The builder's memo: a rebuild re-evaluates only the resources that changed (src/routing/cache.ts). */
  private readonly cache = new BuildCache();
  private last: BuildResult | undefined;
  private listeners: BuildListener[] = [];
  /** Count of snapshots applied; with `changed`, what the reload metrics report. */
  builds = 0;

  constructor(private readonly options: BuildOptions) {
    this.table = emptyRouteTable(options.serverlessDomain);
  }

  /** The table to use for one request: read once per request. */
  current(): RouteTable {
    return this.table;
  }

  /** Statuses and key problems of the last build (empty before the first snapshot). */
  statuses(): readonly DeploymentStatus[] {
    return this.last?.statuses ?? [];
  }

  keyProblems(): readonly KeyProblem[] {
    return this.last?.keyProblems ?? [];
  }

  hasSnapshot(): boolean {
    return this.last !== undefined;
  }

  /** Builds the next table from a snapshot and swaps it in when it differs; then tells the listeners. */
  apply(snapshot: Snapshot): AppliedBuild {
    const result = buildRouteTable(snapshot, this.options, this.cache);
    const changed = result.table.hash !== this.table.hash;
    if (changed) this.table = result.table;
    this.last = result;
    this.builds++;
    const applied = { changed, result };
    for (const l of this.listeners) {
      try {
        l(applied, snapshot);
      } catch {
        // A listener must never break the swap; listeners log their own failures.
      }
    }
    return applied;
  }

  onBuild(listener: BuildListener): () => void {
    this.listeners.push(listener);
    return () => {
      this.listeners = this.listeners.filter((l) => l !== listener);
    };
  }
}
