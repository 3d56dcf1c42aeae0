// What the route builder remembers between builds (the RouteStore owns it): entries keyed by input object (sources
// hand unchanged resources over as the same object) with what else they used, so a cached build equals a fresh one.
import type { Candidate, Rejection } from './process/conflicts.js';
import type { ApiKeyRecord, KeyProblem, KeySecretResource, ServiceResource } from './types.js';

/** One resource's evaluation, valid while the options, the source kind and the Services it names are the same. */
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
