// The ledger's schema (ARCHITECTURE.md §6.2, §9). The guards live in the database
// itself, so they hold for an operator's `sqlite3` shell as much as for
// custody: the configuration row and every claim, refusal and report are
// insert-once (UPDATE and DELETE raise), and the clock high-water mark only
// moves forward. Refusals share the claims table, and so its unique key on
// operation_id: once a refusal is recorded no claim can follow (H2/H4b, ARCHITECTURE.md §6.5).
//
// The one sanctioned removal is archival: a DELETE on claims or reports
// passes only when custody_archive_permit(operation_id) answers 1, a
// function that exists on custody's own connection only, and only for rows
// it has just copied into archive.db. From the shell the function does not
// exist, so the DELETE fails ("no such function").
//
// Tables are plain, not STRICT: a STRICT table makes the whole file
// unreadable to sqlite3 shells older than 3.37, which operators still run;
// CHECK constraints carry the types that matter instead.
import type { Migration } from '../../shared/store/sqlite-store.js';

const ISO = (column: string) => `strftime('%Y-%m-%dT%H:%M:%fZ', ${column} / 1000.0, 'unixepoch')`;

export /** claims_view: each claim or refusal with its report's status, joined to reports on `join`. */
const claimsView = (join: string) => `CREATE VIEW claims_view AS
SELECT c.seq,
       c.operation_id,
       c.kind,
       c.tool,
       c.claim_id,
       c.claimed_at,
       ${ISO('c.claimed_at')} AS claimed_at_iso,
       c.expires_at,
       ${ISO('c.expires_at')} AS expires_at_iso,
       r.status AS report_status,
       r.finished_at,
       ${ISO('r.finished_at')} AS finished_at_iso,
       CASE WHEN r.status IS NOT NULL THEN r.status ELSE 'outcome_unknown' END AS state
FROM claims c LEFT JOIN reports r ON ${join};`;

/** A report is kept as signed: never changed, and removed only by archival after it copied it (every version's reports table). */
const REPORTS_INSERT_ONCE = `CREATE TRIGGER reports_no_update BEFORE UPDATE ON reports
BEGIN SELECT RAISE(ABORT, 'reports are insert-once: a signed report is kept as signed'); END;
CREATE TRIGGER reports_no_delete BEFORE DELETE ON reports WHEN custody_archive_permit(OLD.operation_id) IS NOT 1
BEGIN SELECT RAISE(ABORT, 'reports are insert-once: only archival removes a report, after copying it'); END;`;

