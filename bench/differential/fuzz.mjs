// Generated cases for the differential harness: requests assembled from pools of methods, targets, headers and body
// framings by fast-check (seeded, so a run can be repeated), each sent alone or as a pipelined pair.
import fc from 'fast-check';

export function fuzzCases(n, seed, { rq, chunked, chat }) {
  const method = fc.constantFrom('GET', 'POST', 'HEAD', 'OPTIONS', 'PUT', 'DELETE');
  const target = fc.constantFrom(
    '/v1/p1/echo/f',
    '/v1/p1/echo/f?status=503',
    '/v1/p1/flaky/f?status=500',
    '/v1/p1/echo/f?reset=1',
    '/v1/p1/dead/f',
    '/v1/p1/multi/f',
    '/v1/p1/iris/v1/models/iris:predict',
    '/v1/p1/llm/v1/chat/completions',
    '/openai/v1/chat/completions',
    '/openai/v1/models',
    '/v1/p2/llm/v1/models',
    '/v1/p1/zz/f',
    '/v1//echo',
  );
  const header = fc.constantFrom(
    'Authorization: Bearer {k1}',
    'Authorization: Bearer {k12}',
    'Authorization: Bearer bad.key',
    'authorization: ApiKey {k1}',
    'Content-Type: application/json',
    'Content-Type: text/plain',
    'Content-Type: multipart/form-data',
    'Origin: http://ok.test',
    'Origin: http://evil.test',
    'Access-Control-Request-Method: POST',
    'Access-Control-Request-Headers: authorization',
    'Expect: 100-continue',
    'Expect: nope',
    'Connection: close',
    'Connection: keep-alive',
    'Connection: upgrade',
    'Upgrade: websocket',
    'X-Request-Id: fuzz-1',
    'X-Forwarded-For: 10.0.0.1',
    'Content-Encoding: gzip',
    'Accept-Encoding: gzip',
    'TE: trailers',
    'X-Dup: 1',
    'Cookie: a=b',
  );
  const body = fc.constantFrom(
    undefined,
    '',
    '{"a":1}',
    chat('p1/llm'),
    chat('p1/llm', ',"stream":true,"stream_options":{"include_usage":true}'),
    chat('p2/llm'),
    chat('llm'),
    '{"instances":[[1]]}',
    'not json',
    'x'.repeat(5000),
  );
  const framing = fc.constantFrom('length', 'chunked', 'none', 'both');
  const reqArb = fc.record({
    method,
    target,
    headers: fc.uniqueArray(header, { maxLength: 6 }),
    body,
    framing,
  });
  const caseArb = fc.record({ reqs: fc.array(reqArb, { minLength: 1, maxLength: 2 }) });
  const samples = fc.sample(caseArb, { numRuns: n, seed });
  return samples.map((s, i) => {
    const bufs = s.reqs.map((r) => {
      const hs = [...r.headers];
      let b = r.body;
      if (b !== undefined && r.framing === 'chunked') {
        hs.push('Transfer-Encoding: chunked');
        b = chunked(b ? [b.slice(0, 3), b.slice(3)].filter(Boolean) : []);
      } else if (b !== undefined && r.framing === 'both') {
        hs.push('Transfer-Encoding: chunked', `Content-Length: ${b.length}`);
        b = chunked(b ? [b] : []);
      } else if (b !== undefined && r.framing === 'none') {
        return rq(r.method, r.target, hs, b, { framing: false });
      }
      return rq(r.method, r.target, hs, b);
    });
    return {
      name: `fuzz#${i} seed ${seed}: ${s.reqs.map((r) => `${r.method} ${r.target} [${r.headers.join('; ')}] ${r.framing}${r.body === undefined ? '' : ` ${String(r.body).slice(0, 30)}`}`).join(' || ')}`,
      steps: [{ write: Buffer.concat(bufs) }],
      methods: s.reqs.map((r) => r.method),
    };
  });
}
