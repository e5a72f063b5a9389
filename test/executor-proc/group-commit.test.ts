// The executor's grouped commits (executor-proc/ledger/ledger.ts): claims
// (and reports) of operations in flight together share one transaction, and
// each operation still runs its effect only after its own claim is durable
// and answers only after its own report is. The pause points
// `pause_claims_together` and `pause_reports_together` hold every operation
// that reaches them until one release, so the batch is provoked, not hoped
// for; the process is then killed, as by kill -9, right after that batch
// commits or while it is held, and the ledger and journal are read back.
import { expect } from 'chai';
import {
  type Authorization,
  type Executor,
  type Home,
  authorize,
  executeBody,
  journalEntries,
  makeHome,
  notesFor,
  provisioned,
  reachedPause,
  removeHome,
  sqlite,
  startExecutor,
  stopExecutor,
} from './helpers.js';
import { codeOfAnswer as codeOf } from '../helpers/codes.js';
import { eventually } from '../helpers/eventually.js';

const IN_FLIGHT = 4;

describe('executor-proc grouped claims and reports', function () {
  this.timeout(30_000);
  let home: Home;
  let identity: Executor['identity'];

  beforeEach(async () => {
    home = makeHome();
    identity = await provisioned(home);
  });

  afterEach(() => removeHome(home));

  /** Send IN_FLIGHT executes at once and wait until every one is held at `cutpoint`; then release it, unless `held`. */
  async function holdAll(executor: Executor, cutpoint: string, held = false): Promise<{ auths: Authorization[]; answers: Array<Promise<string>> }> {
    const auths = Array.from({ length: IN_FLIGHT }, () => authorize({ identity }));
    const answers = auths.map((auth) => codeOf(executor.channel.request('execute', executeBody(auth))));
    const release = await reachedPause(home, cutpoint);
    await eventually(() => executor.stderr.filter((line) => line.includes('"fault_held"') && line.includes(cutpoint)).length === IN_FLIGHT, 10_000, `${IN_FLIGHT} operations held at ${cutpoint}`);
    if (!held) release();
    return { auths, answers };
  }

  const claimsOf = () => sqlite(home.ledgerFile, "SELECT operation_id FROM claims WHERE kind = 'claim'").rows.map((row) => row.operation_id);
  const reportsOf = () => sqlite(home.ledgerFile, 'SELECT operation_id FROM reports').rows.map((row) => row.operation_id);

  /** No line of the journal belongs to an operation without a durable claim. */
  function everyEffectClaimed(): void {
    const claimed = new Set(claimsOf());
    for (const entry of journalEntries(home)) if (entry.operation_id !== undefined) expect(claimed.has(entry.operation_id), `effect of ${entry.operation_id} has a claim`).to.equal(true);
  }

  it('claims asked for together commit in one transaction, and every operation still completes once', async () => {
    const executor = await startExecutor(home, { faults: ['pause_claims_together'] });
    const { auths, answers } = await holdAll(executor, 'pause_claims_together');
    expect(await Promise.all(answers)).to.deep.equal(auths.map(() => 'answered'));
    const stats = (await executor.channel.request('stats', {})) as { commit_batches: Array<{ store: string; size: number; count: number }> };
    await stopExecutor(executor);
    // One transaction carried all the claims; without grouping every batch has size 1.
    expect(stats.commit_batches.some((batch) => batch.store === 'ledger' && batch.size >= IN_FLIGHT)).to.equal(true);
    for (const auth of auths) expect(notesFor(home, auth.operationId)).to.have.length(1);
    expect(reportsOf().sort()).to.deep.equal(auths.map((auth) => auth.operationId).sort());
  });

  it('killed right after a batch of claims commits: every claim is on disk, no effect ran, and each is outcome_unknown then reconciled not applied', async () => {
    const executor = await startExecutor(home, { faults: ['pause_claims_together', 'after_claim'] });
    const { auths, answers } = await holdAll(executor, 'pause_claims_together');
    for (const code of await Promise.all(answers)) expect(code).to.be.oneOf(['peer_exited', 'channel_closed']);
    expect((await executor.exited).signal).to.equal('SIGKILL');
    // The cutpoint fires after the first commit: all four on disk prove they shared it.
    expect(claimsOf().sort()).to.deep.equal(auths.map((auth) => auth.operationId).sort());
    expect(reportsOf()).to.deep.equal([]);
    expect(journalEntries(home)).to.deep.equal([]);

    const next = await startExecutor(home);
    for (const auth of auths) {
      expect(await codeOf(next.channel.request('execute', executeBody(auth)))).to.equal('outcome_unknown');
      const reconciled = await next.channel.request('reconcile_operation', { authorization: auth.text, expected: auth.expected });
      expect(reconciled.status).to.equal('reconciled_not_applied');
    }
    await stopExecutor(next);
    for (const auth of auths) expect(notesFor(home, auth.operationId)).to.have.length(0);
  });

  it('killed while a batch of reports is held: every effect has its claim, none is reported, and each is outcome_unknown then reconciled applied', async () => {
    const executor = await startExecutor(home, { faults: ['pause_reports_together'] });
    // Never released: the kill lands while all four effects have run and their reports wait for their transaction.
    const { auths, answers } = await holdAll(executor, 'pause_reports_together', true);
    for (const auth of auths) expect(notesFor(home, auth.operationId), 'the effect ran before the hold').to.have.length(1);
    executor.process.kill('SIGKILL');
    for (const code of await Promise.all(answers)) expect(code).to.be.oneOf(['peer_exited', 'channel_closed']);
    await executor.exited;
    everyEffectClaimed();
    expect(reportsOf(), 'no report was written').to.deep.equal([]);

    const next = await startExecutor(home);
    for (const auth of auths) {
      expect(await codeOf(next.channel.request('execute', executeBody(auth)))).to.equal('outcome_unknown');
      const reconciled = await next.channel.request('reconcile_operation', { authorization: auth.text, expected: auth.expected });
      expect(reconciled.status).to.equal('reconciled_applied');
    }
    await stopExecutor(next);
    for (const auth of auths) expect(notesFor(home, auth.operationId)).to.have.length(1);
  });

  it('killed right after a batch of reports commits: every report is on disk and replays byte for byte', async () => {
    const executor = await startExecutor(home, { faults: ['pause_reports_together', 'after_report'] });
    const { auths, answers } = await holdAll(executor, 'pause_reports_together');
    for (const code of await Promise.all(answers)) expect(code).to.be.oneOf(['peer_exited', 'channel_closed']);
    expect((await executor.exited).signal).to.equal('SIGKILL');
    everyEffectClaimed();
    // Killed after the first report commit, and no answer left: all four in it.
    expect(reportsOf().sort()).to.deep.equal(auths.map((auth) => auth.operationId).sort());
    const next = await startExecutor(home);
    for (const auth of auths) {
      const retained = sqlite(home.ledgerFile, `SELECT report FROM reports WHERE operation_id = '${auth.operationId}'`).rows[0]?.report;
      expect(await next.channel.request('execute', executeBody(auth))).to.deep.equal({ report: retained, status: 'completed', replayed: true });
    }
    await stopExecutor(next);
    for (const auth of auths) expect(notesFor(home, auth.operationId)).to.have.length(1);
  });
});
