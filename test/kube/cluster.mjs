#!/usr/bin/env node
// A real control plane on loopback: etcd and kube-apiserver (built by scripts/build-kube.mjs), with RBAC
// authorization, a client CA with an admin certificate (O=system:masters), and ServiceAccount token signing
// (TokenRequest). It runs as its own process so that several test files of one jest worker can share it:
//
//   node test/kube/cluster.mjs --dir DIR [--parent PID]
//
// writes DIR/state.json once the API server is ready (ports, pids, files), and stops etcd and the API server, then
// removes DIR, on SIGTERM/SIGINT or as soon as process PID (the jest worker that owns it) is gone. Faults on demand:
// SIGUSR1 kills the API server with SIGKILL (its port stays free for the restart), SIGUSR2 starts it again on the same
// port; state.json's apiserverPid follows. SIGHUP runs the etcd operation written in DIR/etcd-op ("<n> backup" or
// "<n> restore"): the API server is killed, etcd stopped, its data folder copied to DIR/etcd-backup (or put back from
// it: a restore from a volume backup, revisions back where they were), then both started again on the same ports;
// state.json's etcdOpDone becomes n. No controller manager, scheduler or kubelet runs: tests write what those
// would (EndpointSlices, ServiceAccounts) themselves.
import { execFileSync, spawn } from 'node:child_process';
import { cpSync, mkdirSync, readFileSync, rmSync, writeFileSync, existsSync, openSync } from 'node:fs';
import { request } from 'node:https';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { kubeCacheDir } from './cache.mjs';

const args = process.argv.slice(2);
const opt = (name) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
};
const dir = opt('--dir');
const parent = Number(opt('--parent') ?? 0);
if (!dir) {
  console.error('usage: cluster.mjs --dir DIR [--parent PID]');
  process.exit(2);
}
const bin = join(kubeCacheDir(), 'bin');
if (!existsSync(join(bin, 'kube-apiserver'))) {
  console.error(`cluster: ${bin}/kube-apiserver is missing: run \`npm run kube:build\` (needs Go 1.26 or newer)`);
  process.exit(3);
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

function openssl(...a) {
  execFileSync('openssl', a, { stdio: ['ignore', 'ignore', 'pipe'] });
}

/** CA, the API server's serving certificate, the admin client certificate and the ServiceAccount signing key. */
function makePki(pki) {
  mkdirSync(pki, { recursive: true });
  const f = (n) => join(pki, n);
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  openssl(
    'req',
    '-x509',
    ...ec,
    '-days',
    '3',
    '-subj',
    '/CN=servegate-test-ca',
    '-keyout',
    f('ca.key'),
    '-out',
    f('ca.crt'),
  );
  const leaf = (name, subj, ext) => {
    openssl('req', '-new', ...ec, '-subj', subj, '-keyout', f(`${name}.key`), '-out', f(`${name}.csr`));
    writeFileSync(f(`${name}.ext`), ext);
    openssl(
      'x509',
      '-req',
      '-in',
      f(`${name}.csr`),
      '-CA',
      f('ca.crt'),
      '-CAkey',
      f('ca.key'),
      '-CAcreateserial',
      '-days',
      '3',
      '-extfile',
      f(`${name}.ext`),
      '-out',
      f(`${name}.crt`),
    );
  };
  leaf(
    'apiserver',
    '/CN=kube-apiserver',
    'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth\n',
  );
  leaf('admin', '/O=system:masters/CN=servegate-test-admin', 'extendedKeyUsage=clientAuth\n');
  openssl('ecparam', '-name', 'prime256v1', '-genkey', '-noout', '-out', f('sa.key'));
  openssl('ec', '-in', f('sa.key'), '-pubout', '-out', f('sa.pub'));
  return f;
}

function get(url, f) {
  return new Promise((resolve) => {
    const req = request(url, { ca: f.ca, cert: f.cert, key: f.key, timeout: 2000 }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode));
    });
    req.on('error', () => resolve(0));
    req.on('timeout', () => req.destroy());
    req.end();
  });
}

