// The answer to a request Node's parser refused, as a plain function of the error and the bytes it failed on: which
// error, the dialect the request line's target reads as, and the CORS headers of an allowed Origin in that head only.
// (test/gateway/admit/other-projects.test.ts drives the same answers through a running gateway.)
import { describe, expect, test } from '@jest/globals';
import { parseConfig } from '../../../src/config/load.js';
import { corsPolicy } from '../../../src/gateway/admit/cors.js';
import { parseErrorAnswer } from '../../../src/gateway/listen/parse-errors.js';
import { runtime } from '../../support/units.js';

const cors = corsPolicy(parseConfig({ cors: { allowedOrigins: ['https://good.example'] } }, runtime).cors);

function failure(code: string, packet?: string, reason?: string): NodeJS.ErrnoException {
  return Object.assign(new Error(code), {
    code,
    ...(packet !== undefined ? { rawPacket: Buffer.from(packet, 'latin1') } : {}),
    ...(reason !== undefined ? { reason } : {}),
  });
}

const LLM = 'POST /v1/demo/chat/v1/chat/completions HTTP/1.1\r\nHost: x\r\n';

describe('parseErrorAnswer', () => {
  test.each(['ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'ECONNABORTED', 'ERR_STREAM_DESTROYED'])(
    'a failure of the socket itself (%s) has no answer',
    (code) => {
      expect(parseErrorAnswer(failure(code, LLM), cors, 10)).toBeUndefined();
    },
  );

  test('which error: a head over the size limit is 431, headers not received in time 408, anything else 400', () => {
    const big = parseErrorAnswer(failure('HPE_HEADER_OVERFLOW', LLM), cors, 10)!;
    expect([big.error.status, big.error.code]).toEqual([431, 'headers_too_large']);
    const late = parseErrorAnswer(failure('ERR_HTTP_REQUEST_TIMEOUT'), cors, 7)!;
    expect([late.error.status, late.error.code]).toEqual([408, 'request_timeout']);
    expect(late.error.message).toBe('request headers not received within 7s');
    const bad = parseErrorAnswer(failure('HPE_INVALID_HEADER_TOKEN', LLM, 'Invalid header value char'), cors, 10)!;
    expect([bad.error.status, bad.error.code]).toEqual([400, 'bad_request']);
    expect(bad.error.message).toBe('malformed HTTP request (HPE_INVALID_HEADER_TOKEN: Invalid header value char)');
  });

  test("in the dialect the request line's target reads as; KServe form when the bytes do not start with one", () => {
    expect(parseErrorAnswer(failure('HPE_X', LLM), cors, 10)!.dialect).toBe('openai');
    expect(parseErrorAnswer(failure('HPE_X', 'GET /openai/v1/models HTTP/1.1\r\n'), cors, 10)!.dialect).toBe('openai');
    expect(
      parseErrorAnswer(failure('HPE_X', 'POST /v1/demo/iris/v1/models/iris:predict HTTP/1.1\r\n'), cors, 10)!.dialect,
    ).toBe('kserve');
    // The body of an earlier request, or no bytes at all: no target to read.
    expect(parseErrorAnswer(failure('HPE_X', '{"model": "/openai/v1"}'), cors, 10)).toEqual({
      error: expect.anything(),
      dialect: 'kserve',
      headers: [],
    });
    expect(parseErrorAnswer(failure('HPE_X'), cors, 10)!.dialect).toBe('kserve');
  });

  test("the CORS headers of the head's allowed Origin; none for another origin or an Origin line past the head", () => {
    const headersOf = (packet: string): Map<string, string> => {
      const list = parseErrorAnswer(failure('HPE_X', packet), cors, 10)!.headers;
      const m = new Map<string, string>();
      for (let i = 0; i < list.length; i += 2) m.set(list[i], list[i + 1]);
      return m;
    };
    const allowed = headersOf(`${LLM}origin:  https://good.example \r\n\r\n`);
    expect(allowed.get('access-control-allow-origin')).toBe('https://good.example');
    expect(allowed.get('vary')).toBe('Origin');
    const other = headersOf(`${LLM}Origin: https://evil.example\r\n\r\n`);
    expect(other.has('access-control-allow-origin')).toBe(false);
    expect(other.get('vary')).toBe('Origin');
    expect(headersOf(`${LLM}\r\nPOST / HTTP/1.1\r\nOrigin: https://good.example\r\n\r\n`).size).toBe(0);
  });
});
