// Lease leader election against a fake kube-apiserver over real HTTP, with the real @kubernetes/client-node.
import net from 'node:net';
import { hostname } from 'node:os';
import type { AddressInfo } from 'node:net';
import { KubeConfig } from '@kubernetes/client-node';
import { afterEach, beforeEach, describe, expect, test } from '@jest/globals';
import { waitFor } from '../support/wait.js';
import {
  checkLeaderTimings,
  defaultIdentity,
  LeaderElector,
  leaderTimingsFromConfig,
  type LeaderElectorOptions,
} from '../../src/controller/leader.js';
import { FakeApiServer } from '../support/fake-apiserver.js';

const NS = 'servegate';
const LEASE = 'servegate-controller';
/** Short timings: lease 1 s, renew deadline 0.7 s, retry 0.15 s. */
const FAST = { leaseDurationMs: 1000, renewDeadlineMs: 700, retryPeriodMs: 150, requestTimeoutMs: 400 };

/** For tests that must not lose leadership on a slow, loaded machine: a wide renew deadline. */
const ROOMY = { leaseDurationMs: 3000, renewDeadlineMs: 2000 };

let fake: FakeApiServer;
const electors: LeaderElector[] = [];
const proxies: TcpProxy[] = [];

beforeEach(async () => {
  fake = await FakeApiServer.start();
});
afterEach(async () => {
  await Promise.all(electors.splice(0).map((e) => e.stop()));
  for (const p of proxies.splice(0)) p.close();
  await fake.stop();
});

function elector(identity: string, extra: Partial<LeaderElectorOptions> = {}) {
  const events: string[] = [];
  const e = new LeaderElector({
    api: fake.kubeConfig(NS),
    namespace: NS,
    name: LEASE,
    identity,
    ...FAST,
    onStartedLeading: () => events.push('started'),
    onStoppedLeading: () => events.push('stopped'),
    ...extra,
  });
  electors.push(e);
  return { e, events };
}

function lease() {
  return fake.get('coordination.k8s.io/v1', 'Lease', NS, LEASE);
}

const isLeasePath = (path: string) => path.includes('/leases');
/** Lease requests the fake API server has answered so far (any replica), in arrival order. */
const leaseRequests = () => fake.requests.filter((r) => isLeasePath(r.path) && r.status !== 0);

/**
 * Waits until a replica has renewed the Lease successfully twice after the request at index `from` of fake.requests.
 * A replica sends its next request only once it has handled the previous answer, so by then every answer before
 * `from` has been acted on (a step-down it caused has happened).
 */
async function renewedTwiceAfter(from: number, what: string): Promise<void> {
  await waitFor(
    () =>
      fake.requests.slice(from + 1).filter((r) => r.method === 'PUT' && isLeasePath(r.path) && r.status === 200)
        .length >= 2,
    what,
  );
}

/** A TCP proxy in front of the fake API server that can be cut: one replica loses its network, the others do not. */
class TcpProxy {
  private server: net.Server;
  private sockets = new Set<net.Socket>();
  private cutOff = false;
  constructor(target: number) {
    this.server = net.createServer((client) => {
      if (this.cutOff) return void client.destroy();
      const upstream = net.connect(target, '127.0.0.1');
      for (const s of [client, upstream]) {
        this.sockets.add(s);
        s.on('close', () => this.sockets.delete(s));
        s.on('error', () => {});
      }
      client.pipe(upstream).pipe(client);
    });
  }
  async listen(): Promise<number> {
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    return (this.server.address() as AddressInfo).port;
  }
  cut(): void {
    this.cutOff = true;
    for (const s of this.sockets) s.destroy();
  }
  close(): void {
    this.cut();
    this.server.close();
  }
}

async function partitionableKubeConfig(): Promise<{ kc: KubeConfig; proxy: TcpProxy }> {
  const proxy = new TcpProxy(Number(new URL(fake.url).port));
  proxies.push(proxy);
  const port = await proxy.listen();
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'p', server: `http://127.0.0.1:${port}`, skipTLSVerify: true }],
    users: [{ name: 'p', token: 't' }],
    contexts: [{ name: 'p', cluster: 'p', user: 'p', namespace: NS }],
    currentContext: 'p',
  });
  return { kc, proxy };
}

