// Where scripts/build-kube.mjs puts the tests' control plane, shared by that script and test/support/kube.
// The folder is keyed by a hash of this Go module (go.mod, go.sum, its commands) and of OTHER_CRDS: a change to any
// of them builds anew; anything else (formatting included) reuses the cache.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));

/** Other projects' CRDs, as their own Go modules ship them (KServe, Gateway API, the Prometheus operator). */
export const OTHER_CRDS = [
  {
    name: 'kserve',
    module: 'github.com/kserve/kserve',
    version: 'v0.17.0',
    files: ['config/crd/full/serving.kserve.io_inferenceservices.yaml'],
  },
  {
    name: 'gateway-api',
    module: 'sigs.k8s.io/gateway-api',
    version: 'v1.4.1',
    files: [
      'config/crd/standard/gateway.networking.k8s.io_gatewayclasses.yaml',
      'config/crd/standard/gateway.networking.k8s.io_gateways.yaml',
      'config/crd/standard/gateway.networking.k8s.io_httproutes.yaml',
    ],
  },
  {
    name: 'prometheus-operator',
    module: 'github.com/prometheus-operator/prometheus-operator',
    version: 'v0.85.0',
    files: [
      'example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml',
      'example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml',
    ],
  },
];

/** test/kube, the Go module. */
export function kubeModuleDir() {
  return here;
}

/** The cache folder for this module's build: $SERVEGATE_KUBE_CACHE, else ~/.cache/servegate/kube, then the hash. */
export function kubeCacheDir() {
  const h = createHash('sha256');
  const files = ['go.mod', 'go.sum', 'cmd/kube-apiserver/main.go', 'cmd/etcd/main.go', 'cmd/kubectl/main.go'];
  for (const f of files)
    h.update(f)
      .update('\0')
      .update(readFileSync(join(here, f)))
      .update('\0');
  h.update(JSON.stringify(OTHER_CRDS));
  const base = process.env.SERVEGATE_KUBE_CACHE || join(homedir(), '.cache', 'servegate', 'kube');
  return join(base, h.digest('hex').slice(0, 16));
}
