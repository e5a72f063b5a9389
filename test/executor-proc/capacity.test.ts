// Capacity and explicit archival over the wire (ARCHITECTURE.md §6.2): a full ledger
// refuses before claiming; archival moves only expired, reconciled claims,
// which still replay afterwards and can never be claimed again.
import { expect } from 'chai';
import {
  type Executor,
  type Home,
  authorize,
  executeBody,
  makeHome,
  notesFor,
  provisioned,
  removeHome,
  setClockOffset,
  sqlite,
  startExecutor,
  stopExecutor,
} from './helpers.js';
import { codeOfAnswer as codeOf } from '../helpers/codes.js';


describe('executor-proc capacity and archival', function () {
  this.timeout(30_000);
  let home: Home;
  let executor: Executor;

  before(async () => {
    home = makeHome();
    await provisioned(home, { settings: { claim_capacity: 3, refusal_reserve: 1 } });
    executor = await startExecutor(home);
  });

  after(async () => {
    await stopExecutor(executor);
    removeHome(home);
  });

  it('refuses a claim on a full ledger before claiming, keeps the reserve for refusals, and makes room by archival', async () => {
    const window = { notBefore: Date.now() - 1_000, expiresAt: Date.now() + 60_000 };
    const first = authorize(executor, window);
    const second = authorize(executor, window);
    const third = authorize(executor, window);
    const firstReport = await executor.channel.request('execute', executeBody(first));
    await executor.channel.request('execute', executeBody(second));
    expect(await codeOf(executor.channel.request('execute', executeBody(third)))).to.equal('ledger_full');
    expect(notesFor(home, third.operationId)).to.have.length(0);
    // The reserve still takes a refusal, so the kernel can release the third hold.
    expect((await executor.channel.request('reconcile_operation', { authorization: third.text, expected: third.expected })).status).to.equal('never_claimed');

    const listed = [first.operationId, second.operationId, third.operationId];
    const early = await executor.channel.request('archive', { settled: listed });
    expect(early.archived).to.equal(0);
    expect(early.not_archived.map((entry) => entry.reason)).to.deep.equal(['window_open', 'window_open', 'window_open']);

    setClockOffset(home, 120_000);
    const moved = await executor.channel.request('archive', { settled: listed });
    expect(moved).to.deep.equal({ archived: 3, live: 0, not_archived: [] });

    // Archived: still found, still replayed byte for byte, never claimed again.
    expect(await executor.channel.request('execute', executeBody(first))).to.deep.equal({ ...firstReport, replayed: true });
    expect((await executor.channel.request('claims.get', { operation_id: first.operationId })).claim?.archived).to.equal(true);
    expect(await codeOf(executor.channel.request('execute', executeBody(third)))).to.equal('never_claimed');

    // Room again for new claims.
    const now = Date.now() + 120_000;
    const fourth = authorize(executor, { notBefore: now - 1_000, expiresAt: now + 60_000 });
    expect((await executor.channel.request('execute', executeBody(fourth))).status).to.equal('completed');
    expect(notesFor(home, first.operationId)).to.have.length(1);

    const archiveFile = home.ledgerFile.replace('ledger.db', 'archive.db');
    const rows = sqlite(archiveFile, 'SELECT operation_id, kind, report_status FROM archived_claims_view ORDER BY seq').rows;
    expect(rows.map((row) => row.operation_id)).to.deep.equal(listed);
    expect(sqlite(home.ledgerFile, 'SELECT count(*) AS n FROM claims').rows[0]?.n).to.equal(1);
    expect(sqlite(home.ledgerFile, 'DELETE FROM claims').error, 'the delete trigger calls a permit only custody defines').to.be.a('string').that.includes('no such function: custody_archive_permit');
  });
});
