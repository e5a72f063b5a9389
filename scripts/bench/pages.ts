// npm run bench:pages -- [operations] [grants]
//
// What a page of ops.list and grant.list costs at depth (docs/PERFORMANCE.md
// "Listings page by key"): a kernel.db provisioned by the kernel's own store,
// a long history written into it (denied operations, three to a
// millisecond, so ties are paged too; expired grants), then pages of 1,000
// read through the store's own statements, each page after the last one's
// key, beside the offset query the store ran before kernel.db version 9 on
// the same file. Both must return the same rows at every depth measured.
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { KernelStore } from '../../kernel-proc/store/kernel-store.js';
import { type GrantRow, GrantsTable, grantKeyOf } from '../../kernel-proc/store/grants-table.js';
import { OperationsTable, operationKeyOf } from '../../kernel-proc/store/operations-table.js';
import type { GrantKey, OperationKey } from '../../shared/protocol/kernel-messages.js';
import { scriptArgs } from './args.js';

const PAGE = 1000;
const [operations, grants] = scriptArgs('usage: npm run bench:pages -- [operations, 300000] [grants, 100000]', {
  counts: [
    { name: 'operations', fallback: 300_000 },
    { name: 'grants', fallback: 100_000 },
  ],
}).counts as [number, number];

/** Milliseconds `run` takes, and what it returned. */
function timed<T>(run: () => T): [number, T] {
  const started = process.hrtime.bigint();
  const result = run();
  return [Number(process.hrtime.bigint() - started) / 1e6, result];
}

/** Every page from the first, each after the last one's key; how many rows in all. */
function everyPage<Row, Key>(page: (after: Key | null) => Row[], keyOf: (row: Row) => Key): number {
  let listed = 0;
  for (let after: Key | null = null; ; ) {
    const rows = page(after);
    listed += Math.min(rows.length, PAGE);
    if (rows.length <= PAGE) return listed;
    after = keyOf(rows[PAGE - 1]!);
  }
}

/** Every page from the first, each `offset` further on; how many rows in all. */
function everyPageByOffset(page: (offset: number) => unknown[]): number {
  for (let offset = 0; ; offset += PAGE) {
    const rows = page(offset);
    if (rows.length <= PAGE) return offset + rows.length;
  }
}

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'custody-bench-pages-'));
try {
  KernelStore.provision(path.join(dir, 'kernel')).close();
  const db = new Database(path.join(dir, 'kernel', 'kernel.db'));
  const start = Date.now() - operations;
  const insertOperation = db.prepare(`
    INSERT INTO operations (operation_id, request_id, request_binding_hash, subject, tool, parameters_digest, cost_units, state, created_at, updated_at)
    VALUES (?, ?, 'seeded', 'agent', 'review-notes/append', 'seeded', 0, 'denied', ?, ?)`);
  const insertGrant = db.prepare(`
    INSERT INTO grants (capability_id, tool, subject, max_invocations, max_cost_units, not_before, expires_at, issued_at, capability, capability_digest)
    VALUES (?, 'pile/*', '*', 10, NULL, ?, ?, ?, '{}', ?)`);
  db.transaction(() => {
    for (let i = 0; i < operations; i++) {
      const at = start + Math.floor(i / 3);
      insertOperation.run(createHash('sha256').update(`seed-${i}`).digest('hex'), `seed-${i}`, at, at);
    }
    for (let i = 0; i < grants; i++) insertGrant.run(`cap-seed-${String(i).padStart(7, '0')}`, start + i, start + i + 60_000, start + i, '0'.repeat(64));
  })();

  const table = new OperationsTable(db);
  const byOffset = db.prepare<[{ limit: number; offset: number }], { operation_id: string; created_at: number }>(`
    SELECT operation_id, request_id, subject, tool, state, capability_id, executor_id, created_at, updated_at, flag FROM operations WHERE rowid IN (
      SELECT rowid FROM operations ORDER BY created_at DESC, operation_id LIMIT @limit OFFSET @offset)
    ORDER BY created_at DESC, operation_id`);
  const ids = (rows: ReadonlyArray<{ operation_id: string }>) => rows.map((row) => row.operation_id).join();
  const depths = [0, Math.floor(operations / 3), operations - PAGE].filter((depth) => depth >= 0 && depth < operations);
  const reps = 20;
  for (const depth of depths) {
    const last = depth === 0 ? null : byOffset.get({ limit: 1, offset: depth - 1 })!;
    const after: OperationKey | null = last === null ? null : operationKeyOf(last);
    const [offsetMs, offsetRows] = timed(() => Array.from({ length: reps }, () => byOffset.all({ limit: PAGE + 1, offset: depth })).at(-1)!);
    const [keyMs, keyRows] = timed(() => Array.from({ length: reps }, () => table.list(null, PAGE + 1, after)).at(-1)!);
    if (ids(offsetRows) !== ids(keyRows)) throw new Error(`the pages ${depth} deep differ`);
    console.log(JSON.stringify({ listing: 'ops.list', operations, depth, page: PAGE, offset_ms: +(offsetMs / reps).toFixed(2), key_ms: +(keyMs / reps).toFixed(2) }));
  }
  const [offsetAll, offsetListed] = timed(() => everyPageByOffset((offset) => byOffset.all({ limit: PAGE + 1, offset })));
  const [keyAll, keyListed] = timed(() => everyPage((after: OperationKey | null) => table.list(null, PAGE + 1, after), operationKeyOf));
  if (offsetListed !== operations || keyListed !== operations) throw new Error(`listed ${offsetListed} and ${keyListed} of ${operations}`);
  console.log(JSON.stringify({ listing: 'ops.list', operations, every_page_ms: { offset: Math.round(offsetAll), key: Math.round(keyAll) } }));

  const grantsTable = new GrantsTable(db);
  const [grantMs, grantListed] = timed(() => everyPage((after: GrantKey | null): GrantRow[] => grantsTable.page(null, PAGE + 1, after), grantKeyOf));
  const held = (db.prepare('SELECT count(*) AS n FROM grants').get() as { n: number }).n;
  if (grantListed !== held) throw new Error(`listed ${grantListed} of ${held} grants`);
  console.log(JSON.stringify({ listing: 'grant.list', grants: grantListed, every_page_ms: { key: Math.round(grantMs) } }));
  db.close();
} finally {
  fs.rmSync(dir, { recursive: true, force: true });
}
