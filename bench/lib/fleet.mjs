// A simulated vLLM fleet (examples/backends/vllm-sim.mjs) as a process of the bench: its replicas' URLs once it
// prints them.
import { fileURLToPath } from 'node:url';
import { startProcess, waitFor } from './procs.mjs';

const SIM = fileURLToPath(new URL('../../examples/backends/vllm-sim.mjs', import.meta.url));

/** Starts the fleet; `options` become its flags (camelCase names as --kebab-case). Resolves { child, urls }. */
export async function startSimFleet(options, { model, maxTokens }) {
  const args = [SIM, '0', '--json', '--model', model, '--max-tokens', String(maxTokens)];
  for (const [k, v] of Object.entries(options))
    args.push(`--${k.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`, String(v));
  const child = startProcess('vllm-sim fleet', process.execPath, args);
  let urls;
  await waitFor(
    'simulated vLLM fleet',
    () => {
      const line = /^\{"urls".*$/m.exec(child.output)?.[0];
      if (line) urls = JSON.parse(line).urls;
      return urls;
    },
    { child, timeoutMs: 10_000 },
  );
  return { child, urls };
}
