// The Helm chart without a helm binary: values vs values.schema.json (ajv), the `gateway:` values vs the real config
// schema (parseConfig and zod's own JSON Schema), template references, CRDs, RBAC vs docs/rbac.md, Dockerfile.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import AjvModule from 'ajv';
const Ajv = AjvModule as unknown as typeof AjvModule.default;
import { describe, test } from '@jest/globals';
import { expect } from '../support/expect.js';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { parseConfig } from '../../src/config/load.js';
import { configSchema } from '../../src/config/schema.js';

const ROOT = new URL('../..', import.meta.url).pathname;
const CHART = join(ROOT, 'charts/servegate');
const read = (p: string) => readFileSync(join(ROOT, p), 'utf8');

type Json = Record<string, any>;
const values = parseYaml(read('charts/servegate/values.yaml')) as Json;
const schema = JSON.parse(read('charts/servegate/values.schema.json')) as Json;
const chart = parseYaml(read('charts/servegate/Chart.yaml')) as Json;
const ajv = new Ajv({ allErrors: true, strict: false });
const validateValues = ajv.compile(schema);
const validateGateway = ajv.compile({ $schema: schema.$schema, ...schema.properties.gateway });

const templateFiles = readdirSync(join(CHART, 'templates')).sort();
const templates = Object.fromEntries(templateFiles.map((f) => [f, read(`charts/servegate/templates/${f}`)]));

/** values with `patch` merged in (objects merged, everything else replaced), as `helm --set` does. */
function withValues(patch: Json, base: Json = values): Json {
  const out: Json = structuredClone(base);
  for (const [k, v] of Object.entries(patch)) {
    out[k] =
      v && typeof v === 'object' && !Array.isArray(v) && out[k] && typeof out[k] === 'object'
        ? withValues(v, out[k])
        : v;
  }
  return out;
}

function configOk(doc: unknown): boolean {
  try {
    parseConfig(doc, { port: 8080, namespace: 'servegate' });
    return true;
  } catch {
    return false;
  }
}

describe('Chart.yaml', () => {
  test('is a v2 application chart whose appVersion is the package version', () => {
    const pkg = JSON.parse(read('package.json'));
    expect(chart).toMatchObject({ apiVersion: 'v2', name: 'servegate', type: 'application' });
    expect(chart.appVersion).toBe(pkg.version);
    expect(chart.version).toMatch(/^\d+\.\d+\.\d+/);
  });
});

