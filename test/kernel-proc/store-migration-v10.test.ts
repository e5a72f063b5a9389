// kernel.db version 10 (kernel-proc/store/schema.ts): a store written at
// version 9 — an operation's hold, nonce, receipts and report keyed by its
// id — is migrated when this build opens it: every row is found again by
// its operation's rowid, nothing is lost or changed, the schema is exactly
// the one a fresh store gets, and every answer the kernel gave before is
// given again byte for byte.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { expect } from 'chai';
import { KERNEL_MIGRATIONS } from '../../kernel-proc/store/schema.js';
import { isCustodyError } from '../../shared/errors.js';
import { announceMigrationsTo, applyMigrations } from '../../shared/store/migrations.js';
import { createLogger } from '../../shared/log.js';
import { collectingLogger } from '../helpers/children.js';
import { type RecordedHistory, expectSameAnswers, recordHistory } from '../helpers/kernel-history.js';
import { downgradeToV9 } from '../helpers/kernel-v9.js';
import { copyPlans } from '../helpers/query-plans.js';
import { KernelProcess, KernelRoot, reserveBody, signReport, testExecutor } from './helpers.js';

const V9 = KERNEL_MIGRATIONS.slice(0, 9);

function schemaOf(db: Database.Database): string[] {
  return db.prepare<[], { sql: string }>("SELECT type || ' ' || name || ': ' || sql AS sql FROM sqlite_schema WHERE sql IS NOT NULL ORDER BY type, name").all().map((row) => row.sql);
}

/** Each table's rows by operation id, without the key version 10 adds. */
const ROWS = {
  holds: 'SELECT hold_id, operation_id, capability_id, invocations, cost_units_held, cost_units_charged, state, created_at, settled_at, settled_by FROM holds ORDER BY operation_id',
  nonces: 'SELECT nonce_id, operation_id, state, created_at, expires_at, closed_at FROM nonces ORDER BY operation_id',
  receipts: 'SELECT operation_id, seq, request_digest, receipt FROM receipts ORDER BY operation_id, seq',
  reports: 'SELECT operation_id, report FROM reports ORDER BY operation_id',
  grants: 'SELECT * FROM grants ORDER BY capability_id',
} as const;
type Snapshot = Record<keyof typeof ROWS | 'operations', unknown[]>;

