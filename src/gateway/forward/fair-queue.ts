// Fair, prioritized queueing (SPEC §14) while every ready endpoint of an LLM deployment is saturated: `critical`
// first, then fair shares across tenants by start-time fair queueing (a tenant sending ten times as much gets no more
// than its share while others wait); `sheddable` refused at once. Saturation: the endpoints' reports (alike on every
// replica) plus this replica's traffic since. docs/llm.md, "Fair queueing of a saturated deployment", has the design.
import type { Priority, Route } from '../../routing/types.js';
import { gatewayError, type GatewayError } from '../http/errors.js';
import { copyWith } from '../../same-shape.js';
import type { Metrics } from '../../observe/metrics.js';
import type { EndpointStats, Scraped } from './endpoint-stats.js';
import type { Target, TargetPicker } from './targets.js';

/** A queued request, as the queue sees it (the Exchange). */
export interface Queued {
  /** Its turn: it goes on to pick an endpoint now; `room`: an endpoint with room, for a pick that has none. */
  dispatch(room: Target): void;
  /** Refused (sheddable while saturated, past a bound, waited too long). */
  shed(err: GatewayError): void;
}

/** Who a request is, for the queue: priority, fair-share group and its weight, and the bytes its body holds. */
export interface Ticket {
  priority: Priority;
  tenant: string;
  weight: number;
  bytes: number;
}

export interface QueueSettings {
  enabled: boolean;
  maxWaitSeconds: number;
  maxQueued: number;
  maxQueuedBytes: number;
  maxWaiting: number;
  maxKvCache: number;
}

export const PRIORITIES: readonly Priority[] = ['critical', 'standard', 'sheddable'];
/** The priorities that wait in a queue (`sheddable` never does). */
const QUEUED_PRIORITIES: readonly Priority[] = ['critical', 'standard'];

/**
 * Running slots of a deployment kept free for critical requests while they are recent (`reserved`); where other
 * replicas send too (`shared`), a request of a tenant below its share of the deployment's recent sends (`below`) may
 * take them as well.
 */
export const CRITICAL_RESERVE = 1;
/**
 * The reserve where other replicas send too: each sees another's take only at its next scrape, so one slot more covers
 * that blind window (on the bench's 32 slots, 3.4 % of output; the critical tenant's TTFT p90 through two gateways
 * +4..+5 % of alone instead of +19..+30 %).
 */
export const CRITICAL_RESERVE_SHARED = 2;
/** How long after a critical request the reserve holds. */
export const CRITICAL_RECENT_MS = 1000;

interface Entry {
  q: Queued;
  t: Ticket;
  tag: number;
  at: number;
  timer: NodeJS.Timeout;
  level: Level;
  tenant: TenantQueue;
  dq: DeploymentQueue;
}

interface TenantQueue {
  name: string;
  entries: Entry[];
  /** Where its last request queued finishes (its next starts there, or at the virtual time if later). */
  last: number;
}

interface Level {
  priority: Priority;
  tenants: Map<string, TenantQueue>;
  /** Virtual time: the start tag of the last request sent on. */
  vtime: number;
  count: number;
}

interface DeploymentQueue {
  route: Route;
  levels: Level[];
  count: number;
  bytes: number;
}

/** What this replica did at an endpoint since its last scrape, and what the endpoint's reports taught. */
interface Since {
  sample: Scraped | undefined;
  /**
   * This replica's own changes there (a request sent: +1, ended: -1) when they happened (Date.now()), oldest first;
   * those the sample holds already are dropped when it arrives.
   */
  at: number[];
  delta: number[];
  /** Their sum: this replica's change in flight there since the sample. */
  change: number;
  /** Running sequences at once when it also had waiting ones: its capacity (max seen); 0 = not known yet. */
  capacity: number;
}

/** A deployment's sends per tenant, per weight, in this second (`now`, since `since`) and the one before. */
interface Recent {
  since: number;
  now: Map<string, number>;
  before: Map<string, number>;
}

