#!/usr/bin/env node
// Builds the tests' real control plane: kube-apiserver (k8s.io/kubernetes) and etcd (go.etcd.io/etcd/server/v3)
// from the Go module in test/kube, and takes other projects' CRDs from the Go modules that ship them. Everything
// goes into a cache outside the tree, keyed by a hash of test/kube's go.mod, go.sum and sources: a second run with
// the same module is a no-op. This is an install step (it reaches the Go module proxy); the tests only read the cache.
//
//   node scripts/build-kube.mjs          build if needed, print the cache folder
//   node scripts/build-kube.mjs --where  print the cache folder only (exit 1 when not built)
import { execFileSync, spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { kubeCacheDir, kubeModuleDir, OTHER_CRDS } from '../test/kube/cache.mjs';

const dir = kubeCacheDir();

if (process.argv.includes('--where')) {
  if (!existsSync(join(dir, 'ready'))) process.exit(1);
  console.log(dir);
  process.exit(0);
}
if (existsSync(join(dir, 'ready'))) {
  console.log(`build-kube: cached ${dir}`);
  process.exit(0);
}

// Go: the module's `go` line names the version it needs; an older go fetches that toolchain through the module proxy.
const go = spawnSync('go', ['version'], { encoding: 'utf8' });
if (go.status !== 0) {
  console.error('build-kube: no `go` on PATH: install Go 1.26 or newer (https://go.dev/doc/install) and run again');
  process.exit(2);
}
const started = Date.now();
const work = `${dir}.partial-${process.pid}`;
rmSync(work, { recursive: true, force: true });
mkdirSync(join(work, 'bin'), { recursive: true });
const env = { ...process.env, CGO_ENABLED: '0', GOFLAGS: '-mod=mod -buildvcs=false' };
const mod = kubeModuleDir();
console.log(
  `build-kube: ${go.stdout.trim()}; building kube-apiserver, kubectl and etcd (first build: about 5 minutes on 2 idle cores, 20 or more on busy ones)`,
);
// The version the binaries report (GET /version, `kubectl version`) is stamped at link time, as Kubernetes' own build
// does (hack/lib/version.sh): without it kube-apiserver says v0.0.0-master+$Format:%H$, and `helm install` refuses
// every chart with a kubeVersion constraint, since that is no version at all.
const kubeVersion = /^\s*k8s\.io\/kubernetes (v\d+\.\d+\.\d+)\s*$/m.exec(
  readFileSync(join(mod, 'go.mod'), 'utf8'),
)?.[1];
if (!kubeVersion) throw new Error('build-kube: test/kube/go.mod requires no k8s.io/kubernetes vX.Y.Z');
const [major, minor] = kubeVersion.slice(1).split('.');
const stamp = Object.entries({ gitVersion: kubeVersion, gitMajor: major, gitMinor: minor, gitTreeState: 'clean' })
  .map(([k, v]) => `-X k8s.io/component-base/version.${k}=${v}`)
  .join(' ');
execFileSync('go', ['build', '-trimpath', `-ldflags=-s -w ${stamp}`, '-o', join(work, 'bin') + '/', './cmd/...'], {
  cwd: mod,
  env,
  stdio: 'inherit',
});

// Other projects' CRDs, from the files their own Go modules ship.
for (const crd of OTHER_CRDS) {
  const out = execFileSync('go', ['mod', 'download', '-json', `${crd.module}@${crd.version}`], {
    cwd: mod,
    env,
    encoding: 'utf8',
  });
  const { Dir } = JSON.parse(out);
  for (const file of crd.files) {
    const to = join(work, 'crds', crd.name, file.split('/').pop());
    mkdirSync(dirname(to), { recursive: true });
    cpSync(join(Dir, file), to);
  }
}
writeFileSync(join(work, 'ready'), `${new Date().toISOString()} ${Math.round((Date.now() - started) / 1000)} s\n`);
rmSync(dir, { recursive: true, force: true });
mkdirSync(dirname(dir), { recursive: true });
renameSync(work, dir);
console.log(`build-kube: built ${dir} in ${Math.round((Date.now() - started) / 1000)} s`);