describe('kernel-proc: kernel.db migration to version 10', function () {
  this.timeout(30_000);
  const root = new KernelRoot();
  const executor = testExecutor(72);
  let history: RecordedHistory;
  let v9: Snapshot & { schema: string[]; rowids: Record<string, number> };

  const snapshot = (db: Database.Database): Snapshot => ({
    operations: db.prepare('SELECT * FROM operations ORDER BY operation_id').all().map((row) => {
      const { operation_rowid: _row, ...rest } = row as Record<string, unknown>;
      return rest;
    }),
    ...(Object.fromEntries(Object.entries(ROWS).map(([table, sql]) => [table, db.prepare(sql).all()])) as Record<keyof typeof ROWS, unknown[]>),
  });

  before(async () => {
    history = await recordHistory(root, executor, 'k', { line: 7 });
    downgradeToV9(root.dir, root.root);
    const db = new Database(path.join(root.dir, 'kernel.db'), { readonly: true });
    try {
      const rowids = Object.fromEntries(db.prepare<[], { request_id: string; rowid: number }>('SELECT request_id, rowid FROM operations').all().map((row) => [row.request_id, row.rowid]));
      v9 = { schema: schemaOf(db), rowids, ...snapshot(db) };
    } finally {
      db.close();
    }
    await (await KernelProcess.start(root)).stop();
  });
  after(() => root.remove());

  it('builds a version-9 store with exactly the schema version 9 creates, its rows in another order than they came in', () => {
    const pristine = new Database(':memory:');
    try {
      applyMigrations(pristine, 'pristine', V9, { provisioning: true });
      expect(v9.schema).to.deep.equal(schemaOf(pristine));
    } finally {
      pristine.close();
    }
    expect(v9.schema.some((sql) => sql.includes('operation_rowid'))).to.equal(false);
    expect(v9.operations).to.have.length(5);
    // reserve of each (5) and the settles' (2): an allowed start is answered by its authorization, not a receipt.
    expect(v9.receipts).to.have.length(7);
    // Written in the order of their ids: the older rowids are not the order of the requests.
    const inOrder = history.names.map((name) => v9.rowids[name]);
    expect(inOrder).to.not.deep.equal([...inOrder].sort((a, b) => a! - b!));
  });

  it('keeps every operation, hold, nonce, receipt, report and grant as it was, each child under its operation\'s rowid', () => {
    const db = new Database(path.join(root.dir, 'kernel.db'), { readonly: true });
    try {
      expect(db.pragma('user_version', { simple: true })).to.equal(KERNEL_MIGRATIONS.length);
      expect(snapshot(db)).to.deep.equal({ operations: v9.operations, holds: v9.holds, nonces: v9.nonces, receipts: v9.receipts, reports: v9.reports, grants: v9.grants });
      // The operations kept their rowids, and each hold, nonce, receipt and report is keyed by its operation's.
      const rowids = Object.fromEntries(db.prepare<[], { request_id: string; operation_rowid: number }>('SELECT request_id, operation_rowid FROM operations').all().map((row) => [row.request_id, row.operation_rowid]));
      expect(rowids).to.deep.equal(v9.rowids);
      for (const table of ['holds', 'nonces', 'receipts', 'reports']) {
        const strays = db.prepare(`SELECT count(*) AS n FROM ${table} t JOIN operations o ON o.operation_rowid = t.operation_rowid WHERE o.operation_id IS NOT t.operation_id`).get() as { n: number };
        const keyed = db.prepare(`SELECT count(*) AS n FROM ${table} t JOIN operations o ON o.operation_rowid = t.operation_rowid`).get() as { n: number };
        expect([strays.n, keyed.n], table).to.deep.equal([0, v9[table as keyof typeof ROWS].length]);
      }
      expect(db.prepare('SELECT count(*) AS n FROM grants_view WHERE usage_agrees = 1').get()).to.deep.equal({ n: v9.grants.length });
    } finally {
      db.close();
    }
  });

  it('keeps every trigger, index and view of version 9, adds the four that hold a row\'s key to its operation, and keys by rowid', () => {
    const byType = (schema: string[], type: string) => schema.filter((line) => line.startsWith(`${type} `)).map((line) => line.slice(type.length + 1, line.indexOf(':'))).sort();
    const db = new Database(path.join(root.dir, 'kernel.db'), { readonly: true });
    try {
      const now = schemaOf(db);
      const named = ['holds', 'nonces', 'receipts', 'reports'].map((table) => `${table}_operation_named`);
      // And version 11's, which runs after this one: the clock high-water mark never goes back.
      expect(byType(now, 'trigger')).to.deep.equal([...byType(v9.schema, 'trigger'), ...named, 'head_clock_forward_only'].sort());
      expect(byType(now, 'index')).to.deep.equal(byType(v9.schema, 'index'));
      expect(byType(now, 'view')).to.deep.equal(byType(v9.schema, 'view'));
      // The unique keys of an operation's rows: its id and request id on operations, (operation_rowid, seq) on receipts.
      const keys = db.prepare<[], { tbl_name: string; name: string }>(
        `SELECT tbl_name, name FROM sqlite_schema WHERE type = 'index' AND sql IS NULL AND tbl_name IN ('operations', 'holds', 'nonces', 'receipts', 'reports') ORDER BY name`,
      ).all();
      const columns = Object.fromEntries(keys.map((key) => [key.name, db.prepare<[], { name: string }>(`SELECT name FROM pragma_index_info('${key.name}') ORDER BY seqno`).all().map((c) => c.name).join(',')]));
      expect(columns).to.deep.equal({ sqlite_autoindex_operations_1: 'operation_id', sqlite_autoindex_operations_2: 'request_id', sqlite_autoindex_receipts_1: 'operation_rowid,seq' });
      for (const table of ['holds', 'nonces', 'reports']) {
        expect(db.prepare(`SELECT name, pk FROM pragma_table_info('${table}') WHERE pk > 0`).all(), table).to.deep.equal([{ name: 'operation_rowid', pk: 1 }]);
      }
    } finally {
      db.close();
    }
  });

  it('answers every reserve, start, settle and operation.get as before, byte for byte, and settles a new operation', async () => {
    const kernel = await KernelProcess.start(root);
    try {
      await expectSameAnswers(kernel, history);
      const reserved = await kernel.request('reserve', reserveBody('k-after'));
      const started = await kernel.request('start', { request_id: 'k-after', nonce_id: reserved.nonce!.id, arguments: reserveBody('k-after').arguments });
      const done = await kernel.request('settle', { authorization: started.authorization!, report: signReport(executor, started.authorization!, root.publicKey, { output: { line: 8 } }) });
      expect([done.state, done.output]).to.deep.equal(['completed', { line: 8 }]);
      // The new operation's rows are under its own rowid, the largest.
      const [row] = root.read<{ operation_rowid: number; holds: number; receipts: number; reports: number }>(
        `SELECT o.operation_rowid, (SELECT count(*) FROM holds h WHERE h.operation_rowid = o.operation_rowid) AS holds,
                (SELECT count(*) FROM receipts r WHERE r.operation_rowid = o.operation_rowid) AS receipts,
                (SELECT count(*) FROM reports r WHERE r.operation_rowid = o.operation_rowid) AS reports
         FROM operations o WHERE request_id = 'k-after'`,
      );
      expect(row).to.deep.equal({ operation_rowid: Math.max(...Object.values(v9.rowids)) + 1, holds: 1, receipts: 2, reports: 1 });
    } finally {
      await kernel.stop();
    }
  });
});

