// The configuration schema, read alike from chart values `gateway:`, `servegate serve --config FILE` and the ConfigMap.
// Every key has a default, so an empty document is a valid configuration.
import { z } from 'zod';
import { parseBudgetPeriod } from '../limits/budgets.js';
import { PROJECT_NAME, projectNamespaceForm } from '../routing/names.js';

const origin = z.string().refine((s) => s === '*' || /^https?:\/\/(\*\.)?[A-Za-z0-9.-]+(:\d{1,5})?$/.test(s), {
  message:
    'must be "*" or an origin like https://app.example.com or https://*.example.com (scheme, host, optional port; no path)',
});
const positiveInt = z.number().int().positive();
const seconds = z.number().positive();
/** A budget period (SPEC §14): a calendar day or month (UTC), or a rolling 1h to 366d. */
const budgetPeriod = z.string().refine((s) => typeof parseBudgetPeriod(s) !== 'string', {
  message: 'must be "day", "month" or a rolling duration of 1h to 366d such as 12h or 7d',
});
/**
 * A cost budget: 0 (none), or from one millionth (what budgets count in) to the key Secret's largest. A positive cost
 * under a millionth would count as a budget of 0 already spent: every request of the project refused.
 */
const budgetCost = z.number().refine((v) => v === 0 || (v >= 1e-6 && v < 1e12), {
  message: 'must be 0 (no cost budget) or from 0.000001 to 999999999999 in the currency of spec.pricing',
});
const budget = z
  .object({
    budgetTokens: z.number().int().min(0).default(0),
    budgetCost: budgetCost.default(0),
    budgetPeriod: budgetPeriod.default('month'),
  })
  .strict();
const projectBudget = z
  .object({
    budgetTokens: z.number().int().min(0).optional(),
    budgetCost: budgetCost.optional(),
    budgetPeriod: budgetPeriod.optional(),
  })
  .strict();
/** limits.projects: named as projects are (a misspelt name would budget nothing), each project once in any form. */
const projectBudgets = z.record(z.string(), projectBudget).superRefine((projects, ctx) => {
  const seen = new Map<string, string>();
  for (const p of Object.keys(projects)) {
    const first = seen.get(projectNamespaceForm(p));
    if (p.length > 63 || !PROJECT_NAME.test(p))
      ctx.addIssue({
        code: 'custom',
        path: [p],
        message: "must be a project name: 1-63 letters, digits, '_' or '-', starting and ending with a letter or digit",
      });
    else if (first !== undefined)
      ctx.addIssue({
        code: 'custom',
        path: [p],
        message: `names the same project as "${first}" (projects are compared in namespace form): give it once`,
      });
    else seen.set(projectNamespaceForm(p), p);
  }
});

