// Where a request goes: the backend (and canary variant), then a ready endpoint by the route's policy (SPEC §12):
// round-robin, least-request, or llm: weighted rendezvous hashing of the prompt's key, so replicas pick alike with
// no shared state, spilling to the key's next choice when saturated; weights from the request rates endpoints report
// even out an imbalance of keys (docs/llm.md, "Which endpoint", has the design and its measures).
import type { Backend, Route } from '../../routing/types.js';
import type { EndpointAddress, EndpointResolver } from '../../sources/types.js';
import type { PromptKey } from '../openai/prefix.js';
import type { EndpointStats } from './endpoint-stats.js';

export interface Target {
  origin: string;
  /** Host header value for the backend. */
  authority: string;
  /** Path prefix of a url backend ("" for services). */
  basePath: string;
  /** host:port, for logs and metrics. */
  address: string;
  /** 32-bit hash of the address: its half of the rendezvous score. */
  hash: number;
}

export type Variant = 'primary' | 'canary';

/**
 * prefix / conversation: the first endpoint of that key's rendezvous order; spill: a later one, the earlier being
 * saturated; load: the least loaded (no key, or every endpoint saturated); only: one endpoint; round-robin: in turn
 * (that policy, or under llm a shared prefix seen for the first time lately).
 */
export type PickReason = 'prefix' | 'conversation' | 'spill' | 'load' | 'only' | 'round-robin';

export interface Chosen {
  target: Target;
  backend: Backend;
  /** Set when the route has a canary: which backend answers. */
  variant?: Variant;
  /** Why this endpoint (set when there was more than one to choose from). */
  reason?: PickReason;
}

export interface BalancingLimits {
  /** Scraped waiting requests above this: saturated. */
  maxWaiting: number;
  /** Scraped KV-cache use (0-1) above this: saturated. */
  maxKvCache: number;
  /** Bounded load: in flight above max(maxLoadFactor × mean, mean + maxLoadSlack) while another is below: avoided. */
  maxLoadFactor: number;
  maxLoadSlack: number;
}

export const DEFAULT_LIMITS: BalancingLimits = { maxWaiting: 5, maxKvCache: 0.8, maxLoadFactor: 1.25, maxLoadSlack: 2 };
/** How long an address a connection to failed is passed over (`unreachable`). */
export const DOWN_MS = 5_000;
/** An address a pick passes over (the retry's, those down). */
type Skip = (address: string) => boolean;
/** Most addresses remembered as down at once (expired ones go first): a bound, whatever the tables hold. */
const DOWN_MAX = 10_000;

/** The weights are brought up to date at most this often (at a pick), from the endpoints' figures. */
const WEIGHT_STEP_MS = 250;
/** Time constant of the smoothed request rates. */
const RATE_TAU_MS = 1500;
/** An endpoint's weight, in doublings, per doubling of its smoothed request rate over the mean (past the dead band). */
const RATE_GAIN = 4;
/** Rates within this of the mean (in doublings, about ±3.5 %) leave the weight at 1. */
const RATE_DEADBAND = 0.05;
/** Below this many requests per endpoint within RATE_TAU_MS, the rates say too little to move a weight. */
const RATE_MIN_REQUESTS = 4;
/** The same for endpoints that do not report their finished requests: their load (running + waiting). */
const LOAD_TAU_MS = 2000;
const WEIGHT_GAIN = 2;
/** Loads within this of the mean (in doublings, about ±7 %) leave the weight at 1. */
const WEIGHT_DEADBAND = 0.1;
/** Weights stay within 2^±2 of each other's mean, in steps of 1/8 of a doubling. */
const WEIGHT_LIMIT = 2;
const WEIGHT_STEPS = 8;
/** Below this mean load (running + waiting per endpoint) the figures say too little to move a weight. */
const WEIGHT_MIN_LOAD = 0.5;
/** Shared-prefix keys this gateway remembers having picked for (a first sighting goes to the least loaded). */
const SEEN_KEYS = 16_384;
/**
 * A conversation key picked more than HOT_PICKS times in a window of HOT_WINDOW_MS here (and in the window after) is
 * not one conversation, which sends its next turn after its last answer, but a prefix many requests share past the
 * system part (few-shot examples as messages, a long fixed opening): it is judged as a shared prefix is, with this
 * replica's bounded load, so that a burst of it does not all go to one endpoint before a scrape shows it waiting.
 */