/** Requests of others at a deployment's endpoints from which a replica counts as one of several (`shared`). */
const SHARED_MIN = 2;

/** How long a quiet tenant's request waits for a slot its own replica frees before it may take the reserve. */
const RESERVE_AFTER_MS = 20;

/** The length of one of Recent's two windows. */
const RECENT_MS = 1000;

/** Own changes kept per endpoint at most (each sample drops those it holds). */
const MAX_CHANGES = 4096;

export class FairQueues {
  private readonly queues = new Map<string, DeploymentQueue>();
  private readonly where = new Map<Queued, Entry>();
  private readonly since = new Map<string, Since>();
  /** When each deployment last had a critical request (Date.now()), while recent. */
  private readonly lastCritical = new Map<string, number>();
  private readonly recent = new Map<string, Recent>();
  /** Deployments that ever queued: their queue length reads 0 once drained (a series that vanished would read stale). */
  private readonly queuedOnce = new Set<string>();
  private pumpScheduled = false;
  private ticker: NodeJS.Timeout | undefined;

  constructor(
    private readonly settings: QueueSettings,
    private readonly picker: TargetPicker,
    private readonly stats: EndpointStats | undefined,
    private readonly metrics: Metrics,
  ) {}

  /**
   * A request about to pick an endpoint of `route`: undefined when it goes on now; else it was queued or refused (its
   * `dispatch` or `shed` is called later, or `shed` was called already).
   */
  enter(route: Route, q: Queued, t: Ticket): 'queued' | 'shed' | undefined {
    if (!this.settings.enabled || route.kind !== 'llm' || !this.stats) return undefined;
    const dq = this.queues.get(route.id);
    // Nothing waits and there is room: straight on (the common case costs one look at the endpoints' figures). A
    // critical request may take one place more, in a backend's own queue: it then starts at the next slot any replica
    // frees, not only at the next this replica frees.
    const slack = t.priority === 'critical' ? 1 : 0;
    const now = Date.now();
    if (slack) this.lastCritical.set(route.id, now);
    const ahead = !dq ? 0 : slack ? dq.levels[0].count : dq.count;
    // A standard request never takes the reserve on arrival: below its share, it may once it waited RESERVE_AFTER_MS.
    if (ahead === 0 && !this.saturated(route, slack) && (slack || !this.reserved(route, now))) {
      this.sent(route.id, t, now);
      return undefined;
    }
    const labels = { project: route.project, deployment: route.deployment, priority: t.priority };
    if (t.priority === 'sheddable') {
      this.metrics.queueShed.inc(copyWith(labels, { reason: 'sheddable' }));
      q.shed(overloaded(route, 'sheddable', this.retryAfter()));
      return 'shed';
    }
    const queue = dq ?? this.queueOf(route);
    queue.route = route;
    const full =
      queue.count >= this.settings.maxQueued
        ? 'queue_full'
        : queue.bytes + t.bytes > this.settings.maxQueuedBytes
          ? 'queue_bytes'
          : undefined;
    if (full && !this.evictBelow(queue, t, full)) {
      this.metrics.queueShed.inc(copyWith(labels, { reason: full }));
      q.shed(overloaded(route, full, this.retryAfter()));
      return 'shed';
    }
    this.push(queue, q, t);
    this.tick();
    return 'queued';
  }

  /** A queued request whose client went away (or that was answered otherwise): out of the queue at once. */
  remove(q: Queued): boolean {
    const e = this.where.get(q);
    if (!e) return false;
    this.take(e, false);
    return true;
  }

  /** This replica sends a request to / ends one at `origin` (the picker's begin and end). */
  begun(origin: string): void {
    this.record(origin, 1);
  }

  ended(origin: string): void {
    this.record(origin, -1);
    if (this.where.size > 0) this.schedulePump();
  }

