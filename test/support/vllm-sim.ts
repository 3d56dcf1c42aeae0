// One replica of the simulated vLLM server (examples/backends/vllm-sim.mjs) in this process, for tests that saturate
// an LLM deployment: its own figures are read at any moment through stats().
export type SimReplica = {
  url: string;
  stats(): { served: number; aborted: number; waiting: number; running: number };
  close(): Promise<void>;
};

/** A replica on a free port; `options` as vllm-sim.mjs's startReplica takes them (maxRunning, decodeMsPerToken, ...). */
export async function startSimReplica(options: object): Promise<SimReplica> {
  const sim = (await import(new URL('../../examples/backends/vllm-sim.mjs', import.meta.url).href)) as {
    startReplica(port: number, options?: object): Promise<SimReplica>;
  };
  return sim.startReplica(0, options);
}
