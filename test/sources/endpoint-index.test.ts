// EndpointIndex.resolve keeps each backend object's last answer on the object itself: two indexes (two gateways in
// one process, whose tables share backend objects) must never read each other's answers, and a change is seen at once.
import { expect, test } from '@jest/globals';
import { EndpointIndex } from '../../src/sources/kubernetes/endpoints.js';
import type { ParsedSlice } from '../../src/sources/kubernetes/convert.js';

const slice = (name: string, hosts: string[]): ParsedSlice => ({
  namespace: 'demo',
  name,
  service: 'svc',
  ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
  readyAddresses: hosts,
});

test('two indexes answer one backend object each from their own slices; a change shows on the next resolve', () => {
  const backend = { kind: 'service' as const, namespace: 'demo', service: 'svc', port: 80, portName: 'http' };
  const a = new EndpointIndex(() => undefined);
  const b = new EndpointIndex(() => undefined);
  a.upsertSlice(slice('s1', ['10.0.0.1']));
  b.upsertSlice(slice('s1', ['10.0.0.2', '10.0.0.3']));
  for (let i = 0; i < 3; i++) {
    expect(a.resolve(backend)).toEqual([{ host: '10.0.0.1', port: 8080 }]);
    expect(b.resolve(backend)).toEqual([
      { host: '10.0.0.2', port: 8080 },
      { host: '10.0.0.3', port: 8080 },
    ]);
  }
  const first = a.resolve(backend);
  expect(a.resolve(backend)).toBe(first); // steady: the same array
  a.upsertSlice(slice('s2', ['10.0.0.9']));
  expect(a.resolve(backend)).toEqual([
    { host: '10.0.0.1', port: 8080 },
    { host: '10.0.0.9', port: 8080 },
  ]);
  a.deleteSlice('demo', 's1');
  a.deleteSlice('demo', 's2');
  expect(a.resolve(backend)).toEqual([]);
  expect(b.resolve(backend)).toHaveLength(2);
  // The backend's content is untouched.
  expect(Object.keys(backend)).toEqual(['kind', 'namespace', 'service', 'port', 'portName']);
  expect(JSON.stringify(backend)).toBe(
    '{"kind":"service","namespace":"demo","service":"svc","port":80,"portName":"http"}',
  );
});
