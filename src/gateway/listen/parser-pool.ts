// Node's HTTP server takes a request parser from a free list for each new connection and puts it back when the
// connection closes. The list keeps up to 1,000 idle parsers, each with its native memory (the parser's header
// field table and llhttp state): after a burst of thousands of connections, such as thousands of LLM streams at once,
// those 1,000 stay for the life of the process, about 3 MB of RSS on top of a 76 MB gateway (bench Part E: RSS
// after 9,900 streams +10.5 % of its baseline with them, +5.8 % without). The gateway keeps fewer: a parser is made
// anew for a connection that finds the list empty, which costs far less than the connection itself.
//
// The list lives in `node:_http_common`, an internal module (documentation-only deprecation DEP0199, still there in
// Node 20 to 24). When it is missing or shaped otherwise, nothing is changed and Node's default stays.
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

/**
 * Caps the process's free list of idle HTTP parsers at `max` (never raises it). Parsers already idle beyond the cap are
 * let go (they hold no connection). Returns the cap in force, or undefined when this Node has no such list.
 */
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