const HOT_PICKS = 8;
const HOT_WINDOW_MS = 1000;
/** Conversation keys counted at most (the first counted dropped first). */
const HOT_KEYS = 4096;

/** Per list of endpoints: the rendezvous weights, the smoothed loads they follow, and the picks made. */
interface Balance {
  /** Weight of each endpoint (2^(level rounded to 1/8)); `uniform` while every one is 1. */
  weight: Float64Array;
  level: Float64Array;
  load: Float64Array;
  /** Requests each endpoint was sent per second (smoothed), from the counts it reports. */
  rate: Float64Array;
  /** Each endpoint's count of requests it was sent (finished + running + waiting) at its scrape of `countAt` (ms). */
  count: Float64Array;
  countAt: Float64Array;
  uniform: boolean;
  /** Date.now() of the last update (0: none yet). */
  at: number;
  /** Picks per endpoint since the list was made (its share, on /deployments). */
  picks: Float64Array;
  /** Scratch: each endpoint's in-flight count during a pick. */
  flight: Float64Array;
  /**
   * The turn of first-seen prefixes, from a random start: gateway replicas that take requests alternately would
   * otherwise send them to the same endpoint two by two.
   */
  turn: number;
}

/** Picks the backend address for one request. undefined = the Service has no ready endpoint. */
export class TargetPicker {
  private rr = new WeakMap<object, number>();
  private urlTargets = new Map<string, Target>();
  private listTargets = new WeakMap<object, readonly Target[]>();
  /** Per canaried route: the canary's share accumulated so far, in percent (a smooth weighted split, see choose). */
  private credit = new WeakMap<Route, number>();
  /** Requests this gateway has in flight per endpoint origin. */
  private readonly inflight = new Map<string, number>();
  private readonly balance = new WeakMap<readonly Target[], Balance>();
  /** Shared-prefix keys picked for lately, with the pick count when last refreshed (bounded; oldest dropped first). */
  private readonly seen = new Map<number, number>();
  private seenAt = 0;
  /** Conversation keys picked lately: the window's start (ms) × 128 + 64 when the window before was hot + picks in it. */
  private readonly recent = new Map<number, number>();
  /** Addresses a connection to failed lately, with the Date.now() until which they are passed over (`unreachable`). */
  private readonly down = new Map<string, number>();

  constructor(
    private readonly endpoints?: EndpointResolver,
    private readonly stats?: EndpointStats,
    private readonly limits: BalancingLimits = DEFAULT_LIMITS,
  ) {}

  /**
   * The backend and address for one request; a canary's share is kept by a credit, so 0 and 100 are exact and any
   * share holds within one request over any run. undefined: no ready endpoint in either variant.
   */
  choose(route: Route, prefix?: PromptKey): Chosen | undefined {
    const canary = route.canary;
    if (!canary) return this.chosen(route, route.backend, prefix);
    const credit = (this.credit.get(route) ?? 0) + canary.percent;
    const toCanary = credit >= 100;
    this.credit.set(route, toCanary ? credit - 100 : credit);
    const first = toCanary ? canary.backend : route.backend;
    const c1 = this.chosen(route, first, prefix);
    if (c1) return withVariant(c1, toCanary ? 'canary' : 'primary');
    const second = toCanary ? route.backend : canary.backend;
    const c2 = this.chosen(route, second, prefix);
    return c2 && withVariant(c2, toCanary ? 'primary' : 'canary');
  }

  /** Another address of the same backend than `avoid` (the retry after a failed connect), by the same policy. */
  pick(route: Route, backend: Backend, avoid: string, prefix?: PromptKey): Target | undefined {
    return this.chosen(route, backend, prefix, avoid)?.target;
  }

