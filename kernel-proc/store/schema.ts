// kernel.db, as an operator reads it with the sqlite3 shell: plain columns,
// JSON as TEXT, integer millisecond timestamps, signed artifacts as their
// exact bytes, and three views to query first (operations_view, holds_view,
// receipts_view; grants_view too). Triggers guard what the code promises:
// states move only along the tables in machines.ts, a hold is disposed of
// once, receipts are insert-once, identities never change.
import type { Migration } from '../../shared/store/sqlite-store.js';
import { INITIAL_OPERATION_STATES, transitionRows } from '../machines.js';

/** ISO-8601 UTC text for an integer millisecond column. */
const iso = (column: string) => `strftime('%Y-%m-%dT%H:%M:%fZ', ${column} / 1000.0, 'unixepoch')`;

const quote = (text: string) => `'${text.replaceAll("'", "''")}'`;

/**
 * A trigger that refuses any state change not listed in state_transitions for
 * `machine`. RAISE messages are string literals: an expression there is newer
 * SQLite syntax (3.47) that an operator's older sqlite3 shell cannot parse,
 * and a schema it cannot parse makes the whole store unreadable to it.
 */
function transitionGuard(table: string, machine: string): string {
  return `
CREATE TRIGGER ${table}_state_guard BEFORE UPDATE OF state ON ${table}
WHEN NEW.state IS NOT OLD.state AND NOT EXISTS (
  SELECT 1 FROM state_transitions WHERE machine = '${machine}' AND from_state = OLD.state AND to_state = NEW.state)
BEGIN
  SELECT RAISE(ABORT, 'illegal_transition: ${table}: a state change the ${machine} machine does not allow');
END;`;
}

/** A trigger that refuses changes to columns that are fixed once written (NULL may become a value once). */
function fixedColumns(table: string, name: string, columns: readonly string[], setOnce: readonly string[] = []): string {
  const changed = [
    ...columns.map((c) => `NEW.${c} IS NOT OLD.${c}`),
    ...setOnce.map((c) => `(OLD.${c} IS NOT NULL AND NEW.${c} IS NOT OLD.${c})`),
  ].join(' OR ');
  return `
CREATE TRIGGER ${table}_${name} BEFORE UPDATE ON ${table} WHEN ${changed}
BEGIN
  SELECT RAISE(ABORT, 'store_corrupt: ${table}: a column that is fixed once written was changed');
END;`;
}

function neverDeleted(table: string): string {
  return `
CREATE TRIGGER ${table}_kept BEFORE DELETE ON ${table}
BEGIN
  SELECT RAISE(ABORT, 'store_corrupt: ${table} rows are never deleted');
END;`;
}

const transitionsInsert = transitionRows()
  .map((row) => `INSERT INTO state_transitions (machine, from_state, to_state) VALUES (${quote(row.machine)}, ${quote(row.from)}, ${quote(row.to)});`)
  .join('\n');

/** An operation starts as reserved or denied (versions 1 and 10). */
const OPERATIONS_INITIAL_STATE = `CREATE TRIGGER operations_initial_state BEFORE INSERT ON operations
WHEN NEW.state NOT IN (${INITIAL_OPERATION_STATES.map(quote).join(', ')})
BEGIN SELECT RAISE(ABORT, 'illegal_transition: operations: an operation starts as reserved or denied'); END;`;

/** An operation's executor changes only while it is reserved (versions 3 and 10). */
const OPERATIONS_EXECUTOR_BOUND = `CREATE TRIGGER operations_executor_bound BEFORE UPDATE OF executor_id ON operations
WHEN NEW.executor_id IS NOT OLD.executor_id AND (OLD.state IS NOT 'reserved' OR OLD.executor_id IS NULL OR NEW.executor_id IS NULL)
BEGIN
  SELECT RAISE(ABORT, 'store_corrupt: operations: executor_id changes only while the operation is reserved');
END;`;

/** A report digest is set only with the report kept in reports, found by `key` (versions 6 and 10). */
const operationsReportKept = (key: string) => `CREATE TRIGGER operations_report_kept BEFORE UPDATE OF report_digest ON operations
WHEN NEW.report_digest IS NOT NULL AND NOT EXISTS (SELECT 1 FROM reports WHERE ${key} = NEW.${key})
BEGIN SELECT RAISE(ABORT, 'store_corrupt: operations: report_digest is set only with the report kept in reports'); END;`;

const RECEIPTS_INSERT_ONCE = `CREATE TRIGGER receipts_insert_once BEFORE UPDATE ON receipts
BEGIN SELECT RAISE(ABORT, 'store_corrupt: receipts are insert-once'); END;`;

const REPORTS_INSERT_ONCE = `CREATE TRIGGER reports_insert_once BEFORE UPDATE ON reports
BEGIN SELECT RAISE(ABORT, 'store_corrupt: reports are insert-once'); END;`;

/** The operator's view of operations, each joined to its hold, nonce and receipts by `key` (operation_id before version 10, operation_rowid since). */
const operationsView = (key: string) => `CREATE VIEW operations_view AS
SELECT o.operation_id, o.request_id, o.state, o.tool, o.subject, o.capability_id, o.executor_id,
       h.state AS hold, h.cost_units_held, h.cost_units_charged,
       ${iso('o.created_at')} AS created, ${iso('o.updated_at')} AS updated,
       ${iso('n.expires_at')} AS nonce_expires, n.state AS nonce,
       ${iso('o.window_not_before')} AS window_opens, ${iso('o.window_expires_at')} AS window_closes,
       (SELECT count(*) FROM receipts r WHERE r.${key} = o.${key}) AS receipts,
       (SELECT r.reason FROM receipts r WHERE r.${key} = o.${key} ORDER BY r.seq DESC LIMIT 1) AS last_reason,
       o.flag
FROM operations o
LEFT JOIN holds h ON h.${key} = o.${key}
LEFT JOIN nonces n ON n.${key} = o.${key};`;

/** The operator's view of holds, with their request id, joined by `key`. */
const holdsView = (key: string) => `CREATE VIEW holds_view AS
SELECT h.hold_id, o.request_id, h.operation_id, h.capability_id, h.state, h.invocations,
       h.cost_units_held, h.cost_units_charged, ${iso('h.created_at')} AS created, ${iso('h.settled_at')} AS settled, h.settled_by
FROM holds h JOIN operations o ON o.${key} = h.${key};`;

/** The operator's view of receipts, with their request id, joined by `key` (with the stored digest until version 6 dropped it). */
const receiptsView = (key: string, withDigest: boolean) => `CREATE VIEW receipts_view AS
SELECT r.receipt_id, o.request_id, r.operation_id, r.seq, r.decision, r.verdict, r.reason, r.state, r.hold_disposition,
       ${iso('r.issued_at')} AS issued${withDigest ? ', r.digest' : ''}
FROM receipts r JOIN operations o ON o.${key} = r.${key};`;

/**
 * A grant's usage counters move only with a hold, by exactly that hold
 * (versions 7 and 10); `findHold` is how the hold the move names is found,
 * up to its capability check.
 */
