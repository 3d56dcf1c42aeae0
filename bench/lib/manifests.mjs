// API keys and manifests for the benchmark, in the formats of SPEC §2 and §4.
import { createHash, randomBytes } from 'node:crypto';

/** A fresh key "<16-char prefix>.<secret>" and the fields of the Secret that stores its SHA-256. */
export function makeKey() {
  const prefix = randomBytes(12)
    .toString('base64')
    .replace(/[^A-Za-z0-9]/g, 'x')
    .slice(0, 16);
  const key = `${prefix}.${randomBytes(32).toString('base64url')}`;
  return { key, prefix, sha256: createHash('sha256').update(key).digest('hex') };
}

/** A ServingDeployment as a plain object: sklearn (predictive) unless `modelServer` says another, e.g. 'llm'. */
export function deploymentObject({ namespace, name, project, backend, modelServer = 'sklearn' }) {
  return {
    apiVersion: 'serving.servegate.dev/v1alpha1',
    kind: 'ServingDeployment',
    metadata: { name, namespace },
    spec: { ...(project ? { project } : {}), type: 'model', modelServer, backend },
  };
}

/** A key Secret (stringData) as a plain object; no namespace = the keys namespace (files source). */
export function keySecretObject({ name, namespace, prefix, sha256, projects }) {
  return {
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: { name, ...(namespace ? { namespace } : {}), labels: { 'serving.servegate.dev/api-key': 'true' } },
    type: 'Opaque',
    stringData: { prefix, sha256, projects },
  };
}
