import { expect } from 'chai';
import { decodeArtifact } from '../../shared/artifacts/artifact.js';
import type { RequestOf, ResultOf } from '../../shared/protocol/messages.js';
import { KernelProcess, KernelRoot, TOOL, grantBody, holdOf, pinBody, reserveBody, testExecutor, verifyReceipt, refused } from './helpers.js';

async function until(check: () => boolean, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error('condition not reached in time');
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

describe('kernel-proc: start', function () {
  this.timeout(20_000);
  const root = new KernelRoot();
  const executor = testExecutor(21);
  let kernel: KernelProcess;
  let mainGrant: string;

  const reserve = (id: string, overrides: Partial<RequestOf<'reserve'>> = {}) =>
    kernel.request('reserve', reserveBody(id, { capability_id: mainGrant, ...overrides }));
  const startOf = (reserved: ResultOf<'reserve'>, id: string, note = `note for ${id}`) =>
    kernel.request('start', { request_id: id, nonce_id: reserved.nonce!.id, arguments: { note } });
  const receiptsOf = (operationId: string) => root.read<{ decision: string; reason: string; state: string }>(
    'SELECT decision, reason, state FROM receipts WHERE operation_id = ? ORDER BY seq',
    operationId,
  );

  before(async () => {
    kernel = await KernelProcess.start(root, { mode: 'provision', settings: { sweep_interval_ms: 20, history_per_operation: 5, max_request_bytes: 512 } });
    await kernel.request('executor.pin', pinBody(executor));
    mainGrant = (await kernel.request('grant.add', grantBody(TOOL, { max_invocations: 1000 }))).capability_id;
  });
  after(async () => {
    await kernel.stop();
    root.remove();
  });

  it('commits the start and signs an authorization addressed to the pinned executor, binding the reserved invocation', async () => {
    const reserved = await reserve('s-allow');
    const started = await startOf(reserved, 's-allow');
    expect(started).to.include({ verdict: 'allow', reason: 'ok', state: 'dispatch_committed', receipt: null });
    expect(started.expected).to.deep.equal(reserved.expected);
    const authorization = decodeArtifact('authorization', started.authorization!, { trustedSigners: [root.publicKey] }).body;
    expect(authorization.executor).to.deep.equal({ id: executor.id, public_key: executor.publicKey, key_epoch: 1 });
    expect(authorization.invocation).to.deep.equal(reserved.expected);
    expect(authorization.committed).to.deep.equal({ nonce_id: reserved.nonce!.id, budget_hold_id: `hold:${reserved.operation_id}` });
    expect(authorization.expires_at - authorization.not_before).to.equal(120_000);
    expect(root.read('SELECT state FROM nonces WHERE operation_id = ?', reserved.operation_id)).to.deep.equal([{ state: 'used' }]);
    expect(holdOf(root, reserved.operation_id)!.state).to.equal('reserved');
  });

  it('returns the retained authorization, byte for byte, to a retried start', async () => {
    const reserved = await reserve('s-retry');
    const first = await startOf(reserved, 's-retry');
    const second = await startOf(reserved, 's-retry');
    expect(JSON.stringify(second)).to.equal(JSON.stringify(first));
  });

  it('refuses an operation it never reserved: operation_unknown', async () => {
    const refusal = await refused(kernel.request('start', { request_id: 'never-reserved', nonce_id: 'n-x', arguments: {} }));
    expect(refusal.code).to.equal('operation_unknown');
  });

  it('denies a nonce that is not the reservation\'s: nonce_unknown, start_denied, the hold released in the same decision', async () => {
    const reserved = await reserve('s-unknown');
    const denied = await kernel.request('start', { request_id: 's-unknown', nonce_id: 'n-forged', arguments: { note: 'note for s-unknown' } });
    expect(denied).to.include({ verdict: 'deny', reason: 'nonce_unknown', state: 'start_denied', authorization: null });
    const receipt = verifyReceipt(denied.receipt!, root.publicKey);
    expect(receipt).to.include({ decision: 'start', reason: 'nonce_unknown', state: 'start_denied' });
    expect(receipt.hold.disposition).to.equal('released');
    expect(holdOf(root, reserved.operation_id)).to.include({ state: 'released', settled_by: receipt.receipt_id });
    // The right nonce afterwards gets the refusal that ended it, and releases nothing again.
    const late = await startOf(reserved, 's-unknown');
    expect(late).to.include({ verdict: 'deny', reason: 'nonce_unknown', state: 'start_denied', receipt: denied.receipt });
    expect(receiptsOf(reserved.operation_id)).to.have.length(2);
  });

  it('denies arguments that changed since the reservation: arguments_changed, and the nonce is spent', async () => {
    const reserved = await reserve('s-changed');
    const denied = await startOf(reserved, 's-changed', 'a different note');
    expect(denied).to.include({ verdict: 'deny', reason: 'arguments_changed', state: 'start_denied' });
    expect(holdOf(root, reserved.operation_id)!.state).to.equal('released');
    expect(root.read('SELECT state FROM nonces WHERE operation_id = ?', reserved.operation_id)).to.deep.equal([{ state: 'voided' }]);
    const original = await startOf(reserved, 's-changed');
    expect(original).to.include({ verdict: 'deny', reason: 'arguments_changed', receipt: denied.receipt, authorization: null });
  });

  it('denies a start once the grant was revoked after the reservation: capability_revoked', async () => {
    const grant = await kernel.request('grant.add', grantBody(TOOL));
    const reserved = await reserve('s-revoked', { capability_id: grant.capability_id });
    await kernel.request('grant.revoke', { capability_id: grant.capability_id });
    const denied = await startOf(reserved, 's-revoked');
    expect(denied).to.include({ verdict: 'deny', reason: 'capability_revoked', state: 'start_denied' });
    expect(holdOf(root, reserved.operation_id)!.state).to.equal('released');
  });

  it('refuses a second start with other arguments on the same nonce: nonce_reused, and changes nothing', async () => {
    const reserved = await reserve('s-reused');
    const started = await startOf(reserved, 's-reused');
    const refusal = await startOf(reserved, 's-reused', 'another note');
    expect(refusal).to.include({ verdict: 'deny', reason: 'nonce_reused', state: 'dispatch_committed', authorization: null });
    expect(verifyReceipt(refusal.receipt!, root.publicKey).hold.disposition).to.equal('reserved');
    expect(holdOf(root, reserved.operation_id)!.state).to.equal('reserved');
    expect(JSON.stringify(await startOf(reserved, 's-reused', 'another note'))).to.equal(JSON.stringify(refusal));
    expect(JSON.stringify(await startOf(reserved, 's-reused'))).to.equal(JSON.stringify(started));
  });

  it('keeps refusals that change nothing only while history room is left: at history_per_operation, then history_full', async () => {
    // history_per_operation is 5: the reserve receipt, room for `unknown` and a settlement, and two refusals.
    const reserved = await reserve('s-history');
    await startOf(reserved, 's-history');
    expect((await startOf(reserved, 's-history', 'one')).reason).to.equal('nonce_reused');
    expect((await startOf(reserved, 's-history', 'two')).reason).to.equal('nonce_reused');
    const full = await refused(startOf(reserved, 's-history', 'three'));
    expect(full.code).to.equal('history_full');
    expect(receiptsOf(reserved.operation_id)).to.have.length(3);
    // The reserved room is still there: the operation can be marked unknown and settled.
    const marked = await kernel.request('mark_unknown', { operation_id: reserved.operation_id, reason: 'test' });
    expect(marked.operation.state).to.equal('unknown');
    expect(receiptsOf(reserved.operation_id)).to.have.length(4);
  });

  it('opens a window of execution_window_ms, cut short at the grant\'s expiry', async () => {
    const grant = await kernel.request('grant.add', grantBody(TOOL, { ttl_ms: 30_000 }));
    const reserved = await reserve('s-window', { capability_id: grant.capability_id });
    const authorization = decodeArtifact('authorization', (await startOf(reserved, 's-window')).authorization!, { trustedSigners: [root.publicKey] }).body;
    const capability = decodeArtifact('capability', grant.capability, { trustedSigners: [root.publicKey] }).body;
    expect(authorization.expires_at).to.equal(capability.expires_at);
  });

  it('denies a start once the grant expired after the reservation: capability_expired', async () => {
    const grant = await kernel.request('grant.add', grantBody(TOOL, { ttl_ms: 10_000 }));
    const reserved = await reserve('s-grant-expired', { capability_id: grant.capability_id });
    root.advance(10_000);
    expect(await startOf(reserved, 's-grant-expired')).to.include({ verdict: 'deny', reason: 'capability_expired', state: 'start_denied' });
  });

  it('still starts a reservation a second before its nonce TTL ends', async () => {
    const reserved = await reserve('s-ttl-inside');
    root.advance(119_000);
    expect((await startOf(reserved, 's-ttl-inside')).verdict).to.equal('allow');
  });

  it('expires a reservation whose nonce ran out when a start arrives: the expiry receipt, nonce_expired, one release', async () => {
    const reserved = await reserve('s-expired');
    root.advance(120_000);
    const late = await startOf(reserved, 's-expired');
    expect(late).to.include({ verdict: 'deny', reason: 'nonce_expired', state: 'expired', authorization: null });
    const receipt = verifyReceipt(late.receipt!, root.publicKey);
    expect(receipt).to.include({ decision: 'expiry', state: 'expired' });
    expect(holdOf(root, reserved.operation_id)).to.include({ state: 'released', settled_by: receipt.receipt_id });
    expect(receiptsOf(reserved.operation_id).map((r) => r.decision)).to.deep.equal(['reserve', 'expiry']);
  });

  it('after the timer sweep expired a reservation, a late start gets the retained expiry receipt: one release, still expired (H1)', async () => {
    const reserved = await reserve('s-swept');
    root.advance(120_001);
    await until(() => root.read<{ state: string }>('SELECT state FROM operations WHERE operation_id = ?', reserved.operation_id)[0]!.state === 'expired');
    const expiry = (await kernel.request('operation.get', { operation_id: reserved.operation_id, request_id: null })).receipts[1];
    for (const note of ['note for s-swept', 'something else']) {
      const late = await startOf(reserved, 's-swept', note);
      expect(late).to.include({ verdict: 'deny', reason: 'nonce_expired', state: 'expired', receipt: expiry });
    }
    const holds = root.read('SELECT state, settled_by FROM holds WHERE operation_id = ?', reserved.operation_id);
    expect(holds).to.deep.equal([{ state: 'released', settled_by: verifyReceipt(expiry!, root.publicKey).receipt_id }]);
    expect(receiptsOf(reserved.operation_id).map((r) => `${r.decision}:${r.state}`)).to.deep.equal(['reserve:reserved', 'expiry:expired']);
    const view = (await kernel.request('operation.get', { operation_id: reserved.operation_id, request_id: null })).operation!;
    expect(view).to.include({ state: 'expired' });
    expect(view.hold).to.include({ disposition: 'released' });
  });

  it('refuses a start request past max_request_bytes: body_too_large, and the reservation stays', async () => {
    const reserved = await reserve('s-big');
    const refusal = await refused(startOf(reserved, 's-big', 'x'.repeat(600)));
    expect(refusal.code).to.equal('body_too_large');
    expect((await kernel.request('operation.get', { operation_id: reserved.operation_id, request_id: null })).operation!.state).to.equal('reserved');
  });
});
