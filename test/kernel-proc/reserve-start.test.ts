// reserve_start (docs/PROTOCOL.md §6): a reserve and the start naming its
// nonce, decided in one transaction. Each half answers what its own message
// answers, byte for byte, on the first ask and on every retry of either
// form; the two decisions are one write batch (the store head moves once);
// a kill -9 after that commit keeps both; a denied reserve has no start.
import { expect } from 'chai';
import { decodeArtifact } from '../../shared/artifacts/artifact.js';
import { bindRequest } from '../../shared/protocol/binding.js';
import type { RequestOf } from '../../shared/protocol/messages.js';
import { KernelProcess, KernelRoot, TOOL, grantBody, holdOf, pinBody, refused, reserveBody, testExecutor, verifyReceipt } from './helpers.js';

describe('kernel-proc: reserve_start', function () {
  this.timeout(30_000);
  const root = new KernelRoot();
  const executor = testExecutor(61);
  const other = testExecutor(62, 'exec-notes-only');
  let kernel: KernelProcess;
  let grant: string;

  /** The request as a host sends it: with its own binding of what it asks for. */
  const body = (id: string, overrides: Partial<RequestOf<'reserve_start'>> = {}): RequestOf<'reserve_start'> => {
    const request = { ...reserveBody(id, { capability_id: grant }), ...overrides };
    return { request_binding_hash: bindRequest(request).request_binding_hash, ...request };
  };
  const head = () => root.read<{ seq: number }>('SELECT seq FROM head')[0]!.seq;
  const stateOf = (operationId: string) => root.read<{ state: string }>('SELECT state FROM operations WHERE operation_id = ?', operationId)[0]?.state;

  before(async () => {
    kernel = await KernelProcess.start(root, { mode: 'provision' });
    await kernel.request('executor.pin', pinBody(executor));
    await kernel.request('executor.pin', pinBody(other, ['other/*']));
    grant = (await kernel.request('grant.add', grantBody(TOOL, { max_invocations: 1000 }))).capability_id;
  });
  after(async () => {
    await kernel.stop();
    root.remove();
  });

  it('reserves and starts in one write batch, each answer what its own message answers', async () => {
    const before = head();
    const answer = await kernel.request('reserve_start', body('rs-allow'));
    expect(head(), 'one write batch for both decisions').to.equal(before + 1);
    const { reserve: reserved, start: started } = answer;
    expect(reserved).to.include({ verdict: 'allow', reason: 'ok', state: 'reserved' });
    expect(started).to.include({ verdict: 'allow', reason: 'ok', state: 'dispatch_committed', receipt: null });
    const receipt = verifyReceipt(reserved.receipt!, root.publicKey);
    const authorization = decodeArtifact('authorization', started!.authorization!, { trustedSigners: [root.publicKey] }).body;
    expect(authorization.committed.nonce_id).to.equal(reserved.nonce!.id);
    expect(authorization.invocation).to.deep.equal(reserved.expected);
    expect(authorization.executor.id).to.equal(executor.id);
    expect(authorization.issued_at, 'decided at the same batch time').to.equal(receipt.issued_at);
    expect(stateOf(reserved.operation_id)).to.equal('dispatch_committed');
    expect(root.read('SELECT state FROM nonces WHERE operation_id = ?', reserved.operation_id)).to.deep.equal([{ state: 'used' }]);
    expect(holdOf(root, reserved.operation_id)!.state).to.equal('reserved');

    // Retries, in either form, get the same bytes; nothing new is written.
    const again = head();
    expect(JSON.stringify(await kernel.request('reserve_start', body('rs-allow')))).to.equal(JSON.stringify(answer));
    expect(JSON.stringify(await kernel.request('reserve', reserveBody('rs-allow', { capability_id: grant })))).to.equal(JSON.stringify(reserved));
    const alone = await kernel.request('start', { request_id: 'rs-allow', nonce_id: reserved.nonce!.id, arguments: reserveBody('rs-allow').arguments });
    expect(JSON.stringify(alone)).to.equal(JSON.stringify(started));
    expect(head()).to.equal(again);
  });

  it('answers a denied reserve with no start, and nothing dispatched', async () => {
    const answer = await kernel.request('reserve_start', body('rs-denied', { capability_id: null, tool: 'other/thing' }));
    expect(answer.start).to.equal(null);
    expect(answer.reserve).to.include({ verdict: 'deny', reason: 'capability_unknown', state: 'denied', nonce: null });
    expect(stateOf(answer.reserve.operation_id)).to.equal('denied');
    expect(root.read('SELECT count(*) AS n FROM nonces WHERE operation_id = ?', answer.reserve.operation_id)).to.deep.equal([{ n: 0 }]);
  });

  it('signs a start refusal in the same batch: an executor that does not serve the tool ends it start_denied, the hold released', async () => {
    const before = head();
    const answer = await kernel.request('reserve_start', body('rs-wrong-executor', { executor_id: other.id }));
    expect(head()).to.equal(before + 1);
    expect(answer.reserve.verdict).to.equal('allow');
    expect(answer.start).to.include({ verdict: 'deny', reason: 'tool_unknown', state: 'start_denied', authorization: null });
    expect(verifyReceipt(answer.start!.receipt!, root.publicKey)).to.include({ decision: 'start', state: 'start_denied' });
    expect(holdOf(root, answer.reserve.operation_id)!.state).to.equal('released');
  });

  it('does not start a reservation bound otherwise than the host logged: invocation_mismatch, start_denied, the hold released, no authorization', async () => {
    const before = head();
    const answer = await kernel.request('reserve_start', body('rs-unbound', { request_binding_hash: 'f'.repeat(64) }));
    expect(head()).to.equal(before + 1);
    expect(answer.reserve.verdict).to.equal('allow');
    expect(answer.start).to.include({ verdict: 'deny', reason: 'invocation_mismatch', state: 'start_denied', authorization: null });
    expect(verifyReceipt(answer.start!.receipt!, root.publicKey)).to.include({ decision: 'start', reason: 'invocation_mismatch', state: 'start_denied' });
    expect(holdOf(root, answer.reserve.operation_id)!.state).to.equal('released');
    expect(root.read('SELECT authorization FROM operations WHERE operation_id = ?', answer.reserve.operation_id)).to.deep.equal([{ authorization: null }]);
    // Asked again, the same refusal: nothing moves a terminal operation.
    expect(JSON.stringify(await kernel.request('reserve_start', body('rs-unbound', { request_binding_hash: 'f'.repeat(64) })))).to.equal(JSON.stringify(answer));
  });

  it('continues a reservation made by reserve alone: the start half starts it', async () => {
    const reserved = await kernel.request('reserve', reserveBody('rs-after-reserve', { capability_id: grant }));
    const answer = await kernel.request('reserve_start', body('rs-after-reserve'));
    expect(JSON.stringify(answer.reserve)).to.equal(JSON.stringify(reserved));
    expect(answer.start).to.include({ verdict: 'allow', state: 'dispatch_committed' });
  });

  it('refuses other request bytes under the same request id: request_conflict, nothing written', async () => {
    await kernel.request('reserve_start', body('rs-conflict'));
    const before = head();
    expect((await refused(kernel.request('reserve_start', body('rs-conflict', { arguments: { note: 'changed' } })))).code).to.equal('request_conflict');
    expect(head()).to.equal(before);
  });

  it('keeps both decisions through a kill -9 right after their commit; the retry gets them back', async () => {
    await kernel.stop();
    const armed = await KernelProcess.start(root, { faults: ['after_start_commit'] });
    await refused(armed.request('reserve_start', body('rs-crash')));
    await armed.reaped();
    expect(armed.stderr.some((line) => line.includes('"fault_injected"') && line.includes('after_start_commit'))).to.equal(true);
    kernel = await KernelProcess.start(root);
    const retry = await kernel.request('reserve_start', body('rs-crash'));
    expect(retry.start).to.include({ verdict: 'allow', state: 'dispatch_committed' });
    // A restart moves a committed start on to awaiting_report (kernel-proc/setup.ts); the authorization is the one kept.
    expect(stateOf(retry.reserve.operation_id)).to.equal('awaiting_report');
    expect(root.read('SELECT authorization FROM operations WHERE operation_id = ?', retry.reserve.operation_id)).to.deep.equal([{ authorization: retry.start!.authorization }]);
    expect(root.read<{ n: number }>('SELECT count(*) AS n FROM receipts WHERE operation_id = ?', retry.reserve.operation_id)).to.deep.equal([{ n: 1 }]);
  });
});
