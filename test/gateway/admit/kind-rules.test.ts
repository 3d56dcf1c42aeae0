// Which suffixes and bodies each kind of deployment accepts (SPEC §3), and the dialect of its errors (SPEC §6).
import { describe, expect, test } from '@jest/globals';
import fc from 'fast-check';
import { GatewayError } from '../../../src/gateway/http/errors.js';
import { checkSuffix, dialectOf, validateBody, type BodyCheck } from '../../../src/gateway/admit/kind-rules.js';
import { sdep } from '../../support/fixtures.js';
import { routeOf } from '../../support/units.js';

const sklearn = routeOf(sdep('demo/iris').sklearn());
const pyModel = routeOf(sdep('demo/custom').pythonModel());
const tf = routeOf(sdep('demo/flowers').tensorflow().modelName('flowers-v2'));
const llm = routeOf(sdep('demo/chat').llm());
const python = routeOf(sdep('demo/echo').python());

function refusal(r: ReturnType<typeof checkSuffix>): GatewayError {
  expect(r).toBeInstanceOf(GatewayError);
  return r as GatewayError;
}

describe('checkSuffix: accepted', () => {
  test.each([
    ['sklearn :predict', sklearn, 'POST', '/v1/models/iris:predict', 'predict'],
    ['python model server :predict', pyModel, 'POST', '/v1/models/custom:predict', 'predict'],
    ['tensorflow :predict', tf, 'POST', '/v1/models/flowers-v2:predict', 'predict'],
    ['tensorflow :classify', tf, 'POST', '/v1/models/flowers-v2:classify', 'classify'],
    ['tensorflow :regress', tf, 'POST', '/v1/models/flowers-v2:regress', 'regress'],
    ['llm chat completions', llm, 'POST', '/v1/chat/completions', 'json'],
    ['llm completions', llm, 'POST', '/v1/completions', 'json'],
    ['llm embeddings', llm, 'POST', '/v1/embeddings', 'json'],
    ['llm GET /v1/models', llm, 'GET', '/v1/models', 'json'],
    ['llm GET /v1/models/<id>', llm, 'GET', '/v1/models/some-model', 'json'],
    ['python GET /', python, 'GET', '/', 'none'],
    ['python DELETE on any path', python, 'DELETE', '/items/42', 'none'],
    ['python POST to a V1-looking path', python, 'POST', '/v1/models/x:explain', 'none'],
    ['python PATCH /health', python, 'PATCH', '/health', 'none'],
  ])('%s → body check %s', (_what, route, method, rest, check) => {
    expect(checkSuffix(route, method, rest, 'application/json')).toEqual({ check });
  });

  test.each([
    ['multipart/form-data; boundary=x', 'form'],
    ['Multipart/Form-Data; boundary=x', 'form'],
    ['multipart/mixed; boundary=x', 'none'],
    ['audio/wav', 'none'],
    ['application/octet-stream', 'none'],
    ['application/json; charset=utf-8', 'json'],
    [undefined, 'json'],
  ])('llm upload with content-type %s → body check %s', (ct, check) => {
    expect(checkSuffix(llm, 'POST', '/v1/audio/transcriptions', ct)).toEqual({ check });
  });
});

describe('checkSuffix: refused by the gateway', () => {
  test.each([
    ['sklearn :classify', sklearn, ':classify', [':predict']],
    ['sklearn :regress', sklearn, ':regress', [':predict']],
    ['python model server :classify', pyModel, ':classify', [':predict']],
    ['sklearn :explain', sklearn, ':explain', [':predict']],
    ['tensorflow :explain', tf, ':explain', [':predict', ':classify', ':regress']],
  ])('%s → 404 naming the offered verbs', (_what, route, verb, offered) => {
    const e = refusal(checkSuffix(route, 'POST', `/v1/models/${route.modelName}${verb}`, 'application/json'));
    expect(e.status).toBe(404);
    for (const v of offered) expect(e.message).toContain(v);
  });

  test.each([
    ['sklearn', sklearn, 'iris'],
    ['tensorflow', tf, 'flowers-v2'],
  ])('%s: a wrong model name → 404 naming the served model', (_what, route, served) => {
    const e = refusal(checkSuffix(route, 'POST', '/v1/models/other:predict', 'application/json'));
    expect(e.status).toBe(404);
    expect(e.message).toContain(served);
  });

  test.each(['GET', 'PUT', 'DELETE'])('%s on :predict → 405 with Allow: POST', (method) => {
    const e = refusal(checkSuffix(sklearn, method, '/v1/models/iris:predict', undefined));
    expect(e.status).toBe(405);
    expect(e.headers.allow).toBe('POST');
  });

  test.each([['/predict'], ['/'], ['/v1/models'], ['/v1/models/iris:predict/extra'], ['/v2/models/iris/infer']])(
    'sklearn %s → 404 telling the accepted suffix',
    (rest) => {
      const e = refusal(checkSuffix(sklearn, 'POST', rest, 'application/json'));
      expect(e.status).toBe(404);
      expect(e.message).toContain('/v1/models/iris:');
    },
  );

  test.each([['/chat/completions'], ['/'], ['/v1'], ['/v2/chat/completions'], ['/models']])(
    'llm %s → 404 (OpenAI routes start with /v1/)',
    (rest) => {
      const e = refusal(checkSuffix(llm, 'POST', rest, 'application/json'));
      expect(e.status).toBe(404);
      expect(e.message).toContain('/v1/');
    },
  );
});

