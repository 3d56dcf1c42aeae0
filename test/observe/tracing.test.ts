// Tracing (SPEC §11) against a fake OTLP/HTTP collector: the gateway continues the client's W3C trace, the backend
// gets exactly one traceparent (the gateway's span as parent) and the client's tracestate, and the span reaches
// <otlpEndpoint>/v1/traces. Off (no endpoint): trace headers pass through untouched and nothing is exported.
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import http, { type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { startPythonBackend, type RecordingBackend } from '../support/backends.js';
import { send, startGateway, type Gateway } from '../support/harness.js';
import { waitFor } from '../support/wait.js';

interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  attributes: Array<{ key: string; value: Record<string, unknown> }>;
}

/** Collects every span POSTed to /v1/traces (OTLP/HTTP JSON). */
class FakeCollector {
  readonly spans: OtlpSpan[] = [];
  readonly paths: string[] = [];
  private server = http.createServer((req: IncomingMessage, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      this.paths.push(req.url ?? '');
      const body = JSON.parse(Buffer.concat(chunks).toString() || '{}') as {
        resourceSpans?: Array<{ scopeSpans: Array<{ spans: OtlpSpan[] }> }>;
      };
      for (const rs of body.resourceSpans ?? []) for (const ss of rs.scopeSpans) this.spans.push(...ss.spans);
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{}');
    });
  });
  url = '';
  async start(): Promise<void> {
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }
  close(): Promise<void> {
    return new Promise((r) => this.server.close(() => r()));
  }
}

const CLIENT_TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const CLIENT_SPAN = '00f067aa0ba902b7';
let py: RecordingBackend;
let collector: FakeCollector;
let on: Gateway;
let off: Gateway;

beforeAll(async () => {
  py = await startPythonBackend();
  collector = new FakeCollector();
  await collector.start();
  const common = {
    deployments: [{ namespace: 'demo', name: 'echo', type: 'python' as const, url: py.url }],
    keys: [{ name: 'apikey-trace', projects: 'demo' }],
  };
  on = await startGateway({ ...common, config: { tracing: { otlpEndpoint: collector.url, sampleRatio: 1 } } });
  off = await startGateway(common);
});

afterAll(async () => {
  await on?.close();
  await off?.close();
  await collector?.close();
  await py?.close();
});

const rawHeaderValues = (raw: string[], name: string) =>
  raw.filter((_, i) => i % 2 === 0 && raw[i].toLowerCase() === name).map((_, j, a) => a[j]).length;

describe('tracing on', () => {
  test("the client's trace is continued: one traceparent upstream with the gateway's span as parent; the span is exported", async () => {
    const r = await send(`${on.url}/v1/demo/echo/traced?secret=q`, {
      headers: {
        authorization: `ApiKey ${on.keys['apikey-trace']}`,
        traceparent: `00-${CLIENT_TRACE}-${CLIENT_SPAN}-01`,
        tracestate: 'vendor=abc',
      },
    });
    expect(r.status).toBe(200);
    const rec = py.last();
    const sent = rec.rawHeaders.filter((_, i) => i % 2 === 0).map((n) => n.toLowerCase());
    expect(sent.filter((n) => n === 'traceparent')).toHaveLength(1);
    const m = /^00-([0-9a-f]{32})-([0-9a-f]{16})-01$/.exec(String(rec.headers.traceparent))!;
    expect(m[1]).toBe(CLIENT_TRACE);
    expect(m[2]).not.toBe(CLIENT_SPAN);
    expect(rec.headers.tracestate).toBe('vendor=abc');

    // The batch goes out within a second or so.
    const span = await waitFor(
      () => collector.spans.find((s) => s.spanId === m[2]) ?? false,
      'the span at the collector',
      10_000,
    );
    expect(collector.paths).toContain('/v1/traces');
    expect(span.traceId).toBe(CLIENT_TRACE);
    expect(span.parentSpanId).toBe(CLIENT_SPAN);
    expect(span.name).toBe('GET /v1/demo/echo');
    const attrs = Object.fromEntries(span.attributes.map((a) => [a.key, Object.values(a.value)[0]]));
    expect(attrs).toMatchObject({
      'servegate.project': 'demo',
      'servegate.deployment': 'echo',
      'url.path': '/v1/demo/echo/traced',
    });
    expect(Number(attrs['http.response.status_code'])).toBe(200);
    expect(JSON.stringify(span)).not.toContain('secret=q');
  });

  test('without a traceparent the gateway starts the trace; a refused request is traced too', async () => {
    const r = await send(`${on.url}/v1/demo/echo/fresh`, {
      headers: { authorization: `ApiKey ${on.keys['apikey-trace']}` },
    });
    expect(r.status).toBe(200);
    const tp = String(py.last().headers.traceparent);
    expect(tp).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
    const refused = await send(`${on.url}/v1/demo/echo/nokey`);
    expect(refused.status).toBe(401);
    await waitFor(
      () => collector.spans.some((s) => s.spanId === tp.split('-')[2] && s.parentSpanId === undefined),
      'the root span',
      10_000,
    );
    await waitFor(
      () =>
        collector.spans.some((s) =>
          s.attributes.some((a) => a.key === 'url.path' && Object.values(a.value)[0] === '/v1/demo/echo/nokey'),
        ),
      'the span of the 401',
      10_000,
    );
  });
});

describe('tracing off', () => {
  test('trace headers pass through untouched; nothing is exported', async () => {
    const before = collector.spans.length;
    const tp = `00-${CLIENT_TRACE}-${CLIENT_SPAN}-01`;
    const r = await send(`${off.url}/v1/demo/echo/untraced`, {
      headers: { authorization: `ApiKey ${off.keys['apikey-trace']}`, traceparent: tp, tracestate: 'a=1' },
    });
    expect(r.status).toBe(200);
    expect(py.last().headers.traceparent).toBe(tp);
    expect(py.last().headers.tracestate).toBe('a=1');
    expect(rawHeaderValues(py.last().rawHeaders, 'traceparent')).toBe(1);
    // The "on" gateway exports in 1 s batches: a request through it now proves the collector is being listened to.
    await send(`${on.url}/v1/demo/echo/marker`, { headers: { authorization: `ApiKey ${on.keys['apikey-trace']}` } });
    await waitFor(
      () => collector.spans.some((s) => s.attributes.some((a) => Object.values(a.value)[0] === '/v1/demo/echo/marker')),
      'the marker span',
      10_000,
    );
    expect(
      collector.spans
        .slice(before)
        .filter((s) => s.attributes.some((a) => Object.values(a.value)[0] === '/v1/demo/echo/untraced')),
    ).toEqual([]);
  });
});
