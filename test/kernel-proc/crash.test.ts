// kill -9 after each commit (ARCHITECTURE.md §6.3, §12): the fault switch kills the
// kernel right after a transaction commits and before it answers; the test
// reaps it, starts a fresh kernel on the same directory and checks what the
// store kept and what a retry gets.
import { expect } from 'chai';
import { operationIdFor } from '../../shared/protocol/binding.js';
import { KernelProcess, KernelRoot, TOOL, grantBody, holdOf, pinBody, reserveBody, signReport, testExecutor, verifyReceipt, refused, ALL_GRANTS } from './helpers.js';

describe('kernel-proc: kill -9 after each commit, then a restart on the same directory', function () {
  this.timeout(30_000);
  const root = new KernelRoot();
  const executor = testExecutor(51);
  let kernel: KernelProcess;

  const get = async (requestId: string) => kernel.request('operation.get', { operation_id: null, request_id: requestId });
  const rows = (table: string, requestId: string) =>
    root.read<{ n: number }>(`SELECT count(*) AS n FROM ${table} WHERE operation_id = ?`, operationIdFor(requestId))[0]!.n;
  async function dispatch(id: string) {
    const reserved = await kernel.request('reserve', reserveBody(id));
    const started = await kernel.request('start', { request_id: id, nonce_id: reserved.nonce!.id, arguments: reserveBody(id).arguments });
    return { reserved, authorization: started.authorization! };
  }

  /** Restart armed with one cutpoint, run `action` until the kernel dies there, reap it, restart clean. */
  async function crashAt(cutpoint: string, action: (armed: KernelProcess) => Promise<unknown>): Promise<void> {
    await kernel.stop();
    const armed = await KernelProcess.start(root, { faults: [cutpoint] });
    await refused(action(armed));
    await armed.reaped();
    expect(armed.stderr.some((line) => line.includes('"fault_injected"') && line.includes(cutpoint)), `died at ${cutpoint}`).to.equal(true);
    kernel = await KernelProcess.start(root);
  }

  before(async () => {
    kernel = await KernelProcess.start(root, { mode: 'provision' });
    await kernel.request('executor.pin', pinBody(executor));
    await kernel.request('grant.add', grantBody(TOOL));
  });
  after(async () => {
    await kernel.stop();
    root.remove();
  });

  it('after the reserve commit: the retry gets the retained reservation, and there is one of everything', async () => {
    await crashAt('after_reserve_commit', (armed) => armed.request('reserve', reserveBody('c-reserve')));
    const retained = (await get('c-reserve')).receipts;
    const retry = await kernel.request('reserve', reserveBody('c-reserve'));
    expect(retry).to.include({ verdict: 'allow', state: 'reserved', receipt: retained[0] });
    verifyReceipt(retry.receipt!, root.publicKey);
    expect([rows('operations', 'c-reserve'), rows('holds', 'c-reserve'), rows('nonces', 'c-reserve'), rows('receipts', 'c-reserve')]).to.deep.equal([1, 1, 1, 1]);
    const started = await kernel.request('start', { request_id: 'c-reserve', nonce_id: retry.nonce!.id, arguments: reserveBody('c-reserve').arguments });
    expect(started.verdict).to.equal('allow');
  });

  it('inside the reserve transaction: nothing of it was kept, and the retry reserves afresh', async () => {
    await crashAt('inside_reserve_transaction', (armed) => armed.request('reserve', reserveBody('c-inside')));
    expect(rows('operations', 'c-inside')).to.equal(0);
    expect((await kernel.request('reserve', reserveBody('c-inside'))).verdict).to.equal('allow');
  });

  it('after the start commit: the operation is awaiting_report, a retry gets the retained authorization, the original report completes it', async () => {
    const reserved = await kernel.request('reserve', reserveBody('c-start'));
    const start = { request_id: 'c-start', nonce_id: reserved.nonce!.id, arguments: reserveBody('c-start').arguments };
    await crashAt('after_start_commit', (armed) => armed.request('start', start));
    const view = (await get('c-start')).operation!;
    expect(view.state).to.equal('awaiting_report');
    const retry = await kernel.request('start', start);
    expect(retry).to.include({ verdict: 'allow', state: 'dispatch_committed', authorization: view.authorization });
    expect((await get('c-start')).operation!.window).to.deep.equal(view.window);
    expect((await kernel.request('recover', { limit: 100, after: null })).operations.map((op) => op.request_id)).to.include('c-start');
    const settled = await kernel.request('settle', { authorization: retry.authorization!, report: signReport(executor, retry.authorization!, root.publicKey) });
    expect(settled.state).to.equal('completed');
  });

  it('after the reconcile commit: a repeated reconcile returns the byte-identical completion receipt', async () => {
    const { authorization } = await dispatch('c-reconcile');
    const body = { authorization, report: signReport(executor, authorization, root.publicKey) };
    await crashAt('after_settle_commit', (armed) => armed.request('settle', body));
    const kept = (await get('c-reconcile')).operation!;
    expect(kept.state).to.equal('completed');
    const first = await kernel.request('settle', body);
    expect(first.receipt).to.equal(kept.last_receipt);
    expect(JSON.stringify(await kernel.request('settle', body))).to.equal(JSON.stringify(first));
    expect(holdOf(root, operationIdFor('c-reconcile'))!.state).to.equal('consumed');
  });

  it('after the mark_unknown commit: the operation stays unknown with its hold, and the report still settles it', async () => {
    const { reserved, authorization } = await dispatch('c-unknown');
    await crashAt('after_mark_unknown_commit', (armed) => armed.request('mark_unknown', { operation_id: reserved.operation_id, reason: 'test' }));
    const view = (await get('c-unknown')).operation!;
    expect(view.state).to.equal('unknown');
    expect(view.hold).to.include({ disposition: 'reserved' });
    const settled = await kernel.request('settle', { authorization, report: signReport(executor, authorization, root.publicKey) });
    expect(settled.state).to.equal('completed');
  });

  it('after the expiry sweep commit: expired once, released once, and a late start gets the expiry receipt', async () => {
    const reserved = await kernel.request('reserve', reserveBody('c-sweep'));
    root.advance(120_001);
    await crashAt('after_sweep_commit', (armed) => armed.request('operation.get', { operation_id: null, request_id: 'c-sweep' }));
    const { operation, receipts } = await get('c-sweep');
    expect(operation!.state).to.equal('expired');
    const late = await kernel.request('start', { request_id: 'c-sweep', nonce_id: reserved.nonce!.id, arguments: reserveBody('c-sweep').arguments });
    expect(late).to.include({ reason: 'nonce_expired', state: 'expired', receipt: receipts[1] });
    expect(holdOf(root, reserved.operation_id)).to.include({ state: 'released', settled_by: verifyReceipt(receipts[1]!, root.publicKey).receipt_id });
  });

  it('a plain kill -9 with a committed start: awaiting_report after the restart, and the original report completes it (§6.3)', async () => {
    const { authorization } = await dispatch('c-kill');
    const report = signReport(executor, authorization, root.publicKey);
    await kernel.kill();
    kernel = await KernelProcess.start(root);
    expect((await get('c-kill')).operation!.state).to.equal('awaiting_report');
    const settled = await kernel.request('settle', { authorization, report });
    expect(settled).to.include({ verdict: 'allow', state: 'completed' });
  });

  it('after the recovery commit at startup: the committed start is awaiting_report on the next start too', async () => {
    await dispatch('c-recovery');
    await kernel.stop();
    const refusal = await KernelProcess.diesBeforeHello(root, { faults: ['after_recovery_commit'] });
    expect(refusal.code).to.be.oneOf(['peer_exited', 'channel_closed']);
    kernel = await KernelProcess.start(root);
    expect((await get('c-recovery')).operation!.state).to.equal('awaiting_report');
  });
});

describe('kernel-proc: kill -9 right after provisioning commits', function () {
  this.timeout(20_000);
  const root = new KernelRoot();
  after(() => root.remove());

  it('leaves a complete kernel that serves, with its default grant, and refuses a second provisioning', async () => {
    const refusal = await KernelProcess.diesBeforeHello(root, { mode: 'provision', faults: ['after_provision_commit'] });
    expect(refusal.code).to.be.oneOf(['peer_exited', 'channel_closed']);
    const kernel = await KernelProcess.start(root);
    expect((await kernel.request('grant.list', ALL_GRANTS)).grants).to.have.length(1);
    await kernel.stop();
    expect((await KernelProcess.refusal(root, { mode: 'provision' })).code).to.equal('store_exists');
  });
});
