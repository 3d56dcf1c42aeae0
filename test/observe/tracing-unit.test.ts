// Tracing: the gateway's span continues the client's trace (or starts one), the backend gets one traceparent with the
// gateway's span as parent, sampling is parent-based with a ratio for new traces.
import { afterEach, describe, expect, test } from '@jest/globals';
import { InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { Tracing } from '../../src/observe/tracing.js';

const CLIENT_TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const CLIENT_SPAN = '00f067aa0ba902b7';
const TP = /^00-([0-9a-f]{32})-([0-9a-f]{16})-(0[01])$/;

let tracing: Tracing | undefined;
afterEach(async () => {
  await tracing?.shutdown();
  tracing = undefined;
});

function setup(sampleRatio = 1) {
  const exporter = new InMemorySpanExporter();
  tracing = new Tracing({ otlpEndpoint: 'http://unused', sampleRatio, processor: new SimpleSpanProcessor(exporter) });
  return { tracing, exporter };
}

describe('Tracing', () => {
  test("a sampled client trace is continued: same trace id, the client's span as parent, ours sent upstream", () => {
    const { tracing, exporter } = setup(0); // the ratio only applies to traces the gateway starts
    const t = tracing.start(
      'POST',
      '/v1/demo/chat/v1/chat/completions',
      `00-${CLIENT_TRACE}-${CLIENT_SPAN}-01`,
      'vendor=abc',
      '10.0.0.9',
    );
    t.route('demo', 'chat');
    t.end(200);
    const [, traceId, spanId, flags] = TP.exec(t.traceparent)!;
    expect([traceId, flags]).toEqual([CLIENT_TRACE, '01']);
    expect(spanId).not.toBe(CLIENT_SPAN);
    expect(t.tracestate).toBe('vendor=abc');
    const [span] = exporter.getFinishedSpans();
    expect(span.spanContext().spanId).toBe(spanId);
    expect(span.parentSpanContext?.spanId).toBe(CLIENT_SPAN);
    expect(span.name).toBe('POST /v1/demo/chat');
    expect(span.attributes).toMatchObject({
      'servegate.project': 'demo',
      'servegate.deployment': 'chat',
      'http.response.status_code': 200,
      'client.address': '10.0.0.9',
    });
  });

  test("a client's unsampled flag is respected: nothing recorded, the trace id and flag 00 go upstream", () => {
    const { tracing, exporter } = setup(1);
    const t = tracing.start('GET', '/v1/demo/x', `00-${CLIENT_TRACE}-${CLIENT_SPAN}-00`, undefined, '10.0.0.9');
    t.end(200);
    expect(
      TP.exec(t.traceparent)!
        .slice(1, 4)
        .filter((_, i) => i !== 1),
    ).toEqual([CLIENT_TRACE, '00']);
    expect(exporter.getFinishedSpans()).toHaveLength(0);
  });

  test.each([
    ['no traceparent', undefined],
    ['a malformed traceparent', '00-zz-yy-01'],
    ['an all-zero trace id', `00-${'0'.repeat(32)}-${CLIENT_SPAN}-01`],
  ])('%s starts a new trace (sampled at ratio 1, its tracestate dropped)', (_what, traceparent) => {
    const { tracing, exporter } = setup(1);
    const t = tracing.start('GET', '/v1/demo/x/y', traceparent, 'vendor=abc', '10.0.0.9');
    t.end(503, 'no ready endpoint');
    const m = TP.exec(t.traceparent)!;
    expect(m[1]).not.toBe(CLIENT_TRACE);
    expect(m[3]).toBe('01');
    expect(t.tracestate).toBeUndefined();
    const [span] = exporter.getFinishedSpans();
    expect(span.parentSpanContext).toBeUndefined();
    expect(span.status).toEqual({ code: 2, message: 'no ready endpoint' });
  });

  test('sampleRatio 0: new traces are not recorded, yet the backend still gets a valid traceparent', () => {
    const { tracing, exporter } = setup(0);
    const t = tracing.start('GET', '/v1/demo/x', undefined, undefined, '10.0.0.9');
    t.end(200);
    expect(TP.exec(t.traceparent)![3]).toBe('00');
    expect(exporter.getFinishedSpans()).toHaveLength(0);
  });
});
