// The executor's half of the rollback witness (docs/ROLLBACK.md), over a real
// executor process: the head it signs in its hello, the head frame it sends
// after a claim and the wait for head.witnessed before the effect, and the
// refusal of every write once ledger.db no longer names the file it opened.
import { expect } from 'chai';
import { renameSync } from 'node:fs';
import path from 'node:path';
import { helloMessage } from '../../shared/wire/hello.js';
import { type Home, authorize, executeBody, journalEntries, makeHome, notesFor, provisioned, removeHome, sqlite, startExecutor, stopExecutor } from './helpers.js';
import { refused } from '../helpers/codes.js';
import { eventually } from '../helpers/eventually.js';


describe('executor-proc: ledger head and its witness', function () {
  this.timeout(30_000);
  let home: Home;

  beforeEach(async () => {
    home = makeHome();
    await provisioned(home);
  });

  afterEach(() => removeHome(home));

  it('presents the ledger head in its hello, covered by the signature, and announces each claim and report', async () => {
    const heads: number[] = [];
    // report_head_linger_ms 0: the report's head is announced at once, as before the linger.
    const executor = await startExecutor(home, { onHead: (head) => void heads.push(head), settings: { report_head_linger_ms: 0 } });
    try {
      expect(executor.hello.head).to.equal(0);
      await executor.channel.request('execute', executeBody(authorize(executor)));
      // The claim (head 1) is announced and witnessed before the effect; the report (head 2) after it.
      expect(heads).to.deep.equal([1, 2]);
      expect(sqlite(path.join(home.dir, 'ledger.db'), 'SELECT seq FROM head').rows).to.deep.equal([{ seq: 2 }]);
    } finally {
      await stopExecutor(executor);
    }
    const again = await startExecutor(home);
    try {
      expect(again.hello.head).to.equal(2);
      // The signed bytes include the head: the same proof with another head is another message.
      const claim = { role: 'executor' as const, id: again.hello.id, keyEpoch: again.hello.key_epoch };
      expect(helloMessage(again.sid, 'c'.repeat(64), { ...claim, head: 2 }).equals(helloMessage(again.sid, 'c'.repeat(64), { ...claim, head: 1 }))).to.equal(false);
    } finally {
      await stopExecutor(again);
    }
  });

  it("holds a report's head back for the next claim's announcement to carry, announces it alone once report_head_linger_ms has passed, and before leaving", async () => {
    const heads: Array<{ head: number; at: number }> = [];
    const executor = await startExecutor(home, { onHead: (head) => void heads.push({ head, at: Date.now() }), settings: { report_head_linger_ms: 1_000 } });
    const announced = () => heads.map((entry) => entry.head);
    try {
      await executor.channel.request('execute', executeBody(authorize(executor)));
      // The claim (head 1) was waited on; the report (head 2) is not said yet.
      expect(announced()).to.deep.equal([1]);
      await executor.channel.request('execute', executeBody(authorize(executor)));
      const secondAnswered = Date.now();
      // The second claim's frame says head 3, which covers the first report's head 2: one frame, not two.
      expect(announced()).to.deep.equal([1, 3]);
      await eventually(() => announced().length === 3, 5_000, 'the second report head');
      // The second report's head (4), alone, once its own linger passed (not a timer left from the first report).
      expect(announced()).to.deep.equal([1, 3, 4]);
      expect(heads[2]!.at - secondAnswered).to.be.at.least(900);
      // A refusal's head (+2: the refusal and its never_claimed report) is said before its answer, as a claim's.
      const refusal = await executor.channel.request('execute', executeBody(authorize(executor, { args: { note: 42 } })));
      expect(refusal.status).to.equal('never_claimed');
      expect(announced()).to.deep.equal([1, 3, 4, 6]);
      await executor.channel.request('execute', executeBody(authorize(executor)));
      expect(announced()).to.deep.equal([1, 3, 4, 6, 7]);
      // Leaving (the supervisor's graceful stop), the executor says the head its last report left (8) at once.
      await executor.channel.request('shutdown', {});
      await executor.exited;
    } finally {
      await stopExecutor(executor);
    }
    expect(announced()).to.deep.equal([1, 3, 4, 6, 7, 8]);
    expect(sqlite(path.join(home.dir, 'ledger.db'), 'SELECT seq FROM head').rows).to.deep.equal([{ seq: 8 }]);
  });

  it('runs no effect until the supervisor acknowledges the claim head: unacknowledged, the answer is head_unwitnessed and the journal stays empty', async () => {
    // A witness that never answers: the claim commits, the effect must not run.
    const executor = await startExecutor(home, { onHead: () => new Promise<void>(() => undefined), settings: { adapter_deadline_ms: 1500 } });
    try {
      const auth = authorize(executor);
      const error = await refused(executor.channel.request('execute', executeBody(auth)));
      expect(error.code).to.equal('head_unwitnessed');
      expect(error.message).to.contain(auth.operationId);
      expect(journalEntries(home)).to.have.length(0);
      // The claim stands without a report: never run again, settled by reconciliation.
      const claims = sqlite(path.join(home.dir, 'ledger.db'), `SELECT state FROM claims_view WHERE operation_id = '${auth.operationId}'`).rows;
      expect(claims).to.deep.equal([{ state: 'outcome_unknown' }]);
    } finally {
      await stopExecutor(executor);
    }
  });

  it('refuses the next claim once ledger.db is renamed away while it runs (store_replaced), runs nothing, and exits to be replaced', async () => {
    const executor = await startExecutor(home);
    const first = authorize(executor);
    expect((await executor.channel.request('execute', executeBody(first))).status).to.equal('completed');
    renameSync(path.join(home.dir, 'ledger.db'), path.join(home.dir, 'ledger.moved'));
    const second = authorize(executor);
    const error = await refused(executor.channel.request('execute', executeBody(second)));
    expect(error.code).to.equal('store_replaced');
    expect(error.message).to.contain(path.join(home.dir, 'ledger.db'));
    expect(notesFor(home, second.operationId)).to.have.length(0);
    expect(journalEntries(home)).to.have.length(1);
    const exit = await executor.exited;
    expect(exit.code).to.equal(70);
  });

  // Through SQLite (the backup API of .restore): the running connection sees the older pages. A `cat` over the
  // live file is not in this test because it is not reliably seen: the process keeps reading the newer pages of
  // its -wal and its cache (docs/ROLLBACK.md, "What is and is not detected").
  it('refuses to answer for an operation a ledger restored in place while it runs (sqlite3 .restore) forgot: no never_claimed, nothing written, exits to be refused at its hello', async () => {
    const executor = await startExecutor(home);
    const ledger = path.join(home.dir, 'ledger.db');
    expect((await executor.channel.request('execute', executeBody(authorize(executor)))).status).to.equal('completed');
    const old = path.join(home.root, 'ledger.old');
    expect(sqlite(ledger, `.backup '${old}'`).error).to.equal(null);
    const forgotten = authorize(executor);
    expect((await executor.channel.request('execute', executeBody(forgotten))).status).to.equal('completed');
    expect(notesFor(home, forgotten.operationId)).to.have.length(1);
    // Same inode: the path check passes. Only the head, read inside the write, tells.
    expect(sqlite(ledger, `.restore '${old}'`).error).to.equal(null);
    expect(sqlite(ledger, 'SELECT seq FROM head').rows).to.deep.equal([{ seq: 2 }]);
    // The restored ledger has no claim of `forgotten`: before the check, this signed never_claimed.
    const error = await refused(executor.channel.request('reconcile_operation', { authorization: forgotten.text, expected: forgotten.expected }));
    expect(error.code).to.equal('store_rolled_back');
    expect(error.message).to.contain('below the head 4');
    expect(sqlite(ledger, `SELECT count(*) AS n FROM claims_view WHERE operation_id = '${forgotten.operationId}'`).rows).to.deep.equal([{ n: 0 }]);
    expect(sqlite(ledger, 'SELECT seq FROM head').rows).to.deep.equal([{ seq: 2 }]);
    expect(journalEntries(home)).to.have.length(2);
    expect((await executor.exited).code).to.equal(70);
    await eventually(() => executor.stderr.some((line) => line.includes('"event":"store_rolled_back"')), 3_000, 'store_rolled_back logged');
  });
});