mkdirSync(dir, { recursive: true });
const f = makePki(join(dir, 'pki'));
const [etcdPort, peerPort, apiPort] = [await freePort(), await freePort(), await freePort()];
const etcdUrl = `http://127.0.0.1:${etcdPort}`;
const server = `https://127.0.0.1:${apiPort}`;
const children = new Set();

function run(name, file, argv) {
  const out = openSync(join(dir, `${name}.log`), 'a');
  const child = spawn(join(bin, file), argv, { stdio: ['ignore', out, out] });
  children.add(child);
  child.on('exit', () => children.delete(child));
  return child;
}

const etcdData = join(dir, 'etcd');
const etcdArgs = [
  '--name=test',
  `--data-dir=${etcdData}`,
  `--listen-client-urls=${etcdUrl}`,
  `--advertise-client-urls=${etcdUrl}`,
  `--listen-peer-urls=http://127.0.0.1:${peerPort}`,
  `--initial-advertise-peer-urls=http://127.0.0.1:${peerPort}`,
  `--initial-cluster=test=http://127.0.0.1:${peerPort}`,
  '--unsafe-no-fsync',
  '--log-level=warn',
];
let etcd = startEtcd();

const apiArgs = [
  `--etcd-servers=${etcdUrl}`,
  `--secure-port=${apiPort}`,
  '--bind-address=127.0.0.1',
  '--advertise-address=127.0.0.1',
  '--endpoint-reconciler-type=none', // it would write 127.0.0.1 into the kubernetes Service's endpoints
  `--cert-dir=${join(dir, 'pki')}`,
  `--tls-cert-file=${f('apiserver.crt')}`,
  `--tls-private-key-file=${f('apiserver.key')}`,
  `--client-ca-file=${f('ca.crt')}`,
  '--authorization-mode=RBAC',
  '--service-account-issuer=https://kubernetes.default.svc.cluster.local',
  `--service-account-key-file=${f('sa.pub')}`,
  `--service-account-signing-key-file=${f('sa.key')}`,
  '--service-cluster-ip-range=10.96.0.0/24', // Services get addresses from it; nothing is ever sent there
  // The API server's own compaction every 5 minutes would make watch tests depend on timing; tests compact on demand.
  '--etcd-compaction-interval=0',
  '--profiling=false',
  '--v=1',
];
let apiserver = run('apiserver', 'kube-apiserver', apiArgs);

const tls = { ca: f('ca.crt'), cert: f('admin.crt'), key: f('admin.key') };
const readFiles = (p) => execFileSync('cat', [p]);
const creds = { ca: readFiles(tls.ca), cert: readFiles(tls.cert), key: readFiles(tls.key) };

function kubeconfig(userBlock) {
  return [
    'apiVersion: v1',
    'kind: Config',
    'clusters:',
    '- name: test',
    '  cluster:',
    `    server: ${server}`,
    `    certificate-authority: ${tls.ca}`,
    'users:',
    '- name: user',
    '  user:',
    ...userBlock.map((l) => `    ${l}`),
    'contexts:',
    '- name: test',
    '  context: {cluster: test, user: user, namespace: default}',
    'current-context: test',
    '',
  ].join('\n');
}
writeFileSync(join(dir, 'admin.kubeconfig'), kubeconfig([`client-certificate: ${tls.cert}`, `client-key: ${tls.key}`]));

function writeState(extra = {}) {
  const state = {
    server,
    apiPort,
    etcdUrl,
    etcdPid: etcd?.pid ?? 0,
    apiserverPid: apiserver?.pid ?? 0,
    pid: process.pid,
    kubeconfig: join(dir, 'admin.kubeconfig'),
    ca: tls.ca,
    adminCert: tls.cert,
    adminKey: tls.key,
    dir,
    ...extra,
  };
  writeFileSync(join(dir, 'state.json.tmp'), JSON.stringify(state, null, 2));
  execFileSync('mv', [join(dir, 'state.json.tmp'), join(dir, 'state.json')]);
}

