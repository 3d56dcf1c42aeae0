// The compact request-duration histogram renders exactly what prom-client's Histogram would for the same observations.
import { Histogram, Registry } from 'prom-client';
import { expect, test } from '@jest/globals';
import { CompactHistogram } from '../../src/observe/histogram.js';
import { Metrics } from '../../src/observe/metrics.js';

const BUCKETS = [0.001, 0.01, 0.1, 1, 10];
const observations: Array<[string, string, number]> = [
  ['demo', 'iris', 0.0005],
  ['demo', 'iris', 0.001],
  ['demo', 'iris', 0.05],
  ['demo', 'chat', 12],
  ['fraud_detection', 'fraud', 0.2],
  ['we"ird\\pro\nject', 'x', 3],
];

const lines = (text: string) =>
  text
    .split('\n')
    .filter((l) => l && !l.startsWith('#'))
    .sort();

test('renders the same series, buckets, sums and counts as prom-client', async () => {
  const registry = new Registry();
  const reference = new Histogram({
    name: 'h_seconds',
    help: 'h',
    labelNames: ['project', 'deployment'],
    buckets: BUCKETS,
    registers: [registry],
  });
  const compact = new CompactHistogram('h_seconds', 'h', ['project', 'deployment'], BUCKETS);
  for (const [p, d, v] of observations) {
    reference.labels(p, d).observe(v);
    compact.observe(compact.child(p, d), v);
  }
  expect(lines(compact.render())).toEqual(lines(await registry.metrics()));
  expect(compact.render()).toContain('# TYPE h_seconds histogram');
});

test('the gateway metrics expose request counts by project/deployment/status and the duration histogram', async () => {
  const m = new Metrics(false);
  m.observeRequest('demo', 'iris', 200, 0.003);
  m.observeRequest('demo', 'iris', 200, 0.004);
  m.observeRequest('demo', 'iris', 404, 0.001);
  const text = await m.render();
  expect(text).toContain('servegate_requests_total{project="demo",deployment="iris",status="200"} 2');
  expect(text).toContain('servegate_requests_total{project="demo",deployment="iris",status="404"} 1');
  expect(text).toContain('servegate_request_duration_seconds_count{project="demo",deployment="iris"} 3');
  expect(text).toContain('servegate_request_duration_seconds_bucket{le="0.005",project="demo",deployment="iris"} 3');
});

test('a canaried deployment: series per variant, and the admin totals add the variants up', async () => {
  const m = new Metrics(false);
  m.observeRequest('demo', 'split', 200, 0.003, 'primary');
  m.observeRequest('demo', 'split', 200, 0.003, 'primary');
  m.observeRequest('demo', 'split', 500, 2, 'canary');
  const text = await m.render();
  expect(text).toContain(
    'servegate_requests_total{project="demo",deployment="split",status="200",variant="primary"} 2',
  );
  expect(text).toContain('servegate_requests_total{project="demo",deployment="split",status="500",variant="canary"} 1');
  expect(text).toContain(
    'servegate_request_duration_seconds_count{project="demo",deployment="split",variant="canary"} 1',
  );
  const [t] = m.routeTotals();
  expect(t).toMatchObject({ project: 'demo', deployment: 'split', total: 3, errors: 1, count: 3 });
  const le005 = m.durationBounds.indexOf(0.005);
  const le25 = m.durationBounds.indexOf(2.5);
  expect([t.counts[le005], t.counts[le25]]).toEqual([2, 1]);
});