describe('values.yaml and values.schema.json', () => {
  test('the schema is draft-07 and the shipped values validate against it', () => {
    expect(schema.$schema).toBe('http://json-schema.org/draft-07/schema#');
    expect(validateValues(values), ajv.errorsText(validateValues.errors)).toBe(true);
  });

  test.each<[string, Json]>([
    ['an origin that is not a URL', { gateway: { cors: { allowedOrigins: ['app.example.com'] } } }],
    ['an origin with a path', { gateway: { cors: { allowedOrigins: ['https://app.example.com/'] } } }],
    ['origins given as a string, not a list', { gateway: { cors: { allowedOrigins: 'https://app.example.com' } } }],
    ['a negative body limit', { gateway: { limits: { maxRequestBodyBytes: -1 } } }],
    ['a fractional body limit', { gateway: { limits: { maxRequestBodyBytes: 1.5 } } }],
    ['a zero request timeout', { gateway: { limits: { requestTimeoutSeconds: 0 } } }],
    ['an unknown gateway key', { gateway: { corsOrigins: ['*'] } }],
    ['an unknown key under gateway.cors', { gateway: { cors: { origins: ['*'] } } }],
    ['an unknown log level', { gateway: { logLevel: 'verbose' } }],
    ['a publicUrl without a scheme', { gateway: { publicUrl: 'models.example.com' } }],
    ['an empty publicUrl', { gateway: { publicUrl: '' } }],
    ['a drain time of zero', { gateway: { shutdown: { drainSeconds: 0 } } }],
    ['a Service type of ExternalName', { service: { type: 'ExternalName' } }],
    ['a port above 65535', { service: { port: 70000 } }],
    ['a negative replica count', { replicaCount: -1 }],
    ['an unknown pull policy', { image: { pullPolicy: 'Sometimes' } }],
    ['an unknown top-level key', { replicas: 3 }],
    ['a CPU target above 100%', { autoscaling: { targetCPUUtilizationPercentage: 150 } }],
    ['a malformed image digest', { image: { digest: 'latest' } }],
    ['a scrape interval without a unit', { serviceMonitor: { interval: '30' } }],
  ])('%s is rejected', (_, patch) => {
    expect(validateValues(withValues(patch))).toBe(false);
  });

  test.each<[string, Json]>([
    [
      'CORS origins, exact, wildcard and any',
      {
        gateway: {
          cors: { allowedOrigins: ['https://app.example.com', 'https://*.example.org', 'http://localhost:3000'] },
        },
      },
    ],
    ['a public URL', { gateway: { publicUrl: 'https://models.example.com' } }],
    [
      'a LoadBalancer with a node port',
      { service: { type: 'LoadBalancer', nodePort: 30080, externalTrafficPolicy: 'Local' } },
    ],
    ['autoscaling with a memory target', { autoscaling: { enabled: true, targetMemoryUtilizationPercentage: 80 } }],
    ['a PDB by percentage', { podDisruptionBudget: { maxUnavailable: '50%' } }],
    ['a parent chart global', { global: { imageRegistry: 'r.example.com' } }],
    [
      'watched namespaces and kserve',
      { gateway: { kubernetes: { namespaces: ['team-a'], kserve: { enabled: true } } } },
    ],
  ])('%s is accepted', (_, patch) => {
    const v = withValues(patch);
    expect(validateValues(v), ajv.errorsText(validateValues.errors)).toBe(true);
  });
});

