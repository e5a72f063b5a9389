// kernel.db version 6 (kernel-proc/store/schema.ts): a store written at
// version 5 — reports and outputs on the operations row, receipt columns and
// digests stored beside the receipt — is migrated when this build opens it,
// and every answer the kernel gave before is given again byte for byte.
import path from 'node:path';
import Database from 'better-sqlite3';
import { expect } from 'chai';
import { KERNEL_MIGRATIONS } from '../../kernel-proc/store/schema.js';
import { applyMigrations } from '../../shared/store/migrations.js';
import { isCustodyError } from '../../shared/errors.js';
import { type RecordedHistory, expectSameAnswers, recordHistory } from '../helpers/kernel-history.js';
import { downgradeToV5, sha256 } from '../helpers/kernel-v5.js';
import { KernelProcess, KernelRoot, reserveBody, signReport, testExecutor } from './helpers.js';

const V5 = KERNEL_MIGRATIONS.slice(0, 5);

function schemaOf(db: Database.Database): string[] {
  return db.prepare<[], { sql: string }>("SELECT type || ' ' || name || ': ' || sql AS sql FROM sqlite_schema WHERE sql IS NOT NULL ORDER BY type, name").all().map((row) => row.sql);
}

describe('kernel-proc: kernel.db migration to version 6', function () {
  this.timeout(30_000);
  const root = new KernelRoot();
  const executor = testExecutor(71);
  // A float that prints differently at 15 digits, a boolean, a string: the output read back from the report must be the same value.
  const output = { line: 'appended', ratio: 0.30000000000000004, big: 1e21, flag: true, words: 'a "quoted" word' };
  let history: RecordedHistory;
  let v5: { schema: string[]; operations: unknown[]; receipts: Array<Record<string, unknown>> };

  before(async () => {
    history = await recordHistory(root, executor, 'm', output);
    downgradeToV5(root.dir, root.root);
    const db = new Database(path.join(root.dir, 'kernel.db'), { readonly: true });
    try {
      v5 = {
        schema: schemaOf(db),
        operations: db.prepare('SELECT operation_id, state, report, report_digest, output, authorization FROM operations ORDER BY operation_id').all(),
        receipts: db.prepare('SELECT * FROM receipts ORDER BY operation_id, seq').all() as Array<Record<string, unknown>>,
      };
    } finally {
      db.close();
    }
    await (await KernelProcess.start(root)).stop();
  });
  after(() => root.remove());

  it('builds a version-5 store that has exactly the schema version 5 creates, with the report and output on the operation row', () => {
    const pristine = new Database(':memory:');
    try {
      applyMigrations(pristine, 'pristine', V5, { provisioning: true });
      const outputs = v5.operations.map((row) => (row as { output: string | null }).output).filter((text) => text !== null);
      expect(outputs.map((text) => JSON.parse(text) as unknown)).to.deep.equal([output]);
      expect(v5.receipts.every((row) => row.digest === sha256(String(row.receipt)))).to.equal(true);
      expect(v5.schema).to.deep.equal(schemaOf(pristine));
    } finally {
      pristine.close();
    }
  });

  it('keeps every receipt byte for byte, with the columns it stored before now read from the receipt', () => {
    // Version 10 added each receipt's key, its operation's rowid (store-migration-v10.test.ts); the rest is version 6's.
    const after = root.read<Record<string, unknown>>('SELECT * FROM receipts ORDER BY operation_id, seq').map(({ operation_rowid: _row, ...rest }) => rest);
    expect(root.read<{ user_version: number }>('PRAGMA user_version')).to.deep.equal([{ user_version: KERNEL_MIGRATIONS.length }]);
    expect(after.length).to.equal(v5.receipts.length);
    const { digest: _digest, ...withoutDigest } = v5.receipts[0]!;
    expect(Object.keys(after[0]!).sort()).to.deep.equal(Object.keys(withoutDigest).sort());
    expect(after).to.deep.equal(v5.receipts.map(({ digest: _d, ...rest }) => rest));
  });

  it('keeps every report byte for byte in reports, and hands out the same output', () => {
    const after = root.read<{ operation_id: string; state: string; report: string | null; report_digest: string | null; authorization: string | null }>(
      'SELECT o.operation_id, o.state, r.report, o.report_digest, o.authorization FROM operations o LEFT JOIN reports r USING (operation_id) ORDER BY o.operation_id',
    );
    expect(after).to.deep.equal(v5.operations.map((row) => {
      const { output: _output, ...rest } = row as Record<string, unknown>;
      return rest;
    }));
    expect(after.filter((row) => row.report !== null).length).to.equal(2);
    for (const row of after) if (row.report !== null) expect(sha256(row.report)).to.equal(row.report_digest);
  });

  it('answers every reserve, start, settle and operation.get as before, byte for byte, and settles a new operation', async () => {
    const kernel = await KernelProcess.start(root);
    try {
      await expectSameAnswers(kernel, history);

      const reserved = await kernel.request('reserve', reserveBody('m-after'));
      const started = await kernel.request('start', { request_id: 'm-after', nonce_id: reserved.nonce!.id, arguments: reserveBody('m-after').arguments });
      const done = await kernel.request('settle', { authorization: started.authorization!, report: signReport(executor, started.authorization!, root.publicKey, { output }) });
      expect([done.state, done.output]).to.deep.equal(['completed', output]);
    } finally {
      await kernel.stop();
    }
  });
});

