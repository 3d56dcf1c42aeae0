// Which fallback comes next (SPEC §12): routes are compared by resource, not by how spec.fallbacks wrote them, so a
// list that reaches the deployment itself or one deployment twice (a project's two forms, a table reloaded since)
// never calls a backend twice for one request.
import { expect, test } from '@jest/globals';
import { Fallbacks } from '../../../src/gateway/forward/fallback.js';
import type { Route } from '../../../src/routing/types.js';
import { apiKey, sdep } from '../../support/fixtures.js';
import { build } from '../../support/units.js';

test('the deployment itself and a deployment already tried are skipped, whichever form names them', () => {
  const { table } = build({
    deployments: [
      sdep('my-proj/chat').project('my_proj').llm().build(),
      sdep('my-proj/small').project('my_proj').llm().build(),
      sdep('my-proj/spare').project('my_proj').llm().build(),
    ],
    keySecrets: [apiKey('k', 'my_proj').secret],
  });
  const key = [...table.keys.values()][0][0];
  const byName = (n: string) => table.routes.find((r) => r.deployment === n)!;
  // A list the parser refuses (SPEC §12), as if it had got past it: only the route's identity can tell.
  const chat: Route = {
    ...byName('chat'),
    fallbacks: ['my-proj/chat', 'my_proj/chat', 'my_proj/small', 'my-proj/small', 'my-proj/spare'],
  };
  const f = new Fallbacks();
  const names: string[] = [];
  let current = chat;
  for (let to = f.peek(table, current, key); to; to = f.peek(table, current, key)) {
    f.take(current, to);
    names.push(to.deployment);
    current = to;
  }
  expect(names).toEqual(['small', 'spare']);
});
