import { expect } from 'chai';
import path from 'node:path';
import { decodeArtifact, signArtifact } from '../../shared/artifacts/artifact.js';
import type { Signer } from '../../shared/crypto/ed25519.js';
import { loadSigner } from '../../shared/crypto/key-files.js';
import type { AuthorizationBody, Envelope } from '../../shared/protocol/artifacts.js';
import type { RequestOf } from '../../shared/protocol/messages.js';
import {
  KernelProcess,
  KernelRoot,
  TOOL,
  type TestExecutor,
  grantBody,
  holdOf,
  pinBody,
  reserveBody,
  signReport,
  testExecutor,
  verifyReceipt,
  refused,
  ALL_GRANTS,
} from './helpers.js';

describe('kernel-proc: settle', function () {
  this.timeout(20_000);
  const root = new KernelRoot();
  const executor = testExecutor(31);
  const stranger = testExecutor(33);
  let kernel: KernelProcess;

  async function dispatch(id: string, overrides: Partial<RequestOf<'reserve'>> = {}) {
    const request = reserveBody(id, overrides);
    const reserved = await kernel.request('reserve', request);
    expect(reserved.verdict, reserved.reason).to.equal('allow');
    const started = await kernel.request('start', { request_id: id, nonce_id: reserved.nonce!.id, arguments: request.arguments });
    return { operationId: reserved.operation_id, authorization: started.authorization! };
  }
  const report = (signer: TestExecutor, authorization: string, overrides: Parameters<typeof signReport>[3] = {}) =>
    signReport(signer, authorization, root.publicKey, overrides);
  const stateOf = async (operationId: string) =>
    (await kernel.request('operation.get', { operation_id: operationId, request_id: null })).operation!.state;

  before(async () => {
    kernel = await KernelProcess.start(root, { mode: 'provision' });
    await kernel.request('executor.pin', pinBody(executor));
    await kernel.request('grant.add', grantBody(TOOL, { max_invocations: 1000 }));
  });
  after(async () => {
    await kernel.stop();
    root.remove();
  });

  it('walks one operation reserved → dispatch_committed → completed, with its hold and receipts after each step', async () => {
    const look = async () => kernel.request('operation.get', { operation_id: null, request_id: 'r-walk' });
    const reserved = await kernel.request('reserve', reserveBody('r-walk'));
    let got = await look();
    expect([got.operation!.state, got.operation!.hold!.disposition, got.receipts.length]).to.deep.equal(['reserved', 'reserved', 1]);
    const started = await kernel.request('start', { request_id: 'r-walk', nonce_id: reserved.nonce!.id, arguments: reserveBody('r-walk').arguments });
    got = await look();
    expect([got.operation!.state, got.operation!.hold!.disposition, got.receipts.length]).to.deep.equal(['dispatch_committed', 'reserved', 1]);
    expect(got.operation!.authorization).to.equal(started.authorization);
    await kernel.request('settle', { authorization: started.authorization!, report: report(executor, started.authorization!) });
    got = await look();
    expect([got.operation!.state, got.operation!.hold!.disposition, got.receipts.length]).to.deep.equal(['completed', 'consumed', 2]);
    expect(got.receipts.map((text) => verifyReceipt(text, root.publicKey).decision)).to.deep.equal(['reserve', 'completion']);
  });

  it('completes an operation on its executor\'s report: hold consumed, output delivered, a completion receipt', async () => {
    const { operationId, authorization } = await dispatch('r-complete');
    const settled = await kernel.request('settle', { authorization, report: report(executor, authorization, { output: { line: 'one' } }) });
    expect(settled).to.include({ verdict: 'allow', reason: 'ok', state: 'completed' });
    expect(settled.output).to.deep.equal({ line: 'one' });
    const receipt = verifyReceipt(settled.receipt!, root.publicKey);
    expect(receipt).to.include({ decision: 'completion', state: 'completed' });
    expect(receipt.hold).to.include({ disposition: 'consumed', invocations: 1 });
    expect(receipt.report_digest).to.be.a('string');
    expect(holdOf(root, operationId)).to.include({ state: 'consumed', settled_by: receipt.receipt_id });
  });

  it('answers a repeated reconcile with the byte-identical receipt', async () => {
    const { authorization } = await dispatch('r-repeat');
    const body = { authorization, report: report(executor, authorization) };
    const first = await kernel.request('settle', body);
    for (let i = 0; i < 3; i += 1) expect(JSON.stringify(await kernel.request('settle', body))).to.equal(JSON.stringify(first));
  });

  it('refuses another report for a settled operation: operation_terminal', async () => {
    const { authorization } = await dispatch('r-other-report');
    await kernel.request('settle', { authorization, report: report(executor, authorization) });
    const refusal = await refused(kernel.request('settle', { authorization, report: report(executor, authorization, { status: 'failed_before_effect', output: null }) }));
    expect(refusal.code).to.equal('operation_terminal');
  });

  it('refuses a report signed by another key: report_invalid, and the operation is untouched', async () => {
    const { operationId, authorization } = await dispatch('r-wrong-key');
    const refusal = await refused(kernel.request('settle', { authorization, report: report(stranger, authorization) }));
    expect(refusal.code).to.equal('report_invalid');
    expect(refusal.message).to.match(/signer_untrusted/);
    expect(await stateOf(operationId)).to.equal('dispatch_committed');
    expect(holdOf(root, operationId)!.state).to.equal('reserved');
    // The genuine report still settles it.
    expect((await kernel.request('settle', { authorization, report: report(executor, authorization) })).state).to.equal('completed');
  });

  it('refuses a report made for another authorization: report_invalid', async () => {
    const a = await dispatch('r-for-a');
    const b = await dispatch('r-for-b');
    const refusal = await refused(kernel.request('settle', { authorization: a.authorization, report: report(executor, b.authorization) }));
    expect(refusal.code).to.equal('report_invalid');
    expect(await stateOf(a.operationId)).to.equal('dispatch_committed');
  });

  it('refuses an authorization this kernel did not sign, or not the one it committed: authorization_invalid', async () => {
    const { authorization } = await dispatch('r-auth');
    const tampered = authorization.replace('"request_id":"r-auth"', '"request_id":"r-autH"');
    expect((await refused(kernel.request('settle', { authorization: tampered, report: report(executor, authorization) }))).code).to.equal('authorization_invalid');
  });

  // settle trusts an authorization byte-equal to the one retained without checking its signature again
  // (report-check.ts retainedAuthorization); every other text must still be refused, whoever signed it.
  describe('an authorization that is not byte for byte the retained one is refused: authorization_invalid', () => {
    const kernelSigner = () => loadSigner(path.join(root.dir, 'kernel.key'));
    const reEncoded = (text: string, change: (envelope: Envelope) => Envelope) => JSON.stringify(change(JSON.parse(text) as Envelope));
    const withBody = (text: string, change: (body: AuthorizationBody) => AuthorizationBody, signer: Signer) =>
      signArtifact('authorization', change(decodeArtifact('authorization', text, { trustedSigners: [root.publicKey] }).body), signer).text;
    const cases: Array<{ name: string; tamper: (authorization: string) => string }> = [
      { name: 'one body byte changed, signature kept', tamper: (a) => a.replace(/"expires_at":(\d+)/, (_m, n: string) => `"expires_at":${Number(n) + 1}`) },
      { name: 'another signature of valid form', tamper: (a) => a.replace(/"signature":"[0-9a-f]{128}"/, `"signature":"${'ab'.repeat(64)}"`) },
      { name: 'the same members, not canonical (spaces)', tamper: (a) => JSON.stringify(JSON.parse(a), null, 1) },
      { name: 'a member repeated with the retained value last', tamper: (a) => a.replace('{"body":{', '{"body":{"issued_at":0,') },
      { name: 'a trailing newline', tamper: (a) => `${a}\n` },
      { name: 'the same body signed by another key', tamper: (a) => withBody(a, (body) => body, stranger.signer) },
      { name: 'signed by this kernel, not the one committed (another window)', tamper: (a) => withBody(a, (body) => ({ ...body, expires_at: body.expires_at + 1 }), kernelSigner()) },
      { name: 'signed by this kernel, naming the operation under another executor key', tamper: (a) => withBody(a, (body) => ({ ...body, executor: { ...body.executor, public_key: stranger.publicKey } }), kernelSigner()) },
      { name: 'the envelope with its signer swapped', tamper: (a) => reEncoded(a, (envelope) => ({ ...envelope, signer: stranger.publicKey })) },
    ];
    for (const { name, tamper } of cases) {
      it(name, async () => {
        const id = `r-tamper-${cases.findIndex((c) => c.name === name)}`;
        const { operationId, authorization } = await dispatch(id);
        const tampered = tamper(authorization);
        expect(tampered).to.not.equal(authorization);
        const refusal = await refused(kernel.request('settle', { authorization: tampered, report: report(executor, authorization) }));
        expect(refusal.code).to.equal('authorization_invalid');
        expect(await stateOf(operationId)).to.equal('dispatch_committed');
        expect(holdOf(root, operationId)!.state).to.equal('reserved');
        // The retained bytes still settle it.
        expect((await kernel.request('settle', { authorization, report: report(executor, authorization) })).state).to.equal('completed');
      });
    }
  });

  it('denies finalization of a report whose claim fell outside the window: report_outside_window, flagged, hold consumed', async () => {
    const { operationId, authorization } = await dispatch('r-window');
    const window = (await kernel.request('operation.get', { operation_id: operationId, request_id: null })).operation!.window!;
    const late = report(executor, authorization, { claimed_at: window.expires_at, finished_at: window.expires_at + 5 });
    const settled = await kernel.request('settle', { authorization, report: late });
    expect(settled).to.include({ verdict: 'deny', reason: 'report_outside_window', state: 'finalization_denied', output: null });
    expect(verifyReceipt(settled.receipt!, root.publicKey)).to.include({ decision: 'finalization', reason: 'report_outside_window' });
    const view = (await kernel.request('operation.get', { operation_id: operationId, request_id: null })).operation!;
    expect(view.flag).to.match(/report_outside_window: claimed at/);
    expect(holdOf(root, operationId)!.state).to.equal('consumed');
    expect(JSON.stringify(await kernel.request('settle', { authorization, report: late }))).to.equal(JSON.stringify(settled));
  });

  it('accepts a claim at the first millisecond of the window', async () => {
    const { authorization } = await dispatch('r-window-edge');
    const edge = report(executor, authorization);
    expect((await kernel.request('settle', { authorization, report: edge })).state).to.equal('completed');
  });

  it('releases the hold for a report that proves no effect: failed_before_effect, reconciled_not_applied, never_claimed', async () => {
    for (const status of ['failed_before_effect', 'reconciled_not_applied', 'never_claimed'] as const) {
      const { operationId, authorization } = await dispatch(`r-none-${status}`);
      const overrides = status === 'never_claimed' ? { status, output: null, claimed_at: null } : { status, output: null };
      const settled = await kernel.request('settle', { authorization, report: report(executor, authorization, overrides) });
      expect(settled, status).to.include({ verdict: 'allow', state: 'released', output: null });
      expect(verifyReceipt(settled.receipt!, root.publicKey).hold.disposition).to.equal('released');
      expect(holdOf(root, operationId)).to.include({ state: 'released', cost_units_charged: 0 });
    }
  });

  it("settles a never_claimed report carrying the executor's refusal of the arguments as released, with the refusal's code as the receipt's reason", async () => {
    const { operationId, authorization } = await dispatch('r-refused-args');
    const refusal = { code: 'arguments_too_large', message: 'review-notes/append arguments: note: note is 5000 UTF-8 bytes; at most 4096 are allowed' };
    const settled = await kernel.request('settle', { authorization, report: report(executor, authorization, { status: 'never_claimed', output: null, claimed_at: null, refusal }) });
    expect(settled).to.include({ verdict: 'allow', reason: 'arguments_too_large', state: 'released', output: null });
    expect(verifyReceipt(settled.receipt!, root.publicKey)).to.include({ decision: 'completion', reason: 'arguments_too_large', state: 'released' });
    expect(holdOf(root, operationId)).to.include({ state: 'released', cost_units_charged: 0 });
  });

  const badRefusals = [
    { what: 'a refusal on a report of another status', overrides: { status: 'failed_before_effect' as const, output: null, refusal: { code: 'arguments_too_large', message: 'too big' } }, says: /failed_before_effect report carries a refusal/ },
    { what: 'a refusal whose code is no error code', overrides: { status: 'never_claimed' as const, output: null, claimed_at: null, refusal: { code: 'because_i_said_so', message: 'no' } }, says: /refusal code because_i_said_so is not an error code/ },
    // The completion receipt would carry one digest and the settle answer another output.
    { what: 'an output_digest that is not of its output', overrides: { status: 'completed' as const, output: { line: 'appended' }, output_digest: 'ab'.repeat(32) }, says: /output_digest abababababababab… is not the SHA-256 of its output/ },
    { what: 'an output_digest with no output', overrides: { status: 'completed' as const, output: null, output_digest: 'ab'.repeat(32) }, says: /output_digest .* is not the SHA-256 of its output/ },
  ];
  for (const { what, overrides, says } of badRefusals) {
    it(`refuses ${what}: report_invalid, and the hold stays`, async () => {
      const { operationId, authorization } = await dispatch(`r-bad-${what.replaceAll(/[^a-z]+/g, '-')}`);
      const refusal = await refused(kernel.request('settle', { authorization, report: report(executor, authorization, overrides) }));
      expect(refusal.code).to.equal('report_invalid');
      expect(refusal.message).to.match(says);
      expect(holdOf(root, operationId)!.state).to.equal('reserved');
    });
  }

  it('denies finalization of a report claimed before the window opened: report_outside_window', async () => {
    const { authorization } = await dispatch('r-window-early');
    const window = decodeArtifact('authorization', authorization, { trustedSigners: [root.publicKey] }).body;
    const early = report(executor, authorization, { claimed_at: window.not_before - 1 });
    expect(await kernel.request('settle', { authorization, report: early })).to.include({ reason: 'report_outside_window', state: 'finalization_denied' });
  });

  describe('queries', () => {
    it('finds an operation by request id or operation id, says null for one it does not hold, and refuses a mismatched pair', async () => {
      const { operationId } = await dispatch('r-query');
      const byRequest = await kernel.request('operation.get', { operation_id: null, request_id: 'r-query' });
      expect(await kernel.request('operation.get', { operation_id: operationId, request_id: 'r-query' })).to.deep.equal(byRequest);
      expect(await kernel.request('operation.get', { operation_id: null, request_id: 'r-nothing' })).to.deep.equal({ operation: null, receipts: [] });
      expect((await refused(kernel.request('operation.get', { operation_id: operationId, request_id: 'r-other' }))).code).to.equal('bad_request');
      expect((await refused(kernel.request('operation.get', { operation_id: null, request_id: null }))).code).to.equal('bad_request');
    });

    it('lists operations by state, newest first, up to a limit; recover lists committed starts and unknowns', async () => {
      const listed = (await kernel.request('ops.list', { states: ['dispatch_committed'], limit: 2, after: null })).operations;
      expect(listed).to.have.length(2);
      expect(listed.every((op) => op.state === 'dispatch_committed')).to.equal(true);
      expect(listed[0]!.created_at).to.be.at.least(listed[1]!.created_at);
      const { operations, now } = await kernel.request('recover', { limit: 1000, after: null });
      expect(now).to.be.a('number');
      expect(operations.every((op) => ['dispatch_committed', 'awaiting_report', 'unknown'].includes(op.state))).to.equal(true);
      expect(operations.map((op) => op.request_id)).to.include('r-query');
    });
  });

  describe('cost budgets', () => {
    let capabilityId: string;
    before(async () => {
      capabilityId = (await kernel.request('grant.add', grantBody(TOOL, { max_cost_units: 100 }))).capability_id;
    });
    const usage = async () => (await kernel.request('grant.list', ALL_GRANTS)).grants.find((g) => g.capability_id === capabilityId)!;

    it('charges the realized cost and releases the rest of the hold', async () => {
      const { operationId, authorization } = await dispatch('r-cost', { capability_id: capabilityId, cost_units: 10 });
      expect(await usage()).to.include({ cost_units_held: 10, cost_units_used: 0 });
      const settled = await kernel.request('settle', { authorization, report: report(executor, authorization, { realized_cost_units: 7 }) });
      expect(verifyReceipt(settled.receipt!, root.publicKey).hold).to.include({ cost_units_held: 10, cost_units_charged: 7 });
      expect(holdOf(root, operationId)).to.include({ state: 'consumed', cost_units_charged: 7 });
      expect(await usage()).to.include({ cost_units_held: 0, cost_units_used: 7 });
    });

    it('charges the realized cost exactly at the hold', async () => {
      const { authorization } = await dispatch('r-cost-at', { capability_id: capabilityId, cost_units: 5 });
      const settled = await kernel.request('settle', { authorization, report: report(executor, authorization, { realized_cost_units: 5 }) });
      expect(settled.state).to.equal('completed');
    });

    it('denies finalization of a realized cost one unit above the hold: cost_exceeded, flagged, only the hold charged', async () => {
      const { operationId, authorization } = await dispatch('r-cost-over', { capability_id: capabilityId, cost_units: 5 });
      const settled = await kernel.request('settle', { authorization, report: report(executor, authorization, { realized_cost_units: 6 }) });
      expect(settled).to.include({ verdict: 'deny', reason: 'cost_exceeded', state: 'finalization_denied', output: null });
      expect(verifyReceipt(settled.receipt!, root.publicKey).hold).to.include({ disposition: 'consumed', cost_units_charged: 5 });
      const view = (await kernel.request('operation.get', { operation_id: operationId, request_id: null })).operation!;
      expect(view.flag).to.equal('cost_exceeded: realized 6 cost units, hold 5; 1 not charged');
    });
  });

  describe('executor key epochs', () => {
    const epoch1 = testExecutor(41, 'exec-epoch', 1);
    const epoch2 = testExecutor(42, 'exec-epoch', 2);
    before(async () => {
      await kernel.request('executor.pin', pinBody(epoch1, ['epoch/*']));
      await kernel.request('grant.add', grantBody('epoch/*'));
    });

    const statement = (signer: TestExecutor, oldEpoch: number, newKey: string, newEpoch = oldEpoch + 1) =>
      signArtifact('rotation', {
        role: 'executor', id: 'exec-epoch', old_epoch: oldEpoch, new_epoch: newEpoch,
        old_public_key: signer.publicKey, new_public_key: newKey, issued_at: Date.now(),
      }, signer.signer).text;
    const currentPin = async () => (await kernel.request('keys.list', { after_epoch: 0 })).executors.filter((pin) => pin.executor_id === 'exec-epoch').map((pin) => [pin.key_epoch, pin.public_key]);

    it('pins a new epoch only through a statement signed by the pinned key, from the pinned epoch to the next; a forged one leaves the pin', async () => {
      const epoch3 = testExecutor(45, 'exec-epoch', 3);
      const forgeries: Array<[string, Promise<unknown>]> = [
        ['executor.pin with a higher epoch', kernel.request('executor.pin', pinBody(epoch2, ['epoch/*']))],
        ['a statement signed by the new key', kernel.request('pin.rotate', { statement: statement({ ...epoch2, publicKey: epoch1.publicKey }, 1, epoch2.publicKey) })],
        ['a statement that skips an epoch', kernel.request('pin.rotate', { statement: statement(epoch1, 1, epoch3.publicKey, 3) })],
        ['a statement from an epoch that is not the pinned one', kernel.request('pin.rotate', { statement: statement(epoch1, 2, epoch3.publicKey) })],
      ];
      for (const [what, attempt] of forgeries) expect((await refused(attempt)).code, what).to.equal('rotation_invalid');
      expect(await currentPin()).to.deep.equal([[1, epoch1.publicKey]]);
    });

    it('settles reports signed under a retired epoch and under the new one; a report under an epoch not pinned yet is epoch_unpinned', async () => {
      const old = await dispatch('r-epoch', { tool: 'epoch/tool' });
      const retiredRefusal = await dispatch('r-epoch-retired', { tool: 'epoch/tool' });
      const early = report(epoch2, retiredRefusal.authorization, { key_epoch: 2, status: 'never_claimed', claimed_at: null, output: null, refusal: { code: 'epoch_retired', message: 'retired' } });
      expect((await refused(kernel.request('settle', { authorization: retiredRefusal.authorization, report: early })))).to.have.property('code', 'epoch_unpinned');
      const rotated = await kernel.request('pin.rotate', { statement: statement(epoch1, 1, epoch2.publicKey) });
      expect(rotated).to.include({ executor_id: 'exec-epoch', key_epoch: 2, public_key: epoch2.publicKey });
      // Delivered again: the same pin, no error.
      expect(await kernel.request('pin.rotate', { statement: statement(epoch1, 1, epoch2.publicKey) })).to.include({ key_epoch: 2 });
      expect(await currentPin()).to.deep.equal([[1, epoch1.publicKey], [2, epoch2.publicKey]]);
      expect((await kernel.request('settle', { authorization: old.authorization, report: report(epoch1, old.authorization) })).state).to.equal('completed');
      const released = await kernel.request('settle', { authorization: retiredRefusal.authorization, report: early });
      expect(released).to.include({ state: 'released', reason: 'epoch_retired' });
      expect(holdOf(root, retiredRefusal.operationId)).to.include({ state: 'released' });
      const fresh = await dispatch('r-epoch-2', { tool: 'epoch/tool' });
      expect((decodeArtifact('authorization', fresh.authorization, { trustedSigners: [root.publicKey] })).body.executor).to.include({ key_epoch: 2, public_key: epoch2.publicKey });
      expect((await kernel.request('settle', { authorization: fresh.authorization, report: report(epoch2, fresh.authorization) })).state).to.equal('completed');
    });

    it('refuses to pin an older epoch (epoch_stale) or another key at the same epoch (identity_mismatch)', async () => {
      expect((await refused(kernel.request('executor.pin', pinBody(epoch1, ['epoch/*'])))).code).to.equal('epoch_stale');
      const impostor = testExecutor(43, 'exec-epoch', 2);
      expect((await refused(kernel.request('executor.pin', pinBody(impostor, ['epoch/*'])))).code).to.equal('identity_mismatch');
    });

    it('refuses a public key that is not a valid point: key_invalid', async () => {
      const body = { ...pinBody(testExecutor(44, 'exec-bad')), public_key: '01'.padEnd(64, '0') };
      expect((await refused(kernel.request('executor.pin', body))).code).to.equal('key_invalid');
    });
  });

  describe('unknown outcomes', () => {
    it('marks a committed start unknown with a signed receipt, keeps the hold, and a later report still settles it', async () => {
      const { operationId, authorization } = await dispatch('r-unknown');
      const marked = await kernel.request('mark_unknown', { operation_id: operationId, reason: 'adapter said indeterminate' });
      expect(marked.operation).to.include({ state: 'unknown', flag: 'adapter said indeterminate' });
      expect(marked.operation.hold).to.include({ disposition: 'reserved' });
      expect(verifyReceipt(marked.operation.last_receipt!, root.publicKey)).to.include({ decision: 'unknown', reason: 'outcome_unknown', state: 'unknown' });
      expect(JSON.stringify(await kernel.request('mark_unknown', { operation_id: operationId, reason: 'again' }))).to.equal(JSON.stringify(marked));
      expect((await kernel.request('recover', { limit: 1000, after: null })).operations.map((op) => op.operation_id)).to.include(operationId);
      const settled = await kernel.request('settle', { authorization, report: report(executor, authorization) });
      expect(settled.state).to.equal('completed');
      expect(holdOf(root, operationId)!.state).to.equal('consumed');
    });

    it('refuses to mark a reservation that was never started: illegal_transition', async () => {
      const reserved = await kernel.request('reserve', reserveBody('r-unknown-reserved'));
      expect((await refused(kernel.request('mark_unknown', { operation_id: reserved.operation_id, reason: '' }))).code).to.equal('illegal_transition');
    });

    it('leaves a settled operation as it is when asked to mark it unknown', async () => {
      const { operationId, authorization } = await dispatch('r-unknown-late');
      await kernel.request('settle', { authorization, report: report(executor, authorization) });
      expect((await kernel.request('mark_unknown', { operation_id: operationId, reason: 'late' })).operation.state).to.equal('completed');
    });
  });
});
