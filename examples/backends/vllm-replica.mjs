// One simulated vLLM replica for the demo: `servegate demo` starts three (ports 8084, 8085, 8086) behind the
// deployment demo/fleet, whose endpoint the gateway picks per request by prompt prefix and load (SPEC §12).
// It is vllm-sim.mjs's replica (a KV prefix cache, a queue, vLLM's /metrics, every answer carrying
// `x-vllm-replica: <index>`) with demo timings: an answer of the default 16 tokens takes about 0.2 s.
// Node core only. Run `node vllm-replica.mjs 8084` (env REPLICA_INDEX, MODEL, HOST), or import { start }.
import { runIfMain } from './lib.mjs';
import { startReplica } from './vllm-sim.mjs';

/** The demo's timings, pinned here (vllm-sim's defaults serve the benchmark): a curl answers well within a second. */
export const DEMO_TIMINGS = Object.freeze({ prefillMsPerBlock: 0.5, decodeMsPerToken: 10, maxTokens: 16 });

/**
 * @param {number} port 0 for an ephemeral port
 * @param {{ host?: string, model?: string, index?: number } & Record<string, unknown>} [options] any option of
 *   vllm-sim's startReplica; `index` is what the x-vllm-replica header says (default 0), `model` the served name
 * @returns {Promise<{ port: number, url: string, index: number, stats(): object, close(): Promise<void> }>}
 */
export async function start(port = 8084, options = {}) {
  const given = Object.fromEntries(Object.entries(options).filter(([, v]) => v !== undefined));
  return startReplica(port, { ...DEMO_TIMINGS, model: 'sim-llama', ...given });
}

const index = Number(process.env.REPLICA_INDEX || 0);
await runIfMain(
  import.meta,
  start,
  8084,
  (p) => `simulated vLLM replica ${index} listening on http://127.0.0.1:${p}/v1 (metrics: /metrics)`,
  { model: process.env.MODEL, index: Number.isInteger(index) && index >= 0 ? index : 0 },
);
