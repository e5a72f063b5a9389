// The executor's half of the rollback witness (docs/ROLLBACK.md). After a
// claim commits and before its effect runs, the executor announces the
// ledger's new head in a `head` frame and waits until the supervisor answers
// `head.witnessed` with a head at or above it: only then does a record of the
// claim exist outside this ledger, so a restored older ledger can no longer
// forget an effect that happened. Reports and refusals are announced without
// waiting (their signed bytes reach the supervisor in the answer itself).
import { CustodyError } from '../shared/errors.js';
import { withTimeout } from '../shared/timeout.js';
import { type ChildPeer } from '../shared/child/runtime.js';

interface Waiter {
  readonly head: number;
  resolve(): void;
}

export class HeadWitness {
  #peer: ChildPeer | null = null;
  #witnessed: number;
  /** The highest head announced on the current channel: claims of one grouped commit share their head, and one frame says it. */
  #announced = 0;
  readonly #waiters = new Set<Waiter>();

  /** `start`: the head presented in the hello, which the supervisor checked against its witness. */
  constructor(start: number) {
    this.#witnessed = start;
  }

  get witnessed(): number {
    return this.#witnessed;
  }

  attach(peer: ChildPeer): void {
    this.#peer = peer;
    this.#announced = 0;
  }

  /**
   * Tell the supervisor the head advanced; false when there is no channel to
   * tell it on. A head already witnessed, or already announced on this
   * channel, is not sent again: the answer to that announcement covers it.
   */
  announce(head: number): boolean {
    if (!this.#peer) return false;
    if (head <= this.#witnessed || head <= this.#announced) return true;
    const sent = this.#peer.sendHead(head);
    if (sent) this.#announced = head;
    return sent;
  }

  /** `head.witnessed`: the supervisor recorded `head`; every effect waiting at or below it may go. */
  acknowledge(head: number): void {
    if (head > this.#witnessed) this.#witnessed = head;
    for (const waiter of this.#waiters) {
      if (waiter.head <= this.#witnessed) {
        this.#waiters.delete(waiter);
        waiter.resolve();
      }
    }
  }

  /**
   * Announce `head` and wait until it is witnessed. Rejects with
   * `head_unwitnessed` after `deadlineMs`: the effect must not run then (the
   * claim stands, without a report, and reconciliation settles it).
   */
  async announceAndWait(head: number, deadlineMs: number, operationId: string): Promise<void> {
    if (head <= this.#witnessed) return;
    let waiter!: Waiter;
    const witnessed = new Promise<void>((resolve) => {
      waiter = { head, resolve };
    });
    this.#waiters.add(waiter);
    if (!this.announce(head)) {
      this.#waiters.delete(waiter);
      throw unwitnessed(head, operationId, 'the channel to the supervisor is closed');
    }
    try {
      await withTimeout(witnessed, deadlineMs, () => {
        throw unwitnessed(head, operationId, `no head.witnessed within ${deadlineMs} ms`);
      });
    } finally {
      this.#waiters.delete(waiter);
    }
  }
}

function unwitnessed(head: number, operationId: string, why: string): CustodyError {
  return new CustodyError(
    'head_unwitnessed',
    `operation ${operationId}: ledger head ${head} was not witnessed by the supervisor (${why}); the effect was not run and the claim stays — reconcile it`,
  );
}