test('counts kept by route object add up across table rebuilds and scrapes, with and without the route', async () => {
  const m = new Metrics(false);
  const before = { project: 'demo', deployment: 'iris' };
  const after = { project: 'demo', deployment: 'iris' }; // the same deployment in a rebuilt table: another object
  m.observeRequest('demo', 'iris', 200, 0.003, '', before);
  m.observeRequest('demo', 'iris', 200, 0.003, '', before);
  expect(await m.render()).toContain('servegate_requests_total{project="demo",deployment="iris",status="200"} 2');
  m.observeRequest('demo', 'iris', 200, 0.003, '', after);
  m.observeRequest('demo', 'iris', 200, 0.003);
  m.endpointPick('demo', 'iris', 'prefix', before);
  m.endpointPick('demo', 'iris', 'prefix', after);
  m.endpointPick('demo', 'iris', 'load');
  const text = await m.render();
  expect(text).toContain('servegate_requests_total{project="demo",deployment="iris",status="200"} 4');
  expect(text).toContain('servegate_request_duration_seconds_count{project="demo",deployment="iris"} 4');
  expect(text).toContain('servegate_endpoint_picks_total{project="demo",deployment="iris",reason="prefix"} 2');
  expect(text).toContain('servegate_endpoint_picks_total{project="demo",deployment="iris",reason="load"} 1');
  // A scrape hands the counts over once: a second scrape shows the same totals, not twice them.
  expect(await m.render()).toContain('servegate_requests_total{project="demo",deployment="iris",status="200"} 4');
  expect(m.routeTotals()[0]).toMatchObject({ total: 4, errors: 0 });
});

test('counts kept on route objects: the route shows nothing of them, two Metrics on one route count apart, and a change of status or variant is counted as such', async () => {
  const a = new Metrics(false);
  const b = new Metrics(false);
  const route = { project: 'demo', deployment: 'iris' };
  const content = JSON.stringify(route);
  for (const [m, status, variant] of [
    [a, 200, ''],
    [b, 200, ''],
    [a, 200, ''],
    [a, 503, ''],
    [b, 200, ''],
    [a, 200, ''],
    [a, 200, 'canary'],
  ] as const)
    m.observeRequest('demo', 'iris', status, 0.003, variant, route);
  a.endpointPick('demo', 'iris', 'prefix', route);
  b.endpointPick('demo', 'iris', 'load', route);
  a.endpointPick('demo', 'iris', 'prefix', route);
  a.endpointPick('demo', 'iris', 'load', route);
  // The route's own content is what it was: not enumerable, not in JSON (routes are hashed and compared by content).
  expect(JSON.stringify(route)).toBe(content);
  expect(Object.keys(route)).toEqual(['project', 'deployment']);
  const ta = await a.render();
  expect(ta).toContain('servegate_requests_total{project="demo",deployment="iris",status="200"} 3');
  expect(ta).toContain('servegate_requests_total{project="demo",deployment="iris",status="503"} 1');
  expect(ta).toContain('servegate_requests_total{project="demo",deployment="iris",status="200",variant="canary"} 1');
  expect(ta).toContain('servegate_endpoint_picks_total{project="demo",deployment="iris",reason="prefix"} 2');
  expect(ta).toContain('servegate_endpoint_picks_total{project="demo",deployment="iris",reason="load"} 1');
  const tb = await b.render();
  expect(tb).toContain('servegate_requests_total{project="demo",deployment="iris",status="200"} 2');
  expect(tb).not.toContain('status="503"');
  expect(tb).toContain('servegate_endpoint_picks_total{project="demo",deployment="iris",reason="load"} 1');
  expect(tb).not.toContain('reason="prefix"');
  expect(a.routeTotals()[0]).toMatchObject({ total: 5, errors: 1 });
  // A frozen route object is counted all the same (by name).
  const frozen = Object.freeze({ project: 'demo', deployment: 'iris' });
  a.observeRequest('demo', 'iris', 200, 0.003, '', frozen);
  a.endpointPick('demo', 'iris', 'prefix', frozen);
  const tf = await a.render();
  expect(tf).toContain('servegate_requests_total{project="demo",deployment="iris",status="200"} 4');
  expect(tf).toContain('servegate_endpoint_picks_total{project="demo",deployment="iris",reason="prefix"} 3');
});
