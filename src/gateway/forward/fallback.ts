// Fallbacks (SPEC §12): the first admitted deployment's `spec.fallbacks`, in order, while no byte of the answer has
// reached the client; those the key is not granted or of another kind are skipped, their own fallbacks not followed.
// On OpenAI routes `model` is rewritten to the fallback's served name (openai/llm-request.ts).
import type { ApiKeyRecord, Route, RouteTable } from '../../routing/types.js';
import { grantsProject } from '../../routing/names.js';

export type FallbackReason = 'connect' | '5xx' | '429' | 'no_endpoint' | 'timeout' | 'rate_limited';

export class Fallbacks {
  /** The deployment first admitted (whose list is followed), once a fallback was taken. */
  private first: Route | undefined;
  /** The fallbacks taken so far. */
  private readonly taken: Route[] = [];
  private at = 0;

  /** The deployment first admitted, once a fallback was taken. */
  get firstRoute(): Route | undefined {
    return this.first;
  }

  /** The answer names the deployment that gave it (`x-servegate-deployment`). */
  named(route: Route): boolean {
    return this.first !== undefined || route.fallbacks !== undefined;
  }

  /** The next fallback of `current`'s request the key may use, without moving on; undefined: none left. */
  peek(table: RouteTable, current: Route, key: ApiKeyRecord): Route | undefined {
    const first = this.first ?? current;
    const list = first.fallbacks;
    if (!list) return undefined;
    while (this.at < list.length) {
      const r = table.byPath.get(list[this.at]);
      // Compared by resource, not as the list wrote them (a project has two forms; the table may have been
      // reloaded): the deployment itself or one already tried is never called again.
      if (
        r &&
        r.kind === current.kind &&
        !sameRoute(r, first) &&
        !this.taken.some((t) => sameRoute(t, r)) &&
        grantsProject(key, r.project, r.namespace)
      )
        return r;
      this.at++;
    }
    return undefined;
  }

  /** Moves on to the fallback `to` that `peek` gave; returns the deployment first admitted. */
  take(current: Route, to: Route): Route {
    this.at++;
    this.taken.push(to);
    return (this.first ??= current);
  }
}

/** One deployment resource, in whichever table. */
function sameRoute(a: Route, b: Route): boolean {
  return a === b || (a.id === b.id && a.resourceKind === b.resourceKind);
}
