// A data line holding `usage` is scanned, not parsed (issue 31 item 2): the meter reads the usage object alone, and
// stripping takes out the `usage` members on the bytes, every other member passing as the backend sent it (a parsed
// and re-serialised line lost big integers' digits and its spelling; a backend's line of up to 1 MiB built a tree of
// up to 20 times that in the gateway's heap).
import { describe, expect, test } from '@jest/globals';
import { SseUsageMeter } from '../../../src/gateway/openai/usage-meter.js';

describe('SseUsageMeter reads usage without parsing the line', () => {
  test('stripping keeps every other member as sent (big integers, spelling) and meters the usage', () => {
    const m = new SseUsageMeter(true);
    const line =
      '{"id":"a", "n":12345678901234567890,"f":1.50,"choices":[{"delta":{"content":"hi"}}],"usage":{"prompt_tokens":3,"completion_tokens":2},"z":"\\u00e9"}';
    const out = m.push(Buffer.from(`data: ${line}\n\n`), 1)!.toString();
    expect(out).toBe(
      'data: {"id":"a","n":12345678901234567890,"f":1.50,"choices":[{"delta":{"content":"hi"}}],"z":"\\u00e9"}\n\n',
    );
    expect(m.usage).toEqual({ prompt: 3, completion: 2 });
  });

  test('a repeated usage member goes whole; the last one is read; a usage event with no choices is dropped', () => {
    const m = new SseUsageMeter(true);
    const out = m.push(
      Buffer.from(
        'data: {"usage":{"prompt_tokens":9},"choices":[{"delta":{"content":"x"}}],"usage":{"prompt_tokens":1,"completion_tokens":1}}\n\n' +
          'data: {"choices":[ ],"usage":{"prompt_tokens":4,"completion_tokens":5}}\n\n',
      ),
      1,
    );
    expect(out!.toString()).toBe('data: {"choices":[{"delta":{"content":"x"}}]}\n\n');
    expect(m.usage).toEqual({ prompt: 4, completion: 5 });
  });

  test('a line of 1 MiB of {} with a usage is metered from its usage alone', () => {
    const m = new SseUsageMeter(false);
    const big = `{"x":[${'{},'.repeat(300_000)}{}],"usage":{"prompt_tokens":7,"completion_tokens":8}}`;
    const chunk = Buffer.from(`data: ${big}\n\n`);
    expect(m.push(chunk, 1)).toBe(chunk);
    expect(m.usage).toEqual({ prompt: 7, completion: 8 });
  });
});
