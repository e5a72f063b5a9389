// What kernel.db keeps per operation is argued in kernel-proc/store/schema.ts
// (version 6) and docs/PERFORMANCE.md "Store bytes per operation". These
// tests hold what the indexes are for, against the statements the store
// really prepares: every lookup of an operation's rows is a search by an
// index (the receipts' one now on a column read from the receipt's bytes),
// and the one index reserve no longer reads still serves the metrics gauge.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { expect } from 'chai';
import { KernelStore } from '../../kernel-proc/store/kernel-store.js';
import { KERNEL_MIGRATIONS } from '../../kernel-proc/store/schema.js';
import { applyMigrations } from '../../shared/store/migrations.js';

/** Every SQL text the kernel's store prepares when it opens (the table classes prepare theirs in their constructors). */
function preparedStatements(): string[] {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'custody-kernel-plans-'));
  const seen: string[] = [];
  // Called with its own `this` below; taken from the descriptor, not as a loose method.
  const prepare = Object.getOwnPropertyDescriptor(Database.prototype, 'prepare')!.value as Database.Database['prepare'];
  Database.prototype.prepare = function (this: Database.Database, source: string) {
    seen.push(source);
    return prepare.call(this, source);
  } as typeof prepare;
  try {
    KernelStore.provision(path.join(dir, 'kernel')).close();
  } finally {
    Database.prototype.prepare = prepare;
    fs.rmSync(dir, { recursive: true, force: true });
  }
  return [...new Set(seen.filter((sql) => !/^\s*(PRAGMA|BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE)/i.test(sql)))];
}

function plan(db: Database.Database, sql: string): string[] {
  const named = [...new Set([...sql.matchAll(/@(\w+)/g)].map((m) => m[1]!))];
  const statement = db.prepare(`EXPLAIN QUERY PLAN ${sql}`);
  const params = named.length > 0 ? [Object.fromEntries(named.map((name) => [name, null]))] : Array.from({ length: (sql.match(/\?/g) ?? []).length }, () => null);
  return (statement.all(...params) as Array<{ detail: string }>).map((row) => row.detail);
}

/** Statements that read a whole table on purpose, and why. */
const WHOLE_TABLE: ReadonlyArray<readonly [RegExp, string]> = [
  [/FROM holds GROUP BY state/, 'the holds-by-state gauge of GET /metrics'],
  [/FROM grants ORDER BY/, 'grant.list: every grant'],
  [/FROM state_transitions/, 'the machine tables, checked once at open'],
  [/FROM kernel_epochs/, 'the key epochs, a handful of rows'],
  [/UPDATE operations SET state = 'awaiting_report'/, 'startup recovery: every committed start'],
  [/@states IS NULL OR state IN/, 'ops.list with no state filter: every operation, newest first'],
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
        .flatMap((sql) => plan(db, sql).filter((detail) => /^SCAN (operations|receipts|holds|nonces|reports|grants)\b(?! USING (COVERING )?INDEX)/.test(detail)).map((detail) => `${detail}: ${sql.trim()}`));
      expect(scans).to.deep.equal([]);
      const receipts = statements.filter((sql) => /FROM receipts WHERE operation_id = \?/.test(sql));
      expect(receipts.length).to.be.greaterThan(3);
      for (const sql of receipts) expect(plan(db, sql).join('; '), sql).to.match(/SEARCH receipts USING (COVERING )?INDEX sqlite_autoindex_receipts_1 \(operation_id=\?/);
    } finally {
      db.close();
    }
  });

  it('sorts keys, not whole rows, for the rows an OFFSET skips: a deep page of ops.list or recover costs ~100 bytes of memory a row', () => {
    const db = new Database(':memory:');
    try {
      applyMigrations(db, 'plans', KERNEL_MIGRATIONS, { provisioning: true });
      const paged = statements.filter((sql) => /OFFSET @offset/.test(sql));
      expect(paged).to.have.length(2);
      for (const sql of paged) {
        // An ORDER BY ... LIMIT keeps offset + limit entries in an ephemeral b-tree (in memory: temp_store, shared/store/sqlite-store.ts).
        const program = db.prepare(`EXPLAIN ${sql}`).all({ states: null, limit: 1, offset: 0 }) as Array<{ opcode: string; p2: number }>;
        const ephemeral = program.filter((op) => op.opcode === 'OpenEphemeral').map((op) => op.p2);
        expect(Math.max(...ephemeral), sql).to.be.at.most(4);
      }
    } finally {
      db.close();
    }
  });

  it('keeps holds_by_grant because the holds-by-state gauge scans it instead of the holds table', () => {
    const db = new Database(':memory:');
    try {
      applyMigrations(db, 'plans', KERNEL_MIGRATIONS, { provisioning: true });
      const gauge = statements.find((sql) => /FROM holds GROUP BY state/.test(sql))!;
      expect(plan(db, gauge).join('; ')).to.include('SCAN holds USING COVERING INDEX holds_by_grant');
    } finally {
      db.close();
    }
  });
});
