// The operations table: one row per request id. Every state change names the
// state it expects to leave, so a row that moved meanwhile is refused rather
// than overwritten; the machine table is checked here and again by the
// store's trigger.
import type Database from 'better-sqlite3';
import { CustodyError } from '../../shared/errors.js';
import { answeredOutput } from '../../shared/protocol/artifacts.js';
import type { ListedOperation, OperationKey, OperationState } from '../../shared/protocol/kernel-messages.js';
import { OPERATION_MACHINE } from '../machines.js';

export interface OperationRow {
  /** The key the operation's holds, nonce, receipts and report are found by (schema.ts, version 10). */
  readonly operation_rowid: number;
  readonly operation_id: string;
  readonly request_id: string;
  readonly request_binding_hash: string;
  readonly subject: string;
  readonly tool: string;
  readonly parameters_digest: string;
  readonly cost_units: number;
  readonly capability_id: string | null;
  readonly capability_digest: string | null;
  readonly executor_id: string | null;
  readonly state: OperationState;
  readonly created_at: number;
  readonly updated_at: number;
  readonly start_request_digest: string | null;
  readonly authorization: string | null;
  readonly authorization_digest: string | null;
  readonly window_not_before: number | null;
  readonly window_expires_at: number | null;
  /** The settling report's exact bytes, kept in `reports` since schema version 6 (schema.ts). */
  readonly report: string | null;
  readonly report_digest: string | null;
  /** JSON text of the report's output for a completed operation, read from the report (not stored since version 6). */
  readonly output: string | null;
  readonly flag: string | null;
}

export type NewOperation = Pick<
  OperationRow,
  | 'operation_id'
  | 'request_id'
  | 'request_binding_hash'
  | 'subject'
  | 'tool'
  | 'parameters_digest'
  | 'cost_units'
  | 'capability_id'
  | 'capability_digest'
  | 'executor_id'
  | 'state'
  | 'created_at'
>;

export interface DispatchCommit {
  /** The executor the authorization is addressed to (the reserved one, or another of its tool's pool). */
  readonly executor_id: string;
  readonly start_request_digest: string;
  readonly authorization: string;
  readonly authorization_digest: string;
  readonly window_not_before: number;
  readonly window_expires_at: number;
}

export interface Settlement {
  readonly report: string;
  readonly report_digest: string;
  readonly flag: string | null;
}

/** The output a completed operation hands out: its report's, as JSON text; null for any other state or a null output. */
function outputOf(state: OperationState, report: string | null): string | null {
  const output = answeredOutput(state, report);
  return output === null ? null : JSON.stringify(output);
}

/** The operations columns, and the two an operation row carries from elsewhere (filled by `withReport`). */
const ROW = 'operations.*, NULL AS report, NULL AS output';
/** What ops.list lists of a row (shared/protocol/kernel-messages.ts, listedOperation): no artifact, so no report to look up. */
const LISTED = 'operation_id, request_id, subject, tool, state, capability_id, executor_id, created_at, updated_at, flag';

/** The states `recover` hands to the supervisor: committed starts it must drive to a signed end. */
const IN_DOUBT: readonly OperationState[] = ['dispatch_committed', 'awaiting_report', 'unknown'];

/** Keys before every operation in each order: a first page starts after them. */
const NEWEST_FIRST_START: OperationKey = { created_at: Number.MAX_SAFE_INTEGER, operation_id: '' };
const OLDEST_FIRST_START: OperationKey = { created_at: 0, operation_id: '' };

/** The key a page that ends at this row hands on (ops.list, recover). */
export function operationKeyOf(row: Pick<OperationRow, 'created_at' | 'operation_id'>): OperationKey {
  return { created_at: row.created_at, operation_id: row.operation_id };
}

export class OperationsTable {
  readonly #get: Database.Statement<[string], OperationRow>;
  readonly #insert: Database.Statement<[NewOperation]>;
  readonly #move: Database.Statement<[{ id: string; from: string; to: string; now: number; flag: string | null }]>;
  readonly #dispatch: Database.Statement<[DispatchCommit & { id: string; now: number }]>;
  readonly #settle: Database.Statement<[Settlement & { id: string; from: string; to: string; now: number }]>;
  readonly #listAll: Database.Statement<[OperationKey & { limit: number }], ListedOperation>;
  readonly #list: Database.Statement<[OperationKey & { states: string; limit: number }], ListedOperation>;
  readonly #inDoubt: Database.Statement<[OperationKey & { states: string; limit: number }], OperationRow>;
  readonly #awaitAll: Database.Statement<[{ now: number }]>;
  readonly #report: Database.Statement<[number], { report: string }>;
  readonly #keepReport: Database.Statement<[{ row: number; report: string }]>;