const grantsUsageGuard = (findHold: string) => `CREATE TRIGGER grants_usage_guard
BEFORE UPDATE OF invocations_held, invocations_used, cost_units_held, cost_units_used,
                 holds_reserved, holds_consumed, holds_released, usage_hold, usage_state ON grants
WHEN NOT ((NEW.usage_hold IS NOT OLD.usage_hold OR NEW.usage_state IS NOT OLD.usage_state) AND EXISTS (
  SELECT 1 FROM holds h
  WHERE ${findHold} = NEW.capability_id AND h.state = NEW.usage_state
    AND NEW.invocations_held - OLD.invocations_held = CASE WHEN h.state = 'reserved' THEN h.invocations ELSE -h.invocations END
    AND NEW.cost_units_held - OLD.cost_units_held = CASE WHEN h.state = 'reserved' THEN h.cost_units_held ELSE -h.cost_units_held END
    AND NEW.invocations_used - OLD.invocations_used = CASE WHEN h.state = 'consumed' THEN h.invocations ELSE 0 END
    AND NEW.cost_units_used - OLD.cost_units_used = CASE WHEN h.state = 'consumed' THEN h.cost_units_charged ELSE 0 END
    AND NEW.holds_reserved - OLD.holds_reserved = CASE WHEN h.state = 'reserved' THEN 1 ELSE -1 END
    AND NEW.holds_consumed - OLD.holds_consumed = (h.state = 'consumed')
    AND NEW.holds_released - OLD.holds_released = (h.state = 'released')))
BEGIN
  SELECT RAISE(ABORT, 'store_corrupt: grants: usage counters move only with a hold, by exactly that hold');
END;`;

const V1 = `
CREATE TABLE kernel_identity ( -- The key this store was provisioned for (kernel.pub). One row; never changes.
  singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
  public_key TEXT NOT NULL CHECK (length(public_key) = 64),
  key_epoch INTEGER NOT NULL,
  created_at INTEGER NOT NULL
) STRICT;
CREATE TRIGGER kernel_identity_fixed BEFORE UPDATE ON kernel_identity
BEGIN SELECT RAISE(ABORT, 'store_corrupt: the kernel identity never changes'); END;
${neverDeleted('kernel_identity')}

CREATE TABLE state_transitions ( -- The legal moves of each state machine, copied from kernel-proc/machines.ts; the state guards read it.
  machine TEXT NOT NULL,
  from_state TEXT NOT NULL,
  to_state TEXT NOT NULL,
  PRIMARY KEY (machine, from_state, to_state)
) STRICT, WITHOUT ROWID;
${transitionsInsert}
CREATE TRIGGER state_transitions_fixed_insert BEFORE INSERT ON state_transitions
BEGIN SELECT RAISE(ABORT, 'store_corrupt: state_transitions changes only through a schema migration'); END;
CREATE TRIGGER state_transitions_fixed_update BEFORE UPDATE ON state_transitions
BEGIN SELECT RAISE(ABORT, 'store_corrupt: state_transitions changes only through a schema migration'); END;
${neverDeleted('state_transitions')}

CREATE TABLE grants ( -- Grants: kernel-signed capabilities (tool or tool prefix, subject, budget, validity). Only revoked_at ever changes, once.
  capability_id TEXT PRIMARY KEY,
  tool TEXT NOT NULL,
  subject TEXT NOT NULL,
  max_invocations INTEGER NOT NULL CHECK (max_invocations > 0),
  max_cost_units INTEGER CHECK (max_cost_units >= 0),
  not_before INTEGER NOT NULL,
  expires_at INTEGER NOT NULL,
  issued_at INTEGER NOT NULL,
  revoked_at INTEGER,
  capability TEXT NOT NULL,         -- the signed capability, exact JCS bytes
  capability_digest TEXT NOT NULL   -- SHA-256 of those bytes
) STRICT;
${fixedColumns('grants', 'fixed', ['capability_id', 'tool', 'subject', 'max_invocations', 'max_cost_units', 'not_before', 'expires_at', 'issued_at', 'capability', 'capability_digest'], ['revoked_at'])}
${neverDeleted('grants')}

CREATE TABLE executor_pins ( -- Executor pins: (id, key, epoch) from each executor's exported public key, and the tools it serves.
  -- The highest epoch of an id is its current pin; older rows stay for audit and make old authorizations unusable.
  executor_id TEXT NOT NULL,
  key_epoch INTEGER NOT NULL CHECK (key_epoch > 0),
  public_key TEXT NOT NULL CHECK (length(public_key) = 64),
  tools TEXT NOT NULL CHECK (json_valid(tools)),  -- JSON array of tool patterns
  pinned_at INTEGER NOT NULL,
  PRIMARY KEY (executor_id, key_epoch)
) STRICT;
${fixedColumns('executor_pins', 'fixed', ['executor_id', 'key_epoch', 'public_key'])}
${neverDeleted('executor_pins')}

CREATE TABLE operations ( -- Operations, one per request id (the idempotency key). state follows the operation machine.
  operation_id TEXT PRIMARY KEY,
  request_id TEXT NOT NULL UNIQUE,
  request_binding_hash TEXT NOT NULL,   -- digest of the request bytes; a different one is request_conflict
  subject TEXT NOT NULL,
  tool TEXT NOT NULL,
  parameters_digest TEXT NOT NULL,
  cost_units INTEGER NOT NULL,
  capability_id TEXT REFERENCES grants (capability_id),
  capability_digest TEXT,
  executor_id TEXT,
  state TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL,
  start_request_digest TEXT,            -- the start request that committed dispatch (its retry gets the same authorization)
  authorization TEXT,                   -- the signed dispatch authorization, exact JCS bytes
  authorization_digest TEXT,
  window_not_before INTEGER,
  window_expires_at INTEGER,
  report TEXT,                          -- the executor's signed report that settled it, exact bytes
  report_digest TEXT,
  output TEXT CHECK (output IS NULL OR json_valid(output)),  -- the report's output (JSON), for completed operations
  flag TEXT                             -- why an operator should look (finalization deny, unknown)
) STRICT;
CREATE INDEX operations_by_state ON operations (state, created_at);
${OPERATIONS_INITIAL_STATE}
${transitionGuard('operations', 'operation')}
${fixedColumns('operations', 'fixed', ['operation_id', 'request_id', 'request_binding_hash', 'subject', 'tool', 'parameters_digest', 'cost_units', 'capability_id', 'capability_digest', 'executor_id', 'created_at'], ['start_request_digest', 'authorization', 'authorization_digest', 'window_not_before', 'window_expires_at', 'report', 'report_digest', 'output'])}
${neverDeleted('operations')}

CREATE TABLE holds ( -- Budget holds placed at reserve: one per allowed operation, disposed of (released or consumed) at most once.
  hold_id TEXT PRIMARY KEY,
  operation_id TEXT NOT NULL UNIQUE REFERENCES operations (operation_id),
  capability_id TEXT NOT NULL REFERENCES grants (capability_id),
  invocations INTEGER NOT NULL CHECK (invocations >= 0),
  cost_units_held INTEGER NOT NULL CHECK (cost_units_held >= 0),
  cost_units_charged INTEGER NOT NULL DEFAULT 0 CHECK (cost_units_charged >= 0 AND cost_units_charged <= cost_units_held),
  state TEXT NOT NULL DEFAULT 'reserved',  -- reserved, released, consumed
  created_at INTEGER NOT NULL,
  settled_at INTEGER,
  settled_by TEXT                          -- the receipt that released or consumed it
) STRICT;
CREATE INDEX holds_by_grant ON holds (capability_id, state);
${transitionGuard('holds', 'hold')}
${fixedColumns('holds', 'fixed', ['hold_id', 'operation_id', 'capability_id', 'invocations', 'cost_units_held', 'created_at'], ['settled_at', 'settled_by'])}
${neverDeleted('holds')}

CREATE TABLE nonces ( -- Execution nonces minted at reserve. A live nonce is never evicted: when the live ones reach capacity, reserve refuses.
  nonce_id TEXT PRIMARY KEY,
  operation_id TEXT NOT NULL UNIQUE REFERENCES operations (operation_id),
  state TEXT NOT NULL DEFAULT 'live',  -- live, used, expired, voided
  created_at INTEGER NOT NULL,
  expires_at INTEGER NOT NULL,
  closed_at INTEGER
) STRICT;
CREATE INDEX nonces_live ON nonces (expires_at) WHERE state = 'live';
${transitionGuard('nonces', 'nonce')}
${fixedColumns('nonces', 'fixed', ['nonce_id', 'operation_id', 'created_at', 'expires_at'], ['closed_at'])}
${neverDeleted('nonces')}

CREATE TABLE receipts ( -- Every decision, kernel-signed, retained as its exact bytes; insert-once. request_digest names the request it answers.
  receipt_id TEXT PRIMARY KEY,
  operation_id TEXT NOT NULL REFERENCES operations (operation_id),
  seq INTEGER NOT NULL CHECK (seq > 0),
  decision TEXT NOT NULL CHECK (decision IN ('reserve', 'start', 'completion', 'finalization', 'expiry', 'unknown')),
  verdict TEXT NOT NULL CHECK (verdict IN ('allow', 'deny')),
  reason TEXT NOT NULL,          -- ok, or an error code
  state TEXT NOT NULL,           -- the operation state after the decision
  hold_disposition TEXT NOT NULL CHECK (hold_disposition IN ('reserved', 'released', 'consumed', 'release_unconfirmed', 'none')),
  request_digest TEXT,
  issued_at INTEGER NOT NULL,
  digest TEXT NOT NULL,          -- SHA-256 of the receipt bytes
  receipt TEXT NOT NULL,         -- the signed receipt, exact JCS bytes
  UNIQUE (operation_id, seq)
) STRICT;
CREATE INDEX receipts_by_request ON receipts (operation_id, request_digest);
${RECEIPTS_INSERT_ONCE}
${neverDeleted('receipts')}

${operationsView('operation_id')}

${holdsView('operation_id')}

${receiptsView('operation_id', true)}

CREATE VIEW grants_view AS
SELECT g.capability_id, g.tool, g.subject, g.max_invocations, g.max_cost_units,
       (SELECT count(*) FROM holds h WHERE h.capability_id = g.capability_id AND h.state = 'consumed') AS invocations_used,
       (SELECT count(*) FROM holds h WHERE h.capability_id = g.capability_id AND h.state = 'reserved') AS invocations_held,
       ${iso('g.not_before')} AS valid_from, ${iso('g.expires_at')} AS expires, ${iso('g.revoked_at')} AS revoked
FROM grants g;
`;