describe('gateway: is the configuration schema (src/config/schema.ts)', () => {
  test('values.gateway is accepted by parseConfig', () => {
    const { secretName: _chartOnly, ...tls } = values.gateway.tls;
    expect(() => parseConfig({ ...values.gateway, tls }, { port: 8080, namespace: 'servegate' })).not.toThrow();
  });

  test('values.gateway holds every key of the configuration with its default (publicUrl, whose default is computed, aside)', () => {
    const defaults = configSchema.parse({}) as Json;
    expect(defaults.publicUrl).toBeUndefined();
    // gateway.tls.secretName is the one chart-only key (SPEC §11): the chart turns it into certFile/keyFile.
    expect(values.gateway.tls.secretName).toBe('');
    const { secretName: _chartOnly, ...tls } = values.gateway.tls;
    expect({ ...values.gateway, tls }).toEqual(defaults);
  });

  test("the schema's gateway part has the same keys, types and bounds as the configuration schema", () => {
    const zodJson = z.toJSONSchema(configSchema, { target: 'draft-7', io: 'input', unrepresentable: 'any' }) as Json;
    const diffs: string[] = [];
    const walk = (want: Json, got: Json, path: string) => {
      if (!got) return void diffs.push(`${path}: missing in values.schema.json`);
      if (want.type !== got.type)
        diffs.push(`${path}: type ${JSON.stringify(got.type)} != ${JSON.stringify(want.type)}`);
      for (const k of ['minimum', 'exclusiveMinimum', 'enum', 'pattern', 'minLength'] as const) {
        if (want[k] !== undefined && JSON.stringify(want[k]) !== JSON.stringify(got[k]))
          diffs.push(`${path}: ${k} ${JSON.stringify(got[k])} != ${JSON.stringify(want[k])}`);
      }
      if (want.type === 'object' && typeof want.additionalProperties === 'object') {
        // A map (limits.projects): its values are checked as one object.
        if (typeof got.additionalProperties !== 'object')
          diffs.push(`${path}: its values must have a schema (additionalProperties)`);
        else walk(want.additionalProperties, got.additionalProperties, `${path}.*`);
      } else if (want.type === 'object') {
        if (got.additionalProperties !== false)
          diffs.push(`${path}: unknown keys must be refused (additionalProperties: false)`);
        const wk = Object.keys(want.properties ?? {}).sort();
        const gk = Object.keys(got.properties ?? {}).sort();
        if (JSON.stringify(wk) !== JSON.stringify(gk)) diffs.push(`${path}: keys ${gk.join(',')} != ${wk.join(',')}`);
        for (const k of wk) walk(want.properties[k], got.properties?.[k], `${path}.${k}`);
      }
      if (want.type === 'array') walk(want.items, got.items, `${path}[]`);
    };
    const gatewaySchema = structuredClone(schema.properties.gateway);
    delete gatewaySchema.properties.tls.properties.secretName; // chart only (SPEC §11)
    walk(zodJson, gatewaySchema, 'gateway');
    expect(diffs).toEqual([]);
  });

  const docs: Array<[string, Json]> = [
    ['an empty document', {}],
    ['a public URL', { publicUrl: 'https://models.example.com' }],
    ['a public URL with a port and a path', { publicUrl: 'http://10.0.0.1:8080/serving' }],
    ['a public URL with a query', { publicUrl: 'https://x.example.com/?a=1' }],
    ['an empty public URL', { publicUrl: '' }],
    ['an ftp public URL', { publicUrl: 'ftp://x.example.com' }],
    ['a lower-case serverless domain', { serverlessDomain: 'serving.example.com' }],
    ['an upper-case serverless domain', { serverlessDomain: 'Serving.example.com' }],
    ['origin "*"', { cors: { allowedOrigins: ['*'] } }],
    ['exact and wildcard origins', { cors: { allowedOrigins: ['https://*.example.com', 'http://localhost:3000'] } }],
    ['an origin without a scheme', { cors: { allowedOrigins: ['example.com'] } }],
    ['an origin with a trailing slash', { cors: { allowedOrigins: ['https://example.com/'] } }],
    ['an origin with a 6-digit port', { cors: { allowedOrigins: ['https://example.com:123456'] } }],
    ['origins as a string', { cors: { allowedOrigins: 'https://example.com' } }],
    ['a negative max age', { cors: { maxAgeSeconds: -1 } }],
    ['a fractional max age', { cors: { maxAgeSeconds: 1.5 } }],
    ['an empty allowed header', { cors: { allowedHeaders: [''] } }],
    ['a keys namespace', { auth: { keysNamespace: 'keys' } }],
    ['a fractional timeout', { limits: { requestTimeoutSeconds: 0.5 } }],
    ['a zero body limit', { limits: { maxRequestBodyBytes: 0 } }],
    ['a negative rate', { limits: { rateLimitPerKey: -1 } }],
    ['a fractional rate and a burst', { limits: { rateLimitPerKey: 2.5, rateLimitBurst: 10 } }],
    ['an unknown limit', { limits: { maxHeaders: 10 } }],
    ['an unknown top-level key', { tls: true }],
    ['a string for a boolean', { trustForwardedHeaders: 'yes' }],
    ['watched namespaces and kserve', { kubernetes: { namespaces: ['a', 'b'], kserve: { enabled: true } } }],
    ['an empty namespace name', { kubernetes: { namespaces: [''] } }],
    ['a zero lease duration', { kubernetes: { leaderElection: { leaseDurationSeconds: 0 } } }],
    ['an empty lease name', { kubernetes: { leaderElection: { leaseName: '' } } }],
    ['no accept time and a short drain', { shutdown: { drainSeconds: 5, acceptSeconds: 0 } }],
    ['a negative drain', { shutdown: { drainSeconds: -1 } }],
    ['log level debug', { logLevel: 'debug' }],
    ['an unknown log level', { logLevel: 'loud' }],
  ];
  test.each(docs)('values.schema.json and parseConfig agree on %s', (_, doc) => {
    const bySchema = validateGateway(doc);
    expect(bySchema, ajv.errorsText(validateGateway.errors)).toBe(configOk(doc));
  });

  test('the agreement table has both accepted and refused documents', () => {
    const verdicts = docs.map(([, d]) => configOk(d));
    expect(verdicts.filter(Boolean).length).toBeGreaterThan(5);
    expect(verdicts.filter((v) => !v).length).toBeGreaterThan(5);
  });
});

