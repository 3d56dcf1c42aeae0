// Shared helpers for the unit tests: one-line routes and tables built with the real builder.
import { buildRouteTable } from '../../src/routing/build.js';
import type { BuildOptions, BuildResult, Route, Snapshot } from '../../src/routing/types.js';
import { buildOptions, snapshot, type SdepBuilder } from './fixtures.js';

export const runtime = { port: 8080, namespace: 'servegate' };

export function build(parts: Partial<Snapshot> = {}, options: BuildOptions = buildOptions): BuildResult {
  return buildRouteTable(snapshot(parts), options);
}

/** The route the builder makes of one ServingDeployment (fails the test if it is not routed). */
export function routeOf(b: SdepBuilder): Route {
  const r = build({ deployments: [b.build()] });
  if (r.table.routes.length !== 1) throw new Error(`not routed: ${JSON.stringify(r.statuses)}`);
  return r.table.routes[0];
}

/** Deterministic Fisher-Yates shuffle (mulberry32), so a failing order can be reproduced. */
export function shuffled<T>(items: readonly T[], seed: number): T[] {
  let a = seed >>> 0;
  const rand = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const out = [...items];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [out[i], out[j]] = [out[j], out[i]];
  }
  return out;
}
