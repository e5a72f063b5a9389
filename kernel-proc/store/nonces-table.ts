// Execution nonces. Capacity counts live nonces only (unused, unexpired):
// used, expired and voided nonces stay as history and never block a reserve,
// and a live one is never evicted to make room.
import type Database from 'better-sqlite3';
import { CustodyError } from '../../shared/errors.js';
import { NONCE_MACHINE, type NonceState } from '../machines.js';
import { rowOf } from './schema.js';

export interface NonceRow {
  /** The operation's rowid, the nonce's key (schema.ts, version 10). */
  readonly operation_rowid: number;
  readonly nonce_id: string;
  readonly operation_id: string;
  readonly state: NonceState;
  readonly created_at: number;
  readonly expires_at: number;
  readonly closed_at: number | null;
}

export class NoncesTable {
  readonly #forOperation: Database.Statement<[string], NonceRow>;
  readonly #insert: Database.Statement<[{ nonce_id: string; operation_id: string; now: number; expires_at: number }]>;
  readonly #close: Database.Statement<[{ row: number; to: string; now: number }]>;
  readonly #countLive: Database.Statement<[], { live: number }>;
  readonly #expired: Database.Statement<[{ now: number; limit: number }], NonceRow>;
  readonly #nextExpiry: Database.Statement<[], { next: number | null }>;
  /**
   * No live nonce expires before this (-Infinity: not known yet). Only ever
   * too early, never too late: a mint lowers it, and it is raised only from
   * the store after a sweep found nothing due, when nothing of the current
   * batch precedes it (the sweep runs first in each batch, commit-queue.ts),
   * so a rolled-back unit can only revive nonces it already counted.
   */
  #earliestExpiry = Number.NEGATIVE_INFINITY;

  constructor(db: Database.Database) {
    this.#forOperation = db.prepare(`SELECT * FROM nonces WHERE operation_rowid = ${rowOf('?')}`);
    this.#insert = db.prepare(`
      INSERT INTO nonces (operation_rowid, nonce_id, operation_id, state, created_at, expires_at)
      VALUES (${rowOf('@operation_id')}, @nonce_id, @operation_id, 'live', @now, @expires_at)`);
    this.#close = db.prepare(`UPDATE nonces SET state = @to, closed_at = @now WHERE operation_rowid = @row AND state = 'live'`);
    this.#countLive = db.prepare(`SELECT count(*) AS live FROM nonces WHERE state = 'live'`);
    this.#expired = db.prepare(`
      SELECT * FROM nonces WHERE state = 'live' AND expires_at <= @now ORDER BY expires_at, nonce_id LIMIT @limit`);
    this.#nextExpiry = db.prepare(`SELECT min(expires_at) AS next FROM nonces WHERE state = 'live'`);
  }

  forOperation(operationId: string): NonceRow | undefined {
    return this.#forOperation.get(operationId);
  }

  mint(nonceId: string, operationId: string, now: number, expiresAt: number): NonceRow {
    this.#insert.run({ nonce_id: nonceId, operation_id: operationId, now, expires_at: expiresAt });
    this.#earliestExpiry = Math.min(this.#earliestExpiry, expiresAt);
    return this.forOperation(operationId)!;
  }

  close(nonce: NonceRow, to: NonceState, now: number): void {
    NONCE_MACHINE.assertMove(nonce.state, to, `nonce of operation ${nonce.operation_id}`);
    if (this.#close.run({ row: nonce.operation_rowid, to, now }).changes !== 1) {
      throw new CustodyError('illegal_transition', `nonce of operation ${nonce.operation_id} was no longer live when moving it to ${to}`);
    }
  }

  countLive(): number {
    return this.#countLive.get()!.live;
  }

  /**
   * Live nonces whose time has come, oldest first. Before the earliest live
   * expiry it answers without reading the store: the sweep runs before every
   * batch and on a timer, and nearly always finds nothing.
   */
  expired(now: number, limit: number): NonceRow[] {
    if (now < this.#earliestExpiry) return [];
    const due = this.#expired.all({ now, limit });
    if (due.length === 0) this.#earliestExpiry = this.#nextExpiry.get()!.next ?? Number.POSITIVE_INFINITY;
    return due;
  }
}
