// Adapters as an operator adds them (--adapter module): contained output,
// cooperative cancel, deadlines, and reconciliation bounded per tool.
import { expect } from 'chai';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { type Executor, type Home, authorize, executeBody, makeHome, provisioned, removeHome, sqlite, startExecutor, stopExecutor } from './helpers.js';
import { codeOfAnswer as codeOf, refusalOf } from '../helpers/codes.js';
import { eventually } from '../helpers/eventually.js';

/** Long enough that three quick asks fall in one window, short enough to wait out. */
const RECONCILE_WINDOW_MS = 2_000;

/** The `line` of each adapter_output event the executor logged. */
function adapterOutput(executor: Executor): Array<{ line: string; dropped_bytes?: number }> {
  return executor.stderr
    .filter((line) => line.includes('"adapter_output"'))
    .map((line) => JSON.parse(line) as { line: string; dropped_bytes?: number });
}

async function claimed(executor: Executor, operationId: string): Promise<void> {
  for (let i = 0; i < 500; i += 1) {
    if ((await executor.channel.request('claims.get', { operation_id: operationId })).claim) return;
    await sleep(5);
  }
  throw new Error(`operation ${operationId} was never claimed`);
}

describe('executor-proc adapters', function () {
  this.timeout(30_000);
  let home: Home;
  let executor: Executor;

  before(async () => {
    home = makeHome();
    await provisioned(home);
    executor = await startExecutor(home, {
      settings: { adapter_deadlines: { 'fixture/sleep': 300 }, reconcile_per_tool: 2, reconcile_window_ms: RECONCILE_WINDOW_MS, cancel_wait_ms: 2_000 },
    });
  });

  after(async () => {
    await stopExecutor(executor);
    removeHome(home);
  });

  it('keeps everything an adapter and its subprocesses print off the frame channel and in the log', async () => {
    const auth = authorize(executor, { tool: 'fixture/chatty', args: { words: 2_000 } });
    const result = await executor.channel.request('execute', executeBody(auth));
    expect(result.status).to.equal('completed');
    // The channel is intact: more requests, more effects.
    expect((await executor.channel.request('ping', {})).now).to.be.a('number');
    const next = authorize(executor);
    expect((await executor.channel.request('execute', executeBody(next))).status).to.equal('completed');
    await sleep(600);
    expect(executor.channel.state).to.equal('open');
    const lines = adapterOutput(executor).map((event) => event.line);
    for (const expected of [
      'console.log from the chatty adapter',
      'console.error from the chatty adapter',
      'process.stdout.write from the chatty adapter',
      'raw write to fd 1 from the chatty adapter',
      'spawnSync child says hello on stdout',
      'execSync child output',
      'late output from a detached subprocess',
    ]) {
      expect(lines, expected).to.include(expected);
    }
    expect(lines.filter((line) => line === 'chatty-subprocess-line')).to.have.length(2_000);
    const long = adapterOutput(executor).find((event) => event.line.startsWith('xxxx'));
    expect(long?.line.length).to.equal(2048);
    expect(long?.dropped_bytes).to.equal(300_000 - 2048);
  });

  it('acknowledges a cancel only once a cancellable adapter stopped; the report says failed_before_effect', async () => {
    const auth = authorize(executor, { tool: 'fixture/hang', args: {} });
    const pending = executor.channel.request('execute', executeBody(auth), { id: 'hang-1' });
    await claimed(executor, auth.operationId);
    // The claim is durable before the effect starts (the witness wait comes between): cancel the running effect.
    await eventually(() => adapterOutput(executor).some((event) => event.line === 'fixture/hang started'), 20_000, 'the hang adapter running');
    expect(await executor.channel.request('cancel', { target: 'hang-1' })).to.deep.equal({ cancelled: true });
    const result = await pending;
    expect(result.status).to.equal('failed_before_effect');
    expect((JSON.parse(result.report) as { body: { output: unknown } }).body.output).to.deep.equal({ cancelled: true });
  });

  it('refuses to cancel an adapter that is not cancellable, and lets it finish', async () => {
    const latch = path.join(home.dir, 'latch.open');
    const auth = authorize(executor, { tool: 'fixture/latch', args: { path: latch } });
    const pending = executor.channel.request('execute', executeBody(auth), { id: 'latch-1' });
    await eventually(() => adapterOutput(executor).some((event) => event.line === 'fixture/latch started'), 20_000, 'the latch adapter running');
    // The effect is running and cannot end before the latch opens: the refusal is about a running call.
    expect(await codeOf(executor.channel.request('cancel', { target: 'latch-1' }))).to.equal('not_cancellable');
    writeFileSync(latch, '');
    const result = await pending;
    expect(result.status).to.equal('completed');
    expect((JSON.parse(result.report) as { body: { output: unknown } }).body.output).to.deep.equal({ opened: latch });
    expect(await executor.channel.request('cancel', { target: 'latch-1' })).to.deep.equal({ cancelled: false });
  });

  it('answers adapter_still_running at the adapter deadline, then outcome_unknown, and retains the report when the effect ends later', async () => {
    const auth = authorize(executor, { tool: 'fixture/sleep', args: { ms: 800 } });
    expect(await codeOf(executor.channel.request('execute', executeBody(auth)))).to.equal('adapter_still_running');
    expect(await codeOf(executor.channel.request('execute', executeBody(auth)))).to.equal('outcome_unknown');
    await sleep(900);
    const replay = await executor.channel.request('execute', executeBody(auth));
    expect(replay.status).to.equal('completed');
    expect(replay.replayed).to.equal(true);
  });

  it('answers indeterminate when the adapter cannot tell, keeps the claim, and bounds reconciliation per tool', async () => {
    const auth = authorize(executor, { tool: 'fixture/unsure', args: {} });
    expect(await codeOf(executor.channel.request('execute', executeBody(auth)))).to.equal('outcome_unknown');
    const ask = () => executor.channel.request('reconcile_operation', { authorization: auth.text, expected: auth.expected });
    expect(await codeOf(ask())).to.equal('indeterminate');
    expect(await codeOf(ask())).to.equal('indeterminate');
    expect(await codeOf(ask())).to.equal('reconcile_budget_exhausted');
    const view = sqlite(home.ledgerFile, `SELECT state FROM claims_view WHERE operation_id = '${auth.operationId}'`).rows;
    expect(view).to.deep.equal([{ state: 'outcome_unknown' }]);
  });

  it('refills the reconcile bound as its window slides, in the same session, at the time its refusal names', async () => {
    const auth = authorize(executor, { tool: 'fixture/later', args: {} });
    expect(await codeOf(executor.channel.request('execute', executeBody(auth)))).to.equal('outcome_unknown');
    const ask = () => executor.channel.request('reconcile_operation', { authorization: auth.text, expected: auth.expected });
    expect(await codeOf(ask())).to.equal('indeterminate');
    expect(await codeOf(ask())).to.equal('indeterminate');
    const refused = await refusalOf(ask());
    expect(refused.code).to.equal('reconcile_budget_exhausted');
    expect(refused.message).to.match(/tool fixture\/later made 2 in the last 2000 ms \(reconcile_per_tool 2\)/);
    const waitMs = Number(/allowed in (\d+) ms/.exec(refused.message)?.[1]);
    expect(waitMs).to.be.within(1, RECONCILE_WINDOW_MS);
    // A supervisor that backs off as told is asked again, not starved for the rest of the session.
    await sleep(waitMs + 50);
    expect(await codeOf(ask())).to.equal('indeterminate');
    await eventually(() => executor.stderr.filter((line) => line.includes('"reconcile_observed"') && line.includes(auth.operationId)).length === 3, 3000, 'three reconcile_observed lines');
  });

  it('closes an unclaimed authorization as never_claimed at once, window open, and never claims it afterwards', async () => {
    const auth = authorize(executor);
    const refusal = await executor.channel.request('reconcile_operation', { authorization: auth.text, expected: auth.expected });
    expect(refusal.status).to.equal('never_claimed');
    expect(await codeOf(executor.channel.request('execute', executeBody(auth)))).to.equal('never_claimed');
    const { claim } = await executor.channel.request('claims.get', { operation_id: auth.operationId });
    expect(claim).to.include({ kind: 'refusal', claimed_at: null, report_status: 'never_claimed', report: refusal.report });
  });
});