  /**
   * A connection to `address` failed (refused, unreachable, not accepted in time): for DOWN_MS the picks pass it over
   * while another address of its backend is not, so that every request does not pay a failed connect and a retry
   * until its endpoint leaves the list (a pod's readiness takes seconds; a files-source URL never does). The first
   * request after that tries it again.
   */
  unreachable(address: string, now = Date.now()): void {
    if (this.down.size >= DOWN_MAX) for (const [a, until] of this.down) if (until <= now) this.down.delete(a);
    if (this.down.size < DOWN_MAX) this.down.set(address, now + DOWN_MS);
  }

  /**
   * The addresses of `list` a pick passes over now (`unreachable`), when another of the list is not; else none (every
   * address down: each may be tried). The fair queues read room and saturation without them.
   */
  passedOver(list: readonly Target[], now = Date.now()): ((t: Target) => boolean) | undefined {
    if (this.down.size === 0 || list.length < 2) return undefined;
    const down = list.filter((t) => this.isDown(t.address, now));
    if (down.length === 0 || down.length === list.length) return undefined;
    return (t) => down.includes(t);
  }

  private isDown(address: string, now: number): boolean {
    const until = this.down.get(address);
    if (until === undefined) return false;
    if (until > now) return true;
    this.down.delete(address);
    return false;
  }

  /** Told of every request that starts and ends at an endpoint (the fair queues: fair-queue.ts). */
  watcher: { begun(origin: string): void; ended(origin: string): void } | undefined;

  /** A request to `origin` starts / ends: the in-flight counts least-request and the bounded load read. */
  begin(origin: string): void {
    this.inflight.set(origin, (this.inflight.get(origin) ?? 0) + 1);
    this.watcher?.begun(origin);
  }

  end(origin: string): void {
    const n = (this.inflight.get(origin) ?? 1) - 1;
    if (n <= 0) this.inflight.delete(origin);
    else this.inflight.set(origin, n);
    this.watcher?.ended(origin);
  }

  inflightAt(origin: string): number {
    return this.inflight.get(origin) ?? 0;
  }

  /** Per endpoint of `list`: the picks made since the list was made, and the rendezvous weight (llm). */
  picksOf(list: readonly Target[]): Array<{ picks: number; weight: number }> {
    const b = this.balance.get(list);
    return list.map((_, i) => ({ picks: b?.picks[i] ?? 0, weight: b?.weight[i] ?? 1 }));
  }

  /**
   * The ready endpoints of a backend. undefined: the backend has no endpoint list (a files-source Service, reached
   * through cluster DNS as kube-proxy would; an ExternalName Service): one target stands for it.
   */
  targets(backend: Backend): readonly Target[] | undefined {
    if (backend.kind === 'url' || backend.kind === 'urls') {
      // Made once per backend object of the table (not a list per request).
      let list = this.listTargets.get(backend);
      if (!list) {
        list = (backend.kind === 'url' ? [backend.url] : backend.urls).map((u) => this.urlTarget(u));
        this.listTargets.set(backend, list);
      }
      return list;
    }
    if (backend.externalName) return undefined;
    const eps = this.endpoints?.endpoints(backend);
    if (eps === undefined) return undefined;
    let list = this.listTargets.get(eps);
    if (!list) {
      const authority = `${backend.service}.${backend.namespace}.svc:${backend.port}`;
      list = eps.map((ep) => {
        const a = addr(ep);
        return { origin: `http://${a}`, authority, basePath: '', address: a, hash: hash32(a) };
      });
      this.listTargets.set(eps, list);
    }
    return list;
  }