describe('kernel-proc: kernel.db migration to version 10 on a hold whose id is not its operation\'s', () => {
  it('is refused and rolled back: store_schema naming the check, the store still at version 9', () => {
    const db = new Database(':memory:');
    try {
      applyMigrations(db, 'test kernel', V9, { provisioning: true });
      db.exec(`
        INSERT INTO grants (capability_id, tool, subject, max_invocations, max_cost_units, not_before, expires_at, issued_at, capability, capability_digest)
        VALUES ('g1', 't', '*', 10, 100, 0, 9, 0, '{}', 'd');
        INSERT INTO operations (operation_id, request_id, request_binding_hash, subject, tool, parameters_digest, cost_units, capability_id, state, created_at, updated_at)
        VALUES ('o1', 'q1', 'h', 's', 't', 'p', 0, 'g1', 'reserved', 0, 0);
        INSERT INTO holds (hold_id, operation_id, capability_id, invocations, cost_units_held, created_at) VALUES ('hold-o1', 'o1', 'g1', 1, 0, 0);`);
      let error: unknown;
      try {
        applyMigrations(db, 'test kernel', KERNEL_MIGRATIONS, { provisioning: false });
      } catch (caught) {
        error = caught;
      }
      expect(isCustodyError(error) && error.code).to.equal('store_schema');
      expect(String((error as Error).message)).to.include('v10_every_row_copied_with_its_operation');
      expect(db.pragma('user_version', { simple: true })).to.equal(9);
      expect(db.prepare('SELECT hold_id, operation_id FROM holds').all()).to.deep.equal([{ hold_id: 'hold-o1', operation_id: 'o1' }]);

      // The same store with the hold named as the kernel names it migrates.
      db.exec(`DROP TRIGGER holds_fixed; UPDATE holds SET hold_id = 'hold:o1'`);
      applyMigrations(db, 'test kernel', KERNEL_MIGRATIONS, { provisioning: false });
      expect(db.prepare('SELECT operation_rowid, hold_id, operation_id FROM holds').all()).to.deep.equal([{ operation_rowid: 1, hold_id: 'hold:o1', operation_id: 'o1' }]);
    } finally {
      db.close();
    }
  });
});

