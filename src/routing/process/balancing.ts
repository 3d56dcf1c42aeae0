// spec.balancing (how an endpoint is picked among a backend's ready endpoints) and spec.fallbacks (deployments tried
// when this one fails before answering), SPEC §12.
import { isObject } from '../../kube/objects.js';
import type { RouteKind } from '../kinds.js';
import { isDnsLabel, projectNamespaceForm } from '../names.js';
import type { Balancing, BalancingPolicy } from '../types.js';
import { invalid, type Refusal } from './result.js';
import { quoted, shown } from '../quote.js';

const POLICIES: readonly BalancingPolicy[] = ['llm', 'least-request', 'round-robin'];
const FIELDS = ['policy', 'metricsPath', 'metricsPort'];

/** The default for a kind: prefix- and load-aware picking for LLM servers, round robin otherwise. */
export function defaultBalancing(kind: RouteKind): Balancing {
  return { policy: kind === 'llm' ? 'llm' : 'round-robin', metricsPath: '/metrics', metricsPort: 0 };
}

export function parseBalancing(raw: unknown, kind: RouteKind): Balancing | Refusal {
  const b = defaultBalancing(kind);
  if (raw === undefined || raw === null) return b;
  if (!isObject(raw)) return invalid('spec.balancing must be an object: {policy, metricsPath, metricsPort}');
  for (const k of Object.keys(raw))
    if (!FIELDS.includes(k))
      return invalid(`spec.balancing.${shown(k)} is not a field: spec.balancing takes ${FIELDS.join(', ')}`);
  if (raw.policy !== undefined) {
    if (!POLICIES.includes(raw.policy as BalancingPolicy))
      return invalid(`spec.balancing.policy must be one of ${POLICIES.join(', ')}, got ${quoted(raw.policy)}`);
    b.policy = raw.policy as BalancingPolicy;
  }
  if (raw.metricsPath !== undefined) {
    if (typeof raw.metricsPath !== 'string' || !/^\/[^\s?#]*$/.test(raw.metricsPath))
      return invalid(`spec.balancing.metricsPath must be a path like "/metrics", got ${quoted(raw.metricsPath)}`);
    b.metricsPath = raw.metricsPath;
  }
  if (raw.metricsPort !== undefined) {
    const p = raw.metricsPort;
    if (typeof p !== 'number' || !Number.isInteger(p) || p < 0 || p > 65535)
      return invalid(`spec.balancing.metricsPort must be a port number (0 = the serving port), got ${quoted(p)}`);
    b.metricsPort = p;
  }
  return b;
}

/**
 * spec.fallbacks as "<project>/<deployment>" references (a bare name is in the deployment's own project). The
 * deployment itself and repeats are refused whichever way the project is written (`my_proj/chat` or its namespace
 * form `my-proj/chat`: both name one route).
 */
export function parseFallbacks(raw: unknown, project: string, name: string): readonly string[] | undefined | Refusal {
  if (raw === undefined || raw === null) return undefined;
  if (!Array.isArray(raw))
    return invalid('spec.fallbacks must be a list of deployment names ("name" or "project/name")');
  if (raw.length > 8) return invalid(`spec.fallbacks lists ${raw.length} deployments; at most 8`);
  const out: string[] = [];
  const self = `${projectNamespaceForm(project)}/${name}`;
  const seen: string[] = [];
  for (const f of raw) {
    if (typeof f !== 'string') return invalid(`spec.fallbacks holds ${quoted(f)}: each entry is a name`);
    const slash = f.indexOf('/');
    const p = slash === -1 ? project : f.slice(0, slash);
    const d = slash === -1 ? f : f.slice(slash + 1);
    if (!/^[A-Za-z0-9_-]+$/.test(p) || !isDnsLabel(d))
      return invalid(`spec.fallbacks entry ${quoted(f)} must be "<deployment>" or "<project>/<deployment>"`);
    const same = `${projectNamespaceForm(p)}/${d}`;
    if (same === self) return invalid(`spec.fallbacks names the deployment itself (${quoted(f)})`);
    if (seen.includes(same)) return invalid(`spec.fallbacks names ${quoted(f)} twice`);
    seen.push(same);
    out.push(`${p}/${d}`);
  }
  return out.length ? out : undefined;
}