  /**
   * One change of this replica's own in flight at `origin`, with its time (the next sample holds it or not). Only at
   * an endpoint with fresh figures: elsewhere no room is judged from them, and nothing would drop the changes.
   */
  private record(origin: string, delta: number): void {
    if (!this.settings.enabled) return;
    const sample = this.stats?.fresh(origin);
    if (!sample) return;
    const s = this.sinceOf(origin, sample);
    if (s.at.length >= MAX_CHANGES) {
      // Bounded should samples stop coming: the oldest half goes (counted as held by the next sample).
      const n = MAX_CHANGES / 2;
      for (let i = 0; i < n; i++) s.change -= s.delta[i];
      s.at.splice(0, n);
      s.delta.splice(0, n);
    }
    s.at.push(Date.now());
    s.delta.push(delta);
    s.change += delta;
  }

  /**
   * Requests queued per deployment of the table (`routes`) and priority (servegate_queue_length), named as the table
   * names it now: 0 for one that queued and drained; a deployment the table no longer has goes, as its series do.
   */
  *lengths(
    routes: Iterable<Route>,
  ): Iterable<{ project: string; deployment: string; priority: string; count: number }> {
    const live = new Set<string>();
    for (const route of routes) {
      if (!this.queuedOnce.has(route.id)) continue;
      live.add(route.id);
      const dq = this.queues.get(route.id);
      for (const priority of QUEUED_PRIORITIES) {
        const count = dq?.levels.find((l) => l.priority === priority)?.count ?? 0;
        yield { project: route.project, deployment: route.deployment, priority, count };
      }
    }
    for (const id of this.queuedOnce) if (!live.has(id) && !this.queues.has(id)) this.queuedOnce.delete(id);
  }

  /** One deployment's queue for /deployments and the page; undefined when it never queued. */
  view(
    route: Route,
  ): { queued: number; bytes: number; byPriority: Record<string, number>; saturated: boolean } | undefined {
    const dq = this.queues.get(route.id);
    // Every LLM deployment can queue while queueing is on: one that never did shows an empty queue (the others never
    // queue, nor any with queueing off: undefined).
    if (!dq && (route.kind !== 'llm' || !this.settings.enabled)) return undefined;
    const byPriority: Record<string, number> = {};
    if (!dq) {
      for (const priority of QUEUED_PRIORITIES) byPriority[priority] = 0;
      return { queued: 0, bytes: 0, byPriority, saturated: this.saturated(route) };
    }
    for (const l of dq.levels) byPriority[l.priority] = l.count;
    return { queued: dq.count, bytes: dq.bytes, byPriority, saturated: this.saturated(route) };
  }

  close(): void {
    clearInterval(this.ticker);
    this.ticker = undefined;
    for (const e of [...this.where.values()]) clearTimeout(e.timer);
  }

  /**
   * Every ready endpoint of the route's backend is saturated (no figures: not, as the picker judges it then);
   * `slack`: places more than maxWaiting allows (a critical request's one).
   */
  saturated(route: Route, slack = 0): boolean {
    const list = this.picker.targets(route.backend);
    if (!list || list.length === 0) return false;
    const now = Date.now();
    // An address a connection to failed lately has no figures (read as unbounded room): it is passed over, as by the picks.
    const down = this.picker.passedOver(list, now);
    for (const t of list) if (!down?.(t) && this.roomAt(t, now) + slack > 0) return false;
    return true;
  }

  /** The endpoint with the most room, if any has room (`slack`: places more than maxWaiting allows). */
  roomiest(route: Route, slack = 0): Target | undefined {
    const list = this.picker.targets(route.backend);
    if (!list) return undefined;
    const now = Date.now();
    const down = this.picker.passedOver(list, now);
    let best: Target | undefined;
    let most = 0;
    for (const t of list) {
      if (down?.(t)) continue;
      const room = this.roomAt(t, now) + slack;
      if (room > most) {
        most = room;
        best = t;
      }
    }
    return best;
  }

