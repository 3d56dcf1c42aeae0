// The deterministic part of LLM endpoint picking (SPEC §12 and its 2026-11-26 amendment; docs/llm.md, "Which
// endpoint"): for prompt sequences — tenants' single-turn questions, conversations turn by turn, completions — the
// endpoint a gateway picks, as whole tables. The product (keys read from the body's bytes, TargetPicker) against an
// independent reimplementation here (JSON.parse, its own FNV-1a and rendezvous hashing), which must agree on every row:
// that is what lets two gateway replicas agree with no shared state. Then the rendezvous property: adding or removing
// one of n endpoints moves about 1/n of the keys, and only those of that endpoint.
import { describe, expect, test } from '@jest/globals';
import fc from 'fast-check';
import { TargetPicker } from '../../../src/gateway/forward/targets.js';
import { llmMembers } from '../../../src/gateway/openai/llm-body.js';
import { promptKey, type PromptKey } from '../../../src/gateway/openai/prefix.js';
import type { Route } from '../../../src/routing/types.js';
import { llmRoute } from '../../support/llm-route.js';

type Message = { role: string; content: string };
type Doc = { model: string; messages?: Message[]; prompt?: string };

// --- the independent reimplementation -------------------------------------------------------------------------------

function fnv(s: string, step: number, h = 0x811c9dc5): number {
  // step 8: every character of the first 256, then every eighth.
  for (let i = 0; i < s.length; i += i < 256 ? 1 : step) h = Math.imul(h ^ s.charCodeAt(i), 16777619);
  return h >>> 0;
}

/** The key docs/llm.md describes, computed from the parsed body: [hash, rule]. */
function referenceKey(doc: Doc, model: string): [number, string] {
  const head = fnv(`${model}\n`, 8);
  const line = (m: Message) => `${m.role}:${m.content}\n`;
  if (doc.prompt !== undefined) {
    const body = doc.prompt.slice(0, 2048);
    const cut = [2048, 1024, 512, 256, 128].find((b) => body.length >= b) ?? body.length;
    return [fnv(body.slice(0, cut), 8, head), 'prefix'];
  }
  const messages = doc.messages!;
  const history = messages.length > 1 ? messages.slice(0, -1) : messages;
  // A lone message is a prompt, not a conversation.
  const lead = messages.length > 1 ? history.findIndex((m) => m.role !== 'system' && m.role !== 'developer') : -1;
  if (lead === -1) {
    const body = history.map(line).join('').slice(0, 2048);
    const cut = [2048, 1024, 512, 256, 128].find((b) => body.length >= b) ?? body.length;
    return [fnv(body.slice(0, cut), 8, head), 'prefix'];
  }
  const system = history.slice(0, lead).map(line).join('').slice(0, 2048);
  const start = history.slice(lead).map(line).join('').slice(0, 512);
  return [fnv(start, 8, (fnv(system, 8, head) ^ 1) >>> 0), 'conversation'];
}

/** murmur3's finaliser. */
function fmix(x: number): number {
  x ^= x >>> 16;
  x = Math.imul(x, 0x85ebca6b);
  x ^= x >>> 13;
  x = Math.imul(x, 0xc2b2ae35);
  x ^= x >>> 16;
  return x >>> 0;
}

/** Rendezvous: the address whose score for the key is highest. */
function referencePick(key: number, addresses: readonly string[]): string {
  let best = '';
  let bestScore = -1;
  for (const a of addresses) {
    const score = fmix((key ^ fnv(a, 1)) >>> 0);
    if (score > bestScore) [best, bestScore] = [a, score];
  }
  return best;
}

// --- the product ----------------------------------------------------------------------------------------------------

const routeOf = (addresses: readonly string[]): Route => llmRoute(addresses.map((a) => `http://${a}`));

function productKey(doc: Doc, model: string): PromptKey {
  const raw = Buffer.from(JSON.stringify(doc, null, 1)); // spaced as some clients send it: the keys read the text
  const members = llmMembers(raw);
  if (members instanceof Error) throw members;
  return promptKey(raw, members, model)!;
}

// --- the prompt sequences -------------------------------------------------------------------------------------------

const words = (seed: number, n: number) => {
  let s = '';
  let x = seed;
  while (s.length < n) {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    s += `${'abcdefghijklmnopqrstuvwxyz'.slice(x % 20, (x % 20) + 2 + (x % 5))} `;
  }
  return s.slice(0, n);
};
const TENANTS = Array.from({ length: 6 }, (_, t) => `Tenant ${t}: ${words(t + 1, 3000)}`);
const APP = `One application's system prompt. ${words(99, 4000)}`;

/** Rows: [label, body]. */
function sequences(): Array<[string, Doc]> {
  const rows: Array<[string, Doc]> = [];
  for (const [t, system] of TENANTS.entries())
    for (const q of [0, 1])
      rows.push([
        `tenant ${t} question ${q}`,
        {
          model: 'm',
          messages: [
            { role: 'system', content: system },
            { role: 'user', content: `Question ${q}: ${words(100 + q, 200)}` },
          ],
        },
      ]);
  for (let c = 0; c < 8; c++) {
    const messages: Message[] = [{ role: 'system', content: APP }];
    for (let turn = 1; turn <= 4; turn++) {
      messages.push({ role: 'user', content: `Conversation ${c}, turn ${turn}: ${words(1000 + c * 10 + turn, 300)}` });
      rows.push([`conversation ${c} turn ${turn}`, { model: 'm', messages: [...messages] }]);
      messages.push({ role: 'assistant', content: words(2000 + c * 10 + turn, 800) });
      messages.push({ role: 'tool', content: words(3000 + c * 10 + turn, 1200) });
    }
  }
  const bare: Message[] = [];
  for (let turn = 1; turn <= 3; turn++) {
    bare.push({ role: 'user', content: `No system prompt, turn ${turn}: ${words(4000 + turn, 300)}` });
    rows.push([`no system prompt turn ${turn}`, { model: 'm', messages: [...bare] }]);
    bare.push({ role: 'assistant', content: words(5000 + turn, 300) });
  }
  for (const tail of ['one', 'two']) rows.push([`completion ${tail}`, { model: 'm', prompt: `${APP} ${tail}` }]);
  return rows;
}

