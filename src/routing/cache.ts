// What the route builder remembers between builds, owned by whoever builds repeatedly (the RouteStore). Every entry is
// keyed by an input object (sources hand unchanged resources over as the same object) and records what else it
// depended on, so a cached build returns exactly what a fresh one would; without a cache, buildRouteTable makes a new
// one and is plainly a function of its arguments.
import type { Candidate, Rejection } from './process/conflicts.js';
import type { ApiKeyRecord, KeyProblem, KeySecretResource, ServiceResource } from './types.js';

/** One resource's evaluation, valid while the options, the source kind and the Service objects it names are the same. */
export type Evaluated = {
  deps: string;
  /** The Services it names (backend, canary), as found; null when the source sees no Services. */
  services: readonly (ServiceResource | undefined)[] | null;
  value: Candidate | Rejection;
};

/** The key index of one array of key Secrets (process/keys.ts), with each key's digest for the table hash. */
export type KeysResult = { keys: Map<string, ApiKeyRecord[]>; problems: KeyProblem[]; digests: string[] };

export type ParsedKey = { scope: string; id: string; value: ApiKeyRecord | string; digest: string };

export class BuildCache {
  readonly evaluated = new WeakMap<object, Evaluated>();
  readonly parsedKeys = new WeakMap<KeySecretResource, ParsedKey>();
  readonly keysByArray = new WeakMap<readonly KeySecretResource[], { scope: string; result: KeysResult }>();
  readonly servicesByArray = new WeakMap<readonly ServiceResource[], Map<string, ServiceResource>>();
}
