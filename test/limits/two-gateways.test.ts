// Two gateway processes sharing their limits through a real redis-server (SPEC §9): the combined rate across both stays
// within a key's rpm; Redis stopped mid-test → requests keep flowing (fail-open), the store errors are counted and
// /readyz says so; Redis back on the same port → limits apply again. Skipped visibly without redis-server; CI=true
// makes that a failure (.ci/run installs it).
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import { hasRedis, RedisServer } from '../support/redis.js';
import { metricValue } from '../support/metrics.js';
import { startManifestGateway, type ManifestGateway } from '../support/processes.js';
import { waitFor } from '../support/wait.js';

const KEY = 'TwoGatewaysKey01.0123456789abcdef0123456789abcdef';
const RPM = 10;

if (!hasRedis && process.env.CI === 'true') {
  test('redis-server is installed (CI installs it)', () => {
    throw new Error('redis-server not found: .ci/run installs it (apt-get install redis-server)');
  });
}

(hasRedis ? describe : describe.skip)('two gateways, one Redis', () => {
  let redis: RedisServer;
  let backend: Server;
  let dir: string;
  const gateways: ManifestGateway[] = [];

  async function startGateway(): Promise<void> {
    gateways.push(await startManifestGateway(dir));
  }

  beforeAll(async () => {
    redis = await RedisServer.start();
    backend = createServer((req, res) => {
      req.resume();
      req.on('end', () => res.end('{"ok":true}'));
    });
    await new Promise<void>((r) => backend.listen(0, '127.0.0.1', r));
    dir = mkdtempSync(join(tmpdir(), 'servegate-two-'));
    const manifests = join(dir, 'manifests');
    mkdirp(manifests);
    writeFileSync(
      join(manifests, 'app.yaml'),
      `apiVersion: serving.servegate.dev/v1alpha1
kind: ServingDeployment
metadata: {name: app, namespace: demo}
spec: {type: python, backend: {url: "http://127.0.0.1:${(backend.address() as AddressInfo).port}"}}
---
apiVersion: v1
kind: Secret
metadata: {name: limited, labels: {serving.servegate.dev/api-key: "true"}}
stringData: {prefix: TwoGatewaysKey01, projects: demo, rpm: "${RPM}", sha256: ${createHash('sha256').update(KEY).digest('hex')}}
`,
    );
    writeFileSync(
      join(dir, 'config.yaml'),
      `logLevel: info\naccessLog: false\nlimits:\n  redis: {url: "${redis.url}", failOpen: true}\n`,
    );
    await Promise.all([startGateway(), startGateway()]);
  }, 60_000);

  afterAll(async () => {
    for (const g of gateways) g.child.kill('SIGKILL');
    await new Promise<void>((r) => (backend ? backend.close(() => r()) : r()));
    await redis?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const call = (i: number) =>
    fetch(`http://127.0.0.1:${gateways[i % 2].port}/v1/demo/app/x`, {
      headers: { authorization: `ApiKey ${KEY}` },
    }).then(async (r) => {
      await r.arrayBuffer();
      return r.status;
    });
  const burst = async (n: number) => {
    const statuses = await Promise.all(Array.from({ length: n }, (_, i) => call(i)));
    return {
      ok: statuses.filter((s) => s === 200).length,
      limited: statuses.filter((s) => s === 429).length,
      other: statuses.filter((s) => s !== 200 && s !== 429),
    };
  };
  const admin = async (i: number, path: string) =>
    (await fetch(`http://127.0.0.1:${gateways[i].adminPort}${path}`)).text();

  test('30 concurrent requests split across both gateways: exactly rpm admitted in all', async () => {
    const r = await burst(30);
    expect(r).toEqual({ ok: RPM, limited: 30 - RPM, other: [] });
  });

  test('Redis stopped: requests keep flowing (fail-open), store errors counted, /readyz says so; Redis back: limits again', async () => {
    await redis.stop();
    const during = await burst(20);
    expect(during).toEqual({ ok: 20, limited: 0, other: [] });
    const errors = (
      await Promise.all(
        [0, 1].map(async (i) => metricValue(await admin(i, '/metrics'), 'servegate_limits_store_errors_total') ?? 0),
      )
    ).reduce((a, b) => a + b, 0);
    expect(errors).toBeGreaterThanOrEqual(20);
    const ready = JSON.parse(await admin(0, '/readyz')) as { ready: boolean; problems: string[] };
    expect(ready.ready).toBe(true);
    expect(ready.problems.some((p) => p.startsWith('rate limits: redis: '))).toBe(true);

    await redis.start(); // same port, empty: the budget starts full
    await waitFor(
      async () =>
        !(JSON.parse(await admin(0, '/readyz')) as { problems: string[] }).problems.length &&
        !(JSON.parse(await admin(1, '/readyz')) as { problems: string[] }).problems.length,
      'both gateways back on Redis',
      15_000,
    );
    const after = await burst(30);
    expect(after).toEqual({ ok: RPM, limited: 30 - RPM, other: [] });
  }, 60_000);
});

function mkdirp(p: string): void {
  mkdirSync(p, { recursive: true });
}