const ADDRESSES = ['10.0.0.11:8000', '10.0.0.12:8000', '10.0.0.13:8000', '10.0.0.14:8000'];

/** The product's table: every prompt picked once before (a shared prefix seen for the first time goes in turn). */
function productTable(addresses: readonly string[]): Array<[string, string, string]> {
  const route = routeOf(addresses);
  const picker = new TargetPicker();
  const rows = sequences();
  for (const [, doc] of rows) picker.choose(route, productKey(doc, 'm'));
  return rows.map(([label, doc]) => {
    const c = picker.choose(route, productKey(doc, 'm'))!;
    return [label, c.target.address, c.reason!];
  });
}

function referenceTable(addresses: readonly string[]): Array<[string, string, string]> {
  return sequences().map(([label, doc]) => {
    const [key, rule] = referenceKey(doc, 'm');
    return [label, referencePick(key, addresses), rule];
  });
}

describe('prompt sequences → endpoint', () => {
  test('the product and an independent reimplementation agree on every row', () => {
    const table = productTable(ADDRESSES);
    expect(table).toEqual(referenceTable(ADDRESSES));
    // Another set of addresses (other hashes): still every row.
    const other = ['[fd00::7]:9000', '[fd00::8]:9000', '[fd00::9]:9000'];
    expect(productTable(other)).toEqual(referenceTable(other));
  });

  test('what the table says: tenants stay on their endpoint, conversations keep theirs from turn 2 and spread', () => {
    const table = new Map(productTable(ADDRESSES).map(([label, address, rule]) => [label, { address, rule }]));
    for (let t = 0; t < TENANTS.length; t++) {
      expect(table.get(`tenant ${t} question 0`)).toEqual(table.get(`tenant ${t} question 1`));
      expect(table.get(`tenant ${t} question 0`)!.rule).toBe('prefix');
    }
    const homes = new Set<string>();
    for (let c = 0; c < 8; c++) {
      // Turn 1 is the application's system prompt alone (shared by every conversation).
      expect(table.get(`conversation ${c} turn 1`)).toEqual(table.get('conversation 0 turn 1'));
      const home = table.get(`conversation ${c} turn 2`)!;
      expect(home.rule).toBe('conversation');
      for (const turn of [3, 4]) expect(table.get(`conversation ${c} turn ${turn}`)).toEqual(home);
      homes.add(home.address);
    }
    expect(homes.size).toBeGreaterThanOrEqual(3);
    expect(table.get('no system prompt turn 2')).toEqual(table.get('no system prompt turn 3'));
    expect(table.get('completion one')).toEqual(table.get('completion two'));
  });

  test('two gateway replicas (two pickers, each having seen the prompts once) pick alike on every row', () => {
    expect(productTable(ADDRESSES)).toEqual(productTable(ADDRESSES));
  });
});

describe('endpoints joining and leaving', () => {
  const picks = (keys: readonly number[], addresses: readonly string[]) => {
    const route = routeOf(addresses);
    const picker = new TargetPicker();
    return keys.map((hash) => picker.choose(route, { hash, rule: 'conversation' })!.target.address);
  };
  const fleet = fc
    .uniqueArray(fc.tuple(fc.integer({ min: 1, max: 254 }), fc.integer({ min: 1024, max: 65535 })), {
      minLength: 2,
      maxLength: 16,
      selector: ([h, p]) => `${h}:${p}`,
    })
    .map((list) => list.map(([h, p]) => `10.1.0.${h}:${p}`));
  const keys = fc.uniqueArray(fc.integer({ min: 0, max: 0xffffffff }), { minLength: 400, maxLength: 400 });

  /** At most about 1/n of `total` keys: the mean plus four standard deviations of the binomial. */
  const about = (total: number, n: number) => total / n + 4 * Math.sqrt((total / n) * (1 - 1 / n)) + 1;

  test('removing one of n endpoints moves only its keys, about 1/n of them', () => {
    fc.assert(
      fc.property(fleet, keys, fc.nat(), (addresses, ks, which) => {
        const gone = addresses[which % addresses.length];
        const before = picks(ks, addresses);
        const after = picks(
          ks,
          addresses.filter((a) => a !== gone),
        );
        const moved = ks.filter((_, i) => before[i] !== after[i]).length;
        for (let i = 0; i < ks.length; i++) if (before[i] !== gone) expect(after[i]).toBe(before[i]);
        expect(moved).toBeLessThanOrEqual(about(ks.length, addresses.length));
      }),
      { numRuns: 60 },
    );
  });

  test('adding one endpoint to n moves only the keys it takes, about 1/(n+1) of them', () => {
    fc.assert(
      fc.property(fleet, keys, (addresses, ks) => {
        const [added, ...rest] = addresses;
        const before = picks(ks, rest);
        const after = picks(ks, addresses);
        const moved = ks.filter((_, i) => before[i] !== after[i]).length;
        for (let i = 0; i < ks.length; i++) if (after[i] !== added) expect(after[i]).toBe(before[i]);
        expect(moved).toBeLessThanOrEqual(about(ks.length, addresses.length));
      }),
      { numRuns: 60 },
    );
  });
});