describe('leader election', () => {
  test('a lone replica creates the Lease, holds it and keeps renewing it', async () => {
    const { e, events } = elector('pod-a');
    e.start();
    await waitFor(() => e.isLeader(), 'pod-a leads');
    const first = lease();
    expect(first?.spec).toMatchObject({ holderIdentity: 'pod-a', leaseDurationSeconds: 1, leaseTransitions: 0 });
    expect(events).toEqual(['started']);
    await waitFor(() => lease()?.spec.renewTime !== first?.spec.renewTime, 'renewTime moves on');
    expect(lease()?.spec.acquireTime).toBe(first?.spec.acquireTime);
    expect(e.leader()).toBe('pod-a');
    expect(e.isLeader()).toBe(true);
  });

  test('two replicas competing: exactly one leads, and the Lease names it', async () => {
    const a = elector('pod-a');
    const b = elector('pod-b');
    const most: number[] = [];
    const watch = setInterval(() => most.push([a.e, b.e].filter((x) => x.isLeader()).length), 10);
    let sawLeader = false;
    try {
      a.e.start();
      b.e.start();
      const leader = await waitFor(() => [a.e, b.e].find((x) => x.isLeader()) ?? false, 'one replica leads');
      sawLeader = true;
      const other = leader === a.e ? b : a;
      // The contest is decided once the other replica has read the Lease naming the leader, and the leader has
      // renewed twice after that (the other one tried as often in between): no fixed time to wait out.
      await waitFor(() => other.e.leader() === leader.identity, 'the other replica to see the leader');
      await renewedTwiceAfter(fake.requests.length - 1, 'two renewals by the leader after that');
    } finally {
      clearInterval(watch);
    }
    expect(Math.max(0, ...most)).toBeLessThanOrEqual(1);
    expect([a.e, b.e].filter((x) => x.isLeader())).toHaveLength(1);
    expect(sawLeader).toBe(true);
    const leader = [a.e, b.e].find((x) => x.isLeader())!;
    expect(lease()?.spec.holderIdentity).toBe(leader.identity);
    expect([...a.events, ...b.events]).toEqual(['started']);
  });

  test('when the leader stops renewing (network cut), it steps down within renewDeadline and the other takes over after the lease expires', async () => {
    const { kc, proxy } = await partitionableKubeConfig();
    const a = elector('pod-a', { api: kc });
    a.e.start();
    await waitFor(() => a.e.isLeader(), 'pod-a leads');
    const b = elector('pod-b');
    b.e.start();
    // pod-b's first round has read the Lease, held and renewed by pod-a: pod-b stays a candidate.
    await waitFor(() => b.e.leader() === 'pod-a', 'pod-b reads the lease');
    expect(b.e.isLeader()).toBe(false);
    expect(b.e.leader()).toBe('pod-a');

    proxy.cut();
    const overlap: string[] = [];
    const watch = setInterval(() => {
      if (a.e.isLeader() && b.e.isLeader()) overlap.push(new Date().toISOString());
    }, 10);
    try {
      await waitFor(() => b.e.isLeader(), 'pod-b takes over', 6000);
    } finally {
      clearInterval(watch);
    }
    expect(overlap).toEqual([]);
    expect(a.e.isLeader()).toBe(false);
    expect(a.events).toEqual(['started', 'stopped']);
    expect(b.events).toEqual(['started']);
    expect(lease()?.spec).toMatchObject({ holderIdentity: 'pod-b', leaseTransitions: 1 });
  });

  test('stop() steps down and releases the Lease, so the next replica need not wait for expiry', async () => {
    const { e, events } = elector('pod-a');
    e.start();
    await waitFor(() => e.isLeader(), 'pod-a leads');
    await e.stop();
    expect(e.isLeader()).toBe(false);
    expect(events).toEqual(['started', 'stopped']);
    const released = lease();
    expect(released?.spec.holderIdentity ?? '').toBe('');
    expect(released?.spec.leaseDurationSeconds).toBe(1);

    const b = elector('pod-b');
    b.e.start();
    await waitFor(() => b.e.isLeader(), 'pod-b leads');
    expect(lease()?.spec).toMatchObject({ holderIdentity: 'pod-b', leaseTransitions: 1 });
  });

  test('a Lease held by another replica and renewed recently is left alone', async () => {
    const now = new Date().toISOString();
    fake.create({
      apiVersion: 'coordination.k8s.io/v1',
      kind: 'Lease',
      metadata: { name: LEASE, namespace: NS },
      spec: {
        holderIdentity: 'someone-else',
        leaseDurationSeconds: 30,
        renewTime: now,
        acquireTime: now,
        leaseTransitions: 4,
      },
    });
    const { e, events } = elector('pod-a');
    e.start();
    await waitFor(() => e.leader() === 'someone-else', 'pod-a reads the lease');
    // Three rounds in which pod-a could have taken the Lease (it read it each time) instead of a fixed wait.
    await waitFor(() => leaseRequests().filter((r) => r.method === 'GET').length >= 3, 'three reads of the lease');
    expect(e.isLeader()).toBe(false);
    expect(events).toEqual([]);
    expect(lease()?.spec.holderIdentity).toBe('someone-else');
    expect(leaseRequests().filter((r) => r.method !== 'GET')).toEqual([]); // never even tried to write it
  });

  test("the Lease of a dead replica is taken over once it went unrenewed for its duration by this replica's clock, its transitions counted", async () => {
    // renewTime is another node's clock: an old one alone proves nothing (test/real-kube/hostile-kube.test.ts).
    const old = new Date(Date.now() - 60_000).toISOString();
    fake.create({
      apiVersion: 'coordination.k8s.io/v1',
      kind: 'Lease',
      metadata: { name: LEASE, namespace: NS },
      spec: {
        holderIdentity: 'dead-pod',
        leaseDurationSeconds: 1,
        renewTime: old,
        acquireTime: old,
        leaseTransitions: 4,
      },
    });
    const { e } = elector('pod-a');
    const started = Date.now();
    e.start();
    await waitFor(() => e.isLeader(), 'pod-a leads');
    expect(Date.now() - started).toBeGreaterThanOrEqual(1000);
    expect(lease()?.spec).toMatchObject({ holderIdentity: 'pod-a', leaseTransitions: 5, leaseDurationSeconds: 1 });
  });

  test('a lost 409 race on the Lease is not an error: the replica just reads again', async () => {
    const isLeaseWrite = (m: string, p: string) => (m === 'PUT' || m === 'POST') && p.includes('/leases');
    fake.failNext(1, 409, isLeaseWrite);
    const { e } = elector('pod-a', ROOMY);
    e.start();
    await waitFor(() => e.isLeader(), 'pod-a leads after the conflict');
    expect(fake.requests.filter((r) => r.path.includes('/leases') && r.status === 409)).toHaveLength(1);
    expect(e.stats.errors).toBe(0);
    // One conflict while leading does not cost leadership either (renewDeadline 2 s, retry 0.15 s).
    fake.failNext(1, 409, (m, p) => m === 'PUT' && p.includes('/leases'));
    await waitFor(() => fake.requests.filter((r) => r.status === 409).length === 2, 'second conflict');
    const conflict = fake.requests.findLastIndex((r) => r.status === 409);
    await renewedTwiceAfter(conflict, 'two renewals after the conflict');
    expect(e.isLeader()).toBe(true);
    expect(e.stats.losses).toBe(0);
  });

  test('renew failures past renewDeadline cost leadership; the replica leads again once the API server answers', async () => {
    const { e, events } = elector('pod-a');
    e.start();
    await waitFor(() => e.isLeader(), 'pod-a leads');
    await fake.down();
    await waitFor(() => !e.isLeader(), 'pod-a steps down');
    await waitFor(() => events.length === 2, 'onStoppedLeading', 3000);
    expect(events).toEqual(['started', 'stopped']);
    expect(e.stats.errors).toBeGreaterThan(0);
    await fake.up();
    await waitFor(() => e.isLeader(), 'pod-a leads again', 5000);
    expect(events).toEqual(['started', 'stopped', 'started']);
  });

  test('5xx answers while leading are retried within the deadline without losing leadership', async () => {
    const { e } = elector('pod-a', ROOMY);
    e.start();
    await waitFor(() => e.isLeader(), 'pod-a leads');
    fake.failNext(2, 500, (m, p) => p.includes('/leases'));
    await waitFor(() => fake.requests.filter((r) => r.status === 500).length === 2, 'two 500s');
    const failed = fake.requests.findLastIndex((r) => r.status === 500);
    await renewedTwiceAfter(failed, 'two renewals after the 500s');
    expect(e.isLeader()).toBe(true);
    expect(e.stats.losses).toBe(0);
  });
});