describe('templates', () => {
  /** Paths under .Values that are optional and documented as commented-out keys in values.yaml. */
  const OPTIONAL = new Set(['gateway.publicUrl']);

  test('every .Values path a template uses exists in values.yaml', () => {
    const missing: string[] = [];
    for (const [file, text] of Object.entries(templates)) {
      for (const m of text.matchAll(/\.Values((?:\.[A-Za-z0-9_]+)+)/g)) {
        const path = m[1].slice(1);
        let node: unknown = values;
        let ok = true;
        for (const part of path.split('.')) {
          if (node && typeof node === 'object' && part in (node as Json)) node = (node as Json)[part];
          else {
            ok = false;
            break;
          }
        }
        if (!ok && !OPTIONAL.has(path)) missing.push(`${file}: .Values.${path}`);
      }
    }
    expect(missing).toEqual([]);
    for (const p of OPTIONAL) {
      const [a, b] = p.split('.');
      expect(schema.properties[a].properties[b], `${p} in values.schema.json`).toBeDefined();
      expect(read('charts/servegate/values.yaml')).toContain(`# ${b}:`);
    }
  });

  test('every template file is one the chart expects (nothing stray, nothing missing)', () => {
    expect(templateFiles).toEqual([
      'NOTES.txt',
      '_helpers.tpl',
      '_rbac.tpl',
      'configmap.yaml',
      'dashboards.yaml',
      'deployment.yaml',
      'hpa.yaml',
      'httproute.yaml',
      'ingress.yaml',
      'networkpolicy.yaml',
      'pdb.yaml',
      'prometheusrule.yaml',
      'rbac.yaml',
      'service.yaml',
      'serviceaccount.yaml',
      'servicemonitor.yaml',
    ]);
  });

  test('the ConfigMap is .Values.gateway rendered as the config file, and its hash rolls the pods', () => {
    expect(templates['_helpers.tpl']).toMatch(
      /define "servegate.config" -\}\}\n\{\{- \$g := deepCopy \.Values\.gateway \}\}/,
    );
    expect(templates['configmap.yaml']).toContain(
      'config.yaml: |\n    {{- include "servegate.config" . | nindent 4 }}',
    );
    expect(templates['deployment.yaml']).toContain('checksum/config: {{ include "servegate.config" . | sha256sum }}');
  });

  test('the Deployment runs serve --kubernetes with the mounted config, probes on admin, downward-API env', () => {
    const d = templates['deployment.yaml'];
    expect(d).toMatch(/args:\n\s+- serve\n\s+- --kubernetes\n\s+- --config\n\s+- \/etc\/servegate\/config.yaml/);
    expect(d).toMatch(/mountPath: \/etc\/servegate\n/);
    expect(d).toMatch(/readinessProbe:\n\s+httpGet:\n\s+path: \/readyz\n\s+port: admin/);
    expect(d).toMatch(/livenessProbe:\n\s+httpGet:\n\s+path: \/healthz\n\s+port: admin/);
    expect(d).toMatch(/name: POD_NAMESPACE\n\s+valueFrom:\n\s+fieldRef:\n\s+fieldPath: metadata.namespace/);
    expect(d).toMatch(/name: POD_NAME\n\s+valueFrom:\n\s+fieldRef:\n\s+fieldPath: metadata.name/);
    expect(d).toMatch(/containerPort: \{\{ \.Values\.containerPorts\.http \}\}/);
    expect(d).toMatch(/containerPort: \{\{ \.Values\.containerPorts\.admin \}\}/);
    expect(values.containerPorts).toEqual({ http: 8080, admin: 9090 });
    expect(d).toContain('terminationGracePeriodSeconds: {{ include "servegate.terminationGracePeriodSeconds" . }}');
    expect(templates['_helpers.tpl']).toContain(
      'add (int .Values.preStopSleepSeconds) (int (ceil .Values.gateway.shutdown.drainSeconds)) 5',
    );
    expect(d).toMatch(/preStop:\n\s+exec:\n\s+command: \["sleep", \{\{ \.Values\.preStopSleepSeconds \| quote \}\}\]/);
    expect(d).toContain('readOnly: true');
    expect(d).toMatch(/name: tmp\n\s+mountPath: \/tmp/);
  });

  test('the default security settings are non-root, read-only root, no capabilities, RuntimeDefault seccomp', () => {
    expect(values.podSecurityContext).toMatchObject({
      runAsNonRoot: true,
      runAsUser: 65532,
      seccompProfile: { type: 'RuntimeDefault' },
    });
    expect(values.securityContext).toMatchObject({
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      capabilities: { drop: ['ALL'] },
    });
    expect(templates['deployment.yaml']).toContain('{{- toYaml .Values.podSecurityContext | nindent 8 }}');
    expect(templates['deployment.yaml']).toContain('{{- toYaml .Values.securityContext | nindent 12 }}');
  });

  test('the Service type comes from values; the admin port is on its own ClusterIP Service', () => {
    expect(templates['service.yaml']).toContain('type: {{ .Values.service.type }}');
    expect(schema.properties.service.properties.type.enum).toEqual(['ClusterIP', 'NodePort', 'LoadBalancer']);
    const [, admin] = templates['service.yaml'].split('\n---\n');
    expect(admin).toContain('type: ClusterIP');
    expect(admin).toContain('name: admin');
  });
});

