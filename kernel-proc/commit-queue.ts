// The kernel's single write path, ready for group commit (ARCHITECTURE.md §13).
// Requests become units; the units queued within one turn of the event loop
// run in one IMMEDIATE transaction, each in its own savepoint, so one unit's
// refusal or fault rolls back only its own writes. Nobody hears an answer
// before the transaction that holds it has committed, and a crash cutpoint a
// unit asks for fires after that commit and before any answer is sent.
//
// Serializing every decision through this one queue is also what closes the
// race H1 (ARCHITECTURE.md §6.5) ordering: a sweep, a start and a reconcile for one operation can
// never interleave inside each other's read-check-write.
import type Database from 'better-sqlite3';
import { CustodyError, toCustodyError } from '../shared/errors.js';
import { crashPoint } from '../shared/fault.js';
import { type Logger, errorFields } from '../shared/log.js';

export interface UnitContext {
  /** The batch's time, read once (shared/clock.ts): every decision in a batch sees the same now. */
  readonly now: number;
  /**
   * The wall clock as read for this batch, which `now` may be ahead of (the
   * kernel judges at max(clock, high-water mark)): what a signed window opens
   * at, so a clock stepped back signs windows an executor judges by its own
   * mark, never ones that open in the future.
   */
  readonly wallNow: number;
  /** Name a crash cutpoint (CUSTODY_FAULT=kernel:<name>) to pass once this unit's writes have committed (a whenCommitted of its own). */
  afterCommit(cutpoint: string): void;
  /**
   * Run `then` once this unit's writes have committed, in the order the
   * batch's units asked (cutpoints included), before any answer of the
   * batch; never if they did not (its savepoint or the batch rolled back). A log line that reports a decision is written from here,
   * so it never tells of one that a full disk then undid.
   */
  whenCommitted(then: () => void): void;
}

export type Unit<T> = (context: UnitContext) => T;

interface Queued {
  readonly unit: Unit<unknown>;
  resolve(value: unknown): void;
  reject(reason: CustodyError): void;
}

type Outcome = { readonly ok: true; readonly value: unknown } | { readonly ok: false; readonly error: CustodyError };

export interface CommitQueueOptions {
  readonly db: Database.Database;
  /** Units per transaction. */
  readonly maxBatch: number;
  readonly clock: () => number;
  /** The wall clock behind `clock`, when `clock` may run ahead of it (UnitContext.wallNow); default `clock`. */
  readonly wallClock?: () => number;
  /** Throws when this process may no longer write (the store lock was lost). */
  readonly assertWritable: () => void;
  /** First inside every batch's transaction: throws when the store went back under this process (docs/ROLLBACK.md); the batch then writes nothing. */
  readonly assertNotRolledBack?: () => void;
  /** Runs first in every batch, in its own savepoint; a failure is logged and the batch goes on. */
  readonly beforeEachBatch?: Unit<void>;
  /** Inside the batch's transaction, once, when it changed any row: raise the store head (docs/ROLLBACK.md). */
  readonly advanceHead?: () => void;
  /** After a batch that raised the head has committed, before any of its answers is sent. */
  readonly headAdvanced?: () => void;
  /** Told the number of units of each batch that committed (the `stats` message's batch sizes). */
  readonly onCommitted?: (units: number) => void;
  readonly log: Logger;
}

export class CommitQueue {
  readonly #options: CommitQueueOptions;
  readonly #queue: Queued[] = [];
  readonly #totalChanges: Database.Statement<[], { n: number }>;
  #scheduled = false;

  constructor(options: CommitQueueOptions) {
    this.#options = options;
    this.#totalChanges = options.db.prepare('SELECT total_changes() AS n');
  }

  /** Queue a unit; resolves with its value (or rejects with its refusal) after its batch has committed. */
  submit<T>(unit: Unit<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.#queue.push({ unit, resolve: resolve, reject });
      this.#schedule();
    });
  }

  /** Resolves once every unit queued before this call has been answered (the queue is first in, first out). */
  async drain(): Promise<void> {
    if (this.#queue.length === 0) return;
    await this.submit(() => undefined).catch(() => undefined);
  }

  #schedule(): void {
    if (this.#scheduled) return;
    this.#scheduled = true;
    setImmediate(() => {
      this.#scheduled = false;
      this.#flush(this.#queue.splice(0, this.#options.maxBatch));
      if (this.#queue.length > 0) this.#schedule();
    });
  }

  #flush(batch: Queued[]): void {
    const { db, clock, wallClock, assertWritable, assertNotRolledBack, beforeEachBatch, advanceHead, headAdvanced, log } = this.#options;
    let advanced = false;
    const now = clock();
    const wallNow = Math.min(wallClock?.() ?? now, now);
    // What the committed units asked for once they are durable, in their order: log lines, crash cutpoints.
    const committed: Array<() => void> = [];
    const outcomes: Outcome[] = [];
    const runSavepoint = (unit: Unit<unknown>): Outcome => {
      const then: Array<() => void> = [];
      try {
        const value = db.transaction(() =>
          unit({ now, wallNow, afterCommit: (name) => then.push(() => crashPoint('kernel', name)), whenCommitted: (callback) => then.push(callback) }),
        )();
        committed.push(...then);
        return { ok: true, value };
      } catch (error) {
        // SQLite rolled the whole transaction back on its own (SQLITE_FULL, IOERR, NOMEM): the units after this one
        // would each commit alone, refused all the same. The batch ends here, nothing of it durable.
        if (!db.inTransaction) throw error;
        return { ok: false, error: fromStore(error) };
      }
    };
    try {
      assertWritable();
      db.transaction(() => {
        assertNotRolledBack?.();
        const before = this.#totalChanges.get()!.n;
        if (beforeEachBatch) {
          const swept = runSavepoint(beforeEachBatch);
          if (!swept.ok) log.error('sweep_failed', errorFields(swept.error));
        }
        for (const queued of batch) outcomes.push(runSavepoint(queued.unit));
        if (advanceHead && this.#totalChanges.get()!.n !== before) {
          advanceHead();
          advanced = true;
        }
      }).immediate();
    } catch (error) {
      const failure = fromStore(error);
      log.error('batch_not_committed', { units: batch.length, ...errorFields(failure) });
      for (const queued of batch) queued.reject(failure);
      return;
    }
    log.debug('batch_committed', { units: batch.length });
    this.#options.onCommitted?.(batch.length);
    // Committed: what the units asked for now runs (their log lines; a
    // test's kill -9 lands here, after the commit and before any answer).
    for (const then of committed) {
      try {
        then();
      } catch (error) {
        log.error('after_commit_failed', errorFields(error));
      }
    }
    // The head frame goes out before the answers, so the supervisor has witnessed it before it acts on them.
    if (advanced) headAdvanced?.();
    batch.forEach((queued, index) => {
      const outcome = outcomes[index]!;
      if (outcome.ok) queued.resolve(outcome.value);
      else queued.reject(outcome.error);
    });
  }
}

/**
 * The store's guards raise `illegal_transition: …` or `store_corrupt: …`
 * (kernel-proc/store/schema.ts); they become typed errors here. Anything else
 * that is not already a CustodyError is an internal fault.
 */
export function fromStore(error: unknown): CustodyError {
  if (error instanceof CustodyError) return error;
  const message = error instanceof Error ? error.message : String(error);
  const guard = /^(illegal_transition|store_corrupt): (.*)$/s.exec(message);
  if (guard) return new CustodyError(guard[1] as 'illegal_transition' | 'store_corrupt', guard[2], { cause: error });
  return toCustodyError(error);
}