describe('checkSuffix: /v1/models/<name>:<verb> read as its decoded name and exact verb', () => {
  // The oracle: the path split by a regular expression, the name percent-decoded (an invalid escape kept as sent).
  const oracle = (route: typeof sklearn, method: string, rest: string): string => {
    const m = /^\/v1\/models\/([^/:]+):([A-Za-z]+)$/.exec(rest);
    if (!m) return 'other';
    let name = m[1];
    try {
      name = decodeURIComponent(name);
    } catch {
      /* kept */
    }
    if (name !== route.modelName) return 'not_found';
    if (!route.verbs.includes(m[2])) return 'unknown_verb';
    return method === 'POST' ? m[2] : 'method_not_allowed';
  };
  const piece = fc.constantFrom('iris', 'iri', 'is', 'flowers-v2', 'flowers', '%69', '%', '%zz', '-v2', 'x', ':', '/');
  const verb = fc.constantFrom('predict', 'predic', 'predictx', 'Predict', 'classify', 'regress', 'explain', '', 'p:q');
  test('accepted and refused exactly as the oracle says, for names spelled plainly, encoded or nearly right', () => {
    fc.assert(
      fc.property(
        fc.constantFrom(sklearn, tf),
        fc.constantFrom('POST', 'GET'),
        fc.array(piece, { minLength: 1, maxLength: 4 }),
        verb,
        (route, method, name, v) => {
          const rest = `/v1/models/${name.join('')}:${v}`;
          const want = oracle(route, method, rest);
          const got = checkSuffix(route, method, rest, 'application/json');
          if (want === 'other') return;
          if (got instanceof GatewayError) expect(got.code).toBe(want);
          else expect(got).toEqual({ check: want });
        },
      ),
      { numRuns: 2000 },
    );
  });
});

describe('validateBody', () => {
  const ok: Array<[BodyCheck, string]> = [
    ['predict', '{"instances":[[1,2,3]]}'],
    ['predict', '{"instances":[]}'],
    ['predict', '{"inputs":[[1,2,3]]}'],
    ['predict', '{"inputs":{"x":[1]}}'],
    ['predict', ' {"instances":[1]} \n'],
    ['classify', '{"examples":[{"x":1}]}'],
    ['classify', '{"instances":[1]}'],
    ['regress', '{"examples":[{"x":1}]}'],
    ['regress', '{"inputs":[[1]]}'],
    ['json', '{"model":"m","messages":[{"role":"user","content":"hi"}]}'],
    ['json', '[1,2]'],
    ['json', ''],
    ['none', 'not json at all'],
    ['none', ''],
  ];
  test.each(ok)('%s accepts %j', (check, body) => {
    expect(validateBody(check, Buffer.from(body))).toBeUndefined();
  });

  const bad: Array<[BodyCheck, string, string]> = [
    ['predict', 'not json', 'invalid_json'],
    ['predict', '{"instances":[1,]}', 'invalid_json'],
    ['predict', '', 'invalid_json'],
    ['predict', '{}', 'invalid_body'],
    ['predict', '{"data":[1]}', 'invalid_body'],
    ['predict', '[[1,2]]', 'invalid_body'],
    ['predict', 'null', 'invalid_body'],
    ['predict', '{"examples":[{"x":1}]}', 'invalid_body'],
    ['predict', '{"instances":null}', 'invalid_body'],
    ['classify', '{}', 'invalid_body'],
    ['regress', '{"data":1}', 'invalid_body'],
    ['json', '{"model":', 'invalid_json'],
    ['json', 'hello', 'invalid_json'],
  ];
  test.each(bad)('%s refuses %j with 400 %s', (check, body, code) => {
    const e = validateBody(check, Buffer.from(body));
    expect(e).toBeInstanceOf(GatewayError);
    expect(e!.status).toBe(400);
    expect(e!.code).toBe(code);
  });

  test('the message of a missing field names instances and inputs', () => {
    expect(validateBody('predict', Buffer.from('{}'))!.message).toMatch(/instances[\s\S]*inputs/);
    expect(validateBody('classify', Buffer.from('{}'))!.message).toContain('examples');
  });
});

describe('dialectOf', () => {
  test.each([
    ['an llm route', llm, '/v1/chat/completions', 'openai'],
    ['an llm route, refused suffix', llm, '/chat', 'openai'],
    ['an sklearn route', sklearn, '/v1/models/iris:predict', 'kserve'],
    ['a tensorflow route', tf, '/v1/models/x:classify', 'kserve'],
    ['a python route', python, '/v1/chat/completions', 'kserve'],
    ['no route, an OpenAI-looking suffix', undefined, '/v1/chat/completions', 'openai'],
    ['no route, a V1 verb suffix', undefined, '/v1/models/iris:predict', 'kserve'],
    ['no route, another suffix', undefined, '/predict', 'kserve'],
    ['no route, no suffix', undefined, undefined, 'kserve'],
  ])('%s → %s', (_what, route, rest, dialect) => {
    expect(dialectOf(route, rest)).toBe(dialect);
  });
});