  private chosen(route: Route, backend: Backend, prefix?: PromptKey, avoid?: string): Chosen | undefined {
    const list = this.targets(backend);
    if (list === undefined) {
      const target = this.single(backend);
      return target && { target, backend };
    }
    if (list.length === 0) return undefined;
    if (list.length === 1) return { target: list[0], backend, reason: 'only' };
    const b = this.balanceOf(list);
    // Passed over: `avoid` (the retry's address) and, while another address of the list is not, every address a
    // connection to failed lately (`unreachable`) — all of them, not only the policy's first choice, and by the
    // retry's pick too, so that two dead addresses of three do not take turns being tried first.
    let skip: Skip | undefined = avoid === undefined ? undefined : (a) => a === avoid;
    if (this.down.size > 0) {
      const now = Date.now();
      const passed: Skip = (a) => a === avoid || this.isDown(a, now);
      if (list.some((t) => passed(t.address)) && !list.every((t) => passed(t.address))) skip = passed;
    }
    const c = this.byPolicy(route, list, b, backend, prefix, skip);
    b.picks[list.indexOf(c.target)]++;
    return c;
  }

  private byPolicy(
    route: Route,
    list: readonly Target[],
    b: Balance,
    backend: Backend,
    prefix: PromptKey | undefined,
    avoid: Skip | undefined,
  ): Chosen {
    const policy = route.balancing.policy;
    if (policy === 'round-robin') return { target: this.roundRobin(list, avoid), backend, reason: 'round-robin' };
    if (policy === 'least-request' || prefix === undefined)
      return { target: this.leastLoaded(list, avoid, policy === 'llm'), backend, reason: 'load' };
    return this.byPrefix(list, b, backend, prefix, avoid);
  }

  private balanceOf(list: readonly Target[]): Balance {
    let b = this.balance.get(list);
    if (!b) {
      const n = list.length;
      b = {
        weight: new Float64Array(n).fill(1),
        level: new Float64Array(n),
        load: new Float64Array(n),
        rate: new Float64Array(n),
        count: new Float64Array(n),
        countAt: new Float64Array(n),
        uniform: true,
        at: 0,
        picks: new Float64Array(n),
        flight: new Float64Array(n),
        turn: Math.floor(Math.random() * n),
      };
      this.balance.set(list, b);
    }
    return b;
  }

  /**
   * Weights against each endpoint's reported request rate (finished + running + waiting, smoothed over RATE_TAU_MS;
   * else its reported load): above the mean, less weight, until requests, not only keys, spread evenly. Steps of 1/8
   * of a doubling keep small differences from moving keys; figures every replica scrapes alike give weights alike.
   */
  private reweigh(list: readonly Target[], b: Balance, now: number): void {
    const n = list.length;
    const dt = b.at === 0 ? LOAD_TAU_MS : Math.min(now - b.at, 4 * LOAD_TAU_MS);
    b.at = now;
    const a = 1 - Math.exp(-dt / LOAD_TAU_MS);
    let sum = 0;
    let rates = 0;
    let counted = true;
    for (let i = 0; i < n; i++) {
      const s = this.stats?.fresh(list[i].origin, now);
      const load = s ? s.running + s.waiting : this.inflightAt(list[i].origin);
      b.load[i] += a * (load - b.load[i]);
      sum += b.load[i];
      if (s?.finished === undefined) {
        counted = false;
        b.countAt[i] = 0;
        continue;
      }
      // The endpoint's count at each new scrape: its rate over the time between the two scrapes, smoothed.
      const count = s.finished + s.running + s.waiting;
      if (s.at !== b.countAt[i]) {
        const since = s.at - b.countAt[i];
        const d = count - b.count[i];
        // d < 0: the server started again (its counter too); its rate is taken from its next scrape on.
        if (b.countAt[i] !== 0 && since > 0 && d >= 0) {
          const w = 1 - Math.exp(-Math.min(since, 4 * RATE_TAU_MS) / RATE_TAU_MS);
          b.rate[i] += w * ((d * 1000) / since - b.rate[i]);
        }
        b.count[i] = count;
        b.countAt[i] = s.at;
      }
      rates += b.rate[i];
    }
    // A function of the smoothed figures alone (no state of its own): replicas reading the same figures come to the
    // same weights, whenever each started.
    let levels = 0;
    if (counted) {
      const mean = rates / n;
      if ((mean * RATE_TAU_MS) / 1000 < RATE_MIN_REQUESTS) return;
      for (let i = 0; i < n; i++) {
        const r = Math.log2(Math.max(b.rate[i], mean / 16) / mean);
        b.level[i] = -RATE_GAIN * Math.sign(r) * Math.max(0, Math.abs(r) - RATE_DEADBAND);
        levels += b.level[i];
      }
    } else {
      const mean = sum / n;
      if (mean < WEIGHT_MIN_LOAD) return;
      for (let i = 0; i < n; i++) {
        const r = Math.log2(Math.max(b.load[i], mean / 16) / mean);
        b.level[i] = -WEIGHT_GAIN * Math.sign(r) * Math.max(0, Math.abs(r) - WEIGHT_DEADBAND);
        levels += b.level[i];
      }
    }
    let uniform = true;
    for (let i = 0; i < n; i++) {
      const level = Math.max(-WEIGHT_LIMIT, Math.min(WEIGHT_LIMIT, b.level[i] - levels / n));
      b.level[i] = level;
      const q = Math.round(level * WEIGHT_STEPS) / WEIGHT_STEPS;
      b.weight[i] = 2 ** q;
      if (q !== 0) uniform = false;
    }
    b.uniform = uniform;
  }

