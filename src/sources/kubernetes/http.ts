// One JSON GET against the API server with the KubeConfig's TLS and auth (what the client's own Watch uses),
// answering plain JSON: list responses stay plain objects, with no model classes or Date conversion.
import http from 'node:http';
import https from 'node:https';
import type { KubeConfig } from '@kubernetes/client-node';
import { copyWith } from '../../same-shape.js';

/** An HTTP answer other than 200 from the API server; `code` is the HTTP status. */
export class ApiStatusError extends Error {
  constructor(
    readonly code: number,
    message: string,
    readonly reason?: string,
  ) {
    super(message);
    this.name = 'ApiStatusError';
  }
}

export async function getJson(
  kc: KubeConfig,
  path: string,
  query: Record<string, string | number | boolean | undefined>,
  opts: { signal?: AbortSignal; timeoutMs?: number } = {},
): Promise<unknown> {
  const cluster = kc.getCurrentCluster();
  if (!cluster) throw new Error('no current cluster in the kubeconfig');
  const url = new URL(cluster.server.replace(/\/+$/, '') + path);
  for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== '') url.searchParams.set(k, String(v));
  const reqOpts: https.RequestOptions = {};
  await kc.applyToHTTPSOptions(reqOpts);
  const mod = url.protocol === 'https:' ? https : http;
  return new Promise((resolve, reject) => {
    const req = mod.request(
      url,
      {
        method: 'GET',
        headers: copyWith((reqOpts.headers ?? {}) as Record<string, string | string[] | number | undefined>, {
          accept: 'application/json',
        }),
        agent: reqOpts.agent,
        auth: reqOpts.auth,
        signal: opts.signal,
        timeout: opts.timeoutMs ?? 60_000,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('error', reject);
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          const status = res.statusCode ?? 0;
          if (status !== 200) {
            let message = `${status} ${http.STATUS_CODES[status] ?? ''}`.trim();
            let reason: string | undefined;
            try {
              const body = JSON.parse(text) as { message?: unknown; reason?: unknown };
              if (typeof body.message === 'string') message = `${status} ${body.message}`;
              if (typeof body.reason === 'string') reason = body.reason;
            } catch {
              // not a Status object: keep the status line
            }
            reject(new ApiStatusError(status, message, reason));
            return;
          }
          try {
            resolve(JSON.parse(text));
          } catch {
            reject(new Error(`invalid JSON from the API server for ${path}`));
          }
        });
      },
    );
    req.on('timeout', () => req.destroy(new Error(`request timed out after ${opts.timeoutMs ?? 60_000} ms`)));
    req.on('error', reject);
    req.end();
  });
}

/** A short human text for an error from the API server or the network. */
export function errorText(err: unknown): string {
  if (err instanceof ApiStatusError) return err.message;
  if (err && typeof err === 'object') {
    const e = err as { statusCode?: unknown; code?: unknown; message?: unknown };
    if (typeof e.statusCode === 'number')
      return `${e.statusCode} ${typeof e.message === 'string' ? e.message : ''}`.trim();
    if (typeof e.code === 'string' && typeof e.message === 'string')
      return e.message.includes(e.code) ? e.message : `${e.code}: ${e.message}`;
    if (typeof e.message === 'string' && e.message) return e.message;
  }
  return String(err);
}
