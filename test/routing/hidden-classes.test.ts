// Routes of one shape share one V8 hidden class, and so do the copies the request path makes (copyWith): code that
// reads fields of one of 10,000 routes then keeps a fitting inline cache. `{ ...route, hostname }` gave every route a
// hidden class of its own (9,992 for 10,000 routes) and cost a 10,000-route gateway a tenth of its throughput
// (docs/performance.md, "10,000 routes"). Checked in a child process with V8's natives syntax, on the build (dist/).
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { expect, test } from '@jest/globals';
import { ROOT } from '../support/paths.js';

const DIST = join(ROOT, 'dist');

function run(script: string): unknown {
  if (!existsSync(join(DIST, 'routing', 'build.js')))
    throw new Error('dist/ missing: npm test builds it first (or npm run build)');
  const out = execFileSync(process.execPath, ['--allow-natives-syntax', '--input-type=module', '-e', script], {
    encoding: 'utf8',
  });
  return JSON.parse(out);
}

const COUNT = `function distinct(objs) {
  const reps = [];
  for (const o of objs) if (!reps.some((r) => %HaveSameMap(r, o))) reps.push(o);
  return reps.length;
}`;

test('1,000 routes of two shapes, read from JSON as the Kubernetes source reads them: two hidden classes', () => {
  const build = pathToFileURL(join(DIST, 'routing', 'build.js')).href;
  const result = run(`
    import { buildRouteTable } from ${JSON.stringify(build)};
    ${COUNT}
    const deployments = [];
    for (let i = 0; i < 1000; i++) {
      const spec = i % 2
        ? { type: 'model', modelServer: 'sklearn', backend: { service: 'svc', port: 8080 } }
        : { type: 'model', modelServer: 'llm', backend: { service: 'svc', port: 8080 }, limits: { requestsPerMinute: 60 } };
      deployments.push(JSON.parse(JSON.stringify({
        apiVersion: 'serving.servegate.dev/v1alpha1', kind: 'ServingDeployment',
        metadata: { name: 'd-' + i, namespace: 'p-' + (i % 10), creationTimestamp: '2025-01-01T00:00:00Z' }, spec,
      })));
    }
    const { table } = buildRouteTable(
      { source: 'kubernetes', deployments, inferenceServices: [], keySecrets: [] },
      { publicUrl: 'https://models.example.com', serverlessDomain: 'example.com', keysNamespace: 'servegate', defaultTimeoutMs: 60000 },
    );
    const llm = table.routes.filter((r) => r.kind === 'llm');
    const predictive = table.routes.filter((r) => r.kind === 'predictive');
    process.stdout.write(JSON.stringify({ routes: table.routes.length, llm: distinct(llm), predictive: distinct(predictive) }));
  `);
  expect(result).toEqual({ routes: 1000, llm: 1, predictive: 1 });
});

test('copyWith: copies of objects of one shape share a hidden class, whatever they are given', () => {
  const shape = pathToFileURL(join(DIST, 'same-shape.js')).href;
  const result = run(`
    import { copyWith } from ${JSON.stringify(shape)};
    ${COUNT}
    const copies = [];
    for (let i = 0; i < 500; i++) copies.push(copyWith({ a: i, b: 'x' + i, c: [i] }, { d: 'y' + i, e: i + 0.5 }));
    process.stdout.write(JSON.stringify({ distinct: distinct(copies), sample: copies[7] }));
  `);
  expect(result).toEqual({ distinct: 1, sample: { a: 7, b: 'x7', c: [7], d: 'y7', e: 7.5 } });
});