  /** llm: the first endpoint in the key's (weighted) rendezvous order that is not saturated. */
  private byPrefix(list: readonly Target[], b: Balance, backend: Backend, key: PromptKey, avoid?: Skip): Chosen {
    const now = Date.now();
    if (now - b.at >= WEIGHT_STEP_MS) this.reweigh(list, b, now);
    const { maxLoadFactor, maxLoadSlack } = this.limits;
    // Each endpoint's in-flight count, read once (a map lookup each).
    const flight = b.flight;
    let total = 1; // the request being placed
    for (let i = 0; i < list.length; i++) total += flight[i] = this.inflightAt(list[i].origin);
    const mean = total / list.length;
    const bound = Math.max(maxLoadFactor * mean, mean + maxLoadSlack);
    let top: Target | undefined;
    let topScore = -1;
    let best: Target | undefined;
    let bestScore = -1;
    const prefix = key.hash;
    // A shared prefix this gateway has not picked for lately is likely cached nowhere (a one-off prompt): it goes to
    // its rendezvous choice only while that endpoint is idle (nothing in flight from here, nothing waiting there),
    // else to the next endpoint in turn that is not saturated, as round robin would send it — which spreads prompts
    // that share nothing better than the load figures can (a request in flight says nothing of whether it still
    // holds the server's prefill). From its next request on, it goes to its rendezvous choice.
    if (key.rule === 'prefix' && !this.sawKey(prefix)) {
      let first = -1;
      for (let i = 0; i < list.length; i++) {
        if (avoid?.(list[i].address)) continue;
        const score = b.uniform ? mix32(prefix ^ list[i].hash) : weighted(mix32(prefix ^ list[i].hash), b.weight[i]);
        if (score > topScore) {
          topScore = score;
          first = i;
        }
      }
      if (first !== -1 && flight[first] === 0 && !(this.stats?.fresh(list[first].origin)?.waiting ?? 0))
        return { target: list[first], backend, reason: 'prefix' };
      const start = b.turn++ % list.length;
      for (let k = 0; k < list.length; k++) {
        const i = (start + k) % list.length;
        const t = list[i];
        if (!avoid?.(t.address) && !this.saturated(t, flight[i], bound))
          return { target: t, backend, reason: 'round-robin' };
      }
      return { target: this.leastLoaded(list, avoid, true), backend, reason: 'load' };
    }
    // A conversation's turn must reach the endpoint holding its history whichever replica sends it: it is judged by
    // what the endpoint reports (alike on every replica), not by this replica's own in-flight count, whose bursts
    // would send one turn in eight elsewhere to prefill its whole history again; and it is ranked without weights
    // (conversations are many small keys, which hashing spreads evenly enough, and weights that two replicas hold a
    // step apart for a while would split the conversations near a boundary between two endpoints).
    const uniform = b.uniform || key.rule === 'conversation';
    const conversation = key.rule === 'conversation' && !this.hot(prefix, now);
    for (let i = 0; i < list.length; i++) {
      const t = list[i];
      if (avoid?.(t.address)) continue;
      const score = uniform ? mix32(prefix ^ t.hash) : weighted(mix32(prefix ^ t.hash), b.weight[i]);
      if (score > topScore) {
        topScore = score;
        top = t;
      }
      if (score <= bestScore || this.saturated(t, flight[i], bound, conversation)) continue;
      bestScore = score;
      best = t;
    }
    if (best) return { target: best, backend, reason: best === top ? key.rule : 'spill' };
    return { target: this.leastLoaded(list, avoid, true), backend, reason: 'load' };
  }

