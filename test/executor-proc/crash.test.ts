// The executor rows of the crash matrix (ARCHITECTURE.md §6.3): the process dies, as
// by kill -9, at a cutpoint; a new process on the same directory proves one
// effect at most, outcome_unknown instead of a second run, reconciliation
// that tells the truth, and byte-identical replays.
import { expect } from 'chai';
import {
  type Executor,
  type Home,
  authorize,
  executeBody,
  fencesFor,
  makeHome,
  notesFor,
  provisioned,
  reachedPause,
  reapKilled,
  removeHome,
  sqlite,
  startExecutor,
  stopExecutor,
} from './helpers.js';
import { codeOfAnswer as codeOf } from '../helpers/codes.js';
import { eventually } from '../helpers/eventually.js';


describe('executor-proc crash matrix', function () {
  this.timeout(30_000);
  let home: Home;
  let identity: Executor['identity'];

  beforeEach(async () => {
    home = makeHome();
    identity = await provisioned(home);
  });

  afterEach(() => removeHome(home));

  /** Execute once with a cutpoint armed; the process must die there. */
  async function crashAt(cutpoint: string, auth = authorize({ identity })): Promise<typeof auth> {
    const executor = await startExecutor(home, { faults: [cutpoint] });
    const answer = executor.channel.request('execute', executeBody(auth));
    expect(await codeOf(answer)).to.be.oneOf(['peer_exited', 'channel_closed']);
    const exit = await executor.exited;
    expect(exit.signal).to.equal('SIGKILL');
    await reapKilled(home, executor);
    return auth;
  }

  it('replays the report byte for byte after a reopen, with exactly one journal line', async () => {
    const auth = authorize({ identity });
    let executor = await startExecutor(home);
    const first = await executor.channel.request('execute', executeBody(auth));
    await stopExecutor(executor);
    executor = await startExecutor(home);
    const second = await executor.channel.request('execute', executeBody(auth));
    await stopExecutor(executor);
    expect(second.report).to.equal(first.report);
    expect(second.replayed).to.equal(true);
    expect(notesFor(home, auth.operationId)).to.have.length(1);
  });

  it('after a crash between claim and effect: outcome_unknown across restarts, never an effect, and reconciliation says not_applied', async () => {
    const auth = await crashAt('after_claim');
    for (let restart = 0; restart < 2; restart += 1) {
      const executor = await startExecutor(home);
      expect(await codeOf(executor.channel.request('execute', executeBody(auth)))).to.equal('outcome_unknown');
      await stopExecutor(executor);
    }
    expect(notesFor(home, auth.operationId)).to.have.length(0);
    const executor = await startExecutor(home);
    const reconciled = await executor.channel.request('reconcile_operation', { authorization: auth.text, expected: auth.expected });
    expect(reconciled.status).to.equal('reconciled_not_applied');
    expect(fencesFor(home, auth.operationId)).to.have.length(1);
    // The observation is now the operation's report: replayed, never re-run.
    const replay = await executor.channel.request('execute', executeBody(auth));
    expect(replay).to.deep.equal({ report: reconciled.report, status: 'reconciled_not_applied', replayed: true });
    await stopExecutor(executor);
    expect(notesFor(home, auth.operationId)).to.have.length(0);
  });

  it('after a crash between effect and report: outcome_unknown, then reconciliation says applied with the appended line', async () => {
    const auth = await crashAt('after_effect');
    expect(notesFor(home, auth.operationId)).to.have.length(1);
    const executor = await startExecutor(home);
    expect(await codeOf(executor.channel.request('execute', executeBody(auth)))).to.equal('outcome_unknown');
    const reconciled = await executor.channel.request('reconcile_operation', { authorization: auth.text, expected: auth.expected });
    expect(reconciled.status).to.equal('reconciled_applied');
    const body = JSON.parse(reconciled.report) as { body: { output: unknown; claimed_at: number } };
    expect(body.body.output).to.deep.equal(notesFor(home, auth.operationId)[0]);
    expect(body.body.claimed_at).to.be.a('number');
    const again = await executor.channel.request('reconcile_operation', { authorization: auth.text, expected: auth.expected });
    expect(again.report).to.equal(reconciled.report);
    await stopExecutor(executor);
    expect(notesFor(home, auth.operationId)).to.have.length(1);
    expect(fencesFor(home, auth.operationId)).to.have.length(0);
  });

  it('after a crash between report commit and reply: the next execute returns the retained report', async () => {
    const auth = await crashAt('after_report');
    const retained = sqlite(home.ledgerFile, `SELECT report FROM reports WHERE operation_id = '${auth.operationId}'`).rows[0]?.report;
    const executor = await startExecutor(home);
    const replay = await executor.channel.request('execute', executeBody(auth));
    await stopExecutor(executor);
    expect(replay.report).to.equal(retained);
    expect(replay.status).to.equal('completed');
    expect(notesFor(home, auth.operationId)).to.have.length(1);
  });

  it('an adapter host killed mid-effect leaves outcome_unknown; a fresh host serves the next call and reconciles', async () => {
    const executor = await startExecutor(home, { faults: ['pause_before_effect'] });
    const auth = authorize({ identity });
    const pending = executor.channel.request('execute', executeBody(auth));
    await reachedPause(home, 'pause_before_effect');
    await eventually(() => executor.stderr.some((line) => line.includes('"adapter_host_ready"')), 3000, 'adapter_host_ready logged');
    const ready = executor.stderr.find((line) => line.includes('"adapter_host_ready"'));
    const hostPid = (JSON.parse(ready ?? '{}') as { host_pid?: number }).host_pid;
    expect(hostPid).to.be.a('number');
    process.kill(hostPid!, 'SIGKILL');
    expect(await codeOf(pending)).to.equal('outcome_unknown');
    const next = authorize({ identity });
    expect((await executor.channel.request('execute', executeBody(next))).status).to.equal('completed');
    const reconciled = await executor.channel.request('reconcile_operation', { authorization: auth.text, expected: auth.expected });
    expect(reconciled.status).to.equal('reconciled_not_applied');
    await stopExecutor(executor);
    expect(notesFor(home, auth.operationId)).to.have.length(0);
    expect(notesFor(home, next.operationId)).to.have.length(1);
  });

  it('drop_reply exits 75 after retaining the report, and the next execute returns the identical report', async () => {
    const auth = authorize({ identity });
    let executor = await startExecutor(home);
    expect(await codeOf(executor.channel.request('execute', executeBody(auth, { drop_reply: true })))).to.be.oneOf(['peer_exited', 'channel_closed']);
    expect((await executor.exited).code).to.equal(75);
    await reapKilled(home, executor);
    const retained = sqlite(home.ledgerFile, `SELECT report FROM reports WHERE operation_id = '${auth.operationId}'`).rows[0]?.report;
    expect(retained).to.be.a('string');
    executor = await startExecutor(home);
    const replay = await executor.channel.request('execute', executeBody(auth));
    await stopExecutor(executor);
    expect(replay).to.deep.equal({ report: retained, status: 'completed', replayed: true });
    expect(notesFor(home, auth.operationId)).to.have.length(1);
  });
});
