// Distributed tracing (SPEC §11): a server span continuing the client's `traceparent`, exactly one `traceparent` to
// the backend, batches that drop rather than grow while the collector is away. Off: trace headers pass untouched.
import {
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Span,
  type TextMapGetter,
  type TextMapSetter,
  type Tracer,
} from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { resourceFromAttributes } from '@opentelemetry/resources';
import {
  BasicTracerProvider,
  BatchSpanProcessor,
  ParentBasedSampler,
  TraceIdRatioBasedSampler,
  type SpanProcessor,
} from '@opentelemetry/sdk-trace-base';

export interface TracingOptions {
  /** OTLP/HTTP base URL, e.g. http://otel-collector:4318. */
  otlpEndpoint: string;
  /** For traces the gateway starts (0..1). */
  sampleRatio: number;
  serviceVersion?: string;
  /** Tests: a processor of their own instead of the batching OTLP exporter. */
  processor?: SpanProcessor;
}

/** What one request's span gives the data plane. */
export interface RequestTrace {
  /** The `traceparent` to send upstream (the gateway's span as parent). */
  traceparent: string;
  /** The client's `tracestate`, when it sent one with a valid traceparent. */
  tracestate?: string;
  route(project: string, deployment: string): void;
  end(status: number, error?: string): void;
}

type Carrier = Record<string, string | undefined>;
const getter: TextMapGetter<Carrier> = { keys: (c) => Object.keys(c), get: (c, k) => c[k] };
const setter: TextMapSetter<Carrier> = { set: (c, k, v) => void (c[k] = v) };

export class Tracing {
  private readonly provider: BasicTracerProvider;
  private readonly tracer: Tracer;
  private readonly propagator = new W3CTraceContextPropagator();

  constructor(options: TracingOptions) {
    const processor =
      options.processor ??
      new BatchSpanProcessor(
        new OTLPTraceExporter({ url: `${options.otlpEndpoint.replace(/\/+$/, '')}/v1/traces`, timeoutMillis: 5_000 }),
        {
          maxQueueSize: 4096,
          maxExportBatchSize: 512,
          scheduledDelayMillis: 1_000,
        },
      );
    this.provider = new BasicTracerProvider({
      resource: resourceFromAttributes({
        'service.name': 'servegate',
        'service.version': options.serviceVersion ?? '',
      }),
      sampler: new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(options.sampleRatio) }),
      spanProcessors: [processor],
    });
    this.tracer = this.provider.getTracer('servegate');
  }

  /** Starts the server span of one request from the client's trace headers (either may be absent or invalid). */
  start(
    method: string,
    path: string,
    traceparent: string | undefined,
    tracestate: string | undefined,
    client: string,
  ): RequestTrace {
    const parent = traceparent
      ? this.propagator.extract(ROOT_CONTEXT, { traceparent, tracestate }, getter)
      : ROOT_CONTEXT;
    const span: Span = this.tracer.startSpan(
      `${method} ${routeTemplate(path)}`,
      {
        kind: SpanKind.SERVER,
        attributes: { 'http.request.method': method, 'url.path': path, 'client.address': client },
      },
      parent,
    );
    const out: Carrier = {};
    this.propagator.inject(trace.setSpan(parent, span), out, setter);
    return {
      traceparent: out.traceparent!,
      tracestate: out.tracestate,
      route(project, deployment) {
        span.setAttribute('servegate.project', project);
        span.setAttribute('servegate.deployment', deployment);
        span.updateName(`${method} /v1/${project}/${deployment}`);
      },
      end(status, error) {
        span.setAttribute('http.response.status_code', status);
        if (status >= 500 || error) span.setStatus({ code: SpanStatusCode.ERROR, message: error });
        span.end();
      },
    };
  }

  /** Exports what is queued (bounded by the exporter's timeout) and stops. */
  async shutdown(): Promise<void> {
    await this.provider.shutdown();
  }
}

/** A low-cardinality span name before the route is known: `/v1/<project>/<deployment>` kept, the rest dropped. */
function routeTemplate(path: string): string {
  const m = /^\/v1\/[^/]+\/[^/]+/.exec(path);
  return m ? m[0] : path.startsWith('/openai/') ? '/openai/v1' : '/';
}
