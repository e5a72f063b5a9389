// What kernel.db keeps per operation is argued in kernel-proc/store/schema.ts
// (version 6) and docs/PERFORMANCE.md "Store bytes per operation". These
// tests hold what the indexes are for, against the statements the store
// really prepares: every lookup of an operation's rows is a search by an
// index (since kernel.db version 10 by the operation's rowid),
// and the one index reserve no longer reads still serves the metrics gauge.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { expect } from 'chai';
import { KernelStore } from '../../kernel-proc/store/kernel-store.js';
import { KERNEL_MIGRATIONS } from '../../kernel-proc/store/schema.js';
import { applyMigrations } from '../../shared/store/migrations.js';
import { preparedWhile, queryPlan, rowByRow } from '../helpers/query-plans.js';

/** Every SQL text the kernel's store prepares when it opens (the table classes prepare theirs in their constructors). */
function preparedStatements(): string[] {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'custody-kernel-plans-'));
  try {
    const seen = preparedWhile(() => KernelStore.provision(path.join(dir, 'kernel')).close());
    return seen.filter((sql) => !/^\s*(PRAGMA|BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE)/i.test(sql));
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

const plan = queryPlan;

/** Statements that read a whole table on purpose, and why. */
const WHOLE_TABLE: ReadonlyArray<readonly [RegExp, string]> = [
  [/sum\(holds_reserved\)/, 'the holds-by-state gauge of GET /metrics: the counters of every grant'],
  [/FROM state_transitions/, 'the machine tables, checked once at open'],
  [/FROM kernel_epochs/, 'the key epochs, a handful of rows'],
  [/UPDATE operations SET state = 'awaiting_report'/, 'startup recovery: every committed start'],
];

describe('kernel-proc: kernel.db indexes against the statements the store prepares', () => {
  const statements = preparedStatements();

  it('finds every operation, hold, nonce, receipt and report by an index, never by reading the table', () => {
    const db = new Database(':memory:');
    try {
      applyMigrations(db, 'plans', KERNEL_MIGRATIONS, { provisioning: true });
      expect(statements.length).to.be.greaterThan(20);
      const scans = statements
        .filter((sql) => !WHOLE_TABLE.some(([pattern]) => pattern.test(sql)))
        .flatMap((sql) => rowByRow(plan(db, sql)).map((detail) => `${detail}: ${sql.trim()}`));
      expect(scans).to.deep.equal([]);
      // An operation's rows are found by its rowid (schema version 10): the operation id's index once, then each table's key.
      const receipts = statements.filter((sql) => /FROM receipts WHERE operation_rowid = /.test(sql));
      expect(receipts.length).to.be.greaterThan(3);
      for (const sql of receipts) expect(plan(db, sql).join('; '), sql).to.match(/SEARCH receipts USING (COVERING )?INDEX sqlite_autoindex_receipts_1 \(operation_rowid=\?/);
      for (const table of ['holds', 'nonces', 'reports']) {
        const reads = statements.filter((sql) => new RegExp(`FROM ${table} WHERE operation_rowid = `).test(sql));
        expect(reads, table).to.have.length.greaterThan(0);
        for (const sql of reads) expect(plan(db, sql).join('; '), sql).to.match(new RegExp(`SEARCH ${table} USING INTEGER PRIMARY KEY \\(rowid=\\?\\)`));
      }
    } finally {
      db.close();
    }
  });

  it('pages ops.list, recover and grant.list by key, sorting keys, not whole rows, where a page sorts at all', () => {
    const db = new Database(':memory:');
    try {
      applyMigrations(db, 'plans', KERNEL_MIGRATIONS, { provisioning: true });
      expect(statements.filter((sql) => /OFFSET/.test(sql)), 'no page skips rows by count').to.deep.equal([]);
      const paged = statements.filter((sql) => /FROM (operations|grants)\b[^]*LIMIT @limit/.test(sql));
      expect(paged).to.have.length(5);
      for (const sql of paged) {
        expect(sql, 'a page starts after a key').to.match(/@created_at|@issued_at/);
        // An ORDER BY ... LIMIT sorts in an ephemeral b-tree (in memory: temp_store, shared/store/sqlite-store.ts): of keys and rowids only.
        const bound = { states: '[]', limit: 1, created_at: 1, operation_id: '', issued_at: 1, capability_id: '', now: 0 };
        const program = db.prepare(`EXPLAIN ${sql}`).all(bound) as Array<{ opcode: string; p2: number }>;
        const ephemeral = program.filter((op) => op.opcode === 'OpenEphemeral').map((op) => op.p2);
        expect(Math.max(0, ...ephemeral), sql).to.be.at.most(4);
      }
    } finally {
      db.close();
    }
  });

  it('answers the holds-by-state gauge and an unfiltered ops.list page without reading the history', () => {
    const db = new Database(':memory:');
    try {
      applyMigrations(db, 'plans', KERNEL_MIGRATIONS, { provisioning: true });
      const gauge = statements.find((sql) => /holds_reserved/.test(sql))!;
      expect(plan(db, gauge).every((detail) => !/\bholds\b/.test(detail)), plan(db, gauge).join('; ')).to.equal(true);
      expect(plan(db, gauge).join('; ')).to.match(/SCAN grants/);
      // Walked from the page's key down the creation index, stopping at the page's end; only ties of one millisecond are sorted.
      const page = statements.find((sql) => /SELECT rowid FROM operations WHERE created_at <= @created_at/.test(sql))!;
      expect(plan(db, page).join('; ')).to.match(/SEARCH operations USING (COVERING )?INDEX operations_by_creation \(created_at<\?\); USE TEMP B-TREE FOR (LAST TERM|RIGHT PART) OF ORDER BY/);
      const byState = statements.find((sql) => /WHERE state IN \(SELECT value FROM json_each\(@states\)\)[^]*ORDER BY created_at DESC/.test(sql))!;
      expect(plan(db, byState).join('; ')).to.include('SEARCH operations USING INDEX operations_by_state (state=? AND created_at<?)');
    } finally {
      db.close();
    }
  });
});
