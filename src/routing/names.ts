// Name rules shared by the builder, the gateway, the CLI and the client — one home for each: DNS names, project and
// model names, API-key formats, project forms, hostnames, deployment URLs.
import type { ModelServer, RouteKind } from './kinds.js';
import type { ApiKeyRecord } from './types.js';
export { MODEL_SERVERS } from './kinds.js';

/** DNS-1123 label (namespaces, Service and deployment names): also at most 63 characters, see isDnsLabel. */
export const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
/** DNS-1123 subdomain (Secret names): also at most 253 characters, see isDnsSubdomain. */
export const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
/** An API key's prefix: 16 characters [A-Za-z0-9] (SPEC §4). */
export const KEY_PREFIX = /^[A-Za-z0-9]{16}$/;
/** A whole API key `<prefix>.<secret>` (SPEC §4): a secret of 32+ visible ASCII characters (base64url, or any). */
export const API_KEY = /^([A-Za-z0-9]{16})\.([\x21-\x7e]{32,})$/;
/** What a key Secret stores: the lowercase hex SHA-256 of the whole key. */
export const KEY_SHA256 = /^[0-9a-f]{64}$/;
/** Project names as they may appear in a URL path segment. */
export const PROJECT_NAME = /^[A-Za-z0-9]([A-Za-z0-9_-]*[A-Za-z0-9])?$/;
/** Model names as they may appear in `/v1/models/<name>:<verb>`. */
export const MODEL_NAME = /^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$/;
/** Names an LLM server may serve (`meta-llama/Llama-3.1-8B`, `llama3:8b`, a path): written into `model` (SPEC §9). */
export const SERVED_MODEL_NAME = /^[A-Za-z0-9_.:/@+-]+$/;

export function isDnsLabel(s: string): boolean {
  return s.length > 0 && s.length <= 63 && DNS_LABEL.test(s);
}

export function isDnsSubdomain(s: string): boolean {
  return s.length > 0 && s.length <= 253 && DNS_SUBDOMAIN.test(s);
}

/** The namespace form of a project name: lower case, every character outside a-z0-9- turned into '-'. */
export function projectNamespaceForm(project: string): string {
  return project.toLowerCase().replace(/[^a-z0-9-]/g, '-');
}

/**
 * Does the key grant this project (either form) and, for a scoped key, namespace? With no route a scoped key grants
 * only the project named like its namespace, so elsewhere it gets 403, not a 404 that would tell what exists.
 */
export function grantsProject(record: ApiKeyRecord, projectSegment: string, routeNamespace?: string): boolean {
  if (record.scopeNamespace !== undefined) {
    const ns = routeNamespace ?? projectNamespaceForm(projectSegment);
    if (ns !== record.scopeNamespace) return false;
  }
  if (record.projects === '*') return true;
  return record.projects.has(projectNamespaceForm(projectSegment));
}

/** The project's label in legacy hostnames: lower case, '_' turned into '-'. */
export function projectHostLabel(project: string): string {
  return project.toLowerCase().replace(/_/g, '-');
}

/** `<deployment>.<project>.<domain>`, or the reason there is none. */
export function legacyHostname(
  project: string,
  deployment: string,
  serverlessDomain: string,
): { hostname: string } | { error: string } {
  const label = projectHostLabel(project);
  if (!isDnsLabel(label)) {
    return {
      error: `project "${project}" does not form a valid DNS label ("${label}"), so the deployment has no legacy hostname`,
    };
  }
  const hostname = `${deployment}.${label}.${serverlessDomain}`;
  if (hostname.length > 253) return { error: `hostname "${hostname}" is longer than 253 characters` };
  return { hostname };
}

export const VERBS: Record<ModelServer, readonly string[]> = {
  python: ['predict'],
  sklearn: ['predict'],
  tensorflow: ['predict', 'classify', 'regress'],
  llm: [],
};

export function routeKindOf(type: 'model' | 'python', modelServer?: ModelServer): RouteKind {
  if (type === 'python') return 'python';
  return modelServer === 'llm' ? 'llm' : 'predictive';
}

export interface DeploymentUrls {
  url: string;
  inferenceUrl?: string;
  openaiUrl?: string;
  endpointUrl?: string;
}

/** The URLs of a deployment, exactly as docs/spec.md §2 gives them. */
export function deploymentUrls(
  publicUrl: string,
  project: string,
  deployment: string,
  kind: RouteKind,
  modelName?: string,
  protocol: 'v1' | 'v2' = 'v1',
): DeploymentUrls {
  const url = `${publicUrl.replace(/\/+$/, '')}/v1/${project}/${deployment}`;
  switch (kind) {
    case 'predictive':
      return protocol === 'v2'
        ? { url, inferenceUrl: `${url}/v2/models/${modelName ?? deployment}/infer` }
        : { url, inferenceUrl: `${url}/v1/models/${modelName}:predict` };
    case 'llm':
      return { url, openaiUrl: `${url}/v1` };
    case 'python':
      return { url, endpointUrl: url };
  }
}