  /**
   * While the deployment had a critical request in the last CRITICAL_RECENT_MS, a standard request leaves the last
   * CRITICAL_RESERVE running slots of its endpoints (all together) free and none waiting in their own queues: a
   * critical request then starts at once instead of at the next slot freed, behind any standard one waiting there.
   * True: the running slots free are the reserve's (or fewer). Endpoints whose capacity is not known yet, or under 8
   * slots in all: no reserve.
   */
  private reserved(route: Route, now: number): boolean {
    const seen = this.lastCritical.get(route.id);
    if (seen === undefined) return false;
    if (now - seen > CRITICAL_RECENT_MS) {
      this.lastCritical.delete(route.id);
      return false;
    }
    const list = this.picker.targets(route.backend);
    if (!list) return false;
    let free = 0;
    let capacity = 0;
    let others = 0;
    for (const t of list) {
      const room = this.roomAt(t, now);
      const known = this.since.get(t.origin)?.capacity;
      if (!known) return false;
      capacity += known;
      const o = this.othersAt(t.origin, now);
      others += o;
      // Room past the waiting places is free running slots.
      const slots = room - this.settings.maxWaiting - extraPlace(o);
      if (slots > 0) free += slots;
    }
    // A small deployment keeps no reserve (at most one slot in eight).
    const reserve = Math.min(
      others >= SHARED_MIN ? CRITICAL_RESERVE_SHARED : CRITICAL_RESERVE,
      Math.floor(capacity / 8),
    );
    return reserve > 0 && free <= reserve;
  }

  /**
   * Whether the deployment's endpoints report requests other than this replica's (other gateway replicas, or clients
   * of their own): at least SHARED_MIN of them. Then this replica sees only the slots its own requests free, and a
   * quiet tenant's request would wait N times as long for one as with one replica; so it may take the reserve.
   */
  private shared(route: Route, now: number): boolean {
    const list = this.picker.targets(route.backend);
    if (!list) return false;
    let others = 0;
    for (const t of list) others += this.othersAt(t.origin, now);
    return others >= SHARED_MIN;
  }

  /** Requests at `origin` in its last report that are not this replica's (no fresh report: 0). */
  private othersAt(origin: string, now: number): number {
    const s = this.stats?.fresh(origin, now);
    if (!s) return 0;
    // Its own requests the report holds: those in flight now less its changes since.
    const own = Math.max(0, this.picker.inflightAt(origin) - this.sinceOf(origin, s).change);
    return Math.max(0, s.running + s.waiting - own);
  }

  /** Whether `t` has room for one more request now. */
  hasRoom(t: Target): boolean {
    return this.roomAt(t, Date.now()) > 0;
  }

  /** Requests `t` takes before it is saturated (above 0: room; no figures: unbounded). */
  private roomAt(t: Target, now: number): number {
    const s = this.stats?.fresh(t.origin, now);
    if (!s) return Infinity;
    if (s.kv !== undefined && s.kv > this.settings.maxKvCache) return 0;
    const since = this.sinceOf(t.origin, s);
    // Until a report with waiting requests teaches the capacity, a guess that doubles with each report (TCP's slow
    // start): a first burst waits here, not in the backend's queue, and costs a few scrapes at most to ramp up.
    const capacity = since.capacity || Math.max(1, 2 * s.running);
    // The endpoint's requests now: what it reported, plus this replica's own changes there that the report does not
    // hold (sinceOf); never fewer than this replica's own in flight (requests on their way when it reported are not in
    // its figures). Not scaled by this replica's share: a replica with a small share would then see every room as full
    // and its share would shrink further (measured: one of two replicas down to 1-3 requests an endpoint).
    const own = this.picker.inflightAt(t.origin);
    const total = Math.max(s.running + s.waiting + since.change, own);
    // Running slots fill first (the capacity its reports taught), then the waiting queue.
    const others = Math.max(0, s.running + s.waiting - Math.max(0, own - since.change));
    return capacity + this.settings.maxWaiting + extraPlace(others) - total;
  }

