// Retained receipts: insert-once, numbered per operation, each with the
// digest of the request it answers so a retried request finds its answer.
// Since schema version 6 a row stores its number, that digest and the
// receipt's bytes; the other columns are read from those bytes (schema.ts).
import type Database from 'better-sqlite3';
import type { HoldDisposition } from '../../shared/protocol/artifacts.js';
import type { OperationState } from '../../shared/protocol/kernel-messages.js';
import { rowOf } from './schema.js';

export type ReceiptDecision = 'reserve' | 'start' | 'completion' | 'finalization' | 'expiry' | 'unknown';

export interface ReceiptRow {
  readonly receipt_id: string;
  readonly operation_id: string;
  readonly seq: number;
  readonly decision: ReceiptDecision;
  readonly verdict: 'allow' | 'deny';
  readonly reason: string;
  readonly state: OperationState;
  readonly hold_disposition: HoldDisposition;
  readonly request_digest: string | null;
  readonly issued_at: number;
  readonly receipt: string;
}

export class ReceiptsTable {
  readonly #insert: Database.Statement<[ReceiptRow]>;
  readonly #count: Database.Statement<[string], { n: number }>;
  readonly #forRequest: Database.Statement<[string, string], ReceiptRow>;
  readonly #entering: Database.Statement<[string, string], ReceiptRow>;
  readonly #all: Database.Statement<[string], ReceiptRow>;
  readonly #last: Database.Statement<[string], ReceiptRow>;

  constructor(db: Database.Database) {
    this.#insert = db.prepare(`
      INSERT INTO receipts (operation_rowid, seq, request_digest, receipt)
      VALUES (${rowOf('@operation_id')}, @seq, @request_digest, @receipt)`);
    this.#count = db.prepare(`SELECT count(*) AS n FROM receipts WHERE operation_rowid = ${rowOf('?')}`);
    this.#forRequest = db.prepare(`SELECT * FROM receipts WHERE operation_rowid = ${rowOf('?')} AND request_digest = ? ORDER BY seq LIMIT 1`);
    this.#entering = db.prepare(`SELECT * FROM receipts WHERE operation_rowid = ${rowOf('?')} AND state = ? ORDER BY seq LIMIT 1`);
    this.#all = db.prepare(`SELECT * FROM receipts WHERE operation_rowid = ${rowOf('?')} ORDER BY seq`);
    this.#last = db.prepare(`SELECT * FROM receipts WHERE operation_rowid = ${rowOf('?')} ORDER BY seq DESC LIMIT 1`);
  }

  /** The row's other columns are what its receipt says; the store's CHECKs hold the key, and the receipt, to them. */
  insert(row: ReceiptRow): void {
    this.#insert.run(row);
  }

  count(operationId: string): number {
    return this.#count.get(operationId)!.n;
  }

  /** The answer already given to this exact request, if any. */
  forRequest(operationId: string, requestDigest: string): ReceiptRow | undefined {
    return this.#forRequest.get(operationId, requestDigest);
  }

  /** The receipt of the decision that moved the operation into `state`. */
  entering(operationId: string, state: OperationState): ReceiptRow | undefined {
    return this.#entering.get(operationId, state);
  }

  all(operationId: string): ReceiptRow[] {
    return this.#all.all(operationId);
  }

  last(operationId: string): ReceiptRow | undefined {
    return this.#last.get(operationId);
  }
}