const LEDGER_V1 = `
CREATE TABLE config (
  id                INTEGER PRIMARY KEY CHECK (id = 1),
  executor_id       TEXT    NOT NULL,
  public_key        TEXT    NOT NULL CHECK (length(public_key) = 64),
  key_epoch         INTEGER NOT NULL CHECK (key_epoch >= 1),
  kernel_public_key TEXT    NOT NULL CHECK (length(kernel_public_key) = 64),
  claim_capacity    INTEGER NOT NULL CHECK (claim_capacity >= 1),
  refusal_reserve   INTEGER NOT NULL CHECK (refusal_reserve >= 0 AND refusal_reserve < claim_capacity),
  file_dev          INTEGER NOT NULL,
  file_ino          INTEGER NOT NULL,
  provisioned_at    INTEGER NOT NULL
);
CREATE TRIGGER config_no_update BEFORE UPDATE ON config
BEGIN SELECT RAISE(ABORT, 'ledger config is immutable: it fixes the executor identity, the kernel pin and the capacity'); END;
CREATE TRIGGER config_no_delete BEFORE DELETE ON config
BEGIN SELECT RAISE(ABORT, 'ledger config is immutable: it fixes the executor identity, the kernel pin and the capacity'); END;
CREATE TRIGGER config_one_row BEFORE INSERT ON config WHEN (SELECT count(*) FROM config) > 0
BEGIN SELECT RAISE(ABORT, 'ledger config has exactly one row'); END;

CREATE TABLE clock (
  id     INTEGER PRIMARY KEY CHECK (id = 1),
  hwm_ms INTEGER NOT NULL CHECK (typeof(hwm_ms) = 'integer')
);
CREATE TRIGGER clock_forward_only BEFORE UPDATE ON clock WHEN NEW.hwm_ms < OLD.hwm_ms OR NEW.id <> OLD.id
BEGIN SELECT RAISE(ABORT, 'the clock high-water mark never goes back'); END;
CREATE TRIGGER clock_no_delete BEFORE DELETE ON clock
BEGIN SELECT RAISE(ABORT, 'the clock high-water mark cannot be removed'); END;

CREATE TABLE claims (
  seq                  INTEGER PRIMARY KEY,
  operation_id         TEXT    NOT NULL UNIQUE,
  claim_id             TEXT    NOT NULL UNIQUE,
  kind                 TEXT    NOT NULL CHECK (kind IN ('claim', 'refusal')),
  tool                 TEXT    NOT NULL,
  authorization_digest TEXT    NOT NULL,
  authorization        TEXT    NOT NULL,
  not_before           INTEGER NOT NULL,
  expires_at           INTEGER NOT NULL,
  claimed_at           INTEGER,
  recorded_at          INTEGER NOT NULL,
  CHECK ((kind = 'claim') = (claimed_at IS NOT NULL)),
  CHECK (typeof(not_before) = 'integer' AND typeof(expires_at) = 'integer' AND typeof(recorded_at) = 'integer')
);
CREATE TRIGGER claims_no_update BEFORE UPDATE ON claims
BEGIN SELECT RAISE(ABORT, 'claims are insert-once: a claim or refusal is never changed'); END;
CREATE TRIGGER claims_no_delete BEFORE DELETE ON claims WHEN custody_archive_permit(OLD.operation_id) IS NOT 1
BEGIN SELECT RAISE(ABORT, 'claims are insert-once: only archival removes a claim, after copying it'); END;

CREATE TABLE reports (
  seq           INTEGER PRIMARY KEY,
  operation_id  TEXT    NOT NULL UNIQUE REFERENCES claims (operation_id),
  claim_id      TEXT    NOT NULL UNIQUE REFERENCES claims (claim_id),
  status        TEXT    NOT NULL CHECK (status IN
                  ('completed', 'failed_before_effect', 'reconciled_applied', 'reconciled_not_applied', 'never_claimed')),
  report        TEXT    NOT NULL,
  report_digest TEXT    NOT NULL,
  finished_at   INTEGER NOT NULL,
  recorded_at   INTEGER NOT NULL
);
${REPORTS_INSERT_ONCE}
-- never_claimed belongs to a refusal, every other status to a claim.
CREATE TRIGGER reports_match_kind BEFORE INSERT ON reports
WHEN (SELECT kind FROM claims WHERE operation_id = NEW.operation_id AND claim_id = NEW.claim_id)
     IS NOT (CASE WHEN NEW.status = 'never_claimed' THEN 'refusal' ELSE 'claim' END)
BEGIN SELECT RAISE(ABORT, 'a report must match its claim: never_claimed for a refusal, any other status for a claim'); END;

CREATE VIEW refusals AS
SELECT seq, operation_id, claim_id AS refusal_id, tool, authorization_digest, expires_at, recorded_at
FROM claims WHERE kind = 'refusal';

${claimsView('r.operation_id = c.operation_id')}
`;

/**
 * The head (docs/ROLLBACK.md): a sequence over every durable ledger event
 * (claim, refusal, report), raised by one in the transaction that records the
 * event and never lowered, archival included (a claim recorded again by
 * `recover-rollback` leaves it: the way back raises it once, at its end). The supervisor witnesses it
 * outside this file, so a ledger restored from an older copy presents a head
 * below the witness and is refused. A ledger from before the head starts at
 * the number of its live rows.
 */
export const LEDGER_V2 = `
CREATE TABLE head (
  id  INTEGER PRIMARY KEY CHECK (id = 1),
  seq INTEGER NOT NULL CHECK (typeof(seq) = 'integer' AND seq >= 0)
);
CREATE TRIGGER head_forward_only BEFORE UPDATE ON head WHEN NEW.seq < OLD.seq OR NEW.id <> OLD.id
BEGIN SELECT RAISE(ABORT, 'the ledger head never goes back'); END;
CREATE TRIGGER head_no_delete BEFORE DELETE ON head
BEGIN SELECT RAISE(ABORT, 'the ledger head cannot be removed'); END;
INSERT INTO head (id, seq) SELECT 1, (SELECT count(*) FROM claims) + (SELECT count(*) FROM reports);
`;