  /** The counts since `origin`'s last scrape (its own changes the new one holds are dropped when it arrives). */
  private sinceOf(origin: string, sample = this.stats?.fresh(origin)): Since {
    let s = this.since.get(origin);
    if (!s) this.since.set(origin, (s = { sample: undefined, at: [], delta: [], change: 0, capacity: 0 }));
    if (sample && sample !== s.sample) {
      s.sample = sample;
      // In its figures: a request this replica sent before the scrape was sent (one sent while the scrape was on its
      // way is not, however late the answer is read), and one that ended before the answer was read.
      const sent = sample.sent ?? sample.at;
      let kept = 0;
      for (let i = 0; i < s.at.length; i++) {
        if (s.delta[i] > 0 ? s.at[i] < sent : s.at[i] <= sample.at) s.change -= s.delta[i];
        else {
          s.at[kept] = s.at[i];
          s.delta[kept++] = s.delta[i];
        }
      }
      s.at.length = s.delta.length = kept;
      if (sample.waiting > 0 && sample.running > s.capacity) s.capacity = sample.running;
    }
    return s;
  }

  private queueOf(route: Route): DeploymentQueue {
    const dq: DeploymentQueue = {
      route,
      levels: QUEUED_PRIORITIES.map((priority) => ({
        priority,
        tenants: new Map(),
        vtime: 0,
        count: 0,
      })),
      count: 0,
      bytes: 0,
    };
    this.queues.set(route.id, dq);
    this.queuedOnce.add(route.id);
    return dq;
  }

  private push(dq: DeploymentQueue, q: Queued, t: Ticket): void {
    const level = dq.levels.find((l) => l.priority === t.priority)!;
    let tenant = level.tenants.get(t.tenant);
    if (!tenant) level.tenants.set(t.tenant, (tenant = { name: t.tenant, entries: [], last: 0 }));
    const tag = Math.max(level.vtime, tenant.last);
    tenant.last = tag + 1 / weightOf(t.weight);
    const timer = setTimeout(() => {
      if (!this.where.has(q)) return;
      this.take(entry, false);
      const route = dq.route;
      this.metrics.queueShed.inc({
        project: route.project,
        deployment: route.deployment,
        priority: t.priority,
        reason: 'timeout',
      });
      this.observeWait(dq, entry);
      q.shed(overloaded(route, 'timeout', this.retryAfter()));
    }, this.settings.maxWaitSeconds * 1000);
    const entry: Entry = { q, t, tag, at: performance.now(), timer, level, tenant, dq };
    tenant.entries.push(entry);
    level.count++;
    dq.count++;
    dq.bytes += t.bytes;
    this.where.set(q, entry);
  }

  /**
   * Takes `e` out of its queue: sent on (`served`), or shed or gone, when its tenant gets back the turn it was given
   * (its later requests, and its next, start 1/weight sooner: a tenant is not charged for requests never sent).
   */
  private take(e: Entry, served: boolean): void {
    clearTimeout(e.timer);
    this.where.delete(e.q);
    const i = e.tenant.entries.indexOf(e);
    if (i !== -1) e.tenant.entries.splice(i, 1);
    if (!served) {
      const turn = 1 / weightOf(e.t.weight);
      for (let j = Math.max(0, i); j < e.tenant.entries.length; j++)
        e.tenant.entries[j].tag = Math.max(e.level.vtime, e.tenant.entries[j].tag - turn);
      e.tenant.last = Math.max(e.level.vtime, e.tenant.last - turn);
    }
    if (e.tenant.entries.length === 0) e.level.tenants.delete(e.tenant.name);
    e.level.count--;
    const dq = e.dq;
    dq.count--;
    dq.bytes -= e.t.bytes;
    if (dq.count === 0 && this.queues.get(dq.route.id) === dq) this.queues.delete(dq.route.id);
  }

