// The container image's Dockerfile (no Docker engine here): what Kubernetes and the chart rely on.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from '@jest/globals';
import { expect } from '../support/expect.js';
import { parse as parseYaml } from 'yaml';

const ROOT = new URL('../..', import.meta.url).pathname;
const dockerfile = readFileSync(join(ROOT, 'Dockerfile'), 'utf8');
const dockerignore = readFileSync(join(ROOT, '.dockerignore'), 'utf8')
  .split('\n')
  .map((l) => l.trim())
  .filter((l) => l && !l.startsWith('#'));

interface Instruction {
  op: string;
  args: string;
}
interface Stage {
  from: string;
  name?: string;
  instructions: Instruction[];
}

/** Instructions (continuations joined, comments dropped) grouped by stage. */
function stages(text: string): Stage[] {
  const joined = text.replace(/\\\n/g, ' ');
  const out: Stage[] = [];
  for (const raw of joined.split('\n')) {
    const line = raw.trim();
    if (!line || line.startsWith('#')) continue;
    const [, op, args] = /^(\S+)\s*(.*)$/.exec(line)!;
    if (op.toUpperCase() === 'FROM') {
      const m = /^(\S+)(?:\s+AS\s+(\S+))?$/i.exec(args)!;
      out.push({ from: m[1], name: m[2], instructions: [] });
    } else out.at(-1)!.instructions.push({ op: op.toUpperCase(), args });
  }
  return out;
}

const all = stages(dockerfile);
const runtime = all.at(-1)!;
const ins = (s: Stage, op: string) => s.instructions.filter((i) => i.op === op);

describe('Dockerfile', () => {
  test('is multi-stage, every stage on Node 22', () => {
    expect(all.length).toBeGreaterThanOrEqual(2);
    for (const s of all) expect(s.from).toMatch(/^(node:22[-.]|gcr\.io\/distroless\/nodejs22)/);
  });

  test('ENTRYPOINT is exec form running node directly (SIGTERM reaches node), CMD is serve --kubernetes', () => {
    const [entry] = ins(runtime, 'ENTRYPOINT');
    expect(JSON.parse(entry.args)).toEqual(['node', 'dist/cli/main.js']);
    expect(JSON.parse(ins(runtime, 'CMD')[0].args)).toEqual(['serve', '--kubernetes']);
    expect(ins(runtime, 'WORKDIR').at(-1)!.args).toBe('/app');
    expect(dockerfile).not.toMatch(/npm (start|run)/);
  });

  test('runs as a non-root numeric user', () => {
    const user = ins(runtime, 'USER').at(-1)!.args;
    const uid = Number(user.split(':')[0]);
    expect(Number.isInteger(uid) && uid > 0).toBe(true);
    const values = parseYaml(readFileSync(join(ROOT, 'charts/servegate/values.yaml'), 'utf8'));
    expect(values.podSecurityContext.runAsUser).toBe(uid);
  });

  test('the runtime preloads jemalloc from one path on every architecture, installed before the user drops root', () => {
    const env = ins(runtime, 'ENV').find((e) => e.args.startsWith('LD_PRELOAD='))!;
    const path = env.args.slice('LD_PRELOAD='.length);
    expect(path).toBe('/usr/local/lib/libjemalloc.so.2');
    const runs = ins(runtime, 'RUN').map((r) => r.args);
    const install = runs.findIndex((a) => a.includes('libjemalloc2') && a.includes(`ln -s`) && a.includes(path));
    expect(install).toBeGreaterThanOrEqual(0);
    expect(runs[install]).toMatch(/--no-install-recommends/);
    expect(runs[install]).toMatch(/rm -rf \/var\/lib\/apt\/lists/);
    const order = runtime.instructions;
    const at = (pred: (i: Instruction) => boolean) => order.findIndex(pred);
    expect(at((i) => i.op === 'RUN' && i.args.includes('libjemalloc2'))).toBeLessThan(at((i) => i.op === 'USER'));
  });

  test('jemalloc gives freed memory back on its own clock (background threads), not only while the process allocates', () => {
    const env = ins(runtime, 'ENV').filter((e) => e.args.startsWith('MALLOC_CONF='));
    expect(env).toHaveLength(1);
    const conf = new Map(
      env[0].args
        .slice('MALLOC_CONF='.length)
        .split(',')
        .map((kv) => kv.split(':') as [string, string]),
    );
    expect(conf.get('background_thread')).toBe('true');
    // Pages freed for a second go back to the system (jemalloc's default holds them 10 s; 0 purged at every free and
    // cost CPU per event, -1 would never purge).
    expect(conf.get('dirty_decay_ms')).toBe('1000');
    expect([...conf.keys()].sort()).toEqual(['background_thread', 'dirty_decay_ms']);
  });

  test('exposes the gateway and admin ports the chart uses', () => {
    expect(ins(runtime, 'EXPOSE')[0].args.split(/\s+/).sort()).toEqual(['8080', '9090']);
  });

  test('the runtime gets production dependencies only, installed without lifecycle scripts', () => {
    const installs = all
      .flatMap((s) => ins(s, 'RUN'))
      .map((r) => r.args)
      .filter((a) => a.includes('npm ci'));
    expect(installs.some((a) => a.includes('--omit=dev') && a.includes('--ignore-scripts'))).toBe(true);
    const copiedModules = ins(runtime, 'COPY').find((c) => c.args.includes('node_modules'))!;
    const fromStage = /--from=(\S+)/.exec(copiedModules.args)![1];
    const deps = all.find((s) => s.name === fromStage)!;
    expect(ins(deps, 'RUN').some((r) => r.args.includes('--omit=dev'))).toBe(true);
  });

  test('everything the build copies from the context exists and is not excluded by .dockerignore', () => {
    const sources = all
      .flatMap((s) => ins(s, 'COPY'))
      .filter((c) => !c.args.startsWith('--from'))
      .flatMap((c) => c.args.split(/\s+/).slice(0, -1));
    expect(sources).toEqual(
      expect.arrayContaining(['package.json', 'package-lock.json', 'tsconfig.json', 'src', 'crds']),
    );
    for (const src of sources) {
      expect(existsSync(join(ROOT, src)), src).toBe(true);
      expect(dockerignore, src).not.toContain(src);
    }
  });

  test('.dockerignore keeps local builds, dependencies, git and tests out of the context', () => {
    for (const p of ['node_modules', 'dist', '.git', 'test', 'bench']) expect(dockerignore).toContain(p);
  });
});
