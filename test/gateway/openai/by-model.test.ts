// The OpenAI base URL's pure parts: admit() on /openai/v1, which deployment a `model` names (SPEC §9), and the
// in-place body edits (model rewrite, stream_options) that leave every other byte as sent.
import { describe, expect, test } from '@jest/globals';
import { admissionContext, admitNow, type ByModel, type RequestFacts } from '../../support/admission.js';
import { GatewayError } from '../../../src/gateway/http/errors.js';
import { objectLayout, memberSpan } from '../../../src/gateway/openai/json-members.js';
import { modelsList, prepareBody, selectModel } from '../../../src/gateway/openai/by-model.js';
import type { ApiKeyRecord } from '../../../src/routing/types.js';
import { apiKey, sdep, buildOptions } from '../../support/fixtures.js';
import { build } from '../../support/units.js';

const keys = {
  genai: apiKey('key-genai', 'genai'),
  both: apiKey('key-both', 'genai,research_lab'),
  team: apiKey('key-team', '*', { namespace: 'genai' }),
};
const { table } = build(
  {
    deployments: [
      sdep('genai/llama').llm().modelName('meta-llama/Llama-3.1-8B-Instruct').build(),
      sdep('genai/mistral').llm().build(),
      sdep('genai/iris').sklearn().build(),
      sdep('research-lab/llama').project('research_lab').llm().build(),
      sdep('secret/gpt').llm().build(),
    ],
    keySecrets: Object.values(keys).map((k) => k.secret),
  },
  // Some keys live in project namespaces (scoped keys): the opt-in of SPEC §11.
  { ...buildOptions, projectNamespaceKeys: true },
);
const record = (name: keyof typeof keys): ApiKeyRecord => table.keys.get(keys[name].key.split('.')[0])![0];

const decide = (facts: RequestFacts, t: typeof table) => admitNow(facts, admissionContext(t).ctx);

function base(url: string, key: keyof typeof keys = 'genai', method = 'POST'): ByModel {
  const d = decide(
    {
      method,
      url,
      host: 'models.example.com',
      authorization: `Bearer ${keys[key].key}`,
      contentType: 'application/json',
      now: Date.now(),
    },
    table,
  );
  if (d.kind !== 'by-model') throw new Error(`${url}: not the base URL: ${JSON.stringify(d)}`);
  return d;
}

describe('admit() on /openai/v1', () => {
  test('the OpenAI path as a deployment URL would forward it, the query kept', () => {
    expect(base('/openai/v1/chat/completions?x=1')).toMatchObject({
      rest: '/v1/chat/completions',
      search: '?x=1',
      dialect: 'openai',
    });
  });

  test('/models/<id> with an encoded "/" is read (answered by the gateway, never forwarded); /models/ is the list', () => {
    expect(base('/openai/v1/models/genai%2Fllama', 'genai', 'GET').modelId).toBe('genai/llama');
    expect(base('/openai/v1/models/', 'genai', 'GET').modelId).toBeUndefined();
  });

  test('the key is checked first: 401 in the OpenAI dialect', () => {
    const d = decide(
      {
        method: 'POST',
        url: '/openai/v1/chat/completions',
        host: 'h',
        authorization: undefined,
        contentType: undefined,
        now: 0,
      },
      table,
    );
    expect(d.ok).toBe(false);
    if (!d.ok) expect([d.error.status, d.dialect]).toEqual([401, 'openai']);
  });

  test('other paths still refuse encoded slashes', () => {
    const d = decide(
      {
        method: 'POST',
        url: '/openai/v1/chat%2Fcompletions',
        host: 'h',
        authorization: `Bearer ${keys.genai.key}`,
        contentType: undefined,
        now: 0,
      },
      table,
    );
    expect(d.ok).toBe(false);
    if (!d.ok) expect(d.error.code).toBe('bad_path');
  });
});

describe('selectModel', () => {
  const pick = (model: unknown, key: keyof typeof keys = 'genai') => {
    const r = selectModel(table, record(key), model);
    return r instanceof GatewayError ? `${r.status} ${r.code}` : r.id;
  };

  test.each([
    ['genai/llama', 'genai', 'genai/llama'],
    ['mistral', 'genai', 'genai/mistral'],
    ['llama', 'genai', 'genai/llama'],
    ['research-lab/llama', 'both', 'research-lab/llama'],
    ['research_lab/llama', 'both', 'research-lab/llama'],
    ['llama', 'both', '400 invalid_body'],
    ['genai/nope', 'genai', '404 model_not_found'],
    ['genai/iris', 'genai', '404 model_not_found'],
    ['genai/llama/x', 'genai', '404 model_not_found'],
    ['secret/gpt', 'genai', '403 model_forbidden'],
    ['secret/nope', 'genai', '403 model_forbidden'],
    ['gpt', 'genai', '404 model_not_found'], // only an ungranted project has it: as unknown
    ['nope', 'genai', '404 model_not_found'],
    ['/llama', 'genai', '404 model_not_found'],
    [undefined, 'genai', '400 invalid_body'],
    ['', 'genai', '400 invalid_body'],
    [7, 'genai', '400 invalid_body'],
    // A key Secret in a project's namespace grants that namespace's routes only, whatever its projects say.
    ['genai/llama', 'team', 'genai/llama'],
    ['secret/gpt', 'team', '403 model_forbidden'],
  ] as const)('%j with key %s → %s', (model, key, want) => {
    expect(pick(model, key)).toBe(want);
  });

  test('the list has what the key may use, oldest first, as <project>/<deployment>', () => {
    expect(
      JSON.parse(modelsList(table, record('both')))
        .data.map((m: { id: string }) => m.id)
        .sort(),
    ).toEqual(['genai/llama', 'genai/mistral', 'research_lab/llama']);
    expect(
      JSON.parse(modelsList(table, record('team')))
        .data.map((m: { id: string }) => m.id)
        .sort(),
    ).toEqual(['genai/llama', 'genai/mistral']);
  });
});