  /**
   * A full queue makes room for `t` by refusing the newest request of a lower priority, else, at its own priority, the
   * newest of the tenant holding the most places per weight when that is more than `t`'s tenant would hold with it
   * (fair shares hold at the bound too: one tenant's backlog never turns another's first request away). False: none.
   */
  private evictBelow(dq: DeploymentQueue, t: Ticket, reason: 'queue_full' | 'queue_bytes'): boolean {
    const rank = PRIORITIES.indexOf(t.priority);
    for (let i = dq.levels.length - 1; i >= 0; i--) {
      const l = dq.levels[i];
      const below = PRIORITIES.indexOf(l.priority) > rank;
      if ((!below && l.priority !== t.priority) || l.count === 0) continue;
      const newest = below ? newestOf(l) : newestOfLargest(l, t);
      if (!newest) continue;
      if (reason === 'queue_bytes' && dq.bytes - newest.t.bytes + t.bytes > this.settings.maxQueuedBytes) return false;
      this.take(newest, false);
      this.metrics.queueShed.inc({
        project: dq.route.project,
        deployment: dq.route.deployment,
        priority: l.priority,
        reason,
      });
      this.observeWait(dq, newest);
      newest.q.shed(overloaded(dq.route, reason, this.retryAfter()));
      return true;
    }
    return false;
  }

  /**
   * The next request of a queue: the highest priority, then the smallest tag among its tenants' first requests
   * (`belowAt`: only those of tenants below their share then).
   */
  private next(dq: DeploymentQueue, belowAt?: number): Entry | undefined {
    for (const l of dq.levels) {
      if (l.count === 0) continue;
      let best: Entry | undefined;
      for (const tq of l.tenants.values()) {
        const e = tq.entries[0];
        if (!e || (best && e.tag >= best.tag)) continue;
        if (belowAt === undefined || this.mayTakeReserve(dq.route.id, e, belowAt)) best = e;
      }
      if (best) return best;
    }
    return undefined;
  }

  /**
   * A queued request of a tenant below its share that has waited RESERVE_AFTER_MS: a slot its own replica frees by
   * then is taken first (the reserve stays the critical requests'); past that, the reserve spares it the longer wait.
   */
  private mayTakeReserve(route: string, e: Entry, now: number): boolean {
    return performance.now() - e.at >= RESERVE_AFTER_MS && this.below(route, e.t, now);
  }

  /** A request of `t` goes on to `route`'s endpoints now: counted in its tenant's recent sends. */
  private sent(route: string, t: Ticket, now: number): void {
    const r = this.recentOf(route, now);
    r.now.set(t.tenant, (r.now.get(t.tenant) ?? 0) + 1 / weightOf(t.weight));
  }

  /**
   * Whether `t`'s tenant sent less than its share of the deployment's requests over the last second or two (per
   * weight, against the mean of the tenants that sent): a quiet tenant is, one sending more than the others is not.
   */
  private below(route: string, t: Ticket, now: number): boolean {
    const r = this.recentOf(route, now);
    let total = 0;
    let tenants = 0;
    for (const [name, n] of r.now) {
      total += n + (r.before.get(name) ?? 0);
      tenants++;
    }
    for (const [name, n] of r.before)
      if (!r.now.has(name)) {
        total += n;
        tenants++;
      }
    const mine = (r.now.get(t.tenant) ?? 0) + (r.before.get(t.tenant) ?? 0);
    if (mine === 0) tenants++;
    return mine * tenants < total;
  }

  /** The deployment's sends per tenant in this second and the one before (older ones are dropped). */
  private recentOf(route: string, now: number): Recent {
    let r = this.recent.get(route);
    if (!r) this.recent.set(route, (r = { since: now, now: new Map(), before: new Map() }));
    else if (now - r.since >= RECENT_MS) {
      r.before = now - r.since < 2 * RECENT_MS ? r.now : new Map();
      r.now = new Map();
      r.since = now;
    }
    return r;
  }

