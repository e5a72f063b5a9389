// kernel.db: one connection, its tables, and the identity row that ties the
// store to kernel.key. Provisioning and opening stay two separate doors
// (shared/store/sqlite-store.ts): opening never creates a store.
import path from 'node:path';
import type Database from 'better-sqlite3';
import { CustodyError } from '../../shared/errors.js';
import { HeadFloor } from '../../shared/store/head-floor.js';
import { type StoreSpec, openStore, provisionStore, storeFileIdentity } from '../../shared/store/sqlite-store.js';
import { transitionRows } from '../machines.js';
import { GrantsTable } from './grants-table.js';
import { HoldsTable } from './holds-table.js';
import { NoncesTable } from './nonces-table.js';
import { OperationsTable } from './operations-table.js';
import { PinsTable } from './pins-table.js';
import { ReceiptsTable } from './receipts-table.js';
import { KERNEL_DB_FILE, KERNEL_MIGRATIONS } from './schema.js';

export interface StoredIdentity {
  readonly public_key: string;
  readonly key_epoch: number;
  readonly created_at: number;
}

function specFor(dir: string): StoreSpec {
  return { label: 'kernel', dir, file: KERNEL_DB_FILE, migrations: KERNEL_MIGRATIONS };
}

export interface KernelEpochRow {
  readonly epoch: number;
  readonly public_key: string;
  /** The rotation statement signed by the previous epoch's key; null for the first. */
  readonly statement: string | null;
  readonly created_at: number;
}

export class KernelStore {
  readonly db: Database.Database;
  readonly operations: OperationsTable;
  readonly holds: HoldsTable;
  readonly nonces: NoncesTable;
  readonly receipts: ReceiptsTable;
  readonly grants: GrantsTable;
  readonly pins: PinsTable;
  readonly #identity: Database.Statement<[], StoredIdentity>;
  readonly #recordIdentity: Database.Statement<[StoredIdentity]>;
  readonly #readHead: Database.Statement<[], { seq: number; clock_hwm_ms: number }>;
  readonly #raiseHead: Database.Statement<[number]>;
  /** The highest head this process has read outside a batch (assertNotRolledBack). */
  readonly #floor = new HeadFloor();
  /** kernel.db's path and the file it named when opened: every write batch checks the path still names it. */
  readonly file: { readonly path: string; readonly dev: number; readonly ino: number };

  private constructor(db: Database.Database, file: string) {
    this.db = db;
    const identity = storeFileIdentity(file);
    this.file = { path: file, dev: identity.dev, ino: identity.ino };
    this.#readHead = db.prepare('SELECT seq, clock_hwm_ms FROM head WHERE singleton = 1');
    this.#raiseHead = db.prepare('UPDATE head SET seq = seq + 1, clock_hwm_ms = max(clock_hwm_ms, ?) WHERE singleton = 1');
    this.operations = new OperationsTable(db);
    this.holds = new HoldsTable(db);
    this.nonces = new NoncesTable(db);
    this.receipts = new ReceiptsTable(db);
    this.grants = new GrantsTable(db);
    this.pins = new PinsTable(db);
    this.#identity = db.prepare('SELECT public_key, key_epoch, created_at FROM kernel_identity WHERE singleton = 1');
    this.#recordIdentity = db.prepare(
      'INSERT INTO kernel_identity (singleton, public_key, key_epoch, created_at) VALUES (1, @public_key, @key_epoch, @created_at)',
    );
  }

  /** Create kernel.db in `dir`; refuses an existing store (store_exists). */
  static provision(dir: string): KernelStore {
    return KernelStore.#wrap(provisionStore(specFor(dir)), dir);
  }

  /** Open an existing kernel.db; refuses a missing one (store_missing). */
  static open(dir: string): KernelStore {
    return KernelStore.#wrap(openStore(specFor(dir)), dir);
  }

  static #wrap(db: Database.Database, dir: string): KernelStore {
    try {
      checkTransitions(db);
      return new KernelStore(db, path.join(dir, KERNEL_DB_FILE));
    } catch (error) {
      db.close();
      throw error;
    }
  }

  identity(): StoredIdentity | undefined {
    return this.#identity.get();
  }

  recordIdentity(identity: StoredIdentity): void {
    this.#recordIdentity.run(identity);
    // At provision the migrations ran on an empty store: the first epoch is recorded with the identity.
    this.db.prepare('INSERT INTO kernel_epochs (epoch, public_key, statement, created_at) VALUES (@key_epoch, @public_key, NULL, @created_at)').run(identity);
  }

  /** Every kernel key epoch, oldest first (schema version 5). */
  kernelEpochs(): KernelEpochRow[] {
    return this.db.prepare<[], KernelEpochRow>('SELECT epoch, public_key, statement, created_at FROM kernel_epochs ORDER BY epoch').all();
  }

  currentKernelEpoch(): KernelEpochRow {
    const row = this.db.prepare<[], KernelEpochRow>('SELECT epoch, public_key, statement, created_at FROM kernel_epochs ORDER BY epoch DESC LIMIT 1').get();
    if (!row) throw new CustodyError('store_corrupt', 'kernel store has no kernel key epoch; its provisioning never completed');
    return row;
  }

  /** Inside a write unit; the table's trigger refuses anything but the next epoch. */
  recordKernelEpoch(row: KernelEpochRow): void {
    this.db.prepare('INSERT INTO kernel_epochs (epoch, public_key, statement, created_at) VALUES (@epoch, @public_key, @statement, @created_at)').run(row);
  }

  /** The head (docs/ROLLBACK.md): how many write batches this store has committed. Read outside a batch, it is committed. */
  head(): number {
    return this.#floor.saw(this.#headNow());
  }

  #headNow(): number {
    return this.#headRow().seq;
  }

  #headRow(): { seq: number; clock_hwm_ms: number } {
    const row = this.#readHead.get();
    if (!row) throw new CustodyError('store_corrupt', 'kernel store head row is missing');
    return row;
  }

  /** The clock high-water mark (schema version 11): the latest time a committed batch was decided at. */
  clockHighWater(): number {
    return this.#headRow().clock_hwm_ms;
  }

  /** First thing inside every write batch: the head may not be below one this process has read (shared/store/head-floor.ts). */
  assertNotRolledBack(): void {
    this.#floor.check(this.#headNow(), `kernel store ${this.file.path}`, 'kernel', 'the newest copy of kernel.db is back');
  }

  /** Inside a write batch that changed something, decided at `now`; the batch commits it, so the process has seen it. */
  raiseHead(now: number): void {
    this.#raiseHead.run(now);
  }

  close(): void {
    if (this.db.open) this.db.close();
  }
}

/**
 * The store's copy of the machine tables must be this build's: a difference
 * means the code changed its machines without a schema migration, and the
 * triggers would enforce the wrong rules.
 */
function checkTransitions(db: Database.Database): void {
  const key = (row: { machine: string; from: string; to: string }) => `${row.machine}:${row.from}->${row.to}`;
  const stored = db
    .prepare<[], { machine: string; from: string; to: string }>(
      'SELECT machine, from_state AS "from", to_state AS "to" FROM state_transitions',
    )
    .all()
    .map(key)
    .sort();
  const code = transitionRows().map(key).sort();
  if (stored.join('\n') !== code.join('\n')) {
    const missing = code.filter((k) => !stored.includes(k));
    const extra = stored.filter((k) => !code.includes(k));
    throw new CustodyError(
      'store_schema',
      `kernel store state_transitions differ from this build (missing ${missing.join(', ') || 'none'}; extra ${extra.join(', ') || 'none'}); a schema migration is missing`,
    );
  }
}