describe('leader election settings', () => {
  test.each([
    [{ leaseDurationMs: 15000, renewDeadlineMs: 10000, retryPeriodMs: 2000 }, undefined],
    [
      { leaseDurationMs: 10000, renewDeadlineMs: 10000, retryPeriodMs: 2000 },
      /leaseDurationSeconds \(10\) must be greater than renewDeadlineSeconds \(10\)/,
    ],
    [
      { leaseDurationMs: 15000, renewDeadlineMs: 2000, retryPeriodMs: 2000 },
      /renewDeadlineSeconds \(2\) must be greater than retryPeriodSeconds \(2\)/,
    ],
  ])('%o', (t, error) => {
    if (error) expect(() => checkLeaderTimings(t)).toThrow(error);
    else expect(() => checkLeaderTimings(t)).not.toThrow();
  });

  test('the config defaults are safe', () => {
    expect(
      leaderTimingsFromConfig({ leaseDurationSeconds: 15, renewDeadlineSeconds: 10, retryPeriodSeconds: 2 }),
    ).toEqual({
      leaseDurationMs: 15000,
      renewDeadlineMs: 10000,
      retryPeriodMs: 2000,
    });
  });

  test('the Lease identity is POD_NAME, else the hostname', () => {
    expect(defaultIdentity({ POD_NAME: 'servegate-7d9f-abcde' })).toBe('servegate-7d9f-abcde');
    expect(defaultIdentity({})).toBe(hostname());
    expect(defaultIdentity({ POD_NAME: '  ' })).toBe(hostname());
  });
});
