// The ledger's key epochs (schema version 4, docs/PROTOCOL.md §12): every
// key this executor has signed with, and every kernel key it has pinned, each
// after the first introduced by a rotation statement signed by the key
// before it. The highest row of each table is current. Retired public keys
// stay: reports signed under them must stay verifiable, and an authorization
// signed or addressed under them is recognised as retired, not unknown.
import type Database from 'better-sqlite3';
import { CustodyError } from '../../shared/errors.js';

export interface EpochRow {
  readonly epoch: number;
  readonly public_key: string;
  /** The rotation statement that introduced this epoch; null for the first. */
  readonly statement: string | null;
  readonly created_at: number;
}

export type EpochTable = 'key_epochs' | 'kernel_epochs';

export class EpochBook {
  readonly #all: Record<EpochTable, Database.Statement<[], EpochRow>>;
  readonly #insert: Record<EpochTable, Database.Statement<[EpochRow]>>;

  constructor(db: Database.Database) {
    const all = (table: EpochTable) => db.prepare<[], EpochRow>(`SELECT epoch, public_key, statement, created_at FROM ${table} ORDER BY epoch`);
    const insert = (table: EpochTable) => db.prepare<[EpochRow]>(`INSERT INTO ${table} (epoch, public_key, statement, created_at) VALUES (@epoch, @public_key, @statement, @created_at)`);
    this.#all = { key_epochs: all('key_epochs'), kernel_epochs: all('kernel_epochs') };
    this.#insert = { key_epochs: insert('key_epochs'), kernel_epochs: insert('kernel_epochs') };
  }

  /** Every epoch, oldest first. */
  all(table: EpochTable): EpochRow[] {
    return this.#all[table].all();
  }

  current(table: EpochTable): EpochRow {
    const rows = this.all(table);
    const last = rows.at(-1);
    if (!last) throw new CustodyError('store_corrupt', `ledger ${table} is empty; it holds at least the provisioned key`);
    return last;
  }

  /** The epoch of a public key, or undefined when this ledger never held it. */
  epochOf(table: EpochTable, publicKey: string): number | undefined {
    return this.all(table).find((row) => row.public_key === publicKey)?.epoch;
  }

  /** Must run inside the caller's write transaction; the table's trigger refuses anything but the next epoch. */
  insert(table: EpochTable, row: EpochRow): void {
    this.#insert[table].run(row);
  }
}
