#!/usr/bin/env node
// Import cycles in src/, type-only imports included (eslint's import-x/no-cycle skips those: TypeScript erases them,
// but a type cycle still means two modules cannot be read, or moved, one without the other). Prints each strongly
// connected group of files with one cycle through it, then the gateway folders' folder-to-folder import counts.
// Exit status 1 when a cycle exists. Usage: node scripts/import-cycles.mjs [dir=src]
import { readdirSync, readFileSync, existsSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import ts from 'typescript';

const root = resolve(process.argv[2] ?? 'src');

function files(dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? files(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : [],
  );
}

function target(from, spec) {
  if (!spec.startsWith('.')) return undefined;
  const base = resolve(dirname(from), spec);
  for (const c of [base.replace(/\.js$/, '.ts'), `${base}.ts`, join(base, 'index.ts')]) if (existsSync(c)) return c;
  return undefined;
}

const all = files(root);
const edges = new Map();
for (const f of all) {
  const { importedFiles } = ts.preProcessFile(readFileSync(f, 'utf8'), true, true);
  edges.set(f, [...new Set(importedFiles.map((i) => target(f, i.fileName)).filter((t) => t !== undefined))]);
}

// Tarjan's strongly connected components, iterative so a deep chain cannot overflow the stack.
const index = new Map();
const low = new Map();
const onStack = new Set();
const stack = [];
const groups = [];
let next = 0;
for (const start of all) {
  if (index.has(start)) continue;
  const work = [[start, 0]];
  index.set(start, next);
  low.set(start, next++);
  stack.push(start);
  onStack.add(start);
  while (work.length > 0) {
    const frame = work[work.length - 1];
    const [v, i] = frame;
    const out = edges.get(v) ?? [];
    if (i < out.length) {
      frame[1]++;
      const w = out[i];
      if (!index.has(w)) {
        index.set(w, next);
        low.set(w, next++);
        stack.push(w);
        onStack.add(w);
        work.push([w, 0]);
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v), index.get(w)));
      continue;
    }
    work.pop();
    if (work.length > 0) {
      const parent = work[work.length - 1][0];
      low.set(parent, Math.min(low.get(parent), low.get(v)));
    }
    if (low.get(v) === index.get(v)) {
      const group = [];
      let w;
      do {
        w = stack.pop();
        onStack.delete(w);
        group.push(w);
      } while (w !== v);
      if (group.length > 1 || (edges.get(v) ?? []).includes(v)) groups.push(group);
    }
  }
}

// One cycle through a group: breadth-first from its first file back to itself, inside the group.
function cycleOf(group) {
  const inGroup = new Set(group);
  const from = new Map();
  const queue = [group[0]];
  const seen = new Set(queue);
  while (queue.length > 0) {
    const v = queue.shift();
    for (const w of edges.get(v) ?? []) {
      if (!inGroup.has(w)) continue;
      if (w === group[0]) {
        const path = [v];
        while (from.has(path[0])) path.unshift(from.get(path[0]));
        return [...path, w];
      }
      if (!seen.has(w)) {
        seen.add(w);
        from.set(w, v);
        queue.push(w);
      }
    }
  }
  return group;
}

const rel = (f) => relative(root, f);
console.log(`import cycles in ${relative(process.cwd(), root) || '.'} (type-only imports included): ${groups.length}`);
for (const g of groups) {
  const cycle = cycleOf(g.sort());
  console.log(`  ${g.length} files, e.g. ${cycle.map(rel).join(' -> ')}`);
  if (g.length > cycle.length - 1) console.log(`    all: ${g.map(rel).join(', ')}`);
}

const gateway = join(root, 'gateway');
if (existsSync(gateway)) {
  const counts = new Map();
  for (const [f, out] of edges) {
    if (!f.startsWith(gateway + '/')) continue;
    const a = relative(gateway, f).split('/')[0];
    for (const t of out) {
      if (!t.startsWith(gateway + '/')) continue;
      const b = relative(gateway, t).split('/')[0];
      if (a !== b) counts.set(`${a} -> ${b}`, (counts.get(`${a} -> ${b}`) ?? 0) + 1);
    }
  }
  console.log('gateway folder -> folder imports (file pairs):');
  for (const [k, n] of [...counts].sort()) console.log(`  ${String(n).padStart(3)}  ${k}`);
}
process.exitCode = groups.length > 0 ? 1 : 0;