describe('prepareBody: only the bytes that must change', () => {
  const prep = (body: string, url = '/openai/v1/chat/completions') => {
    const p = prepareBody(table, base(url), Buffer.from(body));
    if (p instanceof GatewayError) throw p;
    return { body: p.body.toString(), strip: p.stripUsage, route: p.route.id };
  };

  test('model rewritten in place; an escaped member name is read as JSON.parse reads it; a repeated one is refused', () => {
    expect(prep('{"model":"genai/llama","x":[1,2]}').body).toBe(
      '{"model":"meta-llama/Llama-3.1-8B-Instruct","x":[1,2]}',
    );
    expect(prep('{"mod\\u0065l" : "genai/mistral" }').body).toBe('{"mod\\u0065l" : "mistral" }');
    // Two "model" members (one spelled with an escape): the gateway and a backend could read different ones.
    expect(() => prep('{"model":"nope","model":"genai/mistral"}')).toThrow('more than one "model" member');
    expect(() => prep('{"mod\\u0065l":"genai/llama","model":"genai/mistral"}')).toThrow('more than one "model" member');
    expect(prep('{"meta":{"model":"genai/llama"},"model":"mistral"}').body).toBe(
      '{"meta":{"model":"genai/llama"},"model":"mistral"}',
    );
  });

  test.each([
    [
      'no stream_options',
      '{"model":"mistral","stream":true}',
      '{"model":"mistral","stream":true,"stream_options":{"include_usage":true}}',
      true,
    ],
    [
      'stream_options null',
      '{"model":"mistral","stream":true,"stream_options":null}',
      '{"model":"mistral","stream":true,"stream_options":{"include_usage":true}}',
      true,
    ],
    [
      'other stream options kept',
      '{"model":"mistral","stream":true,"stream_options":{"continuous_usage_stats":false,"include_usage":false}}',
      '{"model":"mistral","stream":true,"stream_options":{"continuous_usage_stats":false,"include_usage":true}}',
      true,
    ],
    [
      'usage already asked for',
      '{"model":"mistral","stream":true,"stream_options":{"include_usage":true}}',
      '{"model":"mistral","stream":true,"stream_options":{"include_usage":true}}',
      false,
    ],
    ['not streamed', '{"model":"mistral","stream":false}', '{"model":"mistral","stream":false}', false],
    [
      'stream_options of the wrong type: the backend says so',
      '{"model":"mistral","stream":true,"stream_options":"x"}',
      '{"model":"mistral","stream":true,"stream_options":"x"}',
      false,
    ],
  ])('streamed chat, %s', (_what, body, forwarded, strip) => {
    expect(prep(body)).toEqual({ body: forwarded, strip, route: 'genai/mistral' });
  });

  test('routes whose streams report usage anyway are not touched', () => {
    expect(prep('{"model":"mistral","stream":true}', '/openai/v1/responses')).toEqual({
      body: '{"model":"mistral","stream":true}',
      strip: false,
      route: 'genai/mistral',
    });
  });

  test('the layout scanner finds top-level members only, with their exact value spans', () => {
    const b = Buffer.from(' { "a" : [ {"model":1} , "}" ] ,"model"  :  "x\\"y" , "z":-0.5e3 } ');
    const layout = objectLayout(b)!;
    expect(layout.members.map((m) => m.name)).toEqual(['a', 'model', 'z']);
    const m = memberSpan(layout, 'model')!;
    expect(b.toString('utf8', m.start, m.end)).toBe('"x\\"y"');
    const z = memberSpan(layout, 'z')!;
    expect(b.toString('utf8', z.start, z.end)).toBe('-0.5e3');
    expect(b[layout.close]).toBe(0x7d);
    expect(objectLayout(Buffer.from('[1]'))).toBeUndefined();
    expect(objectLayout(Buffer.from('{}'))!.members).toEqual([]);
  });
});
