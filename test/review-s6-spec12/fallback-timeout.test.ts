// SPEC §12 "Fallbacks": a request that fails before the first byte of the answer reached the client — connect error,
// 5xx, 429, no ready endpoint, `timeoutSeconds` — is sent to the next deployment in the list (a fallback the key is
// not granted is skipped; `model` rewritten to the fallback's spec.modelName), the answer names it in
// x-servegate-deployment and servegate_fallbacks_total counts it (R4 conformance probe, session 6).
import OpenAI from 'openai';
import { afterAll, beforeAll, expect, test } from '@jest/globals';
import { send, startGateway, type Gateway } from '../support/harness.js';
import { metricValue } from '../support/metrics.js';
import { closeAll, llmDoc, replica, type Replica } from './fleet.js';

let slow: Replica;
let backup: Replica;
let gw: Gateway;

beforeAll(async () => {
  slow = await replica('slow');
  slow.delayMs = 4000;
  backup = await replica('backup');
  gw = await startGateway({
    files: {
      'llm.yaml': [
        llmDoc('demo', 'big', [slow.url], {
          modelName: 'llama-70b',
          timeoutSeconds: 1,
          fallbacks: ['hidden/alt', 'small'],
        }),
        llmDoc('demo', 'small', [backup.url], { modelName: 'llama-8b' }),
        llmDoc('hidden', 'alt', [backup.url], { modelName: 'secret' }),
      ],
    },
    keys: [{ name: 'k', projects: 'demo' }],
  });
});

afterAll(async () => {
  await gw?.close();
  await closeAll([slow, backup]);
});

test('a deployment that does not answer within timeoutSeconds falls back to the next granted deployment', async () => {
  const r = await send(`${gw.url}/v1/demo/big/v1/chat/completions`, {
    headers: { authorization: `Bearer ${gw.keys.k}` },
    body: { model: 'llama-70b', messages: [{ role: 'user', content: 'hi' }] },
  });
  expect(r.status).toBe(200);
  expect(r.headers['x-replica']).toBe('backup');
  expect(r.headers['x-servegate-deployment']).toBe('demo/small');
  // hidden/alt (not granted to the key) was skipped: the backup was called once, with demo/small's model name.
  expect(backup.served.map((s) => s.model)).toEqual(['llama-8b']);
  const text = (await send(`${gw.adminUrl}/metrics`)).text;
  const labels = { project: 'demo', deployment: 'big', to: 'demo/small', reason: 'timeout' };
  expect(metricValue(text, 'servegate_fallbacks_total', labels)).toBe(1);
});

test('the same through the OpenAI SDK on /openai/v1', async () => {
  const client = new OpenAI({ baseURL: `${gw.url}/openai/v1`, apiKey: gw.keys.k, maxRetries: 0, timeout: 10_000 });
  const { data, response } = await client.chat.completions
    .create({ model: 'demo/big', messages: [{ role: 'user', content: 'hi' }] })
    .withResponse();
  expect(data.choices[0].message.content).toBe('backup');
  expect(response.headers.get('x-servegate-deployment')).toBe('demo/small');
  expect(backup.served.at(-1)?.model).toBe('llama-8b');
});