/**
 * The head (docs/ROLLBACK.md): raised by one in every write batch that changed
 * anything (a decision, a receipt, a consumed nonce, an expiry), in the same
 * transaction, never lowered. The supervisor witnesses it outside this file,
 * so a kernel.db that lost committed batches (its -wal deleted after a kill,
 * an older copy restored) presents a lower head and is refused.
 */
const V2 = `
CREATE TABLE head ( -- A forward-only count of committed write batches; the supervisor keeps the highest it has seen.
  singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
  seq       INTEGER NOT NULL CHECK (typeof(seq) = 'integer' AND seq >= 0)
);
CREATE TRIGGER head_forward_only BEFORE UPDATE ON head WHEN NEW.seq < OLD.seq OR NEW.singleton <> OLD.singleton
BEGIN
  SELECT RAISE(ABORT, 'store_corrupt: head never goes back');
END;
${neverDeleted('head')}
INSERT INTO head (singleton, seq) SELECT 1, (SELECT count(*) FROM receipts);
`;

/**
 * Executor pools (README "Executor pools"): the supervisor may address a
 * reserved operation's start to another executor that serves its tool, so
 * executor_id may change while the operation is still reserved (the update
 * that commits the dispatch) and never after.
 */
const V3 = `
DROP TRIGGER operations_fixed;
${fixedColumns('operations', 'fixed', ['operation_id', 'request_id', 'request_binding_hash', 'subject', 'tool', 'parameters_digest', 'cost_units', 'capability_id', 'capability_digest', 'created_at'], ['start_request_digest', 'authorization', 'authorization_digest', 'window_not_before', 'window_expires_at', 'report', 'report_digest', 'output'])}
${OPERATIONS_EXECUTOR_BOUND}
`;

/**
 * Version 4: a grant's usage as four counters on its row, so reserve reads
 * them in O(1) instead of summing every hold the grant ever had. Only the
 * hold triggers move them, in the statement (so the transaction) that moves
 * the hold; each move names the hold and the state it entered (usage_hold,
 * usage_state), and the guard refuses any counter change that is not exactly
 * that hold's move — a hand edit in the sqlite3 shell included. grants_view
 * shows the counters beside the sums of the holds, and usage_agrees. It
 * also drops receipts_by_request, which no query needed.
 */
