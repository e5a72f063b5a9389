// supervisor.db: what the supervisor must remember across its own crashes.
// Plain columns, JSON as TEXT, integer ms timestamps; the *_view views show
// ISO times and are what an operator queries first with the sqlite3 shell.
import type { Migration } from '../../shared/store/migrations.js';

const iso = (column: string) => `strftime('%Y-%m-%dT%H:%M:%fZ', ${column} / 1000.0, 'unixepoch')`;

export const SUPERVISOR_MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    description: 'pins, children, sessions, incidents, client requests',
    sql: `
      -- Identities proven at init: every hello must prove the same one.
      CREATE TABLE pins (
        name        TEXT PRIMARY KEY,              -- 'kernel' or an executor's configured name
        role        TEXT NOT NULL CHECK (role IN ('kernel', 'executor')),
        identity_id TEXT NOT NULL,
        public_key  TEXT NOT NULL CHECK (length(public_key) = 64),
        key_epoch   INTEGER NOT NULL CHECK (key_epoch >= 1),
        pinned_at   INTEGER NOT NULL
      ) STRICT;

      -- The processes this supervisor runs: a restarted supervisor kills the
      -- ones its predecessor recorded (pid and start time both matching).
      CREATE TABLE children (
        name            TEXT PRIMARY KEY,
        role            TEXT NOT NULL,
        state           TEXT NOT NULL,
        pid             INTEGER,
        pid_start_ticks INTEGER,                   -- field 22 of /proc/<pid>/stat
        sid             TEXT,
        restarts        INTEGER NOT NULL DEFAULT 0,
        started_at      INTEGER,
        updated_at      INTEGER NOT NULL,
        last_exit       TEXT
      ) STRICT;

      CREATE TABLE sessions (
        sid        TEXT PRIMARY KEY,
        child      TEXT NOT NULL,
        pid        INTEGER,
        started_at INTEGER NOT NULL,
        ended_at   INTEGER,
        end_reason TEXT
      ) STRICT;
      CREATE INDEX sessions_by_child ON sessions (child, started_at);

      -- What went wrong, for the operator: kills, poisonings, watchdog firings, refusals.
      CREATE TABLE incidents (
        id           INTEGER PRIMARY KEY,
        at           INTEGER NOT NULL,
        child        TEXT,
        kind         TEXT NOT NULL,
        code         TEXT,
        message      TEXT NOT NULL,
        operation_id TEXT
      ) STRICT;
      CREATE INDEX incidents_by_operation ON incidents (operation_id);

      -- Client requests: written before the first kernel call, so a request in
      -- flight when the supervisor dies is resumed from the stores' state.
      CREATE TABLE requests (
        request_id    TEXT PRIMARY KEY,
        operation_id  TEXT NOT NULL UNIQUE,
        kind          TEXT NOT NULL CHECK (kind IN ('invoke', 'authorize')),
        tool          TEXT NOT NULL,
        subject       TEXT NOT NULL,
        arguments     TEXT NOT NULL,               -- JSON
        cost_units    INTEGER NOT NULL,
        binding_hash  TEXT NOT NULL,
        phase         TEXT NOT NULL,
        nonce_id      TEXT,
        expected      TEXT,                        -- JSON: the invocation the executor must see
        executor      TEXT,
        authorization TEXT,                        -- exact signed bytes
        report        TEXT,                        -- exact signed bytes
        receipt       TEXT,                        -- exact signed bytes of the last kernel receipt
        output        TEXT,                        -- JSON
        outcome       TEXT,                        -- completed | refused | released | unknown | …
        reason        TEXT,
        attempts      INTEGER NOT NULL DEFAULT 0,
        created_at    INTEGER NOT NULL,
        updated_at    INTEGER NOT NULL
      ) STRICT;
      CREATE INDEX requests_by_phase ON requests (phase);

      CREATE VIEW requests_view AS
        SELECT request_id, substr(operation_id, 1, 12) AS operation, kind, tool, phase, outcome, reason, executor, attempts,
               ${iso('created_at')} AS created, ${iso('updated_at')} AS updated
          FROM requests ORDER BY created_at;
      CREATE VIEW children_view AS
        SELECT name, role, state, pid, restarts, sid, ${iso('started_at')} AS started, last_exit FROM children ORDER BY name;
      CREATE VIEW incidents_view AS
        SELECT id, ${iso('at')} AS at, child, kind, code, substr(operation_id, 1, 12) AS operation, message
          FROM incidents ORDER BY id;
    `,
  },
  {
    version: 2,
    description: 'witness: the highest store head seen per child (docs/ROLLBACK.md)',
    sql: `
      -- The witness outside each child's store: the highest head its hello or a
      -- head frame presented. Forward-only; a child presenting less is refused.
      CREATE TABLE witness (
        name       TEXT PRIMARY KEY,               -- 'kernel' or an executor's configured name
        head       INTEGER NOT NULL CHECK (head >= 0),
        updated_at INTEGER NOT NULL
      ) STRICT;
      CREATE TRIGGER witness_forward_only BEFORE UPDATE ON witness WHEN NEW.head < OLD.head
      BEGIN SELECT RAISE(ABORT, 'a witnessed head never goes back'); END;
    `,
  },
  {
    version: 3,
    description: 'rotations: every key rotation statement a pin moved through (docs/PROTOCOL.md §12)',
    sql: `
      -- The statements that moved a pin (the kernel's or an executor's), in
      -- order: the kernel's are given to every executor whose kernel pin is
      -- behind, at each hello; each is signed by the key of the epoch before.
      CREATE TABLE rotations (
        name           TEXT NOT NULL,              -- 'kernel' or an executor's configured name
        role           TEXT NOT NULL CHECK (role IN ('kernel', 'executor')),
        new_epoch      INTEGER NOT NULL CHECK (new_epoch >= 2),
        old_public_key TEXT NOT NULL CHECK (length(old_public_key) = 64),
        new_public_key TEXT NOT NULL CHECK (length(new_public_key) = 64),
        statement      TEXT NOT NULL,               -- exact signed bytes
        recorded_at    INTEGER NOT NULL,
        PRIMARY KEY (name, new_epoch)
      ) STRICT;
      CREATE TRIGGER rotations_no_update BEFORE UPDATE ON rotations
      BEGIN SELECT RAISE(ABORT, 'rotation statements are insert-once'); END;
    `,
  },
  {
    version: 4,
    description: "output kept once: a completed request's output is its report's (docs/PERFORMANCE.md \"The supervisor's output\")",
    sql: `
      -- From this version a completed request's output is read from its
      -- signed report; requests.output holds one only where the report would
      -- not answer the same (and in rows written before). A build that does
      -- not know this must not open the store: it would answer null.
      -- The output each request answers with, for the shell (JSON text; the
      -- API answers the same value).
      CREATE VIEW requests_output AS
        SELECT request_id, outcome,
               coalesce(output, CASE WHEN outcome = 'completed' AND report IS NOT NULL THEN report -> '$.body.output' END) AS output
          FROM requests;
    `,
  },
  {
    version: 5,
    description: 'witness: never deleted, never lowered by an insert (docs/ROLLBACK.md)',
    sql: `
      -- Version 2 refused an UPDATE that lowers a head; a DELETE, an UPDATE of
      -- the name, or an INSERT OR REPLACE (whose replacing delete fires no
      -- DELETE trigger) lowered it as well, and then any rolled-back store
      -- would be taken silently. The supervisor's own insert never carries a
      -- head below the one stored.
      CREATE TRIGGER witness_no_delete BEFORE DELETE ON witness
      BEGIN SELECT RAISE(ABORT, 'a witnessed head is never deleted'); END;
      CREATE TRIGGER witness_name_fixed BEFORE UPDATE OF name ON witness WHEN NEW.name IS NOT OLD.name
      BEGIN SELECT RAISE(ABORT, 'a witnessed head is never moved to another child'); END;
      CREATE TRIGGER witness_insert_forward_only BEFORE INSERT ON witness
        WHEN NEW.head < (SELECT head FROM witness WHERE name = NEW.name)
      BEGIN SELECT RAISE(ABORT, 'a witnessed head never goes back'); END;
    `,
  },
];
