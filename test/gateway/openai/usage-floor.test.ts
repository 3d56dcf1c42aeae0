// What an LLM answer is charged when its usage is missing or too small (SPEC §9): the gateway counts the generated
// text that passed. A client that reads a non-streamed answer's content and hangs up before the final `usage` is
// charged that content; a backend reporting `usage: {0, 0}` after 50 content events is charged the 50.
import { request as httpRequest } from 'node:http';
import { afterAll, beforeAll, describe, expect, test } from '@jest/globals';
import { chargedUsage, JsonUsageMeter, lineTextBytes, SseUsageMeter } from '../../../src/gateway/openai/usage-meter.js';
import { RecordingBackend } from '../../support/backends.js';
import { send, startGateway, type Gateway } from '../../support/harness.js';
import { metricValue } from '../../support/metrics.js';
import { waitFor } from '../../support/wait.js';

/** 32,000 bytes of content: 8,000 tokens at 4 bytes a token. */
const CONTENT = 'abcd'.repeat(8000);
/** The usage the backend's next answer reports (JSON answers: after the client hung up, when `late`). */
let usage = { prompt_tokens: 0, completion_tokens: 0 };
let late = true;

let be: RecordingBackend;
let gw: Gateway;

beforeAll(async () => {
  be = await new RecordingBackend(async (_req, res, rec) => {
    const body = JSON.parse(rec.body.toString()) as { stream?: boolean };
    if (body.stream) {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      for (let i = 0; i < 50; i++)
        res.write(`data: ${JSON.stringify({ id: 'x', choices: [{ index: 0, delta: { content: 'word ' } }] })}\n\n`);
      res.write(`data: ${JSON.stringify({ id: 'x', choices: [], usage })}\n\n`);
      res.end('data: [DONE]\n\n');
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json' });
    const message = { role: 'assistant', content: CONTENT };
    res.write(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":${JSON.stringify(message)}}],`);
    // The usage comes last; a client that has what it wanted may be gone by then.
    if (late) await rec.closed;
    res.end(`"usage":${JSON.stringify(usage)}}`);
  }).listen();
  gw = await startGateway({
    deployments: [{ namespace: 'demo', name: 'chat', modelServer: 'llm', url: be.url }],
    keys: [
      { name: 'k-cut', projects: 'demo' },
      { name: 'k-zero', projects: 'demo', tpm: 100 },
      { name: 'k-honest', projects: 'demo' },
    ],
  });
});

afterAll(async () => {
  await gw?.close();
  await be?.close();
});

const URL_PATH = '/v1/demo/chat/v1/chat/completions';
const messages = [{ role: 'user', content: 'hi' }];
const metrics = async () => (await send(`${gw.adminUrl}/metrics`)).text;
const keyTokens = async (key: string, type: 'prompt' | 'completion') =>
  metricValue(await metrics(), 'servegate_llm_key_tokens_total', { key, type }) ?? 0;
const linesOf = (key: string) =>
  gw.logs.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.msg === 'request' && l.key === key);

/** A non-streamed chat read until its content has arrived; then the client hangs up. */
function readContentAndHangUp(key: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const body = JSON.stringify({ model: 'chat', messages });
    const req = httpRequest(
      `${gw.url}${URL_PATH}`,
      {
        method: 'POST',
        agent: false,
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'content-length': body.length },
      },
      (res) => {
        let got = 0;
        res.on('data', (c: Buffer) => {
          got += c.length;
          if (got >= CONTENT.length) {
            req.destroy();
            resolve();
          }
        });
        res.on('error', () => undefined);
      },
    );
    req.on('error', (e) => (req.destroyed ? undefined : reject(e)));
    req.end(body);
  });
}

describe('a client that hangs up before the usage', () => {
  test('5 cut answers of 8,000 tokens each are charged their 40,000 completion tokens', async () => {
    late = true;
    usage = { prompt_tokens: 3, completion_tokens: 8000 };
    for (let i = 0; i < 5; i++) await readContentAndHangUp(gw.keys['k-cut']);
    await waitFor(async () => (await keyTokens('k-cut', 'completion')) >= 40_000, 'the cut answers charged', 5000);
    expect(await keyTokens('k-cut', 'completion')).toBe(40_000);
    // The prompt as the request showed it: 32 bytes of messages, 8 tokens.
    expect(await keyTokens('k-cut', 'prompt')).toBe(5 * 8);
    await waitFor(() => linesOf('k-cut').length === 5, 'five log lines');
    expect(linesOf('k-cut')[0]).toMatchObject({ completionTokens: 8000, tokensEstimated: true });
    expect(
      metricValue(await metrics(), 'servegate_llm_tokens_estimated_total', {
        project: 'demo',
        deployment: 'chat',
        type: 'completion',
      }),
    ).toBe(40_000);
  });
});