describe('kernel-proc: kernel.db migration to version 10 out of room', () => {
  it('is refused storage_full, rolled back at version 9 with every row, and runs once there is room', () => {
    const db = new Database(':memory:');
    try {
      applyMigrations(db, 'test kernel', V9, { provisioning: true });
      db.exec(`INSERT INTO grants (capability_id, tool, subject, max_invocations, max_cost_units, not_before, expires_at, issued_at, capability, capability_digest)
               VALUES ('g1', 't', '*', 100000, NULL, 0, 9, 0, '{}', 'd')`);
      const operation = db.prepare(`INSERT INTO operations (operation_id, request_id, request_binding_hash, subject, tool, parameters_digest, cost_units, capability_id, state, created_at, updated_at)
                                    VALUES (?, ?, 'h', 's', 't', 'p', 0, 'g1', 'reserved', 0, 0)`);
      const hold = db.prepare(`INSERT INTO holds (hold_id, operation_id, capability_id, invocations, cost_units_held, created_at) VALUES (?, ?, 'g1', 1, 0, 0)`);
      db.transaction(() => {
        for (let i = 0; i < 2000; i++) {
          const id = `op-${String(i).padStart(6, '0')}-${'x'.repeat(40)}`;
          operation.run(id, `request-${i}`);
          hold.run(`hold:${id}`, id);
        }
      })();
      // The store may grow by a few pages only: the copy of its tables does not fit.
      const pages = db.pragma('page_count', { simple: true }) as number;
      db.pragma(`max_page_count = ${pages + 4}`);
      let error: unknown;
      try {
        applyMigrations(db, 'test kernel', KERNEL_MIGRATIONS, { provisioning: false });
      } catch (caught) {
        error = caught;
      }
      expect(isCustodyError(error) && error.code, String(error)).to.equal('storage_full');
      expect(String((error as Error).message)).to.include('migration 10').and.to.include('still at version 9').and.to.include('twice the store');
      expect(db.pragma('user_version', { simple: true })).to.equal(9);
      expect(db.prepare('SELECT (SELECT count(*) FROM operations) AS operations, (SELECT count(*) FROM holds) AS holds').get()).to.deep.equal({ operations: 2000, holds: 2000 });

      db.pragma('max_page_count = 1073741823');
      applyMigrations(db, 'test kernel', KERNEL_MIGRATIONS, { provisioning: false });
      expect(db.prepare('SELECT count(*) AS n FROM holds h JOIN operations o ON o.operation_rowid = h.operation_rowid WHERE o.operation_id = h.operation_id').get()).to.deep.equal({ n: 2000 });
    } finally {
      db.close();
    }
  });
});

