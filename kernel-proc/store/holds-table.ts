// Budget holds. A grant's usage is what its holds say (consumed ones are
// used, reserved ones are held); the store keeps it as counters on the grant
// row, moved only by the hold triggers in the same statement as the hold
// (schema.ts, version 2), so reading it is O(1) however long the history.
// A hold leaves `reserved` at most once: the UPDATE names `reserved` and the
// store's trigger refuses any other move (ARCHITECTURE.md §6.4, the H1 double release).
import type Database from 'better-sqlite3';
import { CustodyError } from '../../shared/errors.js';
import { HOLD_MACHINE, type HoldState } from '../machines.js';
import { rowOf } from './schema.js';

export interface HoldRow {
  /** The operation's rowid, the hold's key (schema.ts, version 10). */
  readonly operation_rowid: number;
  /** `hold:<operation_id>`, read from the operation id (holdIdFor). */
  readonly hold_id: string;
  readonly operation_id: string;
  readonly capability_id: string;
  readonly invocations: number;
  readonly cost_units_held: number;
  readonly cost_units_charged: number;
  readonly state: HoldState;
  readonly created_at: number;
  readonly settled_at: number | null;
  readonly settled_by: string | null;
}

export interface GrantUsage {
  readonly invocations_used: number;
  readonly invocations_held: number;
  readonly cost_units_used: number;
  readonly cost_units_held: number;
}

export function holdIdFor(operationId: string): string {
  return `hold:${operationId}`;
}

export class HoldsTable {
  readonly #get: Database.Statement<[string], HoldRow>;
  readonly #insert: Database.Statement<[{ operation_id: string; capability_id: string; invocations: number; cost: number; now: number }]>;
  readonly #settle: Database.Statement<[{ row: number; to: string; charged: number; now: number; receipt: string }]>;
  readonly #usage: Database.Statement<[string], GrantUsage>;
  readonly #byState: Database.Statement<[], Record<'reserved' | 'consumed' | 'released', number>>;

  constructor(db: Database.Database) {
    this.#get = db.prepare(`SELECT * FROM holds WHERE operation_rowid = ${rowOf('?')}`);
    this.#insert = db.prepare(`
      INSERT INTO holds (operation_rowid, operation_id, capability_id, invocations, cost_units_held, state, created_at)
      VALUES (${rowOf('@operation_id')}, @operation_id, @capability_id, @invocations, @cost, 'reserved', @now)`);
    this.#settle = db.prepare(`
      UPDATE holds SET state = @to, cost_units_charged = @charged, settled_at = @now, settled_by = @receipt
      WHERE operation_rowid = @row AND state = 'reserved'`);
    // A grant that does not exist has no usage: the zero row keeps callers total.
    this.#usage = db.prepare(`
      SELECT coalesce(max(invocations_used), 0) AS invocations_used, coalesce(max(invocations_held), 0) AS invocations_held,
             coalesce(max(cost_units_used), 0) AS cost_units_used, coalesce(max(cost_units_held), 0) AS cost_units_held
      FROM grants WHERE capability_id = ?`);
    // The per-grant counters the hold triggers keep (kernel.db version 7): a
    // scrape costs the grants, not every hold ever placed.
    this.#byState = db.prepare(`
      SELECT coalesce(sum(holds_reserved), 0) AS reserved, coalesce(sum(holds_consumed), 0) AS consumed,
             coalesce(sum(holds_released), 0) AS released
      FROM grants`);
  }

  /** Holds by state (GET /metrics, custody_kernel_holds). */
  countByState(): Array<{ state: string; count: number }> {
    const counts = this.#byState.get()!;
    return Object.entries(counts).map(([state, count]) => ({ state, count }));
  }

  forOperation(operationId: string): HoldRow | undefined {
    return this.#get.get(operationId);
  }

  place(operationId: string, capabilityId: string, costUnits: number, now: number): HoldRow {
    this.#insert.run({ operation_id: operationId, capability_id: capabilityId, invocations: 1, cost: costUnits, now });
    return this.forOperation(operationId)!;
  }

  /** Release or consume a hold that is still reserved; `receiptId` names the decision that did it. */
  settle(hold: HoldRow, to: HoldState, charged: number, now: number, receiptId: string): void {
    HOLD_MACHINE.assertMove(hold.state, to, `hold ${hold.hold_id}`);
    const { changes } = this.#settle.run({ row: hold.operation_rowid, to, charged, now, receipt: receiptId });
    if (changes !== 1) {
      throw new CustodyError('illegal_transition', `hold ${hold.hold_id} was no longer reserved when moving it to ${to}; it is never disposed of twice`);
    }
  }

  usage(capabilityId: string): GrantUsage {
    return this.#usage.get(capabilityId)!;
  }
}
