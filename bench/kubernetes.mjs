// Part B: the Kubernetes source at 10,000 ServingDeployments (waits for FakeApiServer and KubernetesSource).
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { log } from './lib/report.mjs';

export async function runKubernetesBench(ctx) {
  const need = ['test/support/fake-apiserver.ts', 'src/sources/kubernetes/index.ts'].filter((f) => !existsSync(join(ctx.root, f)));
  log(`  SKIPPED: not written yet: ${need.join(', ')}`);
  return { skipped: need };
}
