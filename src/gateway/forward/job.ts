// A request or upgrade as its client connection (listen/connection.ts) runs it: the job's side, and the side of the
// connection a job sees. Declared here, below listen/, so that forward/ never imports the listener.
import type { Socket } from 'node:net';
import type { GatewayError } from '../http/errors.js';
import type { PlaneContext } from './context.js';

/** A request (or upgrade) waiting for, or holding, its turn on the connection. */
export interface Job {
  start(): void;
  /** The connection closed before the job's turn came. */
  drop(): void;
  /** Called about once a second while the job holds the turn (timeouts). */
  tick(now: number): void;
  /** Shutdown deadline: end what is still running. */
  deadline(): void;
  /** A parse error while this job's own request is still being read: true when the job answers it. */
  interrupt?(err: GatewayError): boolean;
}

/** The client connection, as a job sees it. */
export interface Conn {
  readonly socket: Socket;
  /** The data plane the connection came in on: its settings and services, shared by its jobs. */
  readonly ctx: PlaneContext;
  /** The peer address (without the IPv4-mapped IPv6 prefix). */
  readonly client: string;
  readonly proto: 'http' | 'https';
  /** This job's answer is the connection's last: nothing parsed after it is served; the socket lingers after it. */
  lastAnswer(): void;
  /** The job's answer is complete (or abandoned): the next one may go. */
  done(job: Job): void;
  /** Starts the clocks of the body the active request reads (one per connection: one request reads at a time). */
  clockBody(now: number, idleMs: number, minBytesPerSecond: number): void;
  /** One look at them (`backpressured`: bytes wait in the request's own buffer): 'idle' or 'slow' when a bound broke. */
  bodyLate(now: number, backpressured: boolean): 'idle' | 'slow' | undefined;
}