  constructor(db: Database.Database) {
    this.#get = db.prepare(`SELECT ${ROW} FROM operations WHERE operation_id = ?`);
    this.#insert = db.prepare(`
      INSERT INTO operations (operation_id, request_id, request_binding_hash, subject, tool, parameters_digest, cost_units,
                              capability_id, capability_digest, executor_id, state, created_at, updated_at)
      VALUES (@operation_id, @request_id, @request_binding_hash, @subject, @tool, @parameters_digest, @cost_units,
              @capability_id, @capability_digest, @executor_id, @state, @created_at, @created_at)`);
    this.#move = db.prepare(`
      UPDATE operations SET state = @to, updated_at = @now, flag = coalesce(@flag, flag)
      WHERE operation_id = @id AND state = @from`);
    this.#dispatch = db.prepare(`
      UPDATE operations SET state = 'dispatch_committed', updated_at = @now, executor_id = @executor_id, start_request_digest = @start_request_digest,
             authorization = @authorization, authorization_digest = @authorization_digest,
             window_not_before = @window_not_before, window_expires_at = @window_expires_at
      WHERE operation_id = @id AND state = 'reserved'`);
    this.#settle = db.prepare(`
      UPDATE operations SET state = @to, updated_at = @now, report_digest = @report_digest, flag = coalesce(@flag, flag)
      WHERE operation_id = @id AND state = @from`);
    // A page starts after the previous page's last key (docs/PROTOCOL.md,
    // "Paging"), never at a count of rows to skip: a page 100,000 deep costs
    // its own rows, and rows that come or go between pages shift nothing.
    // A first page starts after a key before
    // every row (NEWEST_FIRST_START, OLDEST_FIRST_START). With no state named,
    // the inner query walks operations_by_creation from the key down and
    // stops at the page's end (ties of one millisecond, which the order takes
    // by ascending id, are sorted among themselves); with states,
    // operations_by_state finds only theirs and the keys of those past the
    // bound are sorted in memory (shared/store/sqlite-store.ts, temp_store),
    // ~100 bytes a row, and the outer query reads the page's rows by rowid.
    this.#listAll = db.prepare(`
      SELECT ${LISTED} FROM operations WHERE rowid IN (
        SELECT rowid FROM operations WHERE created_at <= @created_at AND (created_at < @created_at OR operation_id > @operation_id)
        ORDER BY created_at DESC, operation_id LIMIT @limit)
      ORDER BY created_at DESC, operation_id`);
    this.#list = db.prepare(`
      SELECT ${LISTED} FROM operations WHERE rowid IN (
        SELECT rowid FROM operations WHERE state IN (SELECT value FROM json_each(@states))
          AND created_at <= @created_at AND (created_at < @created_at OR operation_id > @operation_id)
        ORDER BY created_at DESC, operation_id LIMIT @limit)
      ORDER BY created_at DESC, operation_id`);
    this.#inDoubt = db.prepare(`
      SELECT ${ROW} FROM operations WHERE rowid IN (
        SELECT rowid FROM operations WHERE state IN (SELECT value FROM json_each(@states))
          AND (created_at, operation_id) > (@created_at, @operation_id)
        ORDER BY created_at, operation_id LIMIT @limit)
      ORDER BY created_at, operation_id`);
    this.#awaitAll = db.prepare(`
      UPDATE operations SET state = 'awaiting_report', updated_at = @now WHERE state = 'dispatch_committed'`);
    this.#report = db.prepare('SELECT report FROM reports WHERE operation_rowid = ?');
    this.#keepReport = db.prepare('INSERT INTO reports (operation_rowid, report) VALUES (@row, @report)');
  }

  /** A settled row gets its report (one lookup) and, when completed, the output the report carries. */
  #withReport(row: OperationRow | undefined): OperationRow | undefined {
    if (row === undefined || row.report_digest === null) return row;
    const report = this.#report.get(row.operation_rowid)?.report ?? null;
    const filled = row as { report: string | null; output: string | null };
    filled.report = report;
    filled.output = outputOf(row.state, report);
    return row;
  }

  get(operationId: string): OperationRow | undefined {
    return this.#withReport(this.#get.get(operationId));
  }

  insert(row: NewOperation): void {
    this.#insert.run(row);
  }

  move(row: OperationRow, to: OperationState, now: number, flag: string | null = null): void {
    OPERATION_MACHINE.assertMove(row.state, to, `operation ${row.operation_id}`);
    expectOne(this.#move.run({ id: row.operation_id, from: row.state, to, now, flag }).changes, row, to);
  }

  commitDispatch(row: OperationRow, commit: DispatchCommit, now: number): void {
    OPERATION_MACHINE.assertMove(row.state, 'dispatch_committed', `operation ${row.operation_id}`);
    expectOne(this.#dispatch.run({ ...commit, id: row.operation_id, now }).changes, row, 'dispatch_committed');
  }

  settle(row: OperationRow, to: OperationState, settlement: Settlement, now: number): void {
    OPERATION_MACHINE.assertMove(row.state, to, `operation ${row.operation_id}`);
    // The report first: the store sets report_digest only once the report is kept (schema.ts, version 6).
    this.#keepReport.run({ row: row.operation_rowid, report: settlement.report });
    expectOne(this.#settle.run({ ...settlement, id: row.operation_id, from: row.state, to, now }).changes, row, to);
  }

  /**
   * One page, newest first, of the operations after `after` (from the newest
   * when null); operation_id breaks ties of created_at, so the order is total
   * and pages do not overlap.
   */
  list(states: readonly OperationState[] | null, limit: number, after: OperationKey | null): ListedOperation[] {
    const key = after ?? NEWEST_FIRST_START;
    return states === null ? this.#listAll.all({ ...key, limit }) : this.#list.all({ ...key, states: JSON.stringify(states), limit });
  }

  /** One page, oldest first, of the operations in doubt after `after` (from the oldest when null). */
  inDoubt(limit: number, after: OperationKey | null): OperationRow[] {
    return this.#inDoubt.all({ ...(after ?? OLDEST_FIRST_START), states: JSON.stringify(IN_DOUBT), limit }).map((row) => this.#withReport(row)!);
  }

  /** Startup recovery: every committed start becomes awaiting_report (ARCHITECTURE.md §6.3). Returns how many. */
  markAllAwaitingReport(now: number): number {
    OPERATION_MACHINE.assertMove('dispatch_committed', 'awaiting_report');
    return this.#awaitAll.run({ now }).changes;
  }
}

function expectOne(changes: number, row: OperationRow, to: OperationState): void {
  if (changes !== 1) {
    throw new CustodyError(
      'illegal_transition',
      `operation ${row.operation_id} was no longer ${row.state} when moving it to ${to}; nothing was overwritten`,
    );
  }
}