/**
 * Version 3: the number of rows in claims (claims and refusals, the live
 * ledger's capacity use), kept by triggers so a claim reads it in O(1)
 * instead of counting up to claim_capacity rows. Archival deletes row by
 * row, so each removal moves it by one; the guard refuses any other move.
 */
const LEDGER_V3 = `
CREATE TABLE claims_count (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  n  INTEGER NOT NULL CHECK (typeof(n) = 'integer' AND n >= 0)
);
INSERT INTO claims_count (id, n) SELECT 1, count(*) FROM claims;
CREATE TRIGGER claims_counted_insert AFTER INSERT ON claims
BEGIN UPDATE claims_count SET n = n + 1 WHERE id = 1; END;
CREATE TRIGGER claims_counted_delete AFTER DELETE ON claims
BEGIN UPDATE claims_count SET n = n - 1 WHERE id = 1; END;
CREATE TRIGGER claims_count_step BEFORE UPDATE ON claims_count WHEN NEW.id IS NOT 1 OR abs(NEW.n - OLD.n) IS NOT 1
BEGIN SELECT RAISE(ABORT, 'claims_count moves only with a claim inserted or archived'); END;
CREATE TRIGGER claims_count_kept BEFORE DELETE ON claims_count
BEGIN SELECT RAISE(ABORT, 'claims_count cannot be removed'); END;
`;

/**
 * Version 4: key rotation (docs/PROTOCOL.md §12). Every key epoch this
 * executor has had, with the rotation statement that introduced it (signed
 * by the previous epoch's key; none for the provisioned epoch), and every
 * kernel key epoch it has pinned, each through a statement signed by the
 * kernel key it pinned before. Both are insert-once and move forward by one
 * epoch at a time; the highest row is current. The config row stays what
 * provisioning fixed: the first identity and the kernel's first key.
 */
const epochTable = (table: string, what: string) => `
CREATE TABLE ${table} (
  epoch      INTEGER PRIMARY KEY CHECK (typeof(epoch) = 'integer' AND epoch >= 1),
  public_key TEXT    NOT NULL UNIQUE CHECK (length(public_key) = 64),
  statement  TEXT,
  created_at INTEGER NOT NULL CHECK (typeof(created_at) = 'integer')
);
CREATE TRIGGER ${table}_no_update BEFORE UPDATE ON ${table}
BEGIN SELECT RAISE(ABORT, '${what} are insert-once: a retired key stays on record'); END;
CREATE TRIGGER ${table}_no_delete BEFORE DELETE ON ${table}
BEGIN SELECT RAISE(ABORT, '${what} are insert-once: a retired key stays on record'); END;
CREATE TRIGGER ${table}_next BEFORE INSERT ON ${table}
WHEN (SELECT count(*) FROM ${table}) > 0 AND (NEW.epoch IS NOT (SELECT max(epoch) FROM ${table}) + 1 OR NEW.statement IS NULL)
BEGIN SELECT RAISE(ABORT, '${what} move forward by one epoch, each with its rotation statement'); END;
`;

const LEDGER_V4 = `
${epochTable('key_epochs', 'executor key epochs')}
INSERT INTO key_epochs (epoch, public_key, statement, created_at) SELECT key_epoch, public_key, NULL, provisioned_at FROM config;
${epochTable('kernel_epochs', 'kernel key epochs')}
INSERT INTO kernel_epochs (epoch, public_key, statement, created_at) SELECT 1, kernel_public_key, NULL, provisioned_at FROM config;
`;

/**
 * Version 5: fewer bytes per report (docs/PERFORMANCE.md "Store bytes per
 * operation"). A report row no longer stores report_digest: it is the
 * SHA-256 of the report's bytes, which the row keeps exactly, and nothing
 * looks a report up by it (archival recomputes it for its copy). Nor does
 * claim_id keep a unique index and a foreign key of its own: the row's
 * operation_id is unique and references its claim, and reports_match_kind
 * refuses a report whose (operation_id, claim_id) is not a claim's — claims
 * never change — so the claim_id is that claim's and unique with it. A
 * report of ~0.9 KB then packs four to a 4 KiB page instead of three.
 */