export const configSchema = z
  .object({
    /** Public base of every URL the gateway prints; default http://localhost:<port>. */
    publicUrl: z
      .string()
      .refine((s) => /^https?:\/\/[^/?#\s]+(\/[^?#\s]*)?$/.test(s), {
        message: 'must be an http(s) URL without query or fragment',
      })
      .optional(),
    serverlessDomain: z
      .string()
      .regex(/^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$/, 'must be a lower-case DNS name')
      .default('serving.local'),
    cors: z
      .object({
        allowedOrigins: z.array(origin).default([]),
        maxAgeSeconds: z.number().int().min(0).default(600),
        allowedHeaders: z.array(z.string().min(1)).default([]),
        exposedHeaders: z.array(z.string().min(1)).default([]),
      })
      .strict()
      .default({ allowedOrigins: [], maxAgeSeconds: 600, allowedHeaders: [], exposedHeaders: [] }),
    auth: z
      .object({
        keysNamespace: z.string().default(''),
        /** true: a key Secret in a project's namespace may grant that project (SPEC §4); false: keys namespace only. */
        projectNamespaceKeys: z.boolean().default(false),
        /** A client address with more than maxFailures failed authentications in windowSeconds gets 429 (0 = off). */
        failureLimit: z
          .object({
            maxFailures: z.number().int().min(0).default(100),
            windowSeconds: positiveInt.default(60),
          })
          .strict()
          .default({ maxFailures: 100, windowSeconds: 60 }),
      })
      .strict()
      .default({
        keysNamespace: '',
        projectNamespaceKeys: false,
        failureLimit: { maxFailures: 100, windowSeconds: 60 },
      }),
    limits: z
      .object({
        maxRequestBodyBytes: positiveInt.default(33_554_432),
        requestTimeoutSeconds: seconds.default(60),
        streamIdleTimeoutSeconds: seconds.default(300),
        headersTimeoutSeconds: seconds.default(30),
        /** A request body that sends no byte for this long is ended (408; the backend's request is aborted). */
        requestBodyIdleTimeoutSeconds: seconds.default(30),
        /**
         * A request body slower than this on average over any 10 s (after its first 10 s) is ended with 408: a
         * trickling client cannot pin a backend request for minutes. 0 = off.
         */
        requestBodyMinBytesPerSecond: z.number().int().min(0).default(1024),
        /**
         * A body with a Content-Encoding that the gateway must read is decoded to at most this many bytes (413
         * above): a few hundred compressed bytes cannot become tens of megabytes of JSON.
         */
        maxDecodedBodyBytes: positiveInt.default(8_388_608),
        /**
         * Request-body bytes the gateway holds in memory at once (bodies read whole to be checked, their decoded and
         * edited copies, bodies kept for fallbacks or held for scale from zero): a body past it waits up to
         * bufferedBodyWaitSeconds for room, then 503. One body alone always fits. Default: two 32 MiB bodies, or one
         * and its edited copy, within the chart's 512 Mi beside a 384 MiB heap (docs/install.md, "Memory").
         */
        maxBufferedBodyBytes: positiveInt.default(67_108_864),
        bufferedBodyWaitSeconds: z.number().min(0).max(300).default(10),
        /** Bodies decoded at once; more wait their turn (up to 64 waiting, then 503). */
        decodeConcurrency: z.number().int().min(1).max(64).default(2),
        /** More header lines than this: 431 (Apache's LimitRequestFields default). */
        maxRequestHeaders: z.number().int().min(1).max(4000).default(100),
        /** Requests per second per API key, 0 = unlimited. */
        rateLimitPerKey: z.number().min(0).default(0),
        rateLimitBurst: z.number().int().min(0).default(0),
        /** Defaults for keys whose Secret has no `rpm`/`tpm` (0 = no limit). */
        perKey: z
          .object({
            requestsPerMinute: z.number().int().min(0).default(0),
            tokensPerMinute: z.number().int().min(0).default(0),
          })
          .strict()
          .default({ requestsPerMinute: 0, tokensPerMinute: 0 }),
        /** Every project's budget (SPEC §14) unless limits.projects names it; 0 = none. */
        perProject: budget.default({ budgetTokens: 0, budgetCost: 0, budgetPeriod: 'month' }),
        /** Budgets of named projects (written or namespace form), over limits.perProject. */
        projects: projectBudgets.default({}),
        /** Counters shared by every replica; empty url = in-process counters (one replica). */
        redis: z
          .object({
            url: z
              .string()
              .refine((s) => s === '' || /^rediss?:\/\/[^\s]+$/.test(s), {
                message: 'must be a redis:// or rediss:// URL',
              })
              .default(''),
            /** Redis unreachable: true admits requests without limits, false refuses them (503). */
            failOpen: z.boolean().default(true),
          })
          .strict()
          .default({ url: '', failOpen: true }),
        /** Scale from zero (SPEC §10): how long a request waits for a first ready endpoint (0 = answer 503 at once). */
        scaleFromZeroHoldSeconds: z.number().min(0).max(3600).default(0),
        /** Held requests per deployment, and bytes of their bodies; past either, 503. */
        scaleFromZeroMaxQueue: z.number().int().min(1).default(100),
        scaleFromZeroMaxQueueBytes: z.number().int().min(0).default(16_777_216),
        /** A websocket with no data either way (pings and pongs are data) for this long is closed (nginx: 60 s). */
        websocketIdleTimeoutSeconds: seconds.default(60),
        /** Open websockets per API key and per client address; one more is refused with 429 (0 = no cap). */
        websocketsPerKey: z.number().int().min(0).default(1000),
        websocketsPerClient: z.number().int().min(0).default(200),
      })
      .strict()
      .default({
        maxRequestBodyBytes: 33_554_432,
        requestTimeoutSeconds: 60,
        streamIdleTimeoutSeconds: 300,
        headersTimeoutSeconds: 30,
        requestBodyIdleTimeoutSeconds: 30,
        requestBodyMinBytesPerSecond: 1024,
        maxDecodedBodyBytes: 8_388_608,
        maxBufferedBodyBytes: 67_108_864,
        bufferedBodyWaitSeconds: 10,
        decodeConcurrency: 2,
        maxRequestHeaders: 100,
        rateLimitPerKey: 0,
        rateLimitBurst: 0,
        perKey: { requestsPerMinute: 0, tokensPerMinute: 0 },
        perProject: { budgetTokens: 0, budgetCost: 0, budgetPeriod: 'month' },
        projects: {},
        redis: { url: '', failOpen: true },
        scaleFromZeroHoldSeconds: 0,
        scaleFromZeroMaxQueue: 100,
        scaleFromZeroMaxQueueBytes: 16_777_216,
        websocketIdleTimeoutSeconds: 60,
        websocketsPerKey: 1000,
        websocketsPerClient: 200,
      }),
    /** With certFile and keyFile, the gateway listener speaks https; both are re-read when they change. */
    tls: z
      .object({
        certFile: z.string().default(''),
        keyFile: z.string().default(''),
        /** With TLS on: an extra plain-http listener on this port (0 = none). */
        httpPort: z.number().int().min(0).max(65535).default(0),
      })
      .strict()
      .refine((t) => (t.certFile === '') === (t.keyFile === ''), {
        message: 'certFile and keyFile go together: set both (https) or neither (http)',
        path: ['keyFile'],
      })
      .refine((t) => t.httpPort === 0 || t.certFile !== '', {
        message: 'httpPort is the extra plain listener next to https: set certFile and keyFile too',
        path: ['httpPort'],
      })
      .default({ certFile: '', keyFile: '', httpPort: 0 }),
    tracing: z
      .object({
        /** OTLP/HTTP base URL (spans go to <base>/v1/traces); empty = tracing off, trace headers pass untouched. */
        otlpEndpoint: z
          .string()
          .refine((s) => s === '' || /^https?:\/\/[^/?#\s]+(\/[^?#\s]*)?$/.test(s), {
            message: 'must be an http(s) URL (e.g. http://otel-collector:4318) or empty',
          })
          .default(''),
        /** For traces the gateway starts; a client's sampled flag is respected (parent-based). */
        sampleRatio: z.number().min(0).max(1).default(1),
      })
      .strict()
      .default({ otlpEndpoint: '', sampleRatio: 1 }),
    /** Endpoint picking of LLM deployments (SPEC §12): scraping the servers' metrics, and saturation bounds. */
    balancing: z
      .object({
        /** How often each LLM endpoint's metrics are scraped (in the background, never on a request's path). */
        scrapeIntervalMs: z.number().int().min(10).max(60_000).default(100),
        /** Scraped figures older than this are not used (the endpoint is judged by in-flight counts alone). */
        staleAfterMs: z.number().int().min(10).max(600_000).default(1000),
        /** Most bytes of metrics text read per scrape: past it the scrape is aborted and counted as an error. */
        scrapeMaxBytes: z
          .number()
          .int()
          .min(4096)
          .max(64 << 20)
          .default(1 << 20),
        /** Whole-scrape deadline (unset: staleAfterMs, between 0.2 and 2 s). */
        scrapeTimeoutMs: z.number().int().min(10).max(60_000).optional(),
        /** An endpoint with more waiting requests than this is avoided while another is not. */
        maxWaiting: z.number().min(0).default(5),
        /** An endpoint with a larger KV-cache use (0-1) than this is avoided while another is not. */
        maxKvCache: z.number().min(0).max(1).default(0.8),
        /** Bounded load: no endpoint gets more in flight than max(maxLoadFactor × mean, mean + maxLoadSlack). */
        maxLoadFactor: z.number().min(1).default(1.25),
        maxLoadSlack: z.number().min(0).default(2),
      })
      .strict()
      .default({
        scrapeIntervalMs: 100,
        staleAfterMs: 1000,
        scrapeMaxBytes: 1 << 20,
        maxWaiting: 5,
        maxKvCache: 0.8,
        maxLoadFactor: 1.25,
        maxLoadSlack: 2,
      }),
    /** Fair, prioritized queueing in the gateway while every endpoint of an LLM deployment is saturated (SPEC §14). */
    queueing: z
      .object({
        enabled: z.boolean().default(true),
        /**
         * A request waits at most this long, then 503 with Retry-After. At most an hour: past 2^31 ms (24.8 days) a
         * timer fires at once, and every queued request was refused as having waited too long.
         */
        maxWaitSeconds: seconds.max(3600).default(30),
        /** Requests and bytes of their bodies queued per deployment; past either, 503. */
        maxQueued: z.number().int().min(1).default(1000),
        maxQueuedBytes: z.number().int().min(0).default(67_108_864),
      })
      .strict()
      .default({ enabled: true, maxWaitSeconds: 30, maxQueued: 1000, maxQueuedBytes: 67_108_864 }),
    /** Trust X-Forwarded-* from the client (set only behind a trusted load balancer). */
    trustForwardedHeaders: z.boolean().default(false),
    /**
     * Forward client headers whose names contain "_" (nginx's underscores_in_headers). Off: they are dropped, so that a
     * backend framework that reads "_" as "-" never sees X_Forwarded_For as X-Forwarded-For.
     */
    forwardUnderscoreHeaders: z.boolean().default(false),
    /** One JSON line per request on stdout. */
    accessLog: z.boolean().default(true),
    kubernetes: z
      .object({
        /** Namespaces to watch for ServingDeployments; empty = all. */
        namespaces: z.array(z.string().min(1)).default([]),
        kserve: z
          .object({ enabled: z.boolean().default(false) })
          .strict()
          .default({ enabled: false }),
        leaderElection: z
          .object({
            enabled: z.boolean().default(true),
            leaseName: z.string().min(1).default('servegate-controller'),
            leaseDurationSeconds: positiveInt.default(15),
            renewDeadlineSeconds: positiveInt.default(10),
            retryPeriodSeconds: positiveInt.default(2),
          })
          .strict()
          .refine((le) => le.leaseDurationSeconds > le.renewDeadlineSeconds, {
            message: 'leaseDurationSeconds must be greater than renewDeadlineSeconds',
            path: ['leaseDurationSeconds'],
          })
          .refine((le) => le.renewDeadlineSeconds > le.retryPeriodSeconds, {
            message: 'renewDeadlineSeconds must be greater than retryPeriodSeconds',
            path: ['renewDeadlineSeconds'],
          })
          .default({
            enabled: true,
            leaseName: 'servegate-controller',
            leaseDurationSeconds: 15,
            renewDeadlineSeconds: 10,
            retryPeriodSeconds: 2,
          }),
        /**
         * Watches with no event (bookmarks included) for this long are restarted. The API server sends an idle watch a
         * bookmark every minute: 150 s is two and a half of them, so a hung watch is found in under three minutes.
         */
        watchIdleTimeoutSeconds: positiveInt.default(150),
      })
      .strict()
      .default({
        namespaces: [],
        kserve: { enabled: false },
        leaderElection: {
          enabled: true,
          leaseName: 'servegate-controller',
          leaseDurationSeconds: 15,
          renewDeadlineSeconds: 10,
          retryPeriodSeconds: 2,
        },
        watchIdleTimeoutSeconds: 150,
      }),
    shutdown: z
      .object({
        /** After SIGTERM, how long in-flight requests and streams may run before they are ended. */
        drainSeconds: seconds.default(25),
        /** After SIGTERM, how long new connections are still accepted (each answered with Connection: close). */
        acceptSeconds: z.number().min(0).default(1),
      })
      .strict()
      .default({ drainSeconds: 25, acceptSeconds: 1 }),
    logLevel: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  })
  .strict();

export type ConfigInput = z.input<typeof configSchema>;
export type ParsedConfig = z.output<typeof configSchema>;

/** Configuration after defaults that depend on the runtime (port, namespace) are filled in. */
export interface Config extends Omit<ParsedConfig, 'publicUrl'> {
  publicUrl: string;
  auth: ParsedConfig['auth'] & { keysNamespace: string };
}
