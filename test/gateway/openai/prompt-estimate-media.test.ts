// Hostile review of the usage floor (issue 31 item 6): the prompt estimate that a reported usage is raised to (at half
// its rate) counts the prompt's text, not media sent inline. A chat with one 4 MiB base64 image that vLLM reports as
// 1,200 prompt tokens was charged 524,311 (the data URL's bytes at 8 a token): one honest picture spent a 100k tpm
// five times over.
import { describe, expect, test } from '@jest/globals';
import { estimatePrompt, llmMembers } from '../../../src/gateway/openai/llm-body.js';

const estimate = (body: object): number => {
  const raw = Buffer.from(JSON.stringify(body));
  const m = llmMembers(raw);
  if (m instanceof Error) throw m;
  return estimatePrompt(raw, m);
};

/** 4 MiB of base64, as an SDK writes an image or a sound inline. */
const B64 = Buffer.alloc(3 << 20, 7).toString('base64');
const TEXT = 'Describe what you see in this picture, in three sentences.';

describe('the prompt estimate counts text, not inline media', () => {
  const textOnly = estimate({ messages: [{ role: 'user', content: [{ type: 'text', text: TEXT }] }] });

  test.each([
    ['a chat image_url data URL', { type: 'image_url', image_url: { url: `data:image/png;base64,${B64}` } }],
    ['a chat input_audio', { type: 'input_audio', input_audio: { data: B64, format: 'wav' } }],
    ['a chat file', { type: 'file', file: { file_data: `data:application/pdf;base64,${B64}`, filename: 'a.pdf' } }],
    ['a video_url data URL', { type: 'video_url', video_url: { url: `data:video/mp4;base64,${B64}` } }],
  ])('%s adds about nothing to the text beside it', (_what, part) => {
    const e = estimate({ messages: [{ role: 'user', content: [{ type: 'text', text: TEXT }, part] }] });
    expect(e).toBeGreaterThanOrEqual(textOnly);
    expect(e).toBeLessThan(textOnly + 40);
  });

  test('Responses input_image / input_file and an Ollama images list', () => {
    const responses = estimate({
      input: [
        {
          role: 'user',
          content: [
            { type: 'input_text', text: TEXT },
            { type: 'input_image', image_url: `data:image/png;base64,${B64}` },
            { type: 'input_file', file_data: `data:application/pdf;base64,${B64}` },
          ],
        },
      ],
    });
    expect(responses).toBeLessThan(textOnly + 60);
    const ollama = estimate({ messages: [{ role: 'user', content: TEXT, images: [B64, B64] }] });
    expect(ollama).toBeLessThan(textOnly + 40);
  });

  test('text is still counted whole, whatever it starts with', () => {
    const long = `data: ${'word '.repeat(40_000)}`;
    expect(estimate({ messages: [{ role: 'user', content: long }] })).toBeGreaterThanOrEqual(long.length / 4);
    expect(estimate({ prompt: long })).toBe(Math.ceil(long.length / 4));
    expect(estimate({ messages: [{ role: 'user', content: [{ type: 'text', text: long }] }] })).toBeGreaterThanOrEqual(
      long.length / 4,
    );
  });
});
