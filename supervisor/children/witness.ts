// The supervisor's witness of its children's store heads (docs/ROLLBACK.md).
// A head is kept in supervisor.db, outside the store it counts, and never
// lowered. A kernel's head is recorded at once, before the answers that follow
// its `head` frame are acted on. Executors' heads are group-committed: every
// head announced within one turn of the event loop goes into one transaction
// (one fsync), and each announcer hears back only after that commit.
import { CustodyError } from '../../shared/errors.js';
import { type SupervisorStore } from '../store/supervisor-store.js';

interface Batch {
  readonly heads: Map<string, number>;
  readonly committed: Promise<void>;
}

export class HeadWitnessStore {
  readonly #store: SupervisorStore;
  #batch: Batch | null = null;

  constructor(store: SupervisorStore) {
    this.#store = store;
  }

  /** The highest head witnessed for this child (0: none yet). */
  head(name: string): number {
    return this.#store.witnessedHead(name);
  }

  /** Record now, synchronously and durably (a kernel's head; a hello's head). */
  recordNow(name: string, head: number): void {
    if (head <= this.#store.witnessedHead(name)) return;
    this.#store.raiseWitness(new Map([[name, head]]));
  }

  /** Record with the other heads of this event-loop turn; resolves once durable. */
  record(name: string, head: number): Promise<void> {
    let batch = this.#batch;
    if (!batch) {
      const heads = new Map<string, number>();
      const committed = new Promise<void>((resolve, reject) => {
        setImmediate(() => {
          this.#batch = null;
          try {
            this.#store.raiseWitness(heads);
            resolve();
          } catch (error) {
            reject(error instanceof CustodyError ? error : new CustodyError('internal', `witness not recorded: ${String(error)}`, { cause: error }));
          }
        });
      });
      committed.catch(() => undefined);
      batch = { heads, committed };
      this.#batch = batch;
    }
    batch.heads.set(name, Math.max(head, batch.heads.get(name) ?? 0));
    return batch.committed;
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
