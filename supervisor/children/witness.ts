// The supervisor's witness of its children's store heads (docs/ROLLBACK.md).
// A head is kept in supervisor.db, outside the store it counts, and never
// lowered. Heads are group-committed: written with the next request write of
// supervisor.db (a kernel decision is always followed by one before the
// supervisor acts on it outside the kernel) or, at the latest, in one
// transaction at the end of the event-loop turn in which they arrived (an
// executor's) or after timing.kernel_head_linger_ms (a kernel's); an
// executor hears head.witnessed only after that commit. A head not yet
// written counts as witnessed for this process's own checks.
import { CustodyError } from '../../shared/errors.js';
import type { SupervisorStore } from '../store/supervisor-store.js';

export class HeadWitnessStore {
  readonly #store: SupervisorStore;

  constructor(store: SupervisorStore) {
    this.#store = store;
  }

  /** The highest head witnessed for this child (0: none yet). */
  head(name: string): number {
    return this.#store.witnessedHead(name);
  }

  /** Record now, synchronously and durably (a hello's head). */
  recordNow(name: string, head: number): void {
    if (head <= this.#store.witnessedHead(name)) return;
    this.#store.raiseWitness(new Map([[name, head]]));
  }

  /**
   * Record with the next write of supervisor.db; resolves once durable. An
   * executor's head (an effect waits for it) is written at the end of this
   * turn at the latest; a kernel's may linger up to `lingerMs` for a request
   * write to carry it (docs/ROLLBACK.md, "Group commit").
   */
  record(name: string, head: number, lingerMs = 0): Promise<void> {
    return this.#store.witnessLater(name, head, lingerMs);
  }
}

/** The refusal of a store whose head is below its witness: names the store, both heads and what to do. */
export function rolledBack(name: string, role: 'kernel' | 'executor', store: string, presented: number, witnessed: number): CustodyError {
  const what = role === 'kernel' ? 'kernel store' : `ledger of executor ${name}`;
  return new CustodyError(
    'store_rolled_back',
    `${what} ${store} presents head ${presented}, below the head ${witnessed} this supervisor witnessed: it was restored from an older copy ` +
      `or lost its last writes (a deleted -wal). It is refused so that it cannot answer for what it has forgotten. ` +
      (role === 'kernel'
        ? 'Put back the newest copy of kernel.db with its -wal; see docs/ROLLBACK.md.'
        : `Put back the newest copy of ledger.db with its -wal, or, if this backup was restored on purpose, run \`custody recover-rollback ${name}\` (docs/ROLLBACK.md).`),
  );
}
