// The access log (SPEC §11): one JSON line per request with the fields an operator searches by, never a key;
// `accessLog: false` turns it off.
import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import { startPythonBackend, type RecordingBackend } from '../support/backends.js';
import { eventually, send, startGateway, type Gateway } from '../support/harness.js';

let py: RecordingBackend;
let on: Gateway;
let off: Gateway;

beforeAll(async () => {
  py = await startPythonBackend();
  const common = {
    deployments: [{ name: 'echo', namespace: 'demo', type: 'python' as const, url: py.url }],
    keys: [{ name: 'apikey-logged', projects: 'demo' }],
  };
  on = await startGateway(common);
  off = await startGateway({ ...common, config: { accessLog: false } });
});

afterAll(async () => {
  await on?.close();
  await off?.close();
  await py?.close();
});

const requestLines = (gw: Gateway) =>
  gw.logs.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.msg === 'request');

describe('access log', () => {
  test('a forwarded request gets one line with its id, route, key name, addresses, sizes and status, and no secret', async () => {
    const key = on.keys['apikey-logged'];
    const r = await send(`${on.url}/v1/demo/echo/some/path?secret=query`, {
      method: 'PUT',
      headers: { authorization: `ApiKey ${key}` },
      body: 'hello',
    });
    expect(r.status).toBe(200);
    const id = r.headers['x-request-id'];
    const line = await eventually(() => {
      const found = requestLines(on).filter((l) => l.requestId === id);
      expect(found).toHaveLength(1);
      return found[0];
    });
    expect(line).toMatchObject({
      level: 'info',
      method: 'PUT',
      path: '/v1/demo/echo/some/path',
      status: 200,
      project: 'demo',
      deployment: 'echo',
      key: 'apikey-logged',
      client: '127.0.0.1',
      upstream: `127.0.0.1:${py.port}`,
      bytesIn: 5,
    });
    expect(line.bytesOut).toBe(r.body.length);
    expect(typeof line.ms).toBe('number');
    expect(typeof line.time).toBe('string');
    const text = on.logs.join('\n');
    expect(text).not.toContain(key.split('.')[1]);
    expect(text).not.toContain(createHash('sha256').update(key).digest('hex')); // nor its hash
    expect(text).not.toContain('secret=query');
  });

  test('a refused request is logged with its status and the reason', async () => {
    const r = await send(`${on.url}/v1/demo/echo/x`);
    expect(r.status).toBe(401);
    const line = await eventually(() => {
      const found = requestLines(on).filter((l) => l.requestId === r.headers['x-request-id']);
      expect(found).toHaveLength(1);
      return found[0];
    });
    expect(line).toMatchObject({ status: 401, key: '', upstream: '' });
    expect(String(line.error)).toMatch(/key/i);
  });

  test('accessLog: false writes no request lines, while the requests are still counted', async () => {
    const key = off.keys['apikey-logged'];
    for (let i = 0; i < 3; i++)
      expect((await send(`${off.url}/v1/demo/echo/x`, { headers: { authorization: `ApiKey ${key}` } })).status).toBe(
        200,
      );
    // The three requests were served and counted (the wait fails naming the metric when they were not).
    await eventually(async () => {
      const m = (await send(`${off.adminUrl}/metrics`)).text;
      expect(m).toMatch(/servegate_requests_total\{project="demo",deployment="echo",status="200"\} 3/);
    });
    // Access lines are batched (written at most 100 ms later) and closing the gateway flushes the batch: after close()
    // every line the three requests could have produced is in the log, so an empty list is final, without a timed wait.
    await off.close();
    expect(requestLines(off)).toEqual([]);
    expect(off.logs.length).toBeGreaterThan(0); // its other lines (start, stop) were captured: the log is read
  });
});
