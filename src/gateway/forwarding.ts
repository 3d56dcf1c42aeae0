// One request on its way to the backend: an undici dispatch handler that writes each chunk to the client as it
// arrives, aborts the upstream when the client goes away, and turns failures into the route's errors.
// A class rather than closures: this object is made for every request.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Readable } from 'node:stream';
import type { Dispatcher } from 'undici';
import type { Accepted } from './decide.js';
import type { Gateway } from './gateway.js';
import { BODY_TOO_LARGE, ClientGone, CONNECT_FAILURES, mapUpstreamError, tooLarge } from './upstream-errors.js';
import { downstreamHeaders } from './headers.js';
import type { Target } from './upstream.js';

export class Forwarding implements Dispatcher.DispatchHandler {
  private controller: Dispatcher.DispatchController | undefined;
  private clientGone = false;
  private responded = false;
  private readonly onClose: () => void;

  // Not readonly: released when the request is over. undici keeps finished requests (and so their handler) in its
  // queue for a while; a handler still holding the request, the response and the body would carry them into the
  // old generation of the heap, and every promoted request costs a bit of the next full GC pause.
  constructor(
    private gw: Gateway,
    private req: IncomingMessage,
    private res: ServerResponse,
    private d: Accepted,
    private body: Buffer | Readable | null,
    private readonly length: number | undefined,
    private readonly started: number,
    private readonly requestId: string,
    private readonly attempt: number,
    private target: Target,
  ) {
    this.onClose = () => {
      if (this.res.writableFinished) return;
      this.abort();
    };
    res.on('close', this.onClose);
  }

  private abort(): void {
    this.clientGone = true;
    const c = this.controller;
    if (c && !c.aborted) c.abort(new ClientGone());
  }

  /** Shutdown deadline: an event stream ends cleanly at an event boundary; anything else is cut. */
  end(): void {
    const res = this.res;
    if (!res) return;
    this.abort();
    if (res.headersSent && String(res.getHeader('content-type') ?? '').startsWith('text/event-stream')) res.end();
    else res.destroy();
  }

  private settle(): void {
    this.gw.settled(this);
    this.res.off('close', this.onClose);
  }

  /** Drops the references to the request's objects (see the constructor). */
  private release(): void {
    const self = this as unknown as Record<string, unknown>;
    self.req = self.res = self.d = self.body = self.gw = self.target = self.controller = undefined;
  }

  onRequestStart(c: Dispatcher.DispatchController): void {
    this.controller = c;
    if (this.clientGone) c.abort(new ClientGone());
  }

  onResponseStart(_c: Dispatcher.DispatchController, status: number, upstream: Record<string, string | string[] | undefined>): void {
    if (status < 200) return; // 1xx informational: not passed on
    this.responded = true;
    const res = this.res;
    const out = downstreamHeaders(upstream, this.gw.cors.enabled);
    for (const k in out) res.setHeader(k, out[k]!);
    res.statusCode = status;
    const ct = upstream['content-type'];
    if (typeof ct === 'string' && ct.startsWith('text/event-stream')) {
      res.setHeader('x-accel-buffering', 'no');
      res.setHeader('cache-control', upstream['cache-control'] ?? 'no-cache');
      res.flushHeaders();
    }
  }

  onResponseData(c: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.clientGone) return;
    if (!this.res.write(chunk)) {
      c.pause();
      this.res.once('drain', () => c.resume());
    }
  }

  onResponseEnd(): void {
    this.settle();
    this.res.end();
    this.gw.finish(this.req, this.res, this.started, this.d.route, this.res.statusCode, this.requestId);
    this.release();
  }

  onResponseError(_c: Dispatcher.DispatchController | undefined, err: Error): void {
    if (!this.res) return; // already over
    this.settle();
    try {
      this.fail(err);
    } finally {
      this.release();
    }
  }

  private fail(err: Error): void {
    const { gw, req, res, d, started, requestId } = this;
    const route = d.route;
    if (this.clientGone || err instanceof ClientGone) {
      gw.deps.metrics.upstreamErrors.inc({ cause: 'client_abort' });
      gw.finish(req, res, started, route, 499, requestId);
      return;
    }
    const code = (err as { code?: string }).code ?? '';
    const body = this.body;
    if (!this.responded && CONNECT_FAILURES.has(code) && (body === null || Buffer.isBuffer(body)) && this.attempt < 1) {
      // Nothing reached the backend: one more try, on another endpoint when there is one.
      gw.deps.logger.debug({ requestId, err: code, target: this.target.origin }, 'connect failed, retrying once');
      const { length, attempt } = this;
      const avoid = this.target.origin.slice(7);
      setTimeout(() => gw.forward(req, res, d, body, length, started, requestId, attempt + 1, avoid), 25);
      return;
    }
    if (this.responded || res.headersSent) {
      // Mid-response failure: cut the connection so the client sees an incomplete response, never a silent truncation.
      const cause = code === 'UND_ERR_BODY_TIMEOUT' ? 'stream_idle_timeout' : 'reset';
      gw.deps.metrics.upstreamErrors.inc({ cause });
      gw.deps.logger.warn({ requestId, project: route.project, deployment: route.deployment, cause }, 'backend response ended early');
      res.destroy();
      gw.finish(req, res, started, route, res.statusCode, requestId);
      return;
    }
    if (code === BODY_TOO_LARGE) {
      res.setHeader('connection', 'close');
      gw.refuse(req, res, tooLarge(gw.maxBody), d.dialect, started, requestId, route);
      return;
    }
    const mapped = mapUpstreamError(code, route);
    gw.deps.metrics.upstreamErrors.inc({ cause: mapped.cause });
    gw.deps.logger.warn({ requestId, project: route.project, deployment: route.deployment, cause: mapped.cause, err: code || err.message }, 'backend failed');
    gw.refuse(req, res, mapped.error, d.dialect, started, requestId, route);
  }
}
