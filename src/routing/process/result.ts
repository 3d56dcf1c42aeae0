// What a processor makes of one resource: a route (without its hostname, which the builder adds) or the reason it is
// not served. Shared by the per-kind processors and the builder.
import type { ReadyReason, Route } from '../types.js';

export type Refusal = { reason: ReadyReason; message: string };
export type RouteOrError = Omit<Route, 'hostname'> | Refusal;

export function invalid(message: string): Refusal {
  return { reason: 'InvalidSpec', message };
}
