// kernel.db as an operator sees it: the views the sqlite3 shell shows first,
// and the guards that refuse, in the store itself, what the code never does.
import path from 'node:path';
import Database from 'better-sqlite3';
import { expect } from 'chai';
import { operationIdFor } from '../../shared/protocol/binding.js';
import { KernelProcess, KernelRoot, TOOL, grantBody, pinBody, reserveBody, signReport, testExecutor } from './helpers.js';
import { KERNEL_MIGRATIONS } from '../../kernel-proc/store/schema.js';

const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

describe('kernel-proc: kernel.db for operators', function () {
  this.timeout(20_000);
  const root = new KernelRoot();
  const executor = testExecutor(61);
  let kernel: KernelProcess;

  before(async () => {
    kernel = await KernelProcess.start(root, { mode: 'provision' });
    await kernel.request('executor.pin', pinBody(executor));
    await kernel.request('grant.add', grantBody(TOOL));
    const done = await kernel.request('reserve', reserveBody('v-done'));
    const started = await kernel.request('start', { request_id: 'v-done', nonce_id: done.nonce!.id, arguments: reserveBody('v-done').arguments });
    await kernel.request('settle', { authorization: started.authorization!, report: signReport(executor, started.authorization!, root.publicKey) });
    await kernel.request('reserve', reserveBody('v-denied', { tool: 'nobody/serves' }));
    await kernel.request('reserve', reserveBody('v-waiting'));
  });
  after(async () => {
    await kernel.stop();
    root.remove();
  });

  describe('read with the sqlite3 shell while the kernel runs', () => {
    it('operations_view shows state, hold, receipts and the last reason, with ISO times', () => {
      const rows = root.shell<Record<string, unknown>>(
        `SELECT request_id, state, hold, nonce, receipts, last_reason, created, window_opens FROM operations_view
         WHERE request_id IN ('v-done', 'v-denied', 'v-waiting') ORDER BY request_id`,
      );
      expect(rows.map((row) => [row.request_id, row.state, row.hold, row.nonce, row.receipts, row.last_reason])).to.deep.equal([
        ['v-denied', 'denied', null, null, 1, 'capability_unknown'],
        ['v-done', 'completed', 'consumed', 'used', 2, 'ok'],
        ['v-waiting', 'reserved', 'reserved', 'live', 1, 'ok'],
      ]);
      for (const row of rows) expect(row.created).to.match(ISO);
      expect(rows[1]!.window_opens).to.match(ISO);
    });

    it('holds_view names the receipt that settled each hold', () => {
      const [row] = root.shell<Record<string, unknown>>(`SELECT state, settled, settled_by FROM holds_view WHERE request_id = 'v-done'`);
      expect(row!.state).to.equal('consumed');
      expect(row!.settled).to.match(ISO);
      expect(row!.settled_by).to.equal(`r:${operationIdFor('v-done')}:2`);
    });

    it('receipts_view lists every decision in order, and the receipt bytes are in receipts', () => {
      const rows = root.shell<Record<string, unknown>>(`SELECT seq, decision, verdict, reason, state, hold_disposition, issued FROM receipts_view WHERE request_id = 'v-done' ORDER BY seq`);
      expect(rows.map((row) => [row.seq, row.decision, row.verdict, row.reason, row.state, row.hold_disposition])).to.deep.equal([
        [1, 'reserve', 'allow', 'ok', 'reserved', 'reserved'],
        [2, 'completion', 'allow', 'ok', 'completed', 'consumed'],
      ]);
      const [text] = root.shell<{ receipt: string }>(`SELECT receipt FROM receipts WHERE receipt_id = 'r:${operationIdFor('v-done')}:2'`);
      expect(JSON.parse(text!.receipt)).to.have.property('schema', 'custody.receipt.v1');
    });

    it('grants_view shows each grant with what is used and held', () => {
      const rows = root.shell<Record<string, unknown>>(`SELECT tool, max_invocations, invocations_used, invocations_held, expires FROM grants_view ORDER BY max_invocations`);
      expect(rows.map((row) => [row.tool, row.max_invocations])).to.deep.equal([[TOOL, 4], [TOOL, 100]]);
      expect(rows.reduce((sum, row) => sum + Number(row.invocations_used), 0)).to.equal(1);
      expect(rows.reduce((sum, row) => sum + Number(row.invocations_held), 0)).to.equal(1);
    });

    it('parses the whole schema in the operator\'s shell, at the latest schema version', () => {
      expect(root.shell<{ user_version: number }>('PRAGMA user_version')).to.deep.equal([{ user_version: KERNEL_MIGRATIONS.length }]);
      const names = root.shell<{ name: string }>(`SELECT name FROM sqlite_schema WHERE type = 'view' ORDER BY name`).map((row) => row.name);
      expect(names).to.deep.equal(['grants_view', 'holds_view', 'operations_view', 'receipts_view']);
    });
  });

  describe('guards in the store', () => {
    let db: Database.Database;
    before(async () => {
      await kernel.stop();
      db = new Database(path.join(root.dir, 'kernel.db'));
    });
    after(async () => {
      db.close();
      kernel = await KernelProcess.start(root);
    });
    const refusal = (sql: string) => {
      try {
        db.exec(sql);
      } catch (error) {
        return (error as Error).message;
      }
      return expect.fail(`the store accepted: ${sql}`);
    };
    const done = operationIdFor('v-done');
    const FIXED = (table: string) => `store_corrupt: ${table}: a column that is fixed once written was changed`;

    it('refuse to move an operation out of a terminal state, or along any move the machine lacks', () => {
      expect(refusal(`UPDATE operations SET state = 'reserved' WHERE operation_id = '${done}'`)).to.equal('illegal_transition: operations: a state change the operation machine does not allow');
      expect(refusal(`UPDATE operations SET state = 'completed' WHERE request_id = 'v-waiting'`)).to.equal('illegal_transition: operations: a state change the operation machine does not allow');
    });

    it('refuse to create an operation in any state but reserved or denied', () => {
      expect(refusal(`INSERT INTO operations (operation_id, request_id, request_binding_hash, subject, tool, parameters_digest, cost_units, state, created_at, updated_at)
                      VALUES ('x', 'x', 'x', 'x', 'x', 'x', 0, 'completed', 1, 1)`)).to.equal('illegal_transition: operations: an operation starts as reserved or denied');
    });

    it('refuse to dispose of a hold twice', () => {
      expect(refusal(`UPDATE holds SET state = 'released' WHERE operation_id = '${done}'`)).to.equal('illegal_transition: holds: a state change the hold machine does not allow');
    });

    it('keep receipts and reports insert-once and every record undeleted', () => {
      expect(refusal(`UPDATE receipts SET request_digest = 'x'`)).to.equal('store_corrupt: receipts are insert-once');
      expect(refusal(`UPDATE receipts SET receipt = receipt`)).to.equal('store_corrupt: receipts are insert-once');
      // A receipt's decision, verdict, reason, … are read from its signed bytes (schema version 6): there is nothing to change.
      expect(refusal(`UPDATE receipts SET reason = 'ok'`)).to.equal('cannot UPDATE generated column "reason"');
      expect(refusal(`UPDATE reports SET report = report || ' '`)).to.equal('store_corrupt: reports are insert-once');
      for (const table of ['receipts', 'reports', 'operations', 'holds', 'nonces', 'grants', 'executor_pins', 'kernel_identity']) {
        expect(refusal(`DELETE FROM ${table}`)).to.equal(`store_corrupt: ${table} rows are never deleted`);
      }
    });

    it('refuse a receipt whose signed bytes name another key, and a report digest whose report is not kept', () => {
      expect(refusal(`INSERT INTO receipts (operation_rowid, seq, request_digest, receipt)
                      SELECT operation_rowid, 9, NULL, receipt FROM receipts WHERE operation_id = '${done}' AND seq = 1`)).to.equal('CHECK constraint failed: receipt_names_its_key');
      // Its operation is read from the bytes too, and must be the one its key names (schema version 10)…
      const other = (column: string) => `replace(${column}, '${done}', 'f${done.slice(1)}')`;
      expect(refusal(`INSERT INTO receipts (operation_rowid, seq, request_digest, receipt)
                      SELECT operation_rowid, 9, NULL, ${other('receipt')} FROM receipts WHERE operation_id = '${done}' AND seq = 1`)).to.equal(
        'store_corrupt: receipts: operation_rowid and operation_id name different operations',
      );
      // …and a key that names no operation names none of them.
      expect(refusal(`INSERT INTO receipts (operation_rowid, seq, request_digest, receipt)
                      SELECT 1000000, 1, NULL, receipt FROM receipts WHERE operation_id = '${done}' AND seq = 1`)).to.equal(
        'store_corrupt: receipts: operation_rowid and operation_id name different operations',
      );
      expect(refusal(`UPDATE operations SET report_digest = 'x' WHERE request_id = 'v-waiting'`)).to.equal(
        'store_corrupt: operations: report_digest is set only with the report kept in reports',
      );
    });

    it('refuse a hold, a nonce or a report whose key is another operation\'s rowid than its id names', () => {
      const rowOf = (request: string) => `(SELECT operation_rowid FROM operations WHERE request_id = '${request}')`;
      const named = (table: string) => `store_corrupt: ${table}: operation_rowid and operation_id name different operations`;
      // v-denied has no hold and no nonce, v-waiting no report: only the names disagree.
      expect(refusal(`INSERT INTO holds (operation_rowid, operation_id, capability_id, invocations, cost_units_held, created_at)
                      SELECT ${rowOf('v-denied')}, '${done}', capability_id, 1, 0, 1 FROM grants LIMIT 1`)).to.equal(named('holds'));
      expect(refusal(`INSERT INTO nonces (operation_rowid, nonce_id, operation_id, created_at, expires_at)
                      VALUES (${rowOf('v-denied')}, 'n', '${done}', 1, 2)`)).to.equal(named('nonces'));
      expect(refusal(`INSERT INTO reports (operation_rowid, report) SELECT ${rowOf('v-waiting')}, report FROM reports`)).to.equal(named('reports'));
      expect(refusal(`UPDATE holds SET operation_rowid = ${rowOf('v-denied')} WHERE operation_id = '${done}'`)).to.equal(FIXED('holds'));
      expect(refusal(`UPDATE operations SET operation_rowid = 1000000 WHERE operation_id = '${done}'`)).to.equal(FIXED('operations'));
    });

    it('keep what identifies an operation, a grant and the kernel fixed', () => {
      expect(refusal(`UPDATE operations SET request_binding_hash = 'x' WHERE operation_id = '${done}'`)).to.equal(FIXED('operations'));
      expect(refusal(`UPDATE operations SET authorization = 'x' WHERE operation_id = '${done}'`)).to.equal(FIXED('operations'));
      expect(refusal(`UPDATE grants SET max_invocations = 1000`)).to.equal(FIXED('grants'));
      expect(refusal(`UPDATE kernel_identity SET key_epoch = 2`)).to.equal('store_corrupt: the kernel identity never changes');
      expect(refusal(`UPDATE state_transitions SET to_state = 'reserved'`)).to.equal('store_corrupt: state_transitions changes only through a schema migration');
    });
  });

  describe('a store whose machine tables differ from this build', () => {
    it('is refused at startup: store_schema, naming the missing move', async () => {
      await kernel.stop();
      const db = new Database(path.join(root.dir, 'kernel.db'));
      db.exec(`DROP TRIGGER state_transitions_kept; DELETE FROM state_transitions WHERE machine = 'operation' AND from_state = 'reserved' AND to_state = 'expired'`);
      db.close();
      const refusal = await KernelProcess.refusal(root);
      expect(refusal.code).to.equal('store_schema');
      expect(refusal.message).to.include('operation:reserved->expired');
    });
  });
});