  /**
   * Over the scraped bounds, or over the bounded load `bound` with one more request than its `inflight` here
   * (`scrapedOnly`: with fresh figures, only past twice the bound and 4 more: a conversation's endpoint keeps its turns
   * through this replica's ordinary bursts, but not a pile-up that no one conversation makes, such as a shared key's
   * requests long enough in flight to stay under HOT_PICKS a second).
   */
  private saturated(t: Target, inflight: number, bound: number, scrapedOnly = false): boolean {
    const s = this.stats?.fresh(t.origin);
    if (inflight + 1 > (scrapedOnly && s ? Math.max(2 * bound, bound + 4) : bound)) return true;
    return (
      s !== undefined && (s.waiting > this.limits.maxWaiting || (s.kv !== undefined && s.kv > this.limits.maxKvCache))
    );
  }

  /** Whether the conversation key `key` is picked for by many requests at once (HOT_PICKS); counts this pick. */
  private hot(key: number, now: number): boolean {
    const v = this.recent.get(key);
    let start = now;
    let flag = 0;
    let n = 1;
    if (v !== undefined) {
      const at = Math.floor(v / 128);
      const picks = v % 64;
      if (now - at < HOT_WINDOW_MS) {
        start = at;
        flag = v % 128 >= 64 ? 64 : 0;
        n = Math.min(63, picks + 1);
      } else if (now - at < 2 * HOT_WINDOW_MS && picks > HOT_PICKS) {
        start = at + HOT_WINDOW_MS;
        flag = 64;
      }
    } else if (this.recent.size >= HOT_KEYS) this.recent.delete(this.recent.keys().next().value!);
    this.recent.set(key, start * 128 + flag + n);
    return flag !== 0 || n > HOT_PICKS;
  }

  /** Whether `key` was picked for lately; remembers it either way (refreshed once it is half the bound old). */
  private sawKey(key: number): boolean {
    const n = ++this.seenAt;
    const at = this.seen.get(key);
    if (at !== undefined && n - at < SEEN_KEYS / 2) return true;
    if (at !== undefined) this.seen.delete(key);
    else if (this.seen.size >= SEEN_KEYS) this.seen.delete(this.seen.keys().next().value!);
    this.seen.set(key, n);
    return at !== undefined;
  }

  /**
   * The fewest in flight here (with `scraped`: plus the waiting requests the endpoint reports, its KV-cache use
   * breaking ties), among the endpoints within the bounded load when any is (an endpoint's own report cannot draw
   * more than that: one claiming an empty queue still gets at most its share); ties in turn.
   */
  private leastLoaded(list: readonly Target[], avoid: Skip | undefined, scraped: boolean): Target {
    let bound = Infinity;
    if (scraped) {
      let total = 1; // the request being placed
      for (const t of list) total += this.inflightAt(t.origin);
      const mean = total / list.length;
      bound = Math.max(this.limits.maxLoadFactor * mean, mean + this.limits.maxLoadSlack);
    }
    const start = this.next(list);
    let best = list[start];
    let bestLoad = Infinity;
    let bestWithin = false;
    for (let k = 0; k < list.length; k++) {
      const t = list[(start + k) % list.length];
      if (avoid?.(t.address) && list.length > 1) continue;
      const inflight = this.inflightAt(t.origin);
      let load = inflight;
      if (scraped) {
        const s = this.stats?.fresh(t.origin);
        if (s) load += s.waiting + (s.kv ?? 0);
      }
      const within = inflight + 1 <= bound;
      if (within === bestWithin ? load < bestLoad : within) {
        bestLoad = load;
        best = t;
        bestWithin = within;
      }
    }
    return best;
  }

