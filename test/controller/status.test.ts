import { describe, expect, test } from '@jest/globals';
import { buildRouteTable } from '../../src/routing/build.js';
import type { DeploymentStatus } from '../../src/routing/types.js';
import {
  deepEqual,
  desiredStatus,
  formatTime,
  statusMergePatch,
  statusNeedsWrite,
} from '../../src/controller/status.js';
import { buildOptions, sdep, service, snapshot } from '../support/fixtures.js';

const T0 = new Date('2026-03-01T10:00:00.123Z');
const T1 = new Date('2026-03-01T11:30:00Z');

function routed(overrides: Partial<DeploymentStatus> = {}): DeploymentStatus {
  return {
    id: 'fraud-detection/fraud',
    namespace: 'fraud-detection',
    name: 'fraud',
    resourceKind: 'ServingDeployment',
    generation: 3,
    url: 'https://models.example.com/v1/fraud_detection/fraud',
    inferenceUrl: 'https://models.example.com/v1/fraud_detection/fraud/v1/models/fraud:predict',
    hostname: 'fraud.fraud-detection.serving.example.com',
    ready: true,
    reason: 'Routed',
    message: '',
    ...overrides,
  };
}

function rejected(reason: DeploymentStatus['reason'], message: string): DeploymentStatus {
  return {
    id: 'ns/x',
    namespace: 'ns',
    name: 'x',
    resourceKind: 'ServingDeployment',
    generation: 2,
    ready: false,
    reason,
    message,
  };
}

describe('desiredStatus', () => {
  test('a routed deployment gets its URLs, hostname, observedGeneration and Ready=True/Routed', () => {
    const s = desiredStatus(routed(), undefined, T0, { project: 'fraud_detection' });
    expect(s).toEqual({
      observedGeneration: 3,
      project: 'fraud_detection',
      url: 'https://models.example.com/v1/fraud_detection/fraud',
      inferenceUrl: 'https://models.example.com/v1/fraud_detection/fraud/v1/models/fraud:predict',
      hostname: 'fraud.fraud-detection.serving.example.com',
      conditions: [
        {
          type: 'Ready',
          status: 'True',
          reason: 'Routed',
          message: '',
          observedGeneration: 3,
          lastTransitionTime: '2026-03-01T10:00:00Z',
        },
        {
          type: 'HostnameAssigned',
          status: 'True',
          reason: 'Assigned',
          message: 'requests with Host: fraud.fraud-detection.serving.example.com are routed here',
          observedGeneration: 3,
          lastTransitionTime: '2026-03-01T10:00:00Z',
        },
      ],
    });
  });

  test.each([
    ['InvalidSpec', 'spec.type must be "model" or "python", got "x"'],
    ['Conflict', 'fraud_detection/fraud is already served by ServingDeployment a/fraud, which is older'],
    ['BackendNotFound', 'Service ns/svc not found'],
  ] as const)('a rejected deployment gets Ready=False with reason %s, its message, and no URLs', (reason, message) => {
    const s = desiredStatus(rejected(reason, message), { url: 'https://old', hostname: 'old.example' }, T0);
    expect(s).toEqual({
      observedGeneration: 2,
      conditions: [
        {
          type: 'Ready',
          status: 'False',
          reason,
          message,
          observedGeneration: 2,
          lastTransitionTime: '2026-03-01T10:00:00Z',
        },
      ],
    });
  });

  test('a project that forms no DNS label gives HostnameAssigned=False with the reason why', () => {
    const s = desiredStatus(
      routed({ hostname: undefined, hostnameMessage: 'project "A_b" does not form a valid DNS label' }),
      undefined,
      T0,
    );
    expect(s.hostname).toBeUndefined();
    expect(s.conditions.find((c) => c.type === 'HostnameAssigned')).toMatchObject({
      status: 'False',
      reason: 'InvalidHostname',
      message: 'project "A_b" does not form a valid DNS label',
    });
    expect(s.conditions.find((c) => c.type === 'Ready')?.status).toBe('True');
  });

  test.each([
    {
      name: 'status unchanged keeps lastTransitionTime',
      before: 'True',
      ready: true,
      expected: '2025-12-24T08:00:00Z',
    },
    {
      name: 'status flipped True→False takes the new time',
      before: 'True',
      ready: false,
      expected: '2026-03-01T11:30:00Z',
    },
    {
      name: 'status flipped False→True takes the new time',
      before: 'False',
      ready: true,
      expected: '2026-03-01T11:30:00Z',
    },
    {
      name: 'status unchanged False keeps lastTransitionTime even when the reason changes',
      before: 'False',
      ready: false,
      expected: '2025-12-24T08:00:00Z',
    },
  ])('$name', ({ before, ready, expected }) => {
    const current = {
      conditions: [
        {
          type: 'Ready',
          status: before,
          reason: before === 'True' ? 'Routed' : 'Conflict',
          message: 'm',
          lastTransitionTime: '2025-12-24T08:00:00Z',
        },
      ],
    };
    const ds = ready ? routed() : rejected('BackendNotFound', 'gone');
    const s = desiredStatus(ds, current, T1);
    expect(s.conditions.find((c) => c.type === 'Ready')?.lastTransitionTime).toBe(expected);
  });

  test('a malformed current status is treated as none', () => {
    for (const current of [null, 'x', 42, { conditions: 'nope' }, { conditions: [null, 1, { status: 'True' }] }]) {
      expect(desiredStatus(routed(), current, T0).conditions[0].lastTransitionTime).toBe('2026-03-01T10:00:00Z');
    }
  });

  test('an over-long message is cut to the 32768 characters metav1.Condition allows', () => {
    const s = desiredStatus(rejected('InvalidSpec', 'x'.repeat(40_000)), undefined, T0);
    expect(s.conditions[0].message.length).toBe(32768);
  });

  test('statuses straight from the builder: LLM gets openaiUrl, python gets endpointUrl, missing Service is BackendNotFound', () => {
    const snap = snapshot({
      source: 'kubernetes',
      deployments: [
        sdep('demo/chat').llm().backend('chat', 8000).build(),
        sdep('demo/app').python().backend('app', 8080).build(),
        sdep('demo/iris').sklearn().backend('nope', 80).build(),
      ],
      services: [service('demo/chat', [{ port: 8000 }]), service('demo/app', [{ port: 8080 }])],
    });
    const { statuses } = buildRouteTable(snap, buildOptions);
    const by = Object.fromEntries(statuses.map((s) => [s.name, desiredStatus(s, undefined, T0)]));
    expect(by.chat).toMatchObject({
      url: 'https://models.example.com/v1/demo/chat',
      openaiUrl: 'https://models.example.com/v1/demo/chat/v1',
    });
    expect(by.chat.inferenceUrl).toBeUndefined();
    expect(by.app).toMatchObject({
      url: 'https://models.example.com/v1/demo/app',
      endpointUrl: 'https://models.example.com/v1/demo/app',
    });
    expect(by.iris.conditions[0]).toMatchObject({ type: 'Ready', status: 'False', reason: 'BackendNotFound' });
  });
});

