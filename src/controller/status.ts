// The status a ServingDeployment should carry, computed from the builder's DeploymentStatus: pure, the clock passed in.
// Also: whether a write is needed (deep equality ignoring key order) and the merge patch that performs it.
import { formatTime, isObject } from '../kube/objects.js';
import type { DeploymentStatus } from '../routing/types.js';

export type ConditionStatus = 'True' | 'False' | 'Unknown';

/** The metav1.Condition shape. */
export interface Condition {
  type: string;
  status: ConditionStatus;
  observedGeneration?: number;
  lastTransitionTime: string;
  reason: string;
  message: string;
}

export interface ServingDeploymentStatus {
  observedGeneration?: number;
  project?: string;
  url?: string;
  inferenceUrl?: string;
  openaiUrl?: string;
  endpointUrl?: string;
  hostname?: string;
  conditions: Condition[];
}

export const READY = 'Ready';
export const HOSTNAME_ASSIGNED = 'HostnameAssigned';
/** HostnameAssigned reasons. */
export const HOSTNAME_REASONS = { assigned: 'Assigned', invalid: 'InvalidHostname' } as const;

/** metav1.Condition.message is at most 32768 characters. */
const MAX_MESSAGE = 32768;

export { formatTime };

/**
 * The desired status of one resource; `current` (as last read, possibly malformed) keeps a condition's
 * lastTransitionTime while its status is unchanged; `project` is shown by `kubectl get sdep`.
 */
export function desiredStatus(
  ds: DeploymentStatus,
  current: unknown,
  now: Date,
  extra: { project?: string } = {},
): ServingDeploymentStatus {
  const previous = currentConditions(current);
  const stamp = formatTime(now);
  const gen = ds.generation;
  const cond = (type: string, status: ConditionStatus, reason: string, message: string): Condition => {
    const prev = previous.get(type);
    const c: Condition = {
      type,
      status,
      lastTransitionTime:
        prev && prev.status === status && typeof prev.lastTransitionTime === 'string' && prev.lastTransitionTime
          ? prev.lastTransitionTime
          : stamp,
      reason,
      message: message.length > MAX_MESSAGE ? `${message.slice(0, MAX_MESSAGE - 3)}...` : message,
    };
    if (gen !== undefined) c.observedGeneration = gen;
    return c;
  };

  const status: ServingDeploymentStatus = { conditions: [] };
  if (gen !== undefined) status.observedGeneration = gen;
  if (extra.project) status.project = extra.project;
  // A served route (Ready, ScaledToZero, or NoReadyEndpoints) carries its URLs and hostname; a refused one does not.
  if (ds.ready || ds.routed) {
    if (ds.url) status.url = ds.url;
    if (ds.inferenceUrl) status.inferenceUrl = ds.inferenceUrl;
    if (ds.openaiUrl) status.openaiUrl = ds.openaiUrl;
    if (ds.endpointUrl) status.endpointUrl = ds.endpointUrl;
    if (ds.hostname) status.hostname = ds.hostname;
    status.conditions.push(
      cond(READY, ds.ready ? 'True' : 'False', ds.reason, ds.message || (ds.ready ? '' : ds.reason)),
    );
    if (ds.hostname) {
      status.conditions.push(
        cond(
          HOSTNAME_ASSIGNED,
          'True',
          HOSTNAME_REASONS.assigned,
          `requests with Host: ${ds.hostname} are routed here`,
        ),
      );
    } else if (ds.hostnameMessage) {
      status.conditions.push(cond(HOSTNAME_ASSIGNED, 'False', HOSTNAME_REASONS.invalid, ds.hostnameMessage));
    }
  } else {
    status.conditions.push(cond(READY, 'False', ds.reason, ds.message || ds.reason));
  }
  return status;
}

function currentConditions(current: unknown): Map<string, Partial<Condition>> {
  const m = new Map<string, Partial<Condition>>();
  if (!isObject(current) || !Array.isArray(current.conditions)) return m;
  for (const c of current.conditions) {
    if (isObject(c) && typeof c.type === 'string') m.set(c.type, c as Partial<Condition>);
  }
  return m;
}

/** True when `desired` differs from `current` (deep equality, object key order ignored, array order kept). */
export function statusNeedsWrite(desired: ServingDeploymentStatus, current: unknown): boolean {
  return !deepEqual(desired, current ?? {});
}

/** Every top-level status field servegate writes. */
const STATUS_FIELDS = [
  'observedGeneration',
  'project',
  'url',
  'inferenceUrl',
  'openaiUrl',
  'endpointUrl',
  'hostname',
  'conditions',
] as const;

/**
 * The JSON merge patch (RFC 7386) that turns the status into `desired`: every desired key, and null for each field
 * servegate writes that `desired` lacks and for each other top-level key of `current` (arrays such as conditions
 * are replaced whole). The fields servegate writes are nulled even when `current` lacks them: `current` may be a
 * version of the object from before a write of ours that added them (the watch lags), and the status would then
 * keep them (a Ready=False BackendNotFound with the URLs of the route it no longer is).
 */
export function statusMergePatch(
  desired: ServingDeploymentStatus,
  current: unknown,
): { status: Record<string, unknown> } {
  const patch: Record<string, unknown> = { ...desired };
  for (const k of STATUS_FIELDS) if (!(k in patch)) patch[k] = null;
  if (isObject(current)) {
    for (const k of Object.keys(current)) if (!(k in patch)) patch[k] = null;
  }
  return { status: patch };
}

export function deepEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (Array.isArray(a)) {
    if (!Array.isArray(b) || a.length !== b.length) return false;
    return a.every((x, i) => deepEqual(x, b[i]));
  }
  if (isObject(a)) {
    if (!isObject(b)) return false;
    const ka = Object.keys(a).filter((k) => a[k] !== undefined);
    const kb = Object.keys(b).filter((k) => b[k] !== undefined);
    if (ka.length !== kb.length) return false;
    return ka.every((k) => Object.prototype.hasOwnProperty.call(b, k) && deepEqual(a[k], b[k]));
  }
  return false;
}