describe('a backend that reports less than it sent', () => {
  test('usage {0, 0} after 50 content events is charged 50 completion tokens: a tpm of 100 trips', async () => {
    usage = { prompt_tokens: 0, completion_tokens: 0 };
    const body = { model: 'chat', messages, stream: true, stream_options: { include_usage: true } };
    const ask = () => send(`${gw.url}${URL_PATH}`, { headers: { authorization: `Bearer ${gw.keys['k-zero']}` }, body });
    expect((await ask()).status).toBe(200);
    expect((await ask()).status).toBe(200);
    await waitFor(async () => (await keyTokens('k-zero', 'completion')) === 100, 'both answers charged');
    const third = await ask();
    expect(third.status).toBe(429);
    expect(third.json().error.code).toBe('rate_limit_exceeded');
    await waitFor(() => linesOf('k-zero').length >= 2, 'the log lines');
    // Against a report the prompt is raised to half the estimate (8 → 4): what no tokenizer comes near.
    expect(linesOf('k-zero')[0]).toMatchObject({
      promptTokens: 4,
      completionTokens: 50,
      tokensEstimated: true,
      reportedPromptTokens: 0,
      reportedCompletionTokens: 0,
    });
  });

  test('an honest report is kept, below the 4-bytes-a-token estimate or above it', async () => {
    late = false;
    for (const completion of [7000, 9000]) {
      usage = { prompt_tokens: 12, completion_tokens: completion };
      const r = await send(`${gw.url}${URL_PATH}`, {
        headers: { authorization: `Bearer ${gw.keys['k-honest']}` },
        body: { model: 'chat', messages },
      });
      expect(r.status).toBe(200);
    }
    await waitFor(() => linesOf('k-honest').length === 2, 'the log lines');
    expect(linesOf('k-honest').map((l) => [l.promptTokens, l.completionTokens, l.tokensEstimated])).toEqual([
      [12, 7000, undefined],
      [12, 9000, undefined],
    ]);
  });
});

describe('the text that passed, counted in any chunking', () => {
  const answer = Buffer.from(
    JSON.stringify({
      id: 'content: "text":',
      choices: [
        {
          message: {
            role: 'assistant',
            content: 'he said \\"content\\": "x"\\\\',
            refusal: null,
            tool_calls: [{ function: { name: 'f', arguments: '{"a":1}' } }],
          },
        },
      ],
      usage: { prompt_tokens: 1, completion_tokens: 2 },
    }),
  );
  const strings = [JSON.stringify('he said \\"content\\": "x"\\\\').length - 2, JSON.stringify('{"a":1}').length - 2];
  test('a JSON answer: the content and arguments strings, raw, wherever the chunks break', () => {
    for (let a = 0; a <= answer.length; a++) {
      for (const b of [a, Math.min(answer.length, a + 1), Math.min(answer.length, a + 7)]) {
        const m = new JsonUsageMeter();
        for (const part of [answer.subarray(0, a), answer.subarray(a, b), answer.subarray(b)]) m.push(part, 1);
        expect([a, b, m.textBytes]).toEqual([a, b, strings[0] + strings[1]]);
        expect(m.usage).toEqual({ prompt: 1, completion: 2 });
      }
    }
  });

  test('event streams: chat deltas count; a Responses event counts its delta, never the text it repeats', () => {
    const line = (o: unknown) => Buffer.from(JSON.stringify(o));
    const count = (o: unknown) => {
      const b = line(o);
      return lineTextBytes(b, 0, b.length);
    };
    expect(count({ choices: [{ delta: { content: 'Hello' } }] })).toBe(5);
    expect(count({ choices: [{ text: 'abc' }] })).toBe(3);
    expect(count({ type: 'response.output_text.delta', delta: 'Hel' })).toBe(3);
    expect(count({ type: 'response.output_text.done', text: 'Hello' })).toBe(0);
    expect(count({ type: 'response.completed', response: { output: [{ content: [{ text: 'Hello' }] }] } })).toBe(0);
    // The type is read wherever it stands: last, nested, after the text it makes a repeat of.
    expect(count({ text: 'Hello', item: { id: 'x' }, type: 'response.output_text.done' })).toBe(0);
    expect(count({ part: { text: 'Hello', type: 'response.part' } })).toBe(0);
    expect(count({ text: 'Hello', note: '"type":"response.x" in a string is text' })).toBe(5);
    expect(count({ text: 'Hello', type: 'responses' })).toBe(5);
    expect(count({ text: 'Hello', type: 'chat.response.x' })).toBe(5);
    // A spaced `"type": "response.` is not the compact form the Responses API sends: counted as text.
    const spaced = Buffer.from('{"text":"Hello", "type": "response.output_text.done"}');
    expect(lineTextBytes(spaced, 0, spaced.length)).toBe(5);
    // Only the line [s, stop) is read: a Responses event after it changes nothing.
    const two = Buffer.from('{"text":"Hello"}\n{"type":"response.done","text":"x"}');
    expect(lineTextBytes(two, 0, two.indexOf(0x0a))).toBe(5);
    const m = new SseUsageMeter(false);
    m.push(Buffer.from(`data: ${JSON.stringify({ choices: [{ delta: { content: 'wor' } }] })}\n\n`), 1);
    m.push(Buffer.from(`data: ${JSON.stringify({ choices: [{ delta: { content: 'ds' } }] })}\n\n`), 2);
    expect([m.textBytes, m.generated]).toEqual([5, 2]);
    // No report: 2 events, 5 bytes (2 tokens); the prompt estimate as given.
    expect(chargedUsage(m, 7)).toEqual({ tokens: { prompt: 7, completion: 2 }, estimated: true });
  });
});