const LEDGER_V5 = `
DROP VIEW claims_view;
ALTER TABLE reports RENAME TO reports_v4;
CREATE TABLE reports (
  seq           INTEGER PRIMARY KEY,
  operation_id  TEXT    NOT NULL UNIQUE REFERENCES claims (operation_id),
  claim_id      TEXT    NOT NULL,
  status        TEXT    NOT NULL CHECK (status IN
                  ('completed', 'failed_before_effect', 'reconciled_applied', 'reconciled_not_applied', 'never_claimed')),
  report        TEXT    NOT NULL,
  finished_at   INTEGER NOT NULL,
  recorded_at   INTEGER NOT NULL
);
INSERT INTO reports (seq, operation_id, claim_id, status, report, finished_at, recorded_at)
SELECT seq, operation_id, claim_id, status, report, finished_at, recorded_at FROM reports_v4 ORDER BY seq;
DROP TABLE reports_v4;
${REPORTS_INSERT_ONCE}
CREATE TRIGGER reports_match_kind BEFORE INSERT ON reports
WHEN (SELECT kind FROM claims WHERE operation_id = NEW.operation_id AND claim_id = NEW.claim_id)
     IS NOT (CASE WHEN NEW.status = 'never_claimed' THEN 'refusal' ELSE 'claim' END)
BEGIN SELECT RAISE(ABORT, 'a report must match its claim: never_claimed for a refusal, any other status for a claim'); END;

${claimsView('r.operation_id = c.operation_id')}
`;

/**
 * Version 6: a report is keyed by its claim's seq, not by its operation id
 * (docs/PERFORMANCE.md "Rows keyed by the operation's rowid"). The
 * operation id is a digest, so its unique index put every report on a
 * random leaf of its own, which the other reports of a group commit did not
 * share; claims' seq grows, so the reports of one commit now land on the
 * same newest leaves. A report still names its operation (a plain column,
 * no longer indexed: a generated column read from the report's bytes would
 * make the file unreadable to a sqlite3 shell older than 3.31, which these
 * tables stay readable by), and reports_match_kind now also refuses a
 * report whose key is not the claim its operation and claim id name.
 * Claims keep their two unique keys: the executor finds a claim by its
 * operation, and a claim id stays unique.
 */
const LEDGER_V6 = `
DROP VIEW claims_view;
ALTER TABLE reports RENAME TO reports_v5;
CREATE TABLE reports (
  claim_seq     INTEGER PRIMARY KEY REFERENCES claims (seq),
  operation_id  TEXT    NOT NULL,
  claim_id      TEXT    NOT NULL,
  status        TEXT    NOT NULL CHECK (status IN
                  ('completed', 'failed_before_effect', 'reconciled_applied', 'reconciled_not_applied', 'never_claimed')),
  report        TEXT    NOT NULL,
  finished_at   INTEGER NOT NULL,
  recorded_at   INTEGER NOT NULL
);
-- Walking the claims in seq order (NOT INDEXED and CROSS JOIN fix that order), each one's report found by the old
-- table's index: written in key order, and nothing sorted in memory.
INSERT INTO reports (claim_seq, operation_id, claim_id, status, report, finished_at, recorded_at)
SELECT c.seq, r.operation_id, r.claim_id, r.status, r.report, r.finished_at, r.recorded_at
FROM claims c NOT INDEXED CROSS JOIN reports_v5 r ON r.operation_id = c.operation_id;
CREATE TEMP TABLE ledger_v6_check (
  kept INTEGER NOT NULL, keyed INTEGER NOT NULL,
  CONSTRAINT v6_every_report_copied_under_its_claim CHECK (kept = keyed)
);
INSERT INTO ledger_v6_check SELECT
  (SELECT count(*) FROM reports_v5),
  (SELECT count(*) FROM reports_v5 v JOIN claims c ON c.operation_id = v.operation_id JOIN reports r ON r.claim_seq = c.seq
     WHERE r.operation_id = v.operation_id AND r.claim_id = v.claim_id AND r.report = v.report AND r.status = v.status
       AND r.finished_at = v.finished_at AND r.recorded_at = v.recorded_at);
DROP TABLE ledger_v6_check;
DROP TABLE reports_v5;
${REPORTS_INSERT_ONCE}
CREATE TRIGGER reports_match_kind BEFORE INSERT ON reports
WHEN (SELECT kind FROM claims WHERE seq = NEW.claim_seq AND operation_id = NEW.operation_id AND claim_id = NEW.claim_id)
     IS NOT (CASE WHEN NEW.status = 'never_claimed' THEN 'refusal' ELSE 'claim' END)
BEGIN SELECT RAISE(ABORT, 'a report must match its claim: never_claimed for a refusal, any other status for a claim'); END;

${claimsView('r.claim_seq = c.seq')}
`;