  private roundRobin(list: readonly Target[], avoid?: Skip): Target {
    let i = this.next(list);
    for (let k = 1; avoid && k < list.length && avoid(list[i].address); k++) i = this.next(list);
    return list[i];
  }

  private next(list: readonly Target[]): number {
    const i = this.rr.get(list) ?? 0;
    this.rr.set(list, (i + 1) % list.length);
    return i % list.length;
  }

  private urlTarget(url: string): Target {
    let t = this.urlTargets.get(url);
    if (!t) {
      const u = new URL(url);
      t = {
        origin: u.origin,
        authority: u.host,
        basePath: u.pathname === '/' ? '' : u.pathname,
        address: u.host,
        hash: hash32(u.host),
      };
      this.urlTargets.set(url, t);
    }
    return t;
  }

  /** A backend reached by name: an ExternalName Service, or a Service through cluster DNS (files source). */
  private single(backend: Backend): Target | undefined {
    if (backend.kind !== 'service') return undefined;
    if (backend.externalName) {
      // Knative serverless: the Service's external name (its gateway), with the Host Knative routes on.
      const key = `${backend.externalName}|${backend.port}|${backend.service}.${backend.namespace}`;
      let t = this.urlTargets.get(key);
      if (!t) {
        const host = backend.externalName.includes(':') ? `[${backend.externalName}]` : backend.externalName;
        const address = `${host}:${backend.port}`;
        t = {
          origin: `http://${address}`,
          authority: `${backend.service}.${backend.namespace}.svc.cluster.local`,
          basePath: '',
          address,
          hash: hash32(address),
        };
        this.urlTargets.set(key, t);
      }
      return t;
    }
    // No endpoint tracking (files source): go through cluster DNS, as kube-proxy would.
    const authority = `${backend.service}.${backend.namespace}.svc:${backend.port}`;
    return { origin: `http://${authority}`, authority, basePath: '', address: authority, hash: hash32(authority) };
  }
}

/** `c` for a canaried route. Written out, not `{ ...c, variant }`: see copyWith (src/same-shape.ts). */
function withVariant(c: Chosen, variant: Variant): Chosen {
  return { target: c.target, backend: c.backend, variant, reason: c.reason };
}

function addr(ep: EndpointAddress): string {
  return ep.host.includes(':') ? `[${ep.host}]:${ep.port}` : `${ep.host}:${ep.port}`;
}

export const FNV_OFFSET = 0x811c9dc5;

/** FNV-1a, 32 bits. */
export function hash32(s: string): number {
  return fnv32(s, 0, s.length, FNV_OFFSET);
}

/** FNV-1a over s[from, to), carried on from `h`: hash32(a + b) = fnv32(b, 0, b.length, hash32(a)). */
export function fnv32(s: string, from: number, to: number, h: number): number {
  for (let i = from; i < to; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/**
 * Weighted rendezvous (the logarithmic method): w / -ln(u) for u = (x + ½) / 2^32 uniform in (0, 1), so an endpoint
 * wins a share of the keys proportional to its weight; with equal weights the order is that of x itself.
 */
function weighted(x: number, w: number): number {
  return w / -Math.log((x + 0.5) / 4294967296);
}

/** A 32-bit finaliser (murmur3's): spreads the rendezvous score of (prefix, endpoint) evenly. */
function mix32(x: number): number {
  x ^= x >>> 16;
  x = Math.imul(x, 0x85ebca6b);
  x ^= x >>> 13;
  x = Math.imul(x, 0xc2b2ae35);
  x ^= x >>> 16;
  return x >>> 0;
}
