// The executor's half of the rollback witness (docs/ROLLBACK.md). After a
// claim commits and before its effect runs, the executor announces the
// ledger's new head in a `head` frame and waits until the supervisor answers
// `head.witnessed` with a head at or above it: only then does a record of the
// claim exist outside this ledger, so a restored older ledger can no longer
// forget an effect that happened. Reports and refusals are announced without
// waiting (their signed bytes reach the supervisor in the answer itself). A
// refusal's head goes before its answer, as a claim's; a report's waits up to
// report_head_linger_ms for the next claim's announcement, which covers it,
// so the supervisor writes one head where it wrote two (docs/ROLLBACK.md
// "Group commit").
import { CustodyError } from '../shared/errors.js';
import { withTimeout } from '../shared/timeout.js';
import type { ChildPeer } from '../shared/child/runtime.js';

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
  /** 0 from the moment the process is leaving: nothing is held back any more. */
  #lingerMs: number;
  /** The highest head no effect waits on that is not announced yet (0: none), and the timer that announces it. */
  #deferred = 0;
  #lingerTimer: NodeJS.Timeout | null = null;

  /**
   * `start`: the head presented in the hello, which the supervisor checked
   * against its witness. `lingerMs`: how long a report's head
   * may wait for a claim's announcement to carry it (0: announced at once).
   */
  constructor(start: number, lingerMs: number) {
    this.#witnessed = start;
    this.#lingerMs = lingerMs;
  }

  get witnessed(): number {
    return this.#witnessed;
  }

  attach(peer: ChildPeer): void {
    this.#peer = peer;
    this.#announced = 0;
    // The hello on this channel presented the current head: nothing deferred is left to say.
    this.#clearDeferred();
  }

  /**
   * Tell the supervisor the head advanced; false when there is no channel to
   * tell it on. A head already witnessed, or already announced on this
   * channel, is not sent again: the answer to that announcement covers it.
   */
  announce(head: number): boolean {
    if (!this.#peer) return false;
    // Heads only grow: a deferred one is at or below this one, and this frame covers it.
    const highest = Math.max(head, this.#deferred);
    this.#clearDeferred();
    if (highest <= this.#witnessed || highest <= this.#announced) return true;
    const sent = this.#peer.sendHead(highest);
    if (sent) this.#announced = highest;
    return sent;
  }

  /**
   * The head after a report, which no effect waits on: announced with the
   * next claim's head, or alone once the linger has passed. A process
   * killed meanwhile loses only the announcement: its next hello presents
   * the head, and a ledger restored in that window lost reports whose
   * claims stand (docs/ROLLBACK.md, "What the operator sees").
   */
  announceLater(head: number): void {
    if (this.#lingerMs === 0) {
      this.announce(head);
      return;
    }
    if (head <= this.#witnessed || head <= this.#announced || head <= this.#deferred) return;
    this.#deferred = head;
    if (this.#lingerTimer) return;
    this.#lingerTimer = setTimeout(() => {
      this.#lingerTimer = null;
      this.#flush();
    }, this.#lingerMs);
    this.#lingerTimer.unref();
  }

  /** The process stops taking work: a held-back head is announced now, and every later one at once. */
  leaving(): void {
    this.#lingerMs = 0;
    this.#flush();
  }

  #flush(): void {
    if (this.#deferred > 0) this.announce(this.#deferred);
  }

  #clearDeferred(): void {
    this.#deferred = 0;
    if (this.#lingerTimer) clearTimeout(this.#lingerTimer);
    this.#lingerTimer = null;
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
