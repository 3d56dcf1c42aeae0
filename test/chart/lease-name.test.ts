// Two releases of the chart in one namespace elect a status writer each: the default Lease name follows the release.
import { execFileSync } from 'node:child_process';
import { parseAllDocuments, parse as parseYaml } from 'yaml';
import { beforeAll, describe, expect, test } from '@jest/globals';
import { parseConfig } from '../../src/config/load.js';
import { CHART, ensureHelm } from '../support/helm.js';

let helm = '';
type Doc = { kind: string; metadata: { name: string }; [k: string]: any };

function render(release: string, ...args: string[]): Doc[] {
  const out = execFileSync(helm, ['template', release, CHART, '-n', 'servegate', ...args], { encoding: 'utf8' });
  return parseAllDocuments(out)
    .map((d) => d.toJSON() as Doc | null)
    .filter((d): d is Doc => !!d);
}

/** The Lease the rendered config elects on, and the Lease names its leader-election Role lets it get and update. */
function lease(docs: Doc[]): { config: string; granted: string[] } {
  const cm = docs.find((d) => d.kind === 'ConfigMap' && typeof d.data?.['config.yaml'] === 'string')!;
  const config = parseConfig(parseYaml(cm.data['config.yaml'] as string), { port: 0, namespace: 'servegate' });
  const role = docs.find((d) => d.kind === 'Role' && d.metadata.name.endsWith('-leader-election'))!;
  const granted = (role.rules as Array<{ verbs: string[]; resourceNames?: string[] }>)
    .filter((r) => r.verbs.includes('update'))
    .flatMap((r) => r.resourceNames ?? []);
  return { config: config.kubernetes.leaderElection.leaseName, granted };
}

beforeAll(() => {
  helm = ensureHelm();
}, 180_000);

describe('the leader-election Lease of a release', () => {
  test('two releases in one namespace elect on two Leases, each granted its own', () => {
    const a = lease(render('public'));
    const b = lease(render('internal'));
    expect(a.config).not.toBe(b.config);
    expect(a.granted).toEqual([a.config]);
    expect(b.granted).toEqual([b.config]);
    expect(a.config).toBe('public-servegate-controller');
  });

  test('the release named as docs/install.md names it keeps servegate-controller', () => {
    expect(lease(render('servegate'))).toEqual({ config: 'servegate-controller', granted: ['servegate-controller'] });
  });

  test('a lease name set by hand is used as written', () => {
    const l = lease(render('public', '--set', 'gateway.kubernetes.leaderElection.leaseName=shared-lease'));
    expect(l).toEqual({ config: 'shared-lease', granted: ['shared-lease'] });
  });
});

describe('the alerts on the status writer', () => {
  test('no replica leading, and every status write failing, are alerted on', () => {
    const docs = render('servegate', '--set', 'prometheusRule.enabled=true');
    const rules = (docs.find((d) => d.kind === 'PrometheusRule')!.spec.groups as Array<{ rules: Doc[] }>).flatMap(
      (g) => g.rules,
    );
    const byMetric = (m: string) => rules.filter((r) => String(r.expr).includes(m)).map((r) => r.alert);
    expect(byMetric('servegate_leader')).toEqual(['ServegateNoStatusWriter']);
    expect(byMetric('servegate_status_write_failures_total')).toEqual(['ServegateStatusWritesFailing']);
  });
});
