// spec.backend.url with userinfo (files source): refused with InvalidSpec, whatever the userinfo is (a user, a password,
// or an empty one), and nothing the builder hands on (statuses: the status condition, /deployments, the admin page,
// the logs; the route table) ever carries it.
import { describe, expect, test } from '@jest/globals';
import { sdep } from '../support/fixtures.js';
import { build } from '../support/units.js';

// Every secret-looking part below contains "pass" (or the user "alice"), so one search over the output finds a leak.
const REFUSED = [
  ['a user and a password', 'http://alice:pass@127.0.0.1:8080'],
  ['an empty user and a password', 'http://:pass@127.0.0.1:8080'],
  ['a user without a password', 'http://alice@127.0.0.1:8080'],
  ['an empty userinfo', 'http://@127.0.0.1:8080'],
  ['an empty user and an empty password', 'http://:@127.0.0.1:8080'],
  ['userinfo and a path prefix', 'http://alice:pass@127.0.0.1:8080/openai/'],
  ['a percent-encoded password', 'http://alice:p%40ss%3Apass@127.0.0.1:8080'],
  ['an "@" in the password', 'http://alice:p@pass@127.0.0.1:8080'],
  ['upper-case scheme', 'HTTP://alice:pass@127.0.0.1:8080'],
  ['backslashes for slashes', 'http:\\\\alice:pass@127.0.0.1:8080'],
  ['no slashes at all', 'http:alice:pass@127.0.0.1:8080'],
  ['a tab inside the userinfo', 'http://ali\tce:pa\tss@127.0.0.1:8080'],
  ['leading spaces', '  http://alice:pass@127.0.0.1:8080'],
] as const;

// Refused for another reason; the message still must not echo the userinfo.
const REFUSED_OTHERWISE = [
  ['https with a password', 'https://alice:pass@127.0.0.1:8443'],
  ['a query and a password', 'http://alice:pass@127.0.0.1:8080/?a=b'],
  ['not a URL (bad port) with a password', 'http://alice:pass@127.0.0.1:99999'],
  ['not a URL (space in host) with a password', 'http://alice:pass@127.0 .0.1:8080'],
  ['no scheme at all', 'alice:pass@127.0.0.1:8080'],
] as const;

function buildOne(url: string, canary = false) {
  const d = canary
    ? sdep('demo/a').url('http://127.0.0.1:8080').set('canary', { backend: { url }, percent: 10 })
    : sdep('demo/a').url(url);
  return build({ deployments: [d.build()] });
}

describe('spec.backend.url with userinfo', () => {
  test.each(REFUSED)('%s (%s) → InvalidSpec, "must not carry credentials", nothing leaked', (_what, url) => {
    const r = buildOne(url);
    expect(r.statuses).toHaveLength(1);
    const s = r.statuses[0];
    expect(s).toMatchObject({ ready: false, reason: 'InvalidSpec' });
    expect(s.routed).toBeFalsy();
    expect(s.message).toMatch(
      /^spec\.backend\.url .*must not carry credentials \(a userinfo "user:secret@" before the host\)$/,
    );
    expect(r.table.routes).toEqual([]);
    const out = JSON.stringify(r);
    expect(out).not.toMatch(/pass|alice|ali\\tce|pa\\tss/);
  });

  test.each(REFUSED)('canary: %s (%s) → InvalidSpec naming spec.canary.backend.url, nothing leaked', (_what, url) => {
    const r = buildOne(url, true);
    const s = r.statuses[0];
    expect(s).toMatchObject({ ready: false, reason: 'InvalidSpec' });
    expect(s.message).toMatch(/^spec\.canary\.backend\.url .*must not carry credentials/);
    expect(JSON.stringify(r)).not.toMatch(/pass|alice|ali\\tce|pa\\tss/);
  });

  test.each(REFUSED_OTHERWISE)('%s (%s) → InvalidSpec, the message shows no userinfo', (_what, url) => {
    const r = buildOne(url);
    expect(r.statuses[0]).toMatchObject({ ready: false, reason: 'InvalidSpec' });
    expect(r.statuses[0].message).toMatch(/spec\.backend\.url/);
    expect(JSON.stringify(r)).not.toMatch(/pass|alice/);
  });

  test('the message shows the URL with its userinfo replaced by ***', () => {
    expect(buildOne('http://alice:pass@127.0.0.1:8080/openai').statuses[0].message).toContain(
      '"http://***@127.0.0.1:8080/openai"',
    );
  });

  test.each([
    ['an "@" in the path', 'http://127.0.0.1:8080/models/a@b', 'http://127.0.0.1:8080/models/a@b'],
    ['a plain URL', 'http://127.0.0.1:8080/', 'http://127.0.0.1:8080'],
  ])('still accepted: %s', (_what, url, kept) => {
    const r = buildOne(url);
    expect(r.statuses[0]).toMatchObject({ ready: true, reason: 'Routed' });
    expect(r.table.routes[0].backend).toEqual({ kind: 'url', url: kept });
  });
});
