// A fleet of OpenAI-compatible replicas on loopback for the SPEC §12 conformance probes (R4, session 6): each serves
// /metrics with whatever text the test sets (vLLM's names, SGLang's, nothing) and answers chat completions, naming
// itself in `x-replica`, after `delayMs`.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface Replica {
  name: string;
  url: string;
  host: string;
  server: Server;
  metrics: () => string;
  /** ms before the answer's headers. */
  delayMs: number;
  served: Array<{ model: unknown }>;
}

export function replica(name: string): Promise<Replica> {
  const r = { name, metrics: () => '', delayMs: 0, served: [] } as unknown as Replica;
  r.server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (req.url === '/metrics') return void res.writeHead(200, { 'content-type': 'text/plain' }).end(r.metrics());
      const body = JSON.parse(Buffer.concat(chunks).toString() || '{}') as Record<string, unknown>;
      r.served.push({ model: body.model });
      const answer = () => {
        if (res.destroyed) return;
        res.writeHead(200, { 'content-type': 'application/json', 'x-replica': name });
        res.end(
          JSON.stringify({
            id: 'x',
            object: 'chat.completion',
            model: body.model,
            choices: [{ index: 0, message: { role: 'assistant', content: name } }],
            usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 },
          }),
        );
      };
      if (r.delayMs > 0) setTimeout(answer, r.delayMs);
      else answer();
    });
  });
  return new Promise((resolve) =>
    r.server.listen(0, '127.0.0.1', () => {
      const port = (r.server.address() as AddressInfo).port;
      r.url = `http://127.0.0.1:${port}`;
      r.host = `127.0.0.1:${port}`;
      resolve(r);
    }),
  );
}

export async function closeAll(replicas: Array<Replica | undefined>): Promise<void> {
  await Promise.all(
    replicas
      .filter((r): r is Replica => r !== undefined)
      .map((r) => {
        r.server.closeAllConnections();
        return new Promise((ok) => r.server.close(ok));
      }),
  );
}

/** vLLM's figures as its /metrics prints them. */
export const vllm = (waiting: number, kv: number): string =>
  `vllm:num_requests_waiting{model_name="m"} ${waiting}\nvllm:num_requests_running{model_name="m"} 1\n` +
  `vllm:kv_cache_usage_perc{model_name="m"} ${kv}\nvllm:cache_config_info{block_size="16"} 1\n`;

/** A `modelServer: llm` ServingDeployment over `urls` (one: backend.url; several: backend.urls). */
export const llmDoc = (ns: string, name: string, urls: string[], extra: Record<string, unknown> = {}): object => ({
  apiVersion: 'serving.servegate.dev/v1alpha1',
  kind: 'ServingDeployment',
  metadata: { name, namespace: ns },
  spec: { type: 'model', modelServer: 'llm', backend: urls.length === 1 ? { url: urls[0] } : { urls }, ...extra },
});

export const SYSTEM = 'You are the support assistant of ACME. Follow the house rules and be brief. '.repeat(40);

/** Conversation `c`'s opening under SYSTEM: a user message and an answer long enough to give it a key of its own. */
export function opening(c: number): Array<{ role: string; content: string }> {
  return [
    { role: 'system', content: SYSTEM },
    { role: 'user', content: `Conversation ${c}: my order number ${c * 7919} has not arrived. `.repeat(12) },
    { role: 'assistant', content: `I am sorry to hear that, customer ${c}. Let me check. `.repeat(12) },
  ];
}
