// Open websocket tunnels per API key and client address (limits.websocketsPer*, 0 = no cap): past a cap, 429 before
// the backend is asked.
import { gatewayError, type GatewayError } from '../http/errors.js';

export class TunnelCounts {
  private readonly byKey = new Map<string, number>();
  private readonly byClient = new Map<string, number>();

  constructor(
    private readonly perKey: number,
    private readonly perClient: number,
  ) {}

  /** Counts one more tunnel for `key` (its display name, unique) and `client`, or the 429 of the cap it would pass. */
  open(key: string, client: string): { scope: 'key' | 'client'; error: GatewayError } | undefined {
    const k = this.byKey.get(key) ?? 0;
    const c = this.byClient.get(client) ?? 0;
    if (this.perKey > 0 && k >= this.perKey)
      return { scope: 'key', error: tooMany(`API key "${key}" has ${k} websockets open (limits.websocketsPerKey)`) };
    if (this.perClient > 0 && c >= this.perClient)
      return { scope: 'client', error: tooMany(`${client} has ${c} websockets open (limits.websocketsPerClient)`) };
    this.byKey.set(key, k + 1);
    this.byClient.set(client, c + 1);
    return undefined;
  }

  /** One tunnel counted by `open` has ended. */
  close(key: string, client: string): void {
    drop(this.byKey, key);
    drop(this.byClient, client);
  }

  /** Tunnels open (admitted and not ended) for a key. */
  openFor(key: string): number {
    return this.byKey.get(key) ?? 0;
  }
}

function drop(m: Map<string, number>, id: string): void {
  const n = (m.get(id) ?? 0) - 1;
  if (n > 0) m.set(id, n);
  else m.delete(id);
}

const tooMany = (why: string): GatewayError =>
  gatewayError('rate_limit_exceeded', `too many open websockets: ${why}; close one first`, { 'retry-after': '1' });