describe('statusNeedsWrite', () => {
  const desired = desiredStatus(routed(), undefined, T0, { project: 'fraud_detection' });

  test('the same status read back from the API server (keys in another order) needs no write', () => {
    const readBack = JSON.parse(JSON.stringify(desired, Object.keys(desired).reverse()));
    readBack.conditions = desired.conditions.map((c) => Object.fromEntries(Object.entries(c).reverse()));
    expect(Object.keys(readBack)[0]).not.toBe(Object.keys(desired)[0]);
    expect(statusNeedsWrite(desired, readBack)).toBe(false);
    // ...and recomputing from it later keeps every lastTransitionTime, so it stays equal.
    expect(statusNeedsWrite(desiredStatus(routed(), readBack, T1, { project: 'fraud_detection' }), readBack)).toBe(
      false,
    );
  });

  test.each([
    ['no status yet', undefined],
    ['empty status', {}],
    ['another url', { ...desired, url: 'https://other' }],
    ['an extra field', { ...desired, stale: 1 }],
    ['an older observedGeneration', { ...desired, observedGeneration: 2 }],
    ['conditions in another order', { ...desired, conditions: [...desired.conditions].reverse() }],
  ])('%s needs a write', (_name, current) => {
    expect(statusNeedsWrite(desired, current)).toBe(true);
  });
});

describe('statusMergePatch', () => {
  test('sets every desired field and nulls the fields the current status has but the desired lacks', () => {
    const desired = desiredStatus(rejected('Conflict', 'taken'), undefined, T0);
    const patch = statusMergePatch(desired, { url: 'u', hostname: 'h', observedGeneration: 1, conditions: [], x: 1 });
    expect(patch).toEqual({
      status: {
        observedGeneration: 2,
        conditions: desired.conditions,
        project: null,
        url: null,
        inferenceUrl: null,
        openaiUrl: null,
        endpointUrl: null,
        hostname: null,
        x: null,
      },
    });
  });

  test('nulls every field servegate writes that the desired lacks, even when the status it read lacks them', () => {
    // What it read may be older than a write of ours that added the URLs (the watch lags).
    const desired = desiredStatus(rejected('Conflict', 'taken'), undefined, T0);
    expect(statusMergePatch(desired, undefined).status).toMatchObject({ url: null, openaiUrl: null, hostname: null });
  });
});

test('deepEqual ignores key order and undefined members but not array order', () => {
  expect(deepEqual({ a: 1, b: { c: [1, 2] } }, { b: { c: [1, 2] }, a: 1 })).toBe(true);
  expect(deepEqual({ a: 1, b: undefined }, { a: 1 })).toBe(true);
  expect(deepEqual([1, 2], [2, 1])).toBe(false);
  expect(deepEqual({ a: 1 }, { a: '1' })).toBe(false);
});

test('formatTime writes RFC 3339 with second precision', () => {
  expect(formatTime(new Date('2026-03-01T10:00:00.999Z'))).toBe('2026-03-01T10:00:00Z');
});
