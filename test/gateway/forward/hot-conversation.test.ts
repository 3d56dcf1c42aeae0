// A conversation key that many requests share (SPEC §12 and its amendment: a hot prefix spreads over the fewest
// endpoints every replica agrees on; bounded load): few-shot examples written as messages, or a long fixed opening,
// make every request of an application a "conversation" with one key. Judged as one conversation — by the endpoint's
// scraped figures alone — a burst of them all went to one endpoint until a scrape showed it waiting (through a gateway
// with queueing off, 64 of 64 to one simulated replica of four, the other three idle). Found by a hostile review.
import { afterEach, describe, expect, jest, test } from '@jest/globals';
import { TargetPicker, type Target } from '../../../src/gateway/forward/targets.js';
import type { Scraped } from '../../../src/gateway/forward/endpoint-stats.js';
import { promptKey, type PromptKey } from '../../../src/gateway/openai/prefix.js';
import { llmMembers } from '../../../src/gateway/openai/llm-body.js';
import { FixedStats, llmRoute } from '../../support/llm-route.js';

const urls = Array.from({ length: 4 }, (_, i) => `http://127.0.0.1:${8001 + i}`);
const idle = (): Scraped => ({ waiting: 0, running: 0, kv: 0.05, blockSize: 16, at: Date.now() });

function keyOf(doc: unknown): PromptKey {
  const raw = Buffer.from(JSON.stringify(doc));
  const members = llmMembers(raw);
  if (members instanceof Error) throw members;
  return promptKey(raw, members, 'chat')!;
}

const SYSTEM = 'You are the support agent of ACME. Answer briefly. '.repeat(10);
const EXAMPLE = 'Example question about an order that was delayed in shipping and the customer is upset. '.repeat(4);
/** One application's requests: the same two example turns, then the question asked. */
const fewShot = (question: string) =>
  keyOf({
    model: 'chat',
    messages: [
      { role: 'system', content: SYSTEM },
      { role: 'user', content: EXAMPLE },
      { role: 'assistant', content: 'Example answer. '.repeat(20) },
      { role: 'user', content: question },
    ],
  });

function picker(): { p: TargetPicker; stats: FixedStats } {
  const stats = new FixedStats();
  for (const u of urls) stats.figures.set(u, idle());
  return { p: new TargetPicker(undefined, stats), stats };
}

/** `n` requests picked one after another, each staying in flight: how many each endpoint got. */
function burst(p: TargetPicker, key: (i: number) => PromptKey, n: number): Map<string, number> {
  const route = llmRoute(urls);
  const counts = new Map<string, number>();
  for (let i = 0; i < n; i++) {
    const t: Target = p.choose(route, key(i))!.target;
    p.begin(t.origin);
    counts.set(t.origin, (counts.get(t.origin) ?? 0) + 1);
  }
  return counts;
}

afterEach(() => {
  jest.useRealTimers();
});

describe('a conversation key shared by many requests at once', () => {
  test('few-shot requests have one conversation key whatever is asked', () => {
    expect(fewShot('where is my order 1?')).toEqual(fewShot('can I return item 2?'));
    expect(fewShot('x').rule).toBe('conversation');
  });

  test('a burst spreads by bounded load over the first endpoints of its ranking, the same on every replica', () => {
    const a = picker();
    const b = picker();
    const counts = burst(a.p, (i) => fewShot(`question ${i}`), 40);
    // 40 in flight over 4: mean 10, none past max(1.25 × 10, 10 + 2) = 12.5 while another is below it.
    expect(Math.max(...counts.values())).toBeLessThanOrEqual(13);
    expect(counts.size).toBeGreaterThanOrEqual(3);
    // Another replica sending the same burst uses the same endpoints in the same order.
    const other = burst(b.p, (i) => fewShot(`question ${i}`), 40);
    expect([...other.entries()]).toEqual([...counts.entries()]);
  });

  test('one real conversation keeps its endpoint past this replica’s bounded load; a hot key is no longer one', () => {
    jest.useFakeTimers({ now: 1_000_000 });
    const { p, stats } = picker();
    const route = llmRoute(urls);
    const conversation = fewShot('a conversation of its own');
    const home = p.choose(route, conversation)!;
    expect(home.reason).toBe('conversation');
    // Six in flight at its endpoint from this replica (other keys), none elsewhere: its next turns stay home.
    for (let i = 0; i < 6; i++) p.begin(home.target.origin);
    for (let turn = 0; turn < 8; turn++) {
      jest.setSystemTime(1_000_000 + 200 * (turn + 1)); // a turn every 200 ms: 5 a second
      for (const u of urls) stats.figures.set(u, idle());
      expect(p.choose(route, conversation)!.target.origin).toBe(home.target.origin);
    }
    // The same key nine times within a second is many requests, not one conversation: bounded load moves it on...
    jest.setSystemTime(1_010_000);
    for (const u of urls) stats.figures.set(u, idle());
    const picks = Array.from({ length: 9 }, () => p.choose(route, conversation)!);
    expect(picks.slice(0, 8).every((c) => c.target.origin === home.target.origin)).toBe(true);
    expect(picks[8].reason).toBe('spill');
    // ...for the second after too, and it is one conversation again once a whole second passed without a burst.
    jest.setSystemTime(1_011_500);
    for (const u of urls) stats.figures.set(u, idle());
    expect(p.choose(route, conversation)!.reason).toBe('spill');
    jest.setSystemTime(1_013_600);
    for (const u of urls) stats.figures.set(u, idle());
    expect(p.choose(route, conversation)!.target.origin).toBe(home.target.origin);
  });
});

describe('a conversation key whose requests pile up at a low rate', () => {
  test('long requests of one key, 4 a second, stop piling on one endpoint past twice the bounded load', () => {
    jest.useFakeTimers({ now: 2_000_000 });
    const { p, stats } = picker();
    const route = llmRoute(urls);
    const key = fewShot('the same opening, long answers');
    const counts = new Map<string, number>();
    for (let i = 0; i < 40; i++) {
      jest.setSystemTime(2_000_000 + 250 * i); // 4 a second: never more than HOT_PICKS (8) in one
      for (const u of urls) stats.figures.set(u, idle()); // the endpoints report no queue (vLLM runs 256 at once)
      const t = p.choose(route, key)!.target;
      p.begin(t.origin); // and every one stays in flight
      counts.set(t.origin, (counts.get(t.origin) ?? 0) + 1);
    }
    // 40 in flight: mean 10, bounded load 12.5; a conversation key spills past max(2 × 12.5, 12.5 + 4) = 25.
    expect(Math.max(...counts.values())).toBeLessThanOrEqual(26);
    expect(counts.size).toBeGreaterThanOrEqual(2);
  });
});
