// The client requests in flight on each session of a child (ARCHITECTURE.md
// §7 "children"; quarantine in supervisor/operations/quarantine.ts): a
// request is admitted before it is sent (a quarantined one is refused here),
// and counted on its session until it is answered. One the channel's end took
// with it stays counted, so the crash can be attributed to it.
import { toCustodyError } from '../../shared/errors.js';
import type { MessageKind, RequestOf, ResultOf } from '../../shared/protocol/messages.js';
import type { ChildSession } from '../../shared/child/spawn.js';
import type { RequestOptions } from '../../shared/wire/client.js';

export class InFlightRequests {
  readonly #admit: ((requestId: string) => void) | undefined;
  /** Per session, each client request's count of sends not yet answered. */
  readonly #bySession = new WeakMap<ChildSession, Map<string, number>>();

  constructor(admit: ((requestId: string) => void) | undefined) {
    this.#admit = admit;
  }

  /** Send on `session`; with a `requestId`, admitted first and counted until answered. */
  send<K extends MessageKind>(session: ChildSession, kind: K, body: RequestOf<K>, options: RequestOptions & { requestId?: string } = {}): Promise<ResultOf<K>> {
    const { requestId, ...channelOptions } = options;
    if (requestId === undefined) return session.channel.request(kind, body, channelOptions);
    try {
      this.#admit?.(requestId);
    } catch (error) {
      return Promise.reject(toCustodyError(error));
    }
    if (session.channel.state !== 'open') return session.channel.request(kind, body, channelOptions);
    const done = this.#count(session, requestId);
    return session.channel.request(kind, body, channelOptions).then(
      (result) => {
        done();
        return result;
      },
      (error: unknown) => {
        // Still open: answered with an error, or given up on (a deadline); not lost to the channel's end.
        if (session.channel.state === 'open') done();
        throw error;
      },
    );
  }

  /** The client requests still counted on a session that ended; forgets the session. */
  take(session: ChildSession): string[] {
    const requests = [...(this.#bySession.get(session)?.keys() ?? [])];
    this.#bySession.delete(session);
    return requests;
  }

  /** Count one send of `requestId` on `session`; returns the function that uncounts it. */
  #count(session: ChildSession, requestId: string): () => void {
    let table = this.#bySession.get(session);
    if (!table) this.#bySession.set(session, (table = new Map<string, number>()));
    const counts = table;
    counts.set(requestId, (counts.get(requestId) ?? 0) + 1);
    return () => {
      const left = (counts.get(requestId) ?? 1) - 1;
      if (left > 0) counts.set(requestId, left);
      else counts.delete(requestId);
    };
  }
}