describe('kernel-proc: kernel.db migration to version 6 on a receipt whose columns disagree with its bytes', () => {
  it('is refused and rolled back: store_schema naming the check, the store still at version 5', () => {
    const db = new Database(':memory:');
    try {
      applyMigrations(db, 'test kernel', V5, { provisioning: true });
      const receipt = JSON.stringify({ body: { receipt_id: 'r:o1:1', operation_id: 'o1', decision: 'reserve', verdict: 'allow', reason: 'ok', state: 'reserved', hold: { disposition: 'reserved' }, issued_at: 5 } });
      db.exec(`INSERT INTO operations (operation_id, request_id, request_binding_hash, subject, tool, parameters_digest, cost_units, state, created_at, updated_at)
               VALUES ('o1', 'q1', 'h', 's', 't', 'p', 0, 'reserved', 0, 0)`);
      const insert = db.prepare(`INSERT INTO receipts (receipt_id, operation_id, seq, decision, verdict, reason, state, hold_disposition, request_digest, issued_at, digest, receipt)
                                 VALUES ('r:o1:1', 'o1', 1, 'reserve', 'allow', ?, 'reserved', 'reserved', 'h', 5, 'd', ?)`);
      insert.run('forged', receipt);
      let error: unknown;
      try {
        applyMigrations(db, 'test kernel', KERNEL_MIGRATIONS, { provisioning: false });
      } catch (caught) {
        error = caught;
      }
      expect(isCustodyError(error) && error.code).to.equal('store_schema');
      expect(String((error as Error).message)).to.include('v6_receipt_columns_equal_the_receipt_bytes');
      expect(db.pragma('user_version', { simple: true })).to.equal(5);
      expect(db.prepare('SELECT reason, digest FROM receipts').get()).to.deep.equal({ reason: 'forged', digest: 'd' });

      // The same store with the column as the receipt says migrates.
      db.exec('DROP TRIGGER receipts_insert_once');
      db.exec(`UPDATE receipts SET reason = 'ok'`);
      db.exec(`CREATE TRIGGER receipts_insert_once BEFORE UPDATE ON receipts BEGIN SELECT RAISE(ABORT, 'store_corrupt: receipts are insert-once'); END;`);
      applyMigrations(db, 'test kernel', KERNEL_MIGRATIONS, { provisioning: false });
      expect(db.prepare('SELECT receipt_id, decision, reason, hold_disposition, issued_at FROM receipts').get()).to.deep.equal({
        receipt_id: 'r:o1:1', decision: 'reserve', reason: 'ok', hold_disposition: 'reserved', issued_at: 5,
      });
    } finally {
      db.close();
    }
  });
});