export const LEDGER_MIGRATIONS: readonly Migration[] = [
  { version: 1, description: 'config, clock, claims and refusals, reports, guards, claims_view', sql: LEDGER_V1 },
  { version: 2, description: 'head: a forward-only sequence over claims, refusals and reports', sql: LEDGER_V2 },
  { version: 3, description: 'claims_count: the live ledger\'s size kept by triggers, read in O(1)', sql: LEDGER_V3 },
  { version: 4, description: 'key_epochs and kernel_epochs: every executor and kernel key epoch, each with its rotation statement', sql: LEDGER_V4 },
  { version: 5, description: 'reports without the stored report_digest and the claim_id index: four reports to a page', sql: LEDGER_V5 },
  { version: 6, description: 'reports keyed by their claim\'s seq, not by an index on their operation id', sql: LEDGER_V6 },
];

/**
 * The archive: where archival moves claims and reports whose authorization
 * has expired and whose report the kernel has settled. Append-only, with
 * no sanctioned removal at all.
 */
export const ARCHIVE_V1 = `
CREATE TABLE config (
  id          INTEGER PRIMARY KEY CHECK (id = 1),
  executor_id TEXT    NOT NULL,
  public_key  TEXT    NOT NULL CHECK (length(public_key) = 64),
  key_epoch   INTEGER NOT NULL,
  file_dev    INTEGER NOT NULL,
  file_ino    INTEGER NOT NULL,
  created_at  INTEGER NOT NULL
);
CREATE TRIGGER config_no_update BEFORE UPDATE ON config BEGIN SELECT RAISE(ABORT, 'archive config is immutable'); END;
CREATE TRIGGER config_no_delete BEFORE DELETE ON config BEGIN SELECT RAISE(ABORT, 'archive config is immutable'); END;
CREATE TRIGGER config_one_row BEFORE INSERT ON config WHEN (SELECT count(*) FROM config) > 0
BEGIN SELECT RAISE(ABORT, 'archive config has exactly one row'); END;

CREATE TABLE archived_claims (
  seq                  INTEGER PRIMARY KEY,
  operation_id         TEXT    NOT NULL UNIQUE,
  claim_id             TEXT    NOT NULL UNIQUE,
  kind                 TEXT    NOT NULL CHECK (kind IN ('claim', 'refusal')),
  tool                 TEXT    NOT NULL,
  authorization_digest TEXT    NOT NULL,
  authorization        TEXT    NOT NULL,
  not_before           INTEGER NOT NULL,
  expires_at           INTEGER NOT NULL,
  claimed_at           INTEGER,
  recorded_at          INTEGER NOT NULL,
  status               TEXT    NOT NULL,
  report               TEXT    NOT NULL,
  report_digest        TEXT    NOT NULL,
  finished_at          INTEGER NOT NULL,
  archived_at          INTEGER NOT NULL
);
CREATE TRIGGER archived_no_update BEFORE UPDATE ON archived_claims
BEGIN SELECT RAISE(ABORT, 'the archive is append-only'); END;
CREATE TRIGGER archived_no_delete BEFORE DELETE ON archived_claims
BEGIN SELECT RAISE(ABORT, 'the archive is append-only'); END;

CREATE VIEW archived_claims_view AS
SELECT seq, operation_id, kind, tool, claim_id,
       claimed_at, ${ISO('claimed_at')} AS claimed_at_iso,
       expires_at, ${ISO('expires_at')} AS expires_at_iso,
       status AS report_status, finished_at, ${ISO('finished_at')} AS finished_at_iso,
       archived_at, ${ISO('archived_at')} AS archived_at_iso
FROM archived_claims;
`;

export const ARCHIVE_MIGRATIONS: readonly Migration[] = [
  { version: 1, description: 'archived claims with their reports, append-only', sql: ARCHIVE_V1 },
];