const V4 = `
ALTER TABLE grants ADD COLUMN invocations_held INTEGER NOT NULL DEFAULT 0 CHECK (invocations_held >= 0);
ALTER TABLE grants ADD COLUMN invocations_used INTEGER NOT NULL DEFAULT 0 CHECK (invocations_used >= 0);
ALTER TABLE grants ADD COLUMN cost_units_held INTEGER NOT NULL DEFAULT 0 CHECK (cost_units_held >= 0);
ALTER TABLE grants ADD COLUMN cost_units_used INTEGER NOT NULL DEFAULT 0 CHECK (cost_units_used >= 0);
ALTER TABLE grants ADD COLUMN usage_hold TEXT;   -- the hold whose move last changed the counters
ALTER TABLE grants ADD COLUMN usage_state TEXT;  -- the state that hold entered

UPDATE grants SET (invocations_held, invocations_used, cost_units_held, cost_units_used) = (
  SELECT coalesce(sum(CASE WHEN h.state = 'reserved' THEN h.invocations END), 0),
         coalesce(sum(CASE WHEN h.state = 'consumed' THEN h.invocations END), 0),
         coalesce(sum(CASE WHEN h.state = 'reserved' THEN h.cost_units_held END), 0),
         coalesce(sum(CASE WHEN h.state = 'consumed' THEN h.cost_units_charged END), 0)
  FROM holds h WHERE h.capability_id = grants.capability_id);

-- Receipts are found by (operation_id, …): the UNIQUE (operation_id, seq) index already
-- narrows to an operation's few receipts, so this second index only cost bytes per receipt.
DROP INDEX receipts_by_request;

CREATE TRIGGER holds_initial_state BEFORE INSERT ON holds WHEN NEW.state IS NOT 'reserved'
BEGIN SELECT RAISE(ABORT, 'illegal_transition: holds: a hold starts as reserved'); END;

CREATE TRIGGER holds_charge_fixed BEFORE UPDATE OF cost_units_charged ON holds
WHEN OLD.state IS NOT 'reserved' AND NEW.cost_units_charged IS NOT OLD.cost_units_charged
BEGIN SELECT RAISE(ABORT, 'store_corrupt: holds: the charge of a disposed hold never changes'); END;

CREATE TRIGGER holds_count_placed AFTER INSERT ON holds
BEGIN
  UPDATE grants SET invocations_held = invocations_held + NEW.invocations,
                    cost_units_held = cost_units_held + NEW.cost_units_held,
                    usage_hold = NEW.hold_id, usage_state = NEW.state
  WHERE capability_id = NEW.capability_id;
END;

CREATE TRIGGER holds_count_disposed AFTER UPDATE OF state ON holds
WHEN OLD.state = 'reserved' AND NEW.state IS NOT 'reserved'
BEGIN
  UPDATE grants SET invocations_held = invocations_held - OLD.invocations,
                    cost_units_held = cost_units_held - OLD.cost_units_held,
                    invocations_used = invocations_used + CASE WHEN NEW.state = 'consumed' THEN NEW.invocations ELSE 0 END,
                    cost_units_used = cost_units_used + CASE WHEN NEW.state = 'consumed' THEN NEW.cost_units_charged ELSE 0 END,
                    usage_hold = NEW.hold_id, usage_state = NEW.state
  WHERE capability_id = NEW.capability_id;
END;

CREATE TRIGGER grants_usage_guard
BEFORE UPDATE OF invocations_held, invocations_used, cost_units_held, cost_units_used, usage_hold, usage_state ON grants
WHEN NOT ((NEW.usage_hold IS NOT OLD.usage_hold OR NEW.usage_state IS NOT OLD.usage_state) AND EXISTS (
  SELECT 1 FROM holds h
  WHERE h.hold_id = NEW.usage_hold AND h.capability_id = NEW.capability_id AND h.state = NEW.usage_state
    AND NEW.invocations_held - OLD.invocations_held = CASE WHEN h.state = 'reserved' THEN h.invocations ELSE -h.invocations END
    AND NEW.cost_units_held - OLD.cost_units_held = CASE WHEN h.state = 'reserved' THEN h.cost_units_held ELSE -h.cost_units_held END
    AND NEW.invocations_used - OLD.invocations_used = CASE WHEN h.state = 'consumed' THEN h.invocations ELSE 0 END
    AND NEW.cost_units_used - OLD.cost_units_used = CASE WHEN h.state = 'consumed' THEN h.cost_units_charged ELSE 0 END))
BEGIN
  SELECT RAISE(ABORT, 'store_corrupt: grants: usage counters move only with a hold, by exactly that hold');
END;

DROP VIEW grants_view;
CREATE VIEW grants_view AS
SELECT g.capability_id, g.tool, g.subject, g.max_invocations, g.max_cost_units,
       g.invocations_used, g.invocations_held, g.cost_units_used, g.cost_units_held,
       coalesce(s.invocations_used, 0) AS holds_invocations_used, coalesce(s.invocations_held, 0) AS holds_invocations_held,
       coalesce(s.cost_units_used, 0) AS holds_cost_units_used, coalesce(s.cost_units_held, 0) AS holds_cost_units_held,
       (g.invocations_used = coalesce(s.invocations_used, 0) AND g.invocations_held = coalesce(s.invocations_held, 0)
        AND g.cost_units_used = coalesce(s.cost_units_used, 0) AND g.cost_units_held = coalesce(s.cost_units_held, 0)) AS usage_agrees,
       ${iso('g.not_before')} AS valid_from, ${iso('g.expires_at')} AS expires, ${iso('g.revoked_at')} AS revoked
FROM grants g LEFT JOIN (
  SELECT h.capability_id,
         sum(CASE WHEN h.state = 'consumed' THEN h.invocations ELSE 0 END) AS invocations_used,
         sum(CASE WHEN h.state = 'reserved' THEN h.invocations ELSE 0 END) AS invocations_held,
         sum(CASE WHEN h.state = 'consumed' THEN h.cost_units_charged ELSE 0 END) AS cost_units_used,
         sum(CASE WHEN h.state = 'reserved' THEN h.cost_units_held ELSE 0 END) AS cost_units_held
  FROM holds h GROUP BY h.capability_id) s ON s.capability_id = g.capability_id;
`;

/**
 * Version 5: kernel key rotation (docs/PROTOCOL.md §12). Every key this
 * kernel has signed with, the first from kernel_identity, each later one with
 * the rotation statement its predecessor signed. Insert-once, one epoch at a
 * time; the highest is current. Receipts, capabilities and authorizations
 * signed under a retired key stay verifiable with its public key here.
 */
const V5 = `
CREATE TABLE kernel_epochs (
  epoch INTEGER PRIMARY KEY CHECK (epoch >= 1),
  public_key TEXT NOT NULL UNIQUE CHECK (length(public_key) = 64),
  statement TEXT,
  created_at INTEGER NOT NULL
) STRICT;
CREATE TRIGGER kernel_epochs_fixed BEFORE UPDATE ON kernel_epochs
BEGIN SELECT RAISE(ABORT, 'store_corrupt: kernel key epochs never change'); END;
${neverDeleted('kernel_epochs')}
CREATE TRIGGER kernel_epochs_next BEFORE INSERT ON kernel_epochs
WHEN (SELECT count(*) FROM kernel_epochs) > 0 AND (NEW.epoch IS NOT (SELECT max(epoch) FROM kernel_epochs) + 1 OR NEW.statement IS NULL)
BEGIN SELECT RAISE(ABORT, 'store_corrupt: kernel key epochs move forward by one, each with its rotation statement'); END;
INSERT INTO kernel_epochs (epoch, public_key, statement, created_at) SELECT key_epoch, public_key, NULL, created_at FROM kernel_identity;
`;

/**
 * Version 6: fewer bytes per operation (docs/PERFORMANCE.md "Store bytes per
 * operation"), every signed artifact still kept as its exact bytes.
 *
 * - The executor's report moves out of the operations row into `reports`,
 *   written once when the operation settles; `output` is no longer kept,
 *   since the report carries it (its body's `output`) and the kernel reads
 *   it from there. The operations row was updated three or four times per
 *   operation and grew to ~2.8 KB by the end: one row per 4 KiB page. Without
 *   the report (~0.9 KB) and the output it is ~1.7 KB, two per page, and the
 *   insert-once report rows pack four to a page. A trigger keeps the pair
 *   whole: an operation's report_digest is set only once its report is in
 *   `reports`.
 * - A receipt keeps what its signed bytes do not say (seq, its number within
 *   the operation; request_digest, the request it answers) and its bytes. Its
 *   operation, id, decision, verdict, reason, state, hold disposition and
 *   time are virtual columns read from those bytes (the unique index on
 *   (operation_id, seq) and the foreign key work on them as before) — shown by the sqlite3 shell and
 *   `SELECT *` as before, stored nowhere, so they can no longer disagree
 *   with the signed receipt. The stored digest (SHA-256 of the bytes, what
 *   `custody receipt verify` computes) and the index on receipt_id (no query
 *   finds a receipt by id; the id is `r:<operation_id>:<seq>`, the unique
 *   key) go. A receipt row drops from ~1.46 KB to ≤ ~1.32 KB: three per
 *   page, not two.
 * - Every other index stays: EXPLAIN QUERY PLAN of every statement the store
 *   prepares (test/kernel-proc/store-bytes.test.ts) finds each one used.
 *   holds_by_grant, which reserve no longer reads since the version-4
 *   counters, is the covering index the holds-by-state gauge of GET /metrics
 *   scans instead of the whole holds table.
 *
 * The migration checks, before the old receipts table goes, that every
 * column it stops storing equals what the receipt's bytes say (a named
 * CHECK on a temporary table fails the migration otherwise).
 */
