// upstreamHeaders() as a table (SPEC §3): for each set of client header lines and context, the WHOLE list of header
// lines the backend is sent, in order, compared at once, so a line added, lost or moved fails its row. The head is
// read by readHead from an IncomingMessage-like object ({method, url, rawHeaders}), as the gateway reads a request.
import type { IncomingMessage } from 'node:http';
import { describe, expect, test } from '@jest/globals';
import { upstreamHeaders, type UpstreamContext } from '../../../src/gateway/http/headers.js';
import { readHead } from '../../../src/gateway/http/request-head.js';

type Line = [name: string, value: string];

interface Input {
  /** The client's header lines as sent (name case kept); no Host is added for you. */
  lines: Line[];
  method?: string;
  /** The request target; default "/v1/models/fraud:predict". */
  url?: string;
  /** limits/config trustForwardedHeaders (read by readHead and upstreamHeaders alike). */
  trustForwarded?: boolean;
  forwardUnderscore?: boolean;
  /** Tracing on: readHead keeps the client's traceparent/tracestate out of the forwarded lines. */
  tracing?: boolean;
  /** Context fields besides the defaults below (contentLength, traceparent, backendAuthority, proto, ...). */
  ctx?: Partial<Omit<UpstreamContext, 'trustForwarded'>>;
}

const CTX: Omit<UpstreamContext, 'trustForwarded'> = {
  clientIp: '10.1.2.3',
  proto: 'http',
  requestId: 'req-1',
  project: 'fraud_detection',
  deployment: 'fraud',
  keyName: 'apikey-ci-bot',
  backendAuthority: '127.0.0.1:8081',
};

const HOST: Line = ['Host', 'models.example.com'];
const CLIENT_TRACEPARENT = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
const GATEWAY_TRACEPARENT = '00-4bf92f3577b34da6a3ce929d0e0e4736-b7ad6b7169203331-01';

function upstream(input: Input): Line[] {
  const trustForwarded = input.trustForwarded ?? false;
  const req = {
    method: input.method ?? 'POST',
    url: input.url ?? '/v1/models/fraud:predict',
    rawHeaders: input.lines.flat(),
  } as unknown as IncomingMessage;
  const head = readHead(req, {
    trustForwarded,
    forwardUnderscore: input.forwardUnderscore ?? false,
    tracing: input.tracing ?? false,
  });
  const flat = upstreamHeaders(head, { ...CTX, ...input.ctx, trustForwarded });
  const out: Line[] = [];
  for (let i = 0; i < flat.length; i += 2) out.push([flat[i], flat[i + 1]]);
  return out;
}

