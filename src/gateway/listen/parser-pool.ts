// Node keeps up to 1,000 idle HTTP parsers with their native memory for the life of the process: after a burst of
// streams ~3 MB of RSS (bench Part E: +10.5 % after 9,900 streams with them, +5.8 % without). The gateway keeps fewer.
// The list is internal (`node:_http_common`, DEP0199): missing or shaped otherwise, Node's default stays.
import { createRequire } from 'node:module';

/** Idle request parsers the gateway's process keeps for reuse (Node's default: 1,000). */
export const IDLE_PARSERS = 64;

interface FreeList {
  max: number;
  list: unknown[];
}

function parserFreeList(): FreeList | undefined {
  try {
    const common = createRequire(import.meta.url)('_http_common') as { parsers?: Partial<FreeList> };
    const parsers = common.parsers;
    if (parsers && typeof parsers.max === 'number' && Array.isArray(parsers.list)) return parsers as FreeList;
  } catch {
    /* not on this Node */
  }
  return undefined;
}

/** Caps the idle-parser list at `max` (never raises it); the cap in force, or undefined when this Node has no list. */
export function capIdleParsers(max = IDLE_PARSERS): number | undefined {
  const pool = parserFreeList();
  if (!pool) return undefined;
  pool.max = Math.min(pool.max, Math.max(0, Math.floor(max)));
  while (pool.list.length > pool.max) {
    const parser = pool.list.pop() as { close?: () => void } | undefined;
    parser?.close?.();
  }
  return pool.max;
}

/** Idle parsers kept now (for tests), or undefined when this Node has no such list. */
export function idleParsers(): number | undefined {
  return parserFreeList()?.list.length;
}