const RECEIPT_KEPT_COLUMNS = ['seq', 'request_digest', 'receipt'];
const fromReceipt = (path: string) => `json_extract(receipt, '$.body.${path}')`;
const V6 = `
DROP TRIGGER operations_fixed;
CREATE TABLE reports ( -- The executor's signed report that settled an operation, exact bytes; insert-once. operations.report_digest names it.
  operation_id TEXT PRIMARY KEY REFERENCES operations (operation_id),
  report TEXT NOT NULL
) STRICT;
INSERT INTO reports (operation_id, report) SELECT operation_id, report FROM operations WHERE report IS NOT NULL ORDER BY rowid;
ALTER TABLE operations DROP COLUMN output;
ALTER TABLE operations DROP COLUMN report;
${fixedColumns('operations', 'fixed', ['operation_id', 'request_id', 'request_binding_hash', 'subject', 'tool', 'parameters_digest', 'cost_units', 'capability_id', 'capability_digest', 'created_at'], ['start_request_digest', 'authorization', 'authorization_digest', 'window_not_before', 'window_expires_at', 'report_digest'])}
${operationsReportKept('operation_id')}
${REPORTS_INSERT_ONCE}
${neverDeleted('reports')}

DROP VIEW operations_view;
DROP VIEW receipts_view;
ALTER TABLE receipts RENAME TO receipts_v5;
CREATE TABLE receipts ( -- Every decision, kernel-signed, retained as its exact bytes; insert-once. request_digest names the request it answers.
  seq INTEGER NOT NULL CHECK (seq > 0),
  request_digest TEXT,
  receipt TEXT NOT NULL,         -- the signed receipt, exact JCS bytes; the columns below are read from them
  operation_id TEXT NOT NULL GENERATED ALWAYS AS (${fromReceipt('operation_id')}) VIRTUAL REFERENCES operations (operation_id),
  receipt_id TEXT GENERATED ALWAYS AS (${fromReceipt('receipt_id')}) VIRTUAL,
  decision TEXT GENERATED ALWAYS AS (${fromReceipt('decision')}) VIRTUAL,
  verdict TEXT GENERATED ALWAYS AS (${fromReceipt('verdict')}) VIRTUAL,
  reason TEXT GENERATED ALWAYS AS (${fromReceipt('reason')}) VIRTUAL,
  state TEXT GENERATED ALWAYS AS (${fromReceipt('state')}) VIRTUAL,
  hold_disposition TEXT GENERATED ALWAYS AS (${fromReceipt('hold.disposition')}) VIRTUAL,
  issued_at INTEGER GENERATED ALWAYS AS (${fromReceipt('issued_at')}) VIRTUAL,
  CONSTRAINT receipt_names_its_key CHECK (receipt_id = 'r:' || operation_id || ':' || seq),
  CHECK (decision IN ('reserve', 'start', 'completion', 'finalization', 'expiry', 'unknown')),
  CHECK (verdict IN ('allow', 'deny')),
  CHECK (hold_disposition IN ('reserved', 'released', 'consumed', 'release_unconfirmed', 'none')),
  UNIQUE (operation_id, seq)
) STRICT;
INSERT INTO receipts (${RECEIPT_KEPT_COLUMNS.join(', ')}) SELECT ${RECEIPT_KEPT_COLUMNS.join(', ')} FROM receipts_v5 ORDER BY rowid;
CREATE TEMP TABLE receipts_v6_check (
  differing INTEGER NOT NULL,
  CONSTRAINT v6_receipt_columns_equal_the_receipt_bytes CHECK (differing = 0)
);
INSERT INTO receipts_v6_check (differing)
SELECT count(*) FROM receipts_v5 o LEFT JOIN receipts n ON n.operation_id = o.operation_id AND n.seq = o.seq
WHERE n.receipt IS NOT o.receipt OR n.request_digest IS NOT o.request_digest OR n.receipt_id IS NOT o.receipt_id
   OR n.decision IS NOT o.decision OR n.verdict IS NOT o.verdict OR n.reason IS NOT o.reason OR n.state IS NOT o.state
   OR n.hold_disposition IS NOT o.hold_disposition OR n.issued_at IS NOT o.issued_at;
DROP TABLE receipts_v6_check;
DROP TABLE receipts_v5;
${RECEIPTS_INSERT_ONCE}
${neverDeleted('receipts')}

${operationsView('operation_id')}

${receiptsView('operation_id', false)}
`;

/** grants_view since version 7: each grant's counters beside the sums of its holds, and whether they agree. */
const GRANTS_VIEW = `
CREATE VIEW grants_view AS
SELECT g.capability_id, g.tool, g.subject, g.max_invocations, g.max_cost_units,
       g.invocations_used, g.invocations_held, g.cost_units_used, g.cost_units_held,
       g.holds_reserved, g.holds_consumed, g.holds_released,
       coalesce(s.invocations_used, 0) AS holds_invocations_used, coalesce(s.invocations_held, 0) AS holds_invocations_held,
       coalesce(s.cost_units_used, 0) AS holds_cost_units_used, coalesce(s.cost_units_held, 0) AS holds_cost_units_held,
       (g.invocations_used = coalesce(s.invocations_used, 0) AND g.invocations_held = coalesce(s.invocations_held, 0)
        AND g.cost_units_used = coalesce(s.cost_units_used, 0) AND g.cost_units_held = coalesce(s.cost_units_held, 0)
        AND g.holds_reserved = coalesce(s.holds_reserved, 0) AND g.holds_consumed = coalesce(s.holds_consumed, 0)
        AND g.holds_released = coalesce(s.holds_released, 0)) AS usage_agrees,
       ${iso('g.not_before')} AS valid_from, ${iso('g.expires_at')} AS expires, ${iso('g.revoked_at')} AS revoked
FROM grants g LEFT JOIN (
  SELECT h.capability_id,
         sum(CASE WHEN h.state = 'consumed' THEN h.invocations ELSE 0 END) AS invocations_used,
         sum(CASE WHEN h.state = 'reserved' THEN h.invocations ELSE 0 END) AS invocations_held,
         sum(CASE WHEN h.state = 'consumed' THEN h.cost_units_charged ELSE 0 END) AS cost_units_used,
         sum(CASE WHEN h.state = 'reserved' THEN h.cost_units_held ELSE 0 END) AS cost_units_held,
         count(CASE WHEN h.state = 'reserved' THEN 1 END) AS holds_reserved,
         count(CASE WHEN h.state = 'consumed' THEN 1 END) AS holds_consumed,
         count(CASE WHEN h.state = 'released' THEN 1 END) AS holds_released
  FROM holds h GROUP BY h.capability_id) s ON s.capability_id = g.capability_id;`;

/**
 * Version 7: nothing an operator or a scrape asks reads the whole history
 * (docs/PERFORMANCE.md "History on the start path").
 * - Holds by state as counters on each grant's row (holds_reserved,
 *   holds_consumed, holds_released), moved by the same hold triggers as the
 *   version-4 usage counters, in the statement that moves the hold, and
 *   under the same guard: the holds-by-state gauge of GET /metrics sums the
 *   grants instead of counting every hold ever placed. holds_by_grant, which
 *   only that gauge still read, goes: a hold's insert and its disposal no
 *   longer write an index entry each. grants_view shows the hold counters
 *   beside the counts of the holds, and usage_agrees covers them.
 * - operations_by_creation: ops.list with no state named reads its page in
 *   this index's order, where it sorted the keys of every operation. It
 *   holds operation_id too, so that the entries an offset skips are read
 *   from the index alone (a page 100,000 deep: ~14 ms, against ~180 ms
 *   reading each skipped row for its id); ties of one millisecond, which
 *   the descending order needs the other way round, are sorted among
 *   themselves.
 */