let stopping = false;
function stop(code = 0) {
  if (stopping) return;
  stopping = true;
  for (const c of children) c.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
  process.exit(code);
}
process.on('SIGTERM', () => stop(0));
process.on('SIGINT', () => stop(0));
process.on('SIGUSR1', () => {
  apiserver?.kill('SIGKILL');
  apiserver = undefined;
  writeState({ apiserverDown: true });
});
process.on('SIGUSR2', () => {
  if (apiserver) return;
  apiserver = run('apiserver', 'kube-apiserver', apiArgs);
  writeState();
});

function startEtcd() {
  const child = run('etcd', 'etcd', etcdArgs);
  child.on('exit', (code, signal) => {
    // An etcd stopped for a backup or restore is not a failure.
    if (!stopping && child === etcd) {
      console.error(`cluster: etcd exited (${code ?? signal}); see ${dir}/etcd.log`);
      stop(4);
    }
  });
  return child;
}

function exited(child) {
  return child.exitCode !== null || child.signalCode !== null
    ? Promise.resolve()
    : new Promise((resolve) => child.once('exit', () => resolve()));
}

let etcdOp = Promise.resolve();
process.on('SIGHUP', () => {
  etcdOp = etcdOp.then(runEtcdOp).catch((err) => {
    console.error(`cluster: etcd operation failed: ${err?.stack ?? err}`);
    stop(6);
  });
});

/** Backup or restore of etcd's data folder, with the API server and etcd stopped; both started again after. */
async function runEtcdOp() {
  const [n, op] = readFileSync(join(dir, 'etcd-op'), 'utf8').trim().split(' ');
  const backup = join(dir, 'etcd-backup');
  if (apiserver) {
    const a = apiserver;
    apiserver = undefined;
    a.kill('SIGKILL');
    await exited(a);
  }
  writeState({ apiserverDown: true });
  const e = etcd;
  etcd = undefined;
  e.kill('SIGTERM');
  await exited(e);
  if (op === 'backup') {
    rmSync(backup, { recursive: true, force: true });
    cpSync(etcdData, backup, { recursive: true });
  } else if (op === 'restore') {
    if (!existsSync(backup)) throw new Error('restore without a backup');
    rmSync(etcdData, { recursive: true, force: true });
    cpSync(backup, etcdData, { recursive: true });
  } else {
    throw new Error(`unknown etcd operation ${op}`);
  }
  etcd = startEtcd();
  const deadline = Date.now() + 30_000;
  while (!(await etcdHealthy())) {
    if (Date.now() > deadline) throw new Error(`etcd did not come back; see ${dir}/etcd.log`);
    await new Promise((r) => setTimeout(r, 100));
  }
  apiserver = run('apiserver', 'kube-apiserver', apiArgs);
  writeState({ etcdOpDone: Number(n) });
}

async function etcdHealthy() {
  try {
    const r = await fetch(`${etcdUrl}/health`, { signal: AbortSignal.timeout(2000) });
    return r.ok && (await r.json()).health === 'true';
  } catch {
    return false;
  }
}
if (parent) {
  setInterval(() => {
    try {
      process.kill(parent, 0);
    } catch {
      stop(0);
    }
  }, 500).unref();
}

// Ready: /readyz answers 200 (etcd reached, RBAC's bootstrap roles written, every post-start hook done).
const deadline = Date.now() + 120_000;
for (;;) {
  if ((await get(`${server}/readyz`, creds)) === 200) break;
  if (Date.now() > deadline || !apiserver || apiserver.exitCode !== null) {
    console.error(`cluster: the API server did not become ready; see ${dir}/apiserver.log`);
    stop(5);
  }
  await new Promise((r) => setTimeout(r, 250));
}
writeState();
console.log(JSON.stringify({ ready: true, dir }));