  /** Sends on, from every queue, while its deployment has room. */
  private pump(): void {
    this.pumpScheduled = false;
    for (const dq of [...this.queues.values()]) {
      // Bounded: each turn takes one request out of the queue.
      for (let n = dq.count; n > 0 && dq.count > 0; n--) {
        let e = this.next(dq);
        if (!e) break;
        // The highest priority goes first: when it finds no room, nothing after it does.
        const critical = e.t.priority === 'critical';
        const room = this.roomiest(dq.route, critical ? 1 : 0);
        if (!room) break;
        const now = Date.now();
        // Only the slots kept free are left: with other replicas, the first request of a tenant below its share takes
        // them; no other does.
        if (!critical && this.reserved(dq.route, now))
          if (!this.shared(dq.route, now)) e = undefined;
          else if (!this.mayTakeReserve(dq.route.id, e, now)) e = this.next(dq, now);
        if (!e) break;
        this.sent(dq.route.id, e.t, now);
        e.level.vtime = Math.max(e.level.vtime, e.tag);
        this.take(e, true);
        this.observeWait(dq, e);
        e.q.dispatch(room);
      }
    }
    if (this.where.size === 0) {
      clearInterval(this.ticker);
      this.ticker = undefined;
    }
  }

  private observeWait(dq: DeploymentQueue, e: Entry): void {
    const labels = { project: dq.route.project, deployment: dq.route.deployment, priority: e.t.priority };
    this.metrics.queueWait.observe(labels, (performance.now() - e.at) / 1000);
  }

  private schedulePump(): void {
    if (this.pumpScheduled) return;
    this.pumpScheduled = true;
    setImmediate(() => this.pump());
  }

  /** While anything waits, a look every 10 ms catches what a scrape changed (a request ending pumps at once). */
  private tick(): void {
    if (this.ticker) return;
    this.ticker = setInterval(() => this.schedulePump(), 10);
    this.ticker.unref();
  }

  private retryAfter(): string {
    return String(Math.max(1, Math.min(5, Math.ceil(this.settings.maxWaitSeconds))));
  }
}

const WHY: Record<string, string> = {
  sheddable: 'sheddable requests are refused while it is saturated',
  queue_full: 'its queue in the gateway is full',
  queue_bytes: 'its queue in the gateway holds too many bytes',
  timeout: 'the request waited in its queue for the longest time allowed',
};

/** 429 (sheddable) or 503 with Retry-After, OpenAI code `overloaded`. */
export function overloaded(route: Route, reason: string, retryAfter: string): GatewayError {
  return gatewayError(
    'overloaded',
    `deployment ${route.project}/${route.deployment} is saturated: ${WHY[reason] ?? reason}; retry after ${retryAfter} s`,
    { 'retry-after': retryAfter },
    reason === 'sheddable' ? 429 : 503,
  );
}

/**
 * A place in an endpoint's own queue past `maxWaiting`, so that a running slot freed there is refilled at once, without
 * a round trip through the gateway: kept by a replica alone there, not where its report shows SHARED_MIN requests of
 * others (each replica would keep it, N places in all, and a critical request would wait behind them).
 */
function extraPlace(others: number): number {
  return others >= SHARED_MIN ? 0 : 1;
}

/** A tenant's weight as fair shares count it: one unless a positive one is set. */
function weightOf(w: number): number {
  return w > 0 ? w : 1;
}

/** The newest request queued at a level. */
function newestOf(l: Level): Entry | undefined {
  let newest: Entry | undefined;
  for (const tq of l.tenants.values()) {
    const e = tq.entries[tq.entries.length - 1];
    if (e && (!newest || e.at > newest.at)) newest = e;
  }
  return newest;
}

/** The newest request of the tenant with the most places per weight at `t`'s level, if it holds more than `t`'s would. */
function newestOfLargest(l: Level, t: Ticket): Entry | undefined {
  const mine = ((l.tenants.get(t.tenant)?.entries.length ?? 0) + 1) / weightOf(t.weight);
  let largest: TenantQueue | undefined;
  let most = mine;
  for (const tq of l.tenants.values()) {
    const last = tq.entries[tq.entries.length - 1];
    if (!last || tq.name === t.tenant) continue;
    const held = tq.entries.length / weightOf(last.t.weight);
    if (held > most) {
      most = held;
      largest = tq;
    }
  }
  return largest?.entries[largest.entries.length - 1];
}
