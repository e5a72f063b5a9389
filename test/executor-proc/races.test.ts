// The model's races (../shared/model/README.md), provoked on the real
// process with pause points: each test holds one request at the step where
// the race opens and lets another request through.
import { expect } from 'chai';
import {
  type Home,
  authorize,
  executeBody,
  fencesFor,
  makeHome,
  notesFor,
  provisioned,
  reachedPause,
  removeHome,
  setClockOffset,
  sqlite,
  startExecutor,
  stopExecutor,
} from './helpers.js';
import { codeOfAnswer as codeOf, refusalOf } from '../helpers/codes.js';


describe('executor-proc races', function () {
  this.timeout(30_000);
  let home: Home;

  beforeEach(async () => {
    home = makeHome();
    await provisioned(home);
  });

  afterEach(() => removeHome(home));

  it('H2/H4b: an unclaimed authorization gets never_claimed, and an execute already past its lookup can no longer claim it', async () => {
    const executor = await startExecutor(home, { faults: ['pause_before_claim'] });
    const auth = authorize(executor);
    const pending = executor.channel.request('execute', executeBody(auth));
    const release = await reachedPause(home, 'pause_before_claim');
    // The execute has looked up (nothing there) and waits before its claim transaction.
    const refusal = await executor.channel.request('reconcile_operation', { authorization: auth.text, expected: auth.expected });
    expect(refusal.status).to.equal('never_claimed');
    expect((JSON.parse(refusal.report) as { body: { claimed_at: unknown } }).body.claimed_at).to.equal(null);
    release();
    expect(await codeOf(pending)).to.equal('never_claimed');
    expect(await codeOf(executor.channel.request('execute', executeBody(auth)))).to.equal('never_claimed');
    const again = await executor.channel.request('reconcile_operation', { authorization: auth.text, expected: auth.expected });
    expect(again).to.deep.equal({ report: refusal.report, status: 'never_claimed', replayed: true });
    await stopExecutor(executor);
    expect(notesFor(home, auth.operationId)).to.have.length(0);
    expect(sqlite(home.ledgerFile, `SELECT kind, state FROM claims_view WHERE operation_id = '${auth.operationId}'`).rows).to.deep.equal([
      { kind: 'refusal', state: 'never_claimed' },
    ]);
  });

  it('H3: reconcile_operation while the first execute is about to append never yields not_applied followed by an append', async () => {
    const executor = await startExecutor(home, { faults: ['pause_before_effect'] });
    const auth = authorize(executor);
    const pending = executor.channel.request('execute', executeBody(auth));
    const release = await reachedPause(home, 'pause_before_effect');
    // Claimed, adapter about to append: reconciliation must make not_applied true (the fence).
    const reconciled = await executor.channel.request('reconcile_operation', { authorization: auth.text, expected: auth.expected });
    expect(reconciled.status).to.equal('reconciled_not_applied');
    expect(fencesFor(home, auth.operationId)).to.have.length(1);
    release();
    const answer = await pending;
    expect(answer).to.deep.equal({ report: reconciled.report, status: 'reconciled_not_applied', replayed: true });
    await stopExecutor(executor);
    expect(notesFor(home, auth.operationId)).to.have.length(0);
    expect(executor.stderr.some((line) => line.includes('contradictory_outcome'))).to.equal(false);
  });

  it('H5: a retained report replays after the window has passed, before any window check', async () => {
    const executor = await startExecutor(home);
    const auth = authorize(executor, { notBefore: Date.now() - 1_000, expiresAt: Date.now() + 60_000 });
    const first = await executor.channel.request('execute', executeBody(auth));
    setClockOffset(home, 3_600_000);
    const replay = await executor.channel.request('execute', executeBody(auth));
    const reconciled = await executor.channel.request('reconcile_operation', { authorization: auth.text, expected: auth.expected });
    await stopExecutor(executor);
    expect(replay).to.deep.equal({ ...first, replayed: true });
    expect(reconciled).to.deep.equal({ ...first, replayed: true });
    expect(notesFor(home, auth.operationId)).to.have.length(1);
  });

  it('H6: a clock stepped back after an outside_window answer does not reopen the window', async () => {
    const executor = await startExecutor(home);
    const auth = authorize(executor, { notBefore: Date.now() - 1_000, expiresAt: Date.now() + 60_000 });
    setClockOffset(home, 120_000);
    expect(await codeOf(executor.channel.request('execute', executeBody(auth)))).to.equal('outside_window');
    setClockOffset(home, 0);
    expect(await codeOf(executor.channel.request('execute', executeBody(auth)))).to.equal('outside_window');
    await stopExecutor(executor);
    // Still closed after a restart: the mark is in the ledger, not in memory.
    const again = await startExecutor(home);
    expect(await codeOf(again.channel.request('execute', executeBody(auth)))).to.equal('outside_window');
    await stopExecutor(again);
    const [clock] = sqlite(home.ledgerFile, 'SELECT hwm_ms FROM clock').rows;
    const { expires_at: expiresAt } = (JSON.parse(auth.text) as { body: { expires_at: number } }).body;
    expect(Number(clock?.hwm_ms)).to.be.at.least(expiresAt);
    expect(sqlite(home.ledgerFile, `SELECT count(*) AS n FROM claims WHERE operation_id = '${auth.operationId}'`).rows[0]?.n).to.equal(0);
    expect(notesFor(home, auth.operationId)).to.have.length(0);
  });

  it('a clock that ran an hour ahead and was set back refuses fresh windows until it passes the mark, and says why', async () => {
    const executor = await startExecutor(home);
    setClockOffset(home, 3_600_000);
    const during = authorize(executor, { notBefore: Date.now() + 3_600_000 - 1_000, expiresAt: Date.now() + 3_600_000 + 60_000 });
    expect((await executor.channel.request('execute', executeBody(during))).status).to.equal('completed');
    setClockOffset(home, 0);
    // Issued at the true time, open for a minute: closed by the mark the hour ahead left, and the refusal says so.
    const fresh = authorize(executor, { notBefore: Date.now() - 1_000, expiresAt: Date.now() + 60_000 });
    const refused = await refusalOf(executor.channel.request('execute', executeBody(fresh)));
    await stopExecutor(executor);
    expect(refused.code).to.equal('outside_window');
    expect(refused.message).to.match(/this executor's clock is 3[56]\d\d s behind the latest time it has answered by \(it ran ahead and was set back\)/);
    expect(sqlite(home.ledgerFile, `SELECT count(*) AS n FROM claims WHERE operation_id = '${fresh.operationId}'`).rows[0]?.n).to.equal(0);
  });

  it('a window not open yet answers window_not_open with the mark stored, and the same execute claims once it opens', async () => {
    const executor = await startExecutor(home);
    const opensAt = Date.now() + 60_000;
    const auth = authorize(executor, { notBefore: opensAt, expiresAt: opensAt + 60_000 });
    const asked = Date.now();
    const early = await refusalOf(executor.channel.request('execute', executeBody(auth)));
    expect(early.code).to.equal('window_not_open');
    expect(early.message).to.include(`at or after ${opensAt}`);
    // A time-based answer stores the mark first (H6, ARCHITECTURE.md §6.5), the not-yet answer too.
    expect(Number(sqlite(home.ledgerFile, 'SELECT hwm_ms FROM clock').rows[0]?.hwm_ms)).to.be.at.least(asked);
    expect(sqlite(home.ledgerFile, `SELECT count(*) AS n FROM claims WHERE operation_id = '${auth.operationId}'`).rows[0]?.n).to.equal(0);
    // The retry the code asks for: once the window is open, the same authorization claims and runs once.
    setClockOffset(home, 61_000);
    const result = await executor.channel.request('execute', executeBody(auth));
    await stopExecutor(executor);
    expect(result.status).to.equal('completed');
    expect(notesFor(home, auth.operationId)).to.have.length(1);
  });

  it('a closed window answers outside_window, never window_not_open, even when the clock is stepped back before not_before', async () => {
    const executor = await startExecutor(home);
    const auth = authorize(executor, { notBefore: Date.now() - 1_000, expiresAt: Date.now() + 30_000 });
    setClockOffset(home, 60_000);
    expect(await codeOf(executor.channel.request('execute', executeBody(auth)))).to.equal('outside_window');
    // The mark (past expires_at) judges, not the clock: the window stays closed.
    setClockOffset(home, -120_000);
    expect(await codeOf(executor.channel.request('execute', executeBody(auth)))).to.equal('outside_window');
    await stopExecutor(executor);
    expect(notesFor(home, auth.operationId)).to.have.length(0);
  });

  it('closing stdin mid-effect lets the effect finish with its report retained, then exits 0', async () => {
    let executor = await startExecutor(home, { faults: ['pause_before_effect'] });
    const auth = authorize(executor);
    const pending = executor.channel.request('execute', executeBody(auth));
    const release = await reachedPause(home, 'pause_before_effect');
    executor.process.stdin?.end();
    await new Promise((resolve) => setTimeout(resolve, 150));
    expect(executor.process.exitCode).to.equal(null);
    release();
    const answer = await pending;
    expect(answer.status).to.equal('completed');
    expect((await executor.exited).code).to.equal(0);
    executor = await startExecutor(home);
    const replay = await executor.channel.request('execute', executeBody(auth));
    await stopExecutor(executor);
    expect(replay).to.deep.equal({ report: answer.report, status: 'completed', replayed: true });
    expect(notesFor(home, auth.operationId)).to.have.length(1);
  });
});