describe('kernel-proc: kernel.db migration to version 10 leaves no WAL behind', () => {
  it('cuts the WAL that carried the copy back to nothing once the migration commits (shared/store/migrations.ts)', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'custody-kernel-wal-'));
    const file = path.join(dir, 'kernel.db');
    const db = new Database(file);
    try {
      db.pragma('journal_mode = WAL');
      applyMigrations(db, 'test kernel', V9, { provisioning: true });
      db.exec(`INSERT INTO grants (capability_id, tool, subject, max_invocations, max_cost_units, not_before, expires_at, issued_at, capability, capability_digest)
               VALUES ('g1', 't', '*', 100000, NULL, 0, 9, 0, '{}', 'd')`);
      const operation = db.prepare(`INSERT INTO operations (operation_id, request_id, request_binding_hash, subject, tool, parameters_digest, cost_units, capability_id, state, created_at, updated_at)
                                    VALUES (?, ?, 'h', 's', 't', 'p', 0, 'g1', 'reserved', 0, 0)`);
      db.transaction(() => {
        for (let i = 0; i < 2000; i++) operation.run(`op-${i}-${'x'.repeat(60)}`, `request-${i}`);
      })();
      db.pragma('wal_checkpoint(TRUNCATE)');
      applyMigrations(db, 'test kernel', KERNEL_MIGRATIONS, { provisioning: false });
      expect(db.pragma('user_version', { simple: true })).to.equal(KERNEL_MIGRATIONS.length);
      // The connection is still open (a checkpoint on close would hide a WAL left full-size).
      expect(fs.statSync(`${file}-wal`).size).to.equal(0);
      expect(db.prepare('SELECT count(*) AS n FROM operations').get()).to.deep.equal({ n: 2000 });
    } finally {
      db.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('kernel-proc: kernel.db migration to version 10, its checkpoint out of room', () => {
  after(() => announceMigrationsTo(createLogger({ pid: process.pid }, { level: 'debug' })));

  it('leaves the store migrated and whole, its last commits in the WAL, and says store_checkpoint_failed instead of failing the start', () => {
    const { log, lines } = collectingLogger();
    announceMigrationsTo(log);
    const db = new Database(':memory:');
    try {
      applyMigrations(db, 'test kernel', V9, { provisioning: true });
      // The file cannot grow by the copy: the checkpoint after the commit is where a WAL store runs out of room.
      const full = Object.assign(new Error('database or disk is full'), { code: 'SQLITE_FULL' });
      const pragma = db.pragma.bind(db);
      const failing = new Proxy(db, {
        get(target, key) {
          if (key === 'pragma') {
            return (source: string, options?: Database.PragmaOptions) => {
              if (source.startsWith('wal_checkpoint')) throw full;
              return pragma(source, options);
            };
          }
          const value = Reflect.get(target, key, target) as unknown;
          return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
        },
      });
      applyMigrations(failing, 'test kernel', KERNEL_MIGRATIONS, { provisioning: false });
      expect(db.pragma('user_version', { simple: true })).to.equal(KERNEL_MIGRATIONS.length);
      const events = lines.map((line) => JSON.parse(line) as { event: string; code?: string });
      expect(events.map((event) => event.event)).to.deep.equal(['store_migrating', 'store_migrated', 'store_checkpoint_failed']);
      expect(events[2]).to.include({ code: 'storage_full' });
    } finally {
      db.close();
    }
  });
});

describe('kernel-proc: kernel.db migration to version 10 over a long history', () => {
  it('copies each table walking the operations in key order, each row found by an index: nothing is sorted in memory', () => {
    const db = new Database(':memory:');
    try {
      applyMigrations(db, 'test kernel', V9, { provisioning: true });
      // Up to its check the migration is plain statements (no trigger bodies): run them one by one, reading each copy's plan first.
      const { plans, indexedAfterACopy } = copyPlans(db, KERNEL_MIGRATIONS[9]!.sql, 'CREATE TEMP TABLE v10_check');
      expect(indexedAfterACopy).to.deep.equal([]);
      expect([...plans.keys()]).to.deep.equal(['operations', 'holds', 'nonces', 'receipts', 'reports']);
      // A sort of a whole table would hold every row in memory (temp_store), ~1.3 KB a receipt.
      for (const [table, plan] of plans) expect(plan, table).to.not.match(/TEMP B-TREE/);
      expect(plans.get('operations')).to.match(/^SCAN operations_v9$/);
      for (const table of ['holds', 'nonces', 'receipts', 'reports']) {
        expect(plans.get(table), table).to.match(new RegExp(`^SCAN o; SEARCH [a-z]+ USING (COVERING )?INDEX sqlite_autoindex_${table}_v9_\\d \\(operation_id=\\?`));
      }
    } finally {
      db.close();
    }
  });
});