const V7 = `
ALTER TABLE grants ADD COLUMN holds_reserved INTEGER NOT NULL DEFAULT 0 CHECK (holds_reserved >= 0);
ALTER TABLE grants ADD COLUMN holds_consumed INTEGER NOT NULL DEFAULT 0 CHECK (holds_consumed >= 0);
ALTER TABLE grants ADD COLUMN holds_released INTEGER NOT NULL DEFAULT 0 CHECK (holds_released >= 0);

DROP TRIGGER grants_usage_guard;
UPDATE grants SET (holds_reserved, holds_consumed, holds_released) = (
  SELECT count(CASE WHEN h.state = 'reserved' THEN 1 END), count(CASE WHEN h.state = 'consumed' THEN 1 END),
         count(CASE WHEN h.state = 'released' THEN 1 END)
  FROM holds h WHERE h.capability_id = grants.capability_id);

DROP TRIGGER holds_count_placed;
CREATE TRIGGER holds_count_placed AFTER INSERT ON holds
BEGIN
  UPDATE grants SET invocations_held = invocations_held + NEW.invocations,
                    cost_units_held = cost_units_held + NEW.cost_units_held,
                    holds_reserved = holds_reserved + 1,
                    usage_hold = NEW.hold_id, usage_state = NEW.state
  WHERE capability_id = NEW.capability_id;
END;

DROP TRIGGER holds_count_disposed;
CREATE TRIGGER holds_count_disposed AFTER UPDATE OF state ON holds
WHEN OLD.state = 'reserved' AND NEW.state IS NOT 'reserved'
BEGIN
  UPDATE grants SET invocations_held = invocations_held - OLD.invocations,
                    cost_units_held = cost_units_held - OLD.cost_units_held,
                    invocations_used = invocations_used + CASE WHEN NEW.state = 'consumed' THEN NEW.invocations ELSE 0 END,
                    cost_units_used = cost_units_used + CASE WHEN NEW.state = 'consumed' THEN NEW.cost_units_charged ELSE 0 END,
                    holds_reserved = holds_reserved - 1,
                    holds_consumed = holds_consumed + (NEW.state = 'consumed'),
                    holds_released = holds_released + (NEW.state = 'released'),
                    usage_hold = NEW.hold_id, usage_state = NEW.state
  WHERE capability_id = NEW.capability_id;
END;

${grantsUsageGuard('h.hold_id = NEW.usage_hold AND h.capability_id')}

DROP INDEX holds_by_grant;
CREATE INDEX operations_by_creation ON operations (created_at, operation_id);

DROP VIEW grants_view;
${GRANTS_VIEW}
`;

/**
 * Version 8: reserve reads the grants that could carry a reservation, not
 * every grant ever issued (docs/PERFORMANCE.md "Grants on the reserve
 * path"). A service that grants per session piles up expired grants, and
 * each reserve read them all: with 20,000 of them the kernel spent ~290 ms
 * of CPU per operation.
 * - grants_live (tool, subject, expires_at): the unexpired grants of one
 *   tool pattern and subject, a range of the index.
 * - grants_newest (tool, subject, issued_at, capability_id): the newest
 *   grant of one pattern and subject in any state, one entry, whose refusal
 *   a reservation no live grant can carry is answered with.
 * - grants_expiry (expires_at): grant.list of the live grants (GET
 *   /v1/tools, custody mcp) reads the unexpired ones, not the pile.
 */
const V8 = `
CREATE INDEX grants_live ON grants (tool, subject, expires_at);
CREATE INDEX grants_newest ON grants (tool, subject, issued_at DESC, capability_id);
CREATE INDEX grants_expiry ON grants (expires_at);
`;

/**
 * Version 9: grant.list pages by key, not by offset (docs/PROTOCOL.md,
 * "Paging"). grants_by_issue holds the listing's order (issued_at
 * descending, then capability_id), so a page of every grant reads its own
 * entries from the previous page's key on, where it sorted the keys of every
 * grant issued before it.
 */
const V9 = `
CREATE INDEX grants_by_issue ON grants (issued_at DESC, capability_id);
`;

/**
 * The rowid of the operation `column` (an SQL expression, or `?` / `@name`)
 * names by id: its unique index finds it. The key every child row of an
 * operation is stored and found under since version 10.
 */
export const rowOf = (column: string) => `(SELECT o.operation_rowid FROM operations o WHERE o.operation_id = ${column})`;

/**
 * A trigger that refuses a row of `table` whose operation_rowid names
 * another operation than its operation_id (stored, or read from the row's
 * signed bytes): the two say the same thing, and the key is what the store
 * finds the row by.
 */
function namesItsOperation(table: string): string {
  return `
CREATE TRIGGER ${table}_operation_named BEFORE INSERT ON ${table}
WHEN NEW.operation_id IS NOT (SELECT o.operation_id FROM operations o WHERE o.operation_rowid = NEW.operation_rowid)
BEGIN
  SELECT RAISE(ABORT, 'store_corrupt: ${table}: operation_rowid and operation_id name different operations');
END;`;
}

const HOLD_TRIGGERS = `
${transitionGuard('holds', 'hold')}
${fixedColumns('holds', 'fixed', ['operation_rowid', 'operation_id', 'capability_id', 'invocations', 'cost_units_held', 'created_at'], ['settled_at', 'settled_by'])}
${neverDeleted('holds')}
${namesItsOperation('holds')}
CREATE TRIGGER holds_initial_state BEFORE INSERT ON holds WHEN NEW.state IS NOT 'reserved'
BEGIN SELECT RAISE(ABORT, 'illegal_transition: holds: a hold starts as reserved'); END;
CREATE TRIGGER holds_charge_fixed BEFORE UPDATE OF cost_units_charged ON holds
WHEN OLD.state IS NOT 'reserved' AND NEW.cost_units_charged IS NOT OLD.cost_units_charged
BEGIN SELECT RAISE(ABORT, 'store_corrupt: holds: the charge of a disposed hold never changes'); END;
CREATE TRIGGER holds_count_placed AFTER INSERT ON holds
BEGIN
  UPDATE grants SET invocations_held = invocations_held + NEW.invocations,
                    cost_units_held = cost_units_held + NEW.cost_units_held,
                    holds_reserved = holds_reserved + 1,
                    usage_hold = NEW.hold_id, usage_state = NEW.state
  WHERE capability_id = NEW.capability_id;
END;
CREATE TRIGGER holds_count_disposed AFTER UPDATE OF state ON holds
WHEN OLD.state = 'reserved' AND NEW.state IS NOT 'reserved'
BEGIN
  UPDATE grants SET invocations_held = invocations_held - OLD.invocations,
                    cost_units_held = cost_units_held - OLD.cost_units_held,
                    invocations_used = invocations_used + CASE WHEN NEW.state = 'consumed' THEN NEW.invocations ELSE 0 END,
                    cost_units_used = cost_units_used + CASE WHEN NEW.state = 'consumed' THEN NEW.cost_units_charged ELSE 0 END,
                    holds_reserved = holds_reserved - 1,
                    holds_consumed = holds_consumed + (NEW.state = 'consumed'),
                    holds_released = holds_released + (NEW.state = 'released'),
                    usage_hold = NEW.hold_id, usage_state = NEW.state
  WHERE capability_id = NEW.capability_id;
END;`;