describe('CRDs', () => {
  test('charts/servegate/crds is identical to the top-level crds/', () => {
    const top = readdirSync(join(ROOT, 'crds'))
      .filter((f) => /\.ya?ml$/.test(f))
      .sort();
    const inChart = readdirSync(join(CHART, 'crds')).sort();
    expect(top.length).toBeGreaterThan(0);
    expect(inChart).toEqual(top);
    for (const f of top) expect(read(`charts/servegate/crds/${f}`), f).toBe(read(`crds/${f}`));
  });
});

describe('RBAC equals docs/rbac.md', () => {
  type Rule = { apiGroups: string[]; resources: string[]; verbs: string[]; resourceNames?: string[] };
  const flat = (rules: Rule[]) =>
    rules
      .flatMap((r) =>
        r.apiGroups.flatMap((g) =>
          r.resources.flatMap((res) =>
            r.verbs.flatMap((v) => (r.resourceNames ?? ['']).map((n) => `${g}|${res}|${v}|${n}`)),
          ),
        ),
      )
      .sort();

  /** The rules of a `define` in _rbac.tpl, with template actions removed and the lease name at its default. */
  function definedRules(name: string): Rule[] {
    const text = templates['_rbac.tpl'];
    const m = new RegExp(
      `\\{\\{- define "${name.replace(/\./g, '\\.')}" -\\}\\}\\n([\\s\\S]*?)\\{\\{- end \\}\\}\\n(?:\\n|$)`,
    ).exec(text);
    if (!m) throw new Error(`no define "${name}" in _rbac.tpl`);
    const body = m[1]
      .split('\n')
      .filter((l) => !/^\s*\{\{.*\}\}\s*$/.test(l))
      .join('\n')
      .replace(
        '{{ include "servegate.leaseName" . | quote }}',
        JSON.stringify(values.gateway.kubernetes.leaderElection.leaseName),
      );
    expect(body).not.toContain('{{');
    return parseYaml(body) as Rule[];
  }

  /** Rows of the first markdown table after a heading that starts with `heading`. */
  function docTable(heading: string): string[][] {
    const doc = read('docs/rbac.md');
    const start = doc.indexOf(`\n## ${heading}`);
    expect(start, `docs/rbac.md has a "## ${heading}" section`).toBeGreaterThan(0);
    const lines = doc.slice(start).split('\n');
    const first = lines.findIndex((l) => l.startsWith('|'));
    const rows: string[][] = [];
    for (const l of lines.slice(first + 2)) {
      if (!l.startsWith('|')) break;
      rows.push(
        l
          .split('|')
          .slice(1, -1)
          .map((c) => c.trim()),
      );
    }
    return rows;
  }
  const ticks = (cell: string) => [...cell.matchAll(/`([^`]*)`/g)].map((m) => m[1]);
  const group = (cell: string) => {
    const g = ticks(cell)[0];
    return g === '""' ? '' : g;
  };

  test('the watch rules (ClusterRole, or Role per watched namespace) are the ClusterRole table', () => {
    const documented = docTable('ClusterRole').map((r) => ({
      apiGroups: [group(r[0])],
      resources: ticks(r[1]),
      verbs: ticks(r[2]),
    }));
    expect(documented.length).toBeGreaterThanOrEqual(5);
    expect(flat(definedRules('servegate.rbac.watchRules'))).toEqual(flat(documented));
  });

  test('the leader-election Role is the Role table, with the lease name from values', () => {
    const documented = docTable('Role in the gateway').map((r) => {
      const def = /default `([^`]+)`/.exec(r[3]);
      return {
        apiGroups: [group(r[0])],
        resources: ticks(r[1]),
        verbs: ticks(r[2]),
        ...(def ? { resourceNames: [def[1]] } : {}),
      };
    });
    expect(documented.length).toBeGreaterThanOrEqual(2);
    expect(flat(definedRules('servegate.rbac.leaderElectionRules'))).toEqual(flat(documented));
  });

  test('the keys-namespace Role is the keys-namespace table, a subset of the watch rules', () => {
    const watch = new Set(flat(definedRules('servegate.rbac.watchRules')));
    const keys = flat(definedRules('servegate.rbac.keyRules'));
    expect(keys).toEqual(['|secrets|list|', '|secrets|watch|']);
    const documented = docTable('Role in the keys namespace').map((r) => ({
      apiGroups: [group(r[0])],
      resources: ticks(r[1]),
      verbs: ticks(r[2]),
    }));
    expect(keys).toEqual(flat(documented));
    for (const k of keys) expect(watch.has(k)).toBe(true);
  });

  test('project-namespace Secrets only with rbac.projectNamespaceKeys, kserve only when enabled, leader election only when enabled', () => {
    expect(templates['_rbac.tpl']).toMatch(
      /\{\{- if \.Values\.rbac\.projectNamespaceKeys \}\}\n- apiGroups: \[""\]\n {2}resources: \[secrets\]/,
    );
    expect(templates['_rbac.tpl']).toMatch(
      /\{\{- if \.Values\.gateway\.kubernetes\.kserve\.enabled \}\}\n- apiGroups: \[serving\.kserve\.io\]/,
    );
    expect(templates['rbac.yaml']).toMatch(
      /\{\{- if \.Values\.gateway\.kubernetes\.leaderElection\.enabled \}\}\n---\napiVersion: rbac.authorization.k8s.io\/v1\nkind: Role/,
    );
  });

  test('rbac.yaml places exactly these rule sets and no others', () => {
    const rbac = templates['rbac.yaml'];
    expect(rbac).not.toMatch(/^\s*- apiGroups:/m);
    expect([...rbac.matchAll(/include "(servegate\.rbac\.[A-Za-z]+)"/g)].map((m) => m[1]).sort()).toEqual([
      'servegate.rbac.keyRules',
      'servegate.rbac.keyRules',
      'servegate.rbac.leaderElectionRules',
      'servegate.rbac.watchRules',
      'servegate.rbac.watchRules',
    ]);
  });
});
