// One-line fixture builders: sdep('demo/iris').sklearn().backend('iris-svc', 8080).build()
import { createHash, randomBytes } from 'node:crypto';
import type {
  KeySecretResource,
  ServingDeploymentResource,
  ServiceResource,
  Snapshot,
} from '../../src/routing/types.js';

let clock = Date.parse('2026-01-01T00:00:00Z');

export class SdepBuilder {
  private obj: ServingDeploymentResource;
  constructor(ref: string) {
    const [namespace, name] = ref.includes('/') ? ref.split('/') : ['default', ref];
    clock += 1000;
    this.obj = {
      apiVersion: 'serving.servegate.dev/v1alpha1',
      kind: 'ServingDeployment',
      metadata: {
        namespace,
        name,
        generation: 1,
        creationTimestamp: new Date(clock).toISOString(),
        uid: `uid-${namespace}-${name}`,
      },
      spec: { type: 'model', modelServer: 'sklearn', backend: { url: 'http://127.0.0.1:9' } },
    };
  }
  private get spec(): Record<string, unknown> {
    return this.obj.spec as Record<string, unknown>;
  }
  project(p: string): this {
    this.spec.project = p;
    return this;
  }
  model(server: 'python' | 'sklearn' | 'tensorflow' | 'llm'): this {
    this.spec.type = 'model';
    this.spec.modelServer = server;
    return this;
  }
  sklearn(): this {
    return this.model('sklearn');
  }
  tensorflow(): this {
    return this.model('tensorflow');
  }
  llm(): this {
    return this.model('llm');
  }
  pythonModel(): this {
    return this.model('python');
  }
  python(): this {
    this.spec.type = 'python';
    delete this.spec.modelServer;
    return this;
  }
  modelName(n: string): this {
    this.spec.modelName = n;
    return this;
  }
  backend(service: string, port: number): this {
    this.spec.backend = { service, port };
    return this;
  }
  url(url: string): this {
    this.spec.backend = { url };
    return this;
  }
  timeout(seconds: number): this {
    this.spec.timeoutSeconds = seconds;
    return this;
  }
  created(iso: string): this {
    this.obj.metadata.creationTimestamp = iso;
    return this;
  }
  generation(g: number): this {
    this.obj.metadata.generation = g;
    return this;
  }
  set(key: string, value: unknown): this {
    this.spec[key] = value;
    return this;
  }
  build(): ServingDeploymentResource {
    return structuredClone(this.obj);
  }
}

export const sdep = (ref: string) => new SdepBuilder(ref);

/** A fresh API key and the Secret that stores its hash. */
export function apiKey(
  name: string,
  projects: string,
  opts: { namespace?: string; expiresAt?: string } = {},
): { key: string; secret: KeySecretResource } {
  const prefix = randomBytes(12)
    .toString('base64')
    .replace(/[^A-Za-z0-9]/g, 'x')
    .slice(0, 16);
  const key = `${prefix}.${randomBytes(32).toString('base64url')}`;
  const data: Record<string, string> = {
    prefix,
    sha256: createHash('sha256').update(key).digest('hex'),
    projects,
  };
  if (opts.expiresAt) data.expiresAt = opts.expiresAt;
  return {
    key,
    secret: {
      metadata: { name, namespace: opts.namespace ?? 'servegate', labels: { 'serving.servegate.dev/api-key': 'true' } },
      data,
    },
  };
}

export function service(
  ref: string,
  ports: Array<{ port: number; name?: string; targetPort?: number | string }>,
): ServiceResource {
  const [namespace, name] = ref.split('/');
  return { metadata: { namespace, name }, ports };
}

export function snapshot(parts: Partial<Snapshot> = {}): Snapshot {
  return { source: 'files', deployments: [], inferenceServices: [], keySecrets: [], ...parts };
}

export const buildOptions = {
  publicUrl: 'https://models.example.com',
  serverlessDomain: 'serving.example.com',
  keysNamespace: 'servegate',
  defaultTimeoutMs: 60_000,
};
