// Group commit for a process's store (supervisor.db, the executor's ledger):
// writes asked for within one turn of the event loop run in one IMMEDIATE
// transaction, each in its own savepoint (a
// refusal rolls back only its own write), and one fsync makes them all
// durable (synchronous=FULL is unchanged). Nobody hears that a write is done
// before the transaction holding it has committed: each promise settles after
// the commit, and a crash cutpoint a write names fires after the commit and
// before any promise settles — the same promise the kernel's commit-queue.ts
// keeps for its decisions (kernel-proc/commit-queue.ts). A commit that fails (a full disk) rejects every
// write of the batch: none of them is durable, and none was answered.
import type Database from 'better-sqlite3';
import { toCustodyError } from '../errors.js';
import { crashPoint } from '../fault.js';

/** What a grouped write returns: its value, and the cutpoints to pass once it is durable. */
export interface GroupedResult<T> {
  readonly value: T;
  readonly cutpoints: readonly string[];
}

/** Writes that ride along with a batch, in its transaction. */
export interface BatchRider {
  write(): void;
  settled(committed: boolean): void;
}

interface Pending {
  readonly write: () => GroupedResult<unknown>;
  resolve(value: unknown): void;
  reject(reason: unknown): void;
}

export class GroupCommit {
  readonly #db: Database.Database;
  readonly #maxBatch: number;
  /** The role crash cutpoints are armed under (CUSTODY_FAULT=<role>:<cutpoint>). */
  readonly #role: string;
  #pending: Pending[] = [];
  #scheduled = false;
  readonly #rider: (() => BatchRider) | undefined;
  readonly #onCommitted: ((writes: number) => void) | undefined;

  /**
   * `rider`, when given, is asked once per batch for writes that go with it
   * in the same transaction (the supervisor's witness heads,
   * docs/ROLLBACK.md), and told whether that transaction committed.
   * `onCommitted` hears how many writes each committed transaction carried
   * (the `stats` answer's commit_batches).
   */
  constructor(db: Database.Database, maxBatch: number, role: string, rider?: () => BatchRider, onCommitted?: (writes: number) => void) {
    this.#db = db;
    this.#maxBatch = maxBatch;
    this.#role = role;
    this.#rider = rider;
    this.#onCommitted = onCommitted;
  }

  /** Run `write` in the next grouped transaction; resolves with its value once that transaction is durable. */
  submit<T>(write: () => GroupedResult<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.#pending.push({ write, resolve: resolve, reject });
      if (this.#scheduled) return;
      this.#scheduled = true;
      setImmediate(() => this.#flushAll());
    });
  }

  #flushAll(): void {
    this.#scheduled = false;
    while (this.#pending.length > 0) this.#flush(this.#pending.splice(0, this.#maxBatch));
  }

  #flush(batch: Pending[]): void {
    const outcomes: Array<{ ok: true; result: GroupedResult<unknown> } | { ok: false; error: unknown }> = [];
    const rider = this.#rider?.();
    try {
      this.#db
        .transaction(() => {
          rider?.write();
          for (const item of batch) {
            // A nested better-sqlite3 transaction is a savepoint: a throw undoes only this write.
            try {
              outcomes.push({ ok: true, result: this.#db.transaction(item.write)() });
            } catch (error) {
              // SQLite rolled the whole transaction back on its own (SQLITE_FULL, IOERR, NOMEM): the writes after this
              // one would each commit alone, unanswered or refused. The batch ends here, nothing of it durable.
              if (!this.#db.inTransaction) throw error;
              outcomes.push({ ok: false, error });
            }
          }
        })
        .immediate();
    } catch (error) {
      rider?.settled(false);
      const failure = toCustodyError(error);
      for (const item of batch) item.reject(failure);
      return;
    }
    rider?.settled(true);
    this.#onCommitted?.(batch.length);
    for (const outcome of outcomes) if (outcome.ok) for (const cutpoint of outcome.result.cutpoints) crashPoint(this.#role, cutpoint);
    batch.forEach((item, index) => {
      const outcome = outcomes[index]!;
      if (outcome.ok) item.resolve(outcome.result.value);
      else item.reject(outcome.error);
    });
  }
}