/**
 * Version 10: an operation's rows are found by its rowid, not by its id
 * (docs/PERFORMANCE.md "Rows keyed by the operation's rowid").
 *
 * The operation id is a digest: keyed by it, every index an operation's rows
 * entered (the hold's id and its operation, the nonce's id and its
 * operation, the receipts' (operation, seq), the report's operation) put
 * them on a random leaf, one 4 KiB page each, which no other operation of
 * the same commit shared: at 64 in flight the kernel wrote ~74 KB toward the
 * disk per operation for ~7 KB it kept. Now `operations` has an explicit
 * rowid, `operation_rowid` (INTEGER PRIMARY KEY: VACUUM keeps it), and a
 * hold, a nonce and a report are keyed by their operation's, receipts by
 * (operation_rowid, seq): each lands on the newest leaves, shared by the
 * operations of a commit. The operation id and the request id keep their
 * unique indexes, the two random leaves an operation still costs (the
 * request id's is the lookup an operator's sqlite3 shell makes).
 *
 * Nothing an operator read goes: holds and nonces keep operation_id (no
 * longer indexed: the views join by rowid), a hold's id is read from its
 * operation (`hold:<operation_id>`, which it always was; the migration
 * checks), a report's operation from its signed bytes. Each child row's
 * operation_rowid is held to its operation_id by a trigger. The triggers,
 * indexes and views are those of version 9 on the new keys, but for one
 * constraint that goes with its index: a nonce id is no longer unique in
 * the store. It is 128 random bits minted at reserve, and start compares
 * the nonce it is given with the one its own operation holds, never looks
 * a nonce up by its id.
 */
const V10 = `
DROP VIEW operations_view;
DROP VIEW holds_view;
DROP VIEW receipts_view;
DROP VIEW grants_view;
DROP TRIGGER grants_usage_guard;
ALTER TABLE receipts RENAME TO receipts_v9;
ALTER TABLE reports RENAME TO reports_v9;
ALTER TABLE nonces RENAME TO nonces_v9;
ALTER TABLE holds RENAME TO holds_v9;
ALTER TABLE operations RENAME TO operations_v9;
DROP INDEX operations_by_state;
DROP INDEX operations_by_creation;
DROP INDEX nonces_live;

CREATE TABLE operations ( -- Operations, one per request id (the idempotency key). state follows the operation machine.
  operation_rowid INTEGER PRIMARY KEY,  -- the key an operation's holds, nonce, receipts and report are found by
  operation_id TEXT NOT NULL UNIQUE,
  request_id TEXT NOT NULL UNIQUE,
  request_binding_hash TEXT NOT NULL,   -- digest of the request bytes; a different one is request_conflict
  subject TEXT NOT NULL,
  tool TEXT NOT NULL,
  parameters_digest TEXT NOT NULL,
  cost_units INTEGER NOT NULL,
  capability_id TEXT REFERENCES grants (capability_id),
  capability_digest TEXT,
  executor_id TEXT,
  state TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL,
  start_request_digest TEXT,            -- the start request that committed dispatch (its retry gets the same authorization)
  authorization TEXT,                   -- the signed dispatch authorization, exact JCS bytes
  authorization_digest TEXT,
  window_not_before INTEGER,
  window_expires_at INTEGER,
  report_digest TEXT,
  flag TEXT                             -- why an operator should look (finalization deny, unknown)
) STRICT;
-- Each table is copied walking the operations in rowid order (NOT INDEXED and CROSS JOIN fix that order in SQLite), each
-- operation's rows found by the old table's index on its id: written in key order. Every index exists before its
-- table is filled (a CREATE INDEX over a filled table sorts all its keys, in memory: temp_store), so no sort grows
-- with the history.
CREATE INDEX operations_by_state ON operations (state, created_at);
CREATE INDEX operations_by_creation ON operations (created_at, operation_id);
INSERT INTO operations SELECT rowid, * FROM operations_v9 ORDER BY rowid;

CREATE TABLE holds ( -- Budget holds placed at reserve: one per allowed operation, disposed of (released or consumed) at most once.
  operation_rowid INTEGER PRIMARY KEY REFERENCES operations (operation_rowid),
  hold_id TEXT GENERATED ALWAYS AS ('hold:' || operation_id) VIRTUAL,
  operation_id TEXT NOT NULL,
  capability_id TEXT NOT NULL REFERENCES grants (capability_id),
  invocations INTEGER NOT NULL CHECK (invocations >= 0),
  cost_units_held INTEGER NOT NULL CHECK (cost_units_held >= 0),
  cost_units_charged INTEGER NOT NULL DEFAULT 0 CHECK (cost_units_charged >= 0 AND cost_units_charged <= cost_units_held),
  state TEXT NOT NULL DEFAULT 'reserved',  -- reserved, released, consumed
  created_at INTEGER NOT NULL,
  settled_at INTEGER,
  settled_by TEXT                          -- the receipt that released or consumed it
) STRICT;
INSERT INTO holds (operation_rowid, operation_id, capability_id, invocations, cost_units_held, cost_units_charged, state, created_at, settled_at, settled_by)
SELECT o.operation_rowid, h.operation_id, h.capability_id, h.invocations, h.cost_units_held, h.cost_units_charged, h.state, h.created_at, h.settled_at, h.settled_by
FROM operations o NOT INDEXED CROSS JOIN holds_v9 h ON h.operation_id = o.operation_id;

CREATE TABLE nonces ( -- Execution nonces minted at reserve. A live nonce is never evicted: when the live ones reach capacity, reserve refuses.
  operation_rowid INTEGER PRIMARY KEY REFERENCES operations (operation_rowid),
  nonce_id TEXT NOT NULL,
  operation_id TEXT NOT NULL,
  state TEXT NOT NULL DEFAULT 'live',  -- live, used, expired, voided
  created_at INTEGER NOT NULL,
  expires_at INTEGER NOT NULL,
  closed_at INTEGER
) STRICT;
CREATE INDEX nonces_live ON nonces (expires_at) WHERE state = 'live';
INSERT INTO nonces (operation_rowid, nonce_id, operation_id, state, created_at, expires_at, closed_at)
SELECT o.operation_rowid, n.nonce_id, n.operation_id, n.state, n.created_at, n.expires_at, n.closed_at
FROM operations o NOT INDEXED CROSS JOIN nonces_v9 n ON n.operation_id = o.operation_id;

CREATE TABLE receipts ( -- Every decision, kernel-signed, retained as its exact bytes; insert-once. request_digest names the request it answers.
  operation_rowid INTEGER NOT NULL REFERENCES operations (operation_rowid),
  seq INTEGER NOT NULL CHECK (seq > 0),
  request_digest TEXT,
  receipt TEXT NOT NULL,         -- the signed receipt, exact JCS bytes; the columns below are read from them
  operation_id TEXT NOT NULL GENERATED ALWAYS AS (${fromReceipt('operation_id')}) VIRTUAL,
  receipt_id TEXT GENERATED ALWAYS AS (${fromReceipt('receipt_id')}) VIRTUAL,
  decision TEXT GENERATED ALWAYS AS (${fromReceipt('decision')}) VIRTUAL,
  verdict TEXT GENERATED ALWAYS AS (${fromReceipt('verdict')}) VIRTUAL,
  reason TEXT GENERATED ALWAYS AS (${fromReceipt('reason')}) VIRTUAL,
  state TEXT GENERATED ALWAYS AS (${fromReceipt('state')}) VIRTUAL,
  hold_disposition TEXT GENERATED ALWAYS AS (${fromReceipt('hold.disposition')}) VIRTUAL,
  issued_at INTEGER GENERATED ALWAYS AS (${fromReceipt('issued_at')}) VIRTUAL,
  CONSTRAINT receipt_names_its_key CHECK (receipt_id = 'r:' || operation_id || ':' || seq),
  CHECK (decision IN ('reserve', 'start', 'completion', 'finalization', 'expiry', 'unknown')),
  CHECK (verdict IN ('allow', 'deny')),
  CHECK (hold_disposition IN ('reserved', 'released', 'consumed', 'release_unconfirmed', 'none')),
  UNIQUE (operation_rowid, seq)
) STRICT;
INSERT INTO receipts (operation_rowid, seq, request_digest, receipt)
SELECT o.operation_rowid, r.seq, r.request_digest, r.receipt FROM operations o NOT INDEXED CROSS JOIN receipts_v9 r ON r.operation_id = o.operation_id;

CREATE TABLE reports ( -- The executor's signed report that settled an operation, exact bytes; insert-once. operations.report_digest names it.
  operation_rowid INTEGER PRIMARY KEY REFERENCES operations (operation_rowid),
  report TEXT NOT NULL,
  operation_id TEXT NOT NULL GENERATED ALWAYS AS (json_extract(report, '$.body.operation_id')) VIRTUAL
) STRICT;
INSERT INTO reports (operation_rowid, report) SELECT o.operation_rowid, r.report FROM operations o NOT INDEXED CROSS JOIN reports_v9 r ON r.operation_id = o.operation_id;

CREATE TEMP TABLE v10_check (
  held INTEGER NOT NULL, holds_named INTEGER NOT NULL, minted INTEGER NOT NULL, nonces_named INTEGER NOT NULL,
  issued INTEGER NOT NULL, receipts_named INTEGER NOT NULL, kept INTEGER NOT NULL, reports_named INTEGER NOT NULL,
  CONSTRAINT v10_every_row_copied_with_its_operation CHECK (
    held = holds_named AND minted = nonces_named AND issued = receipts_named AND kept = reports_named)
);
INSERT INTO v10_check SELECT
  (SELECT count(*) FROM holds_v9),
  (SELECT count(*) FROM holds_v9 v JOIN holds h ON h.operation_rowid = ${rowOf('v.operation_id')}
     WHERE h.hold_id = v.hold_id AND h.operation_id = v.operation_id),
  (SELECT count(*) FROM nonces_v9),
  (SELECT count(*) FROM nonces_v9 v JOIN nonces n ON n.operation_rowid = ${rowOf('v.operation_id')} WHERE n.nonce_id = v.nonce_id),
  (SELECT count(*) FROM receipts_v9),
  (SELECT count(*) FROM receipts_v9 v JOIN receipts r ON r.operation_rowid = ${rowOf('v.operation_id')} AND r.seq = v.seq
     WHERE r.operation_id = v.operation_id AND r.receipt = v.receipt AND r.request_digest IS v.request_digest),
  (SELECT count(*) FROM reports_v9),
  (SELECT count(*) FROM reports_v9 v JOIN reports r ON r.operation_rowid = ${rowOf('v.operation_id')}
     WHERE r.operation_id = v.operation_id AND r.report = v.report);
DROP TABLE v10_check;
DROP TABLE receipts_v9;
DROP TABLE reports_v9;
DROP TABLE nonces_v9;
DROP TABLE holds_v9;
DROP TABLE operations_v9;

${OPERATIONS_INITIAL_STATE}
${transitionGuard('operations', 'operation')}
${fixedColumns('operations', 'fixed', ['operation_rowid', 'operation_id', 'request_id', 'request_binding_hash', 'subject', 'tool', 'parameters_digest', 'cost_units', 'capability_id', 'capability_digest', 'created_at'], ['start_request_digest', 'authorization', 'authorization_digest', 'window_not_before', 'window_expires_at', 'report_digest'])}
${neverDeleted('operations')}
${OPERATIONS_EXECUTOR_BOUND}
${operationsReportKept('operation_rowid')}

${HOLD_TRIGGERS}

${transitionGuard('nonces', 'nonce')}
${fixedColumns('nonces', 'fixed', ['operation_rowid', 'nonce_id', 'operation_id', 'created_at', 'expires_at'], ['closed_at'])}
${neverDeleted('nonces')}
${namesItsOperation('nonces')}

${RECEIPTS_INSERT_ONCE}
${neverDeleted('receipts')}
${namesItsOperation('receipts')}

${REPORTS_INSERT_ONCE}
${neverDeleted('reports')}
${namesItsOperation('reports')}

${grantsUsageGuard(`h.operation_rowid = ${rowOf('substr(NEW.usage_hold, 6)')} AND h.hold_id = NEW.usage_hold\n    AND h.capability_id`)}

${operationsView('operation_rowid')}

${holdsView('operation_rowid')}

${receiptsView('operation_rowid', false)}

${GRANTS_VIEW}
`;