const rows: Array<[name: string, input: Input, expected: Line[]]> = [
  [
    'a bare request: only the lines the gateway sets, in their fixed order',
    { lines: [HOST] },
    [
      ['x-forwarded-for', '10.1.2.3'],
      ['x-forwarded-proto', 'http'],
      ['x-forwarded-host', 'models.example.com'],
      ['x-request-id', 'req-1'],
      ['x-servegate-project', 'fraud_detection'],
      ['x-servegate-deployment', 'fraud'],
      ['x-servegate-key', 'apikey-ci-bot'],
      ['host', '127.0.0.1:8081'],
    ],
  ],
  [
    'end-to-end lines pass first, in order, names lower-cased, values untouched, repeats kept',
    {
      lines: [
        HOST,
        ['Content-Type', 'application/json'],
        ['Accept', 'application/json'],
        ['X-Custom', 'a'],
        ['Cookie', 'session=1'],
        ['X-Custom', ' b '],
      ],
    },
    [
      ['content-type', 'application/json'],
      ['accept', 'application/json'],
      ['x-custom', 'a'],
      ['cookie', 'session=1'],
      ['x-custom', ' b '],
      ['x-forwarded-for', '10.1.2.3'],
      ['x-forwarded-proto', 'http'],
      ['x-forwarded-host', 'models.example.com'],
      ['x-request-id', 'req-1'],
      ['x-servegate-project', 'fraud_detection'],
      ['x-servegate-deployment', 'fraud'],
      ['x-servegate-key', 'apikey-ci-bot'],
      ['host', '127.0.0.1:8081'],
    ],
  ],
  [
    'hop-by-hop lines are removed, whatever their case',
    {
      lines: [
        HOST,
        ['Connection', 'keep-alive'],
        ['Keep-Alive', 'timeout=5'],
        ['Proxy-Connection', 'keep-alive'],
        ['TE', 'trailers'],
        ['Trailer', 'x-checksum'],
        ['Transfer-Encoding', 'chunked'],
        ['Upgrade', 'h2c'],
        ['HTTP2-Settings', 'AAMAAABkAAQAoAAAAAIAAAAA'],
        ['Proxy-Authenticate', 'Basic'],
        ['Accept', '*/*'],
      ],
    },
    [
      ['accept', '*/*'],
      ['x-forwarded-for', '10.1.2.3'],
      ['x-forwarded-proto', 'http'],
      ['x-forwarded-host', 'models.example.com'],
      ['x-request-id', 'req-1'],
      ['x-servegate-project', 'fraud_detection'],
      ['x-servegate-deployment', 'fraud'],
      ['x-servegate-key', 'apikey-ci-bot'],
      ['host', '127.0.0.1:8081'],
    ],
  ],
  [
    'lines named in Connection (every Connection line, any case) are removed too',
    {
      lines: [
        HOST,
        ['Connection', 'keep-alive, X-Hop-One'],
        ['X-Hop-One', '1'],
        ['x-hop-two', '2'],
        ['Connection', 'X-HOP-TWO'],
        ['X-Kept', '3'],
      ],
    },
    [
      ['x-kept', '3'],
      ['x-forwarded-for', '10.1.2.3'],
      ['x-forwarded-proto', 'http'],
      ['x-forwarded-host', 'models.example.com'],
      ['x-request-id', 'req-1'],
      ['x-servegate-project', 'fraud_detection'],
      ['x-servegate-deployment', 'fraud'],
      ['x-servegate-key', 'apikey-ci-bot'],
      ['host', '127.0.0.1:8081'],
    ],
  ],
  [
    "Connection naming the gateway's own lines cannot remove them; an end-to-end line it names (Content-Type) goes",
    {
      lines: [
        HOST,
        ['Connection', 'x-forwarded-for, x-servegate-key, host, x-request-id, content-type'],
        ['Content-Type', 'application/json'],
      ],
    },
    [
      ['x-forwarded-for', '10.1.2.3'],
      ['x-forwarded-proto', 'http'],
      ['x-forwarded-host', 'models.example.com'],
      ['x-request-id', 'req-1'],
      ['x-servegate-project', 'fraud_detection'],
      ['x-servegate-deployment', 'fraud'],
      ['x-servegate-key', 'apikey-ci-bot'],
      ['host', '127.0.0.1:8081'],
    ],
  ],
  [
    "the client's Authorization never goes upstream: one, two, or Proxy-Authorization",
    {
      lines: [
        HOST,
        ['Authorization', 'ApiKey AbCdEfGh12345678.secret'],
        ['authorization', 'Bearer other'],
        ['Proxy-Authorization', 'Basic dXNlcjpwYXNz'],
        ['Accept', '*/*'],
      ],
    },
    [
      ['accept', '*/*'],
      ['x-forwarded-for', '10.1.2.3'],
      ['x-forwarded-proto', 'http'],
      ['x-forwarded-host', 'models.example.com'],
      ['x-request-id', 'req-1'],
      ['x-servegate-project', 'fraud_detection'],
      ['x-servegate-deployment', 'fraud'],
      ['x-servegate-key', 'apikey-ci-bot'],
      ['host', '127.0.0.1:8081'],
    ],
  ],
  [
    "the client's x-servegate-* lines (and their underscore look-alikes) are dropped; the gateway sets its own",
    {
      lines: [
        HOST,
        ['X-Servegate-Key', 'admin'],
        ['x-servegate-project', 'other'],
        ['X-Servegate-Variant', 'canary'],
        ['X_Servegate_Key', 'admin'],
      ],
    },
    [
      ['x-forwarded-for', '10.1.2.3'],
      ['x-forwarded-proto', 'http'],
      ['x-forwarded-host', 'models.example.com'],
      ['x-request-id', 'req-1'],
      ['x-servegate-project', 'fraud_detection'],
      ['x-servegate-deployment', 'fraud'],
      ['x-servegate-key', 'apikey-ci-bot'],
      ['host', '127.0.0.1:8081'],
    ],
  ],
  [
    'names with "_" are dropped by default',
    { lines: [HOST, ['X_Custom', '1'], ['X-Custom', '2']] },
    [
      ['x-custom', '2'],
      ['x-forwarded-for', '10.1.2.3'],
      ['x-forwarded-proto', 'http'],
      ['x-forwarded-host', 'models.example.com'],
      ['x-request-id', 'req-1'],
      ['x-servegate-project', 'fraud_detection'],
      ['x-servegate-deployment', 'fraud'],
      ['x-servegate-key', 'apikey-ci-bot'],
      ['host', '127.0.0.1:8081'],
    ],
  ],
  [
    'forwardUnderscore passes "_" names on, except look-alikes of gateway, forwarding and hop-by-hop headers',
    {
      forwardUnderscore: true,
      trustForwarded: true,
      lines: [
        HOST,
        ['X_Custom', '1'],
        ['X_Servegate_Project', 'other'],
        ['X_Forwarded_For', '6.6.6.6'],
        ['Content_Length', '5'],
        ['Transfer_Encoding', 'chunked'],
        ['X_Request_Id', 'forged'],
      ],
    },
    [
      ['x_custom', '1'],
      ['x-forwarded-for', '10.1.2.3'],
      ['x-forwarded-proto', 'http'],
      ['x-forwarded-host', 'models.example.com'],
      ['x-request-id', 'req-1'],
      ['x-servegate-project', 'fraud_detection'],
      ['x-servegate-deployment', 'fraud'],
      ['x-servegate-key', 'apikey-ci-bot'],
      ['host', '127.0.0.1:8081'],
    ],
  ],
  [
    "untrusted: the client's X-Forwarded-*, Forwarded and X-Real-IP are dropped and the gateway sets its own",
    {
      lines: [
        HOST,
        ['X-Forwarded-For', '1.1.1.1'],
        ['X-Forwarded-Proto', 'https'],
        ['X-Forwarded-Host', 'evil.example'],
        ['X-Forwarded-Port', '443'],
        ['Forwarded', 'for=1.1.1.1;proto=https'],
        ['X-Real-IP', '1.1.1.1'],
      ],
    },
    [
      ['x-forwarded-for', '10.1.2.3'],
      ['x-forwarded-proto', 'http'],
      ['x-forwarded-host', 'models.example.com'],
      ['x-request-id', 'req-1'],
      ['x-servegate-project', 'fraud_detection'],
      ['x-servegate-deployment', 'fraud'],
      ['x-servegate-key', 'apikey-ci-bot'],
      ['host', '127.0.0.1:8081'],
    ],
  ],
  [
    'trusted: the client forwarding lines pass where they were, X-Forwarded-For gets the peer appended',
    {
      trustForwarded: true,
      lines: [
        HOST,
        ['X-Forwarded-For', '1.1.1.1'],
        ['X-Forwarded-Proto', 'https'],
        ['X-Forwarded-Host', 'public.example'],
        ['X-Forwarded-Port', '443'],
        ['Forwarded', 'for=1.1.1.1;proto=https'],
        ['X-Real-IP', '1.1.1.1'],
      ],
    },
    [
      ['x-forwarded-proto', 'https'],
      ['x-forwarded-host', 'public.example'],
      ['x-forwarded-port', '443'],
      ['forwarded', 'for=1.1.1.1;proto=https'],
      ['x-real-ip', '1.1.1.1'],
      ['x-forwarded-for', '1.1.1.1, 10.1.2.3'],
      ['x-request-id', 'req-1'],
      ['x-servegate-project', 'fraud_detection'],
      ['x-servegate-deployment', 'fraud'],
      ['x-servegate-key', 'apikey-ci-bot'],
      ['host', '127.0.0.1:8081'],
    ],
  ],
  [
    'trusted: several X-Forwarded-For lines are joined before the peer; absent proto and host are set by the gateway',
    {
      trustForwarded: true,
      lines: [HOST, ['X-Forwarded-For', '1.1.1.1'], ['x-forwarded-for', '2.2.2.2, 3.3.3.3']],
    },
    [
      ['x-forwarded-for', '1.1.1.1, 2.2.2.2, 3.3.3.3, 10.1.2.3'],
      ['x-forwarded-proto', 'http'],
      ['x-forwarded-host', 'models.example.com'],
      ['x-request-id', 'req-1'],
      ['x-servegate-project', 'fraud_detection'],
      ['x-servegate-deployment', 'fraud'],
      ['x-servegate-key', 'apikey-ci-bot'],
      ['host', '127.0.0.1:8081'],
    ],
  ],
  [
    'a TLS listener: X-Forwarded-Proto is https',
    { lines: [HOST], ctx: { proto: 'https' } },
    [
      ['x-forwarded-for', '10.1.2.3'],
      ['x-forwarded-proto', 'https'],
      ['x-forwarded-host', 'models.example.com'],
      ['x-request-id', 'req-1'],
      ['x-servegate-project', 'fraud_detection'],
      ['x-servegate-deployment', 'fraud'],
      ['x-servegate-key', 'apikey-ci-bot'],
      ['host', '127.0.0.1:8081'],
    ],
  ],
  [
    'no Host line (HTTP/1.0): no X-Forwarded-Host, and Host is still the backend authority',
    { lines: [['Accept', '*/*']] },
    [
      ['accept', '*/*'],
      ['x-forwarded-for', '10.1.2.3'],
      ['x-forwarded-proto', 'http'],
      ['x-request-id', 'req-1'],
      ['x-servegate-project', 'fraud_detection'],
      ['x-servegate-deployment', 'fraud'],
      ['x-servegate-key', 'apikey-ci-bot'],
      ['host', '127.0.0.1:8081'],
    ],
  ],
  [
    "an absolute-form target: X-Forwarded-Host is the target's authority, not the Host line's",
    { lines: [HOST], url: 'http://target.example:8080/v1/models/fraud:predict' },
    [
      ['x-forwarded-for', '10.1.2.3'],
      ['x-forwarded-proto', 'http'],
      ['x-forwarded-host', 'target.example:8080'],
      ['x-request-id', 'req-1'],
      ['x-servegate-project', 'fraud_detection'],
      ['x-servegate-deployment', 'fraud'],
      ['x-servegate-key', 'apikey-ci-bot'],
      ['host', '127.0.0.1:8081'],
    ],
  ],
  [
    "Host is the backend authority (an in-cluster name and port), never the client's; Expect and X-Request-Id are the gateway's",
    {
      lines: [HOST, ['Expect', '100-continue'], ['X-Request-Id', 'client-chosen-id']],
      ctx: {
        backendAuthority: 'fraud-predictor.fraud-detection.svc.cluster.local:8080',
        requestId: 'client-chosen-id',
      },
    },
    [
      ['x-forwarded-for', '10.1.2.3'],
      ['x-forwarded-proto', 'http'],
      ['x-forwarded-host', 'models.example.com'],
      ['x-request-id', 'client-chosen-id'],
      ['x-servegate-project', 'fraud_detection'],
      ['x-servegate-deployment', 'fraud'],
      ['x-servegate-key', 'apikey-ci-bot'],
      ['host', 'fraud-predictor.fraud-detection.svc.cluster.local:8080'],
    ],
  ],
  [
    "Content-Length is the length the gateway sends (a checked body's), not the client's line",
    {
      lines: [HOST, ['Content-Type', 'application/json'], ['Content-Length', '999']],
      ctx: { contentLength: 27 },
    },
    [
      ['content-type', 'application/json'],
      ['x-forwarded-for', '10.1.2.3'],
      ['x-forwarded-proto', 'http'],
      ['x-forwarded-host', 'models.example.com'],
      ['x-request-id', 'req-1'],
      ['x-servegate-project', 'fraud_detection'],
      ['x-servegate-deployment', 'fraud'],
      ['x-servegate-key', 'apikey-ci-bot'],
      ['host', '127.0.0.1:8081'],
      ['content-length', '27'],
    ],
  ],
  [
    'an empty chunked body, buffered whole: Transfer-Encoding goes, Content-Length: 0 is sent',
    {
      lines: [HOST, ['Transfer-Encoding', 'chunked'], ['Content-Type', 'application/json']],
      ctx: { contentLength: 0 },
    },
    [
      ['content-type', 'application/json'],
      ['x-forwarded-for', '10.1.2.3'],
      ['x-forwarded-proto', 'http'],
      ['x-forwarded-host', 'models.example.com'],
      ['x-request-id', 'req-1'],
      ['x-servegate-project', 'fraud_detection'],
      ['x-servegate-deployment', 'fraud'],
      ['x-servegate-key', 'apikey-ci-bot'],
      ['host', '127.0.0.1:8081'],
      ['content-length', '0'],
    ],
  ],
  [
    'a streamed body of unknown length: neither Content-Length nor Transfer-Encoding (the HTTP client frames it)',
    { lines: [HOST, ['Transfer-Encoding', 'chunked'], ['Content-Type', 'application/octet-stream']] },
    [
      ['content-type', 'application/octet-stream'],
      ['x-forwarded-for', '10.1.2.3'],
      ['x-forwarded-proto', 'http'],
      ['x-forwarded-host', 'models.example.com'],
      ['x-request-id', 'req-1'],
      ['x-servegate-project', 'fraud_detection'],
      ['x-servegate-deployment', 'fraud'],
      ['x-servegate-key', 'apikey-ci-bot'],
      ['host', '127.0.0.1:8081'],
    ],
  ],
  [
    "a websocket handshake: the client's Connection and Upgrade lines go, its Sec-WebSocket-* lines pass",
    {
      method: 'GET',
      url: '/ws',
      lines: [
        HOST,
        ['Connection', 'Upgrade'],
        ['Upgrade', 'websocket'],
        ['Sec-WebSocket-Version', '13'],
        ['Sec-WebSocket-Key', 'dGhlIHNhbXBsZSBub25jZQ=='],
        ['Sec-WebSocket-Protocol', 'chat'],
        ['Origin', 'https://app.example'],
      ],
    },
    [
      ['sec-websocket-version', '13'],
      ['sec-websocket-key', 'dGhlIHNhbXBsZSBub25jZQ=='],
      ['sec-websocket-protocol', 'chat'],
      ['origin', 'https://app.example'],
      ['x-forwarded-for', '10.1.2.3'],
      ['x-forwarded-proto', 'http'],
      ['x-forwarded-host', 'models.example.com'],
      ['x-request-id', 'req-1'],
      ['x-servegate-project', 'fraud_detection'],
      ['x-servegate-deployment', 'fraud'],
      ['x-servegate-key', 'apikey-ci-bot'],
      ['host', '127.0.0.1:8081'],
    ],
  ],
  [
    "tracing on: the client's traceparent and tracestate are replaced by the gateway's, sent last",
    {
      tracing: true,
      lines: [HOST, ['traceparent', CLIENT_TRACEPARENT], ['tracestate', 'vendor=abc'], ['Accept', '*/*']],
      ctx: { traceparent: GATEWAY_TRACEPARENT, tracestate: 'vendor=abc' },
    },
    [
      ['accept', '*/*'],
      ['x-forwarded-for', '10.1.2.3'],
      ['x-forwarded-proto', 'http'],
      ['x-forwarded-host', 'models.example.com'],
      ['x-request-id', 'req-1'],
      ['x-servegate-project', 'fraud_detection'],
      ['x-servegate-deployment', 'fraud'],
      ['x-servegate-key', 'apikey-ci-bot'],
      ['host', '127.0.0.1:8081'],
      ['traceparent', GATEWAY_TRACEPARENT],
      ['tracestate', 'vendor=abc'],
    ],
  ],
  [
    'tracing on, a client without trace headers: only the traceparent of the trace the gateway starts',
    { tracing: true, lines: [HOST], ctx: { traceparent: GATEWAY_TRACEPARENT } },
    [
      ['x-forwarded-for', '10.1.2.3'],
      ['x-forwarded-proto', 'http'],
      ['x-forwarded-host', 'models.example.com'],
      ['x-request-id', 'req-1'],
      ['x-servegate-project', 'fraud_detection'],
      ['x-servegate-deployment', 'fraud'],
      ['x-servegate-key', 'apikey-ci-bot'],
      ['host', '127.0.0.1:8081'],
      ['traceparent', GATEWAY_TRACEPARENT],
    ],
  ],
  [
    "tracing off: the client's trace lines pass like any end-to-end line, and the gateway adds none",
    { lines: [HOST, ['traceparent', CLIENT_TRACEPARENT], ['tracestate', 'a=1']] },
    [
      ['traceparent', CLIENT_TRACEPARENT],
      ['tracestate', 'a=1'],
      ['x-forwarded-for', '10.1.2.3'],
      ['x-forwarded-proto', 'http'],
      ['x-forwarded-host', 'models.example.com'],
      ['x-request-id', 'req-1'],
      ['x-servegate-project', 'fraud_detection'],
      ['x-servegate-deployment', 'fraud'],
      ['x-servegate-key', 'apikey-ci-bot'],
      ['host', '127.0.0.1:8081'],
    ],
  ],
  [
    'everything at once: a trusted, traced, keyed JSON POST through a proxy',
    {
      trustForwarded: true,
      tracing: true,
      lines: [
        ['Host', 'models.example.com:443'],
        ['Authorization', 'ApiKey AbCdEfGh12345678.secret'],
        ['Content-Type', 'application/json'],
        ['Content-Length', '27'],
        ['Connection', 'keep-alive, X-Proxy-Hint'],
        ['X-Proxy-Hint', 'drop-me'],
        ['X-Forwarded-For', '203.0.113.7'],
        ['X-Forwarded-Proto', 'https'],
        ['X-Servegate-Deployment', 'other'],
        ['traceparent', CLIENT_TRACEPARENT],
        ['User-Agent', 'curl/8.5.0'],
      ],
      ctx: { contentLength: 27, traceparent: GATEWAY_TRACEPARENT, backendAuthority: '10.0.0.12:8080' },
    },
    [
      ['content-type', 'application/json'],
      ['x-forwarded-proto', 'https'],
      ['user-agent', 'curl/8.5.0'],
      ['x-forwarded-for', '203.0.113.7, 10.1.2.3'],
      ['x-forwarded-host', 'models.example.com:443'],
      ['x-request-id', 'req-1'],
      ['x-servegate-project', 'fraud_detection'],
      ['x-servegate-deployment', 'fraud'],
      ['x-servegate-key', 'apikey-ci-bot'],
      ['host', '10.0.0.12:8080'],
      ['content-length', '27'],
      ['traceparent', GATEWAY_TRACEPARENT],
    ],
  ],
];

describe('upstreamHeaders: the whole list the backend is sent', () => {
  test.each(rows)('%s', (_name, input, expected) => {
    expect(upstream(input)).toEqual(expected);
  });
});
