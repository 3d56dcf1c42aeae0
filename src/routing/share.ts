// Equal parts of routes are one object (a backend, a project or namespace string): with thousands of routes, parts of
// their own are each a cache miss when a request first touches them (docs/performance.md, "The hidden classes").
import type { Backend, Route } from './types.js';

/** Live shared backends by content; an entry goes when no route holds its backend any more. */
const backends = new Map<string, WeakRef<Backend>>();
const forget = new FinalizationRegistry<string>((key) => {
  if (backends.get(key)?.deref() === undefined) backends.delete(key);
});

/** Shared strings (projects and namespaces: a few hundred, not one per route); emptied past a bound. */
const strings = new Map<string, string>();
const MAX_STRINGS = 100_000;

function sharedString(s: string): string {
  const held = strings.get(s);
  if (held !== undefined) return held;
  if (strings.size >= MAX_STRINGS) strings.clear();
  strings.set(s, s);
  return s;
}

function sharedBackend(b: Backend): Backend {
  const key = backendKey(b);
  const held = backends.get(key)?.deref();
  if (held) return held;
  backends.set(key, new WeakRef(b));
  forget.register(b, key);
  return b;
}

/** The backend's whole content (every field: two backends that differ in any one are never merged). */
function backendKey(b: Backend): string {
  return JSON.stringify(b);
}

/** Replaces, in place, `route`'s backends and names by equal shared ones. */
export function shareParts(route: Omit<Route, 'hostname'>): void {
  route.project = sharedString(route.project);
  route.namespace = sharedString(route.namespace);
  route.backend = sharedBackend(route.backend);
  if (route.canary) route.canary = { backend: sharedBackend(route.canary.backend), percent: route.canary.percent };
}