/**
 * The clock high-water mark (docs/RELIABILITY.md, the kernel's clock stepped
 * back): the latest time a committed write batch was decided at, kept on the
 * head row and raised with it, never lowered. A grant, a nonce and a window
 * are judged at max(clock, mark), so a clock stepped back cannot make an
 * expired grant allow again; windows are still signed from the clock
 * (kernel-proc/decisions/start.ts). 0 until the first batch after the upgrade.
 */
const V11 = `
ALTER TABLE head ADD COLUMN clock_hwm_ms INTEGER NOT NULL DEFAULT 0 CHECK (typeof(clock_hwm_ms) = 'integer' AND clock_hwm_ms >= 0);
CREATE TRIGGER head_clock_forward_only BEFORE UPDATE OF clock_hwm_ms ON head WHEN NEW.clock_hwm_ms < OLD.clock_hwm_ms
BEGIN
  SELECT RAISE(ABORT, 'store_corrupt: the clock high-water mark never goes back');
END;
`;

export const KERNEL_MIGRATIONS: readonly Migration[] = [
  { version: 1, description: 'identity, grants, executor pins, operations, holds, nonces, receipts, views', sql: V1 },
  { version: 2, description: 'head: a forward-only count of committed write batches', sql: V2 },
  { version: 3, description: 'executor pools: a reserved operation may be started on another executor of its tool', sql: V3 },
  { version: 4, description: 'grant usage counters kept by the hold triggers; grants_view shows counters and hold sums', sql: V4 },
  { version: 5, description: 'kernel_epochs: every kernel key epoch with the rotation statement that introduced it', sql: V5 },
  { version: 6, description: 'reports out of the operations row, output read from the report; receipt columns read from the receipt bytes', sql: V6 },
  { version: 7, description: 'holds by state counted on each grant; holds_by_grant dropped; operations_by_creation for ops.list', sql: V7 },
  { version: 8, description: 'grants_live, grants_newest and grants_expiry: reserve and the live grant list read the grants that could carry it, not every grant', sql: V8 },
  { version: 9, description: 'grants_by_issue: grant.list reads each page from the previous page\'s key in the listing\'s order', sql: V9 },
  { version: 10, description: 'an operation\'s holds, nonce, receipts and report keyed by its rowid, not its id', sql: V10 },
  { version: 11, description: 'the clock high-water mark on the head row: grants, nonces and windows judged at max(clock, mark)', sql: V11 },
];

export const KERNEL_DB_FILE = 'kernel.db';
