import { expect } from 'chai';
import { artifactDigest } from '../../shared/artifacts/artifact.js';
import { canonicalBytes } from '../../shared/canonical/jcs.js';
import { bindRequest, operationIdFor, parametersDigest, requestBindingHash } from '../../shared/protocol/binding.js';
import type { RequestOf } from '../../shared/protocol/messages.js';
import { KernelProcess, KernelRoot, TOOL, grantBody, pinBody, reserveBody, testExecutor, verifyReceipt, refused, ALL_GRANTS } from './helpers.js';

/** A reserve body whose RFC 8785 form is exactly `bytes` long. */
function reserveOfSize(requestId: string, tool: string, bytes: number): RequestOf<'reserve'> {
  const body = reserveBody(requestId, { tool, arguments: { note: '' } });
  const padding = bytes - canonicalBytes(body).length;
  return { ...body, arguments: { note: 'x'.repeat(padding) } };
}

describe('kernel-proc: reserve', function () {
  this.timeout(20_000);
  const root = new KernelRoot();
  const executor = testExecutor(11);
  let kernel: KernelProcess;

  before(async () => {
    kernel = await KernelProcess.start(root, {
      mode: 'provision',
      settings: { max_request_bytes: 1024, argument_bytes_default: 512, argument_bytes_per_tool: { [TOOL]: 100, 'big/wide': 1024 } },
      env: { CUSTODY_LOG_LEVEL: 'debug' },
    });
    await kernel.request('executor.pin', pinBody(executor, ['review-notes/*', 'big/*']));
    await kernel.request('grant.add', grantBody('big/*'));
  });
  after(async () => {
    await kernel.stop();
    root.remove();
  });

  it('allows a covered request: a hold, a nonce, a signed receipt, and the invocation to expect; nothing is authorized yet', async () => {
    const request = reserveBody('allow-1');
    const result = await kernel.request('reserve', request);
    expect(result).to.include({ verdict: 'allow', reason: 'ok', state: 'reserved', operation_id: operationIdFor('allow-1') });
    const receipt = verifyReceipt(result.receipt!, root.publicKey);
    expect(receipt).to.include({ decision: 'reserve', verdict: 'allow', reason: 'ok', state: 'reserved', request_id: 'allow-1' });
    expect(receipt.hold).to.include({ disposition: 'reserved', invocations: 1 });
    expect(result.nonce!.expires_at - receipt.issued_at).to.equal(120_000);
    const { grants } = await kernel.request('grant.list', ALL_GRANTS);
    const grant = grants.find((g) => g.capability_id === result.expected!.capability_id)!;
    expect(result.expected).to.deep.equal({
      operation_id: operationIdFor('allow-1'),
      request_id: 'allow-1',
      request_binding_hash: requestBindingHash({
        request_id: request.request_id,
        subject: request.subject,
        tool: request.tool,
        parameters_digest: parametersDigest(request.arguments),
        capability_id: request.capability_id,
        cost_units: request.cost_units,
      }),
      capability_id: grant.capability_id,
      capability_digest: artifactDigest(grant.capability),
      tool: TOOL,
      parameters_digest: parametersDigest(request.arguments),
    });
    const view = (await kernel.request('operation.get', { operation_id: result.operation_id, request_id: null })).operation!;
    expect(view.authorization).to.equal(null);
    expect(view.hold).to.include({ disposition: 'reserved' });
  });

  it('returns the retained result, byte for byte, for the same request id and bytes', async () => {
    const first = await kernel.request('reserve', reserveBody('again-1'));
    const second = await kernel.request('reserve', reserveBody('again-1'));
    expect(JSON.stringify(second)).to.equal(JSON.stringify(first));
    expect(root.read('SELECT count(*) AS n FROM receipts WHERE operation_id = ?', first.operation_id)).to.deep.equal([{ n: 1 }]);
  });

  it('refuses the same request id with other bytes: request_conflict, nothing recorded', async () => {
    const first = await kernel.request('reserve', reserveBody('conflict-1'));
    for (const changed of [{ arguments: { note: 'other' } }, { subject: 'agent-2' }, { cost_units: 1 }]) {
      const refusal = await refused(kernel.request('reserve', reserveBody('conflict-1', changed)));
      expect(refusal.code).to.equal('request_conflict');
      expect(refusal.message).to.include('conflict-1');
    }
    const got = await kernel.request('operation.get', { operation_id: first.operation_id, request_id: null });
    expect(got.receipts).to.deep.equal([first.receipt]);
  });

  describe('denies, with a signed receipt, no hold and a retained answer', () => {
    const denials: Array<[string, () => Promise<RequestOf<'reserve'>>, string]> = [
      ['no grant covers the tool', () => Promise.resolve(reserveBody('deny-nogrant', { tool: 'unlisted/tool' })), 'capability_unknown'],
      ['the named grant does not exist', () => Promise.resolve(reserveBody('deny-unknown-cap', { capability_id: 'cap-nosuch' })), 'capability_unknown'],
      [
        'the grant has expired',
        async () => {
          const grant = await kernel.request('grant.add', grantBody(TOOL, { not_before: root.now() - 60_000, ttl_ms: 1000 }));
          return reserveBody('deny-expired', { capability_id: grant.capability_id });
        },
        'capability_expired',
      ],
      [
        'the grant is not valid yet',
        async () => {
          const grant = await kernel.request('grant.add', grantBody(TOOL, { not_before: root.now() + 60_000 }));
          return reserveBody('deny-early', { capability_id: grant.capability_id });
        },
        'capability_not_yet_valid',
      ],
      [
        'the grant was revoked',
        async () => {
          const grant = await kernel.request('grant.add', grantBody(TOOL));
          const revoked = await kernel.request('grant.revoke', { capability_id: grant.capability_id });
          expect(revoked.revoked_at).to.be.a('number');
          return reserveBody('deny-revoked', { capability_id: grant.capability_id });
        },
        'capability_revoked',
      ],
      [
        'the grant is for another tool',
        async () => {
          const grant = await kernel.request('grant.add', grantBody(TOOL));
          return reserveBody('deny-tool', { tool: 'review-notes/delete', capability_id: grant.capability_id });
        },
        'tool_not_granted',
      ],
      [
        'the grant is for another subject',
        async () => {
          const grant = await kernel.request('grant.add', grantBody(TOOL, { subject: 'alice' }));
          return reserveBody('deny-subject', { subject: 'mallory', capability_id: grant.capability_id });
        },
        'subject_not_granted',
      ],
      [
        'no pinned executor serves the tool',
        async () => {
          await kernel.request('grant.add', grantBody('orphan/*'));
          return reserveBody('deny-orphan', { tool: 'orphan/tool' });
        },
        'tool_unknown',
      ],
      ['the arguments are one byte past the tool bound', () => Promise.resolve(reserveBody('deny-args', { arguments: { note: 'x'.repeat(90) } })), 'arguments_too_large'],
      [
        'the arguments are one byte past the default bound',
        () => Promise.resolve(reserveBody('deny-args-default', { tool: 'big/tool', arguments: { note: 'x'.repeat(502) } })),
        'arguments_too_large',
      ],
    ];
    for (const [why, build, reason] of denials) {
      it(`when ${why}: ${reason}`, async () => {
        const request = await build();
        const result = await kernel.request('reserve', request);
        expect(result).to.include({ verdict: 'deny', reason, state: 'denied', nonce: null, expected: null });
        const receipt = verifyReceipt(result.receipt!, root.publicKey);
        expect(receipt).to.include({ decision: 'reserve', verdict: 'deny', reason, state: 'denied' });
        expect(receipt.hold).to.deep.equal({ id: null, disposition: 'none', invocations: 0, cost_units_held: 0, cost_units_charged: 0 });
        expect(root.read('SELECT count(*) AS n FROM holds WHERE operation_id = ?', result.operation_id)).to.deep.equal([{ n: 0 }]);
        expect(JSON.stringify(await kernel.request('reserve', request))).to.equal(JSON.stringify(result));
      });
    }
  });

  it('allows arguments exactly at the tool bound and at the default bound', async () => {
    expect(canonicalBytes({ note: 'x'.repeat(89) }).length).to.equal(100);
    expect((await kernel.request('reserve', reserveBody('args-at', { arguments: { note: 'x'.repeat(89) } }))).verdict).to.equal('allow');
    expect(canonicalBytes({ note: 'x'.repeat(501) }).length).to.equal(512);
    const atDefault = reserveBody('args-at-default', { tool: 'big/tool', arguments: { note: 'x'.repeat(501) } });
    expect((await kernel.request('reserve', atDefault)).verdict).to.equal('allow');
  });

  it('takes a request of exactly max_request_bytes and refuses one byte more: body_too_large, nothing recorded', async () => {
    const at = reserveOfSize('size-at', 'big/wide', 1024);
    expect(canonicalBytes(at).length).to.equal(1024);
    expect((await kernel.request('reserve', at)).verdict).to.equal('allow');
    const past = reserveOfSize('size-past', 'big/wide', 1025);
    const refusal = await refused(kernel.request('reserve', past));
    expect(refusal.code).to.equal('body_too_large');
    expect(refusal.message).to.match(/1025 bytes .* max_request_bytes is 1024/);
    expect((await kernel.request('operation.get', { operation_id: null, request_id: 'size-past' })).operation).to.equal(null);
  });

  it('bounds a reserve_start body the same way: exactly max_request_bytes taken, one byte more refused', async () => {
    // The binding is of the bound fields only: computed on the padded request, it does not change its size.
    const member = canonicalBytes({ request_binding_hash: 'b'.repeat(64) }).length - 2 + 1; // "request_binding_hash":"…" and its comma
    const withBinding = (requestId: string, bytes: number): RequestOf<'reserve_start'> => {
      const sized = reserveOfSize(requestId, 'big/wide', bytes - member);
      return { ...sized, request_binding_hash: bindRequest(sized).request_binding_hash };
    };
    const at = withBinding('rs-size-at', 1024);
    expect(canonicalBytes(at).length).to.equal(1024);
    expect((await kernel.request('reserve_start', at)).reserve.verdict).to.equal('allow');
    const past = withBinding('rs-size-past', 1025);
    expect(canonicalBytes(past).length).to.equal(1025);
    const refusal = await refused(kernel.request('reserve_start', past));
    expect(refusal.code).to.equal('body_too_large');
    expect(refusal.message).to.match(/reserve_start request is 1025 bytes .* max_request_bytes is 1024/);
    expect((await kernel.request('operation.get', { operation_id: null, request_id: 'rs-size-past' })).operation).to.equal(null);
  });

  it('allows four invocations of a 4-invocation grant and denies exactly the fifth: budget_exhausted', async () => {
    const grant = await kernel.request('grant.add', grantBody(TOOL, { max_invocations: 4 }));
    for (let i = 1; i <= 4; i += 1) {
      expect((await kernel.request('reserve', reserveBody(`budget-${i}`, { capability_id: grant.capability_id }))).verdict).to.equal('allow');
    }
    const fifth = await kernel.request('reserve', reserveBody('budget-5', { capability_id: grant.capability_id }));
    expect(fifth).to.include({ verdict: 'deny', reason: 'budget_exhausted' });
    const view = (await kernel.request('grant.list', ALL_GRANTS)).grants.find((g) => g.capability_id === grant.capability_id);
    expect(view).to.include({ invocations_used: 0, invocations_held: 4 });
  });

  it('gives a hold back to the budget when a start refusal releases it', async () => {
    const grant = await kernel.request('grant.add', grantBody(TOOL, { max_invocations: 1 }));
    const first = await kernel.request('reserve', reserveBody('giveback-1', { capability_id: grant.capability_id }));
    expect((await kernel.request('reserve', reserveBody('giveback-2', { capability_id: grant.capability_id }))).reason).to.equal('budget_exhausted');
    await kernel.request('start', { request_id: 'giveback-1', nonce_id: first.nonce!.id, arguments: { note: 'changed' } });
    expect((await kernel.request('reserve', reserveBody('giveback-3', { capability_id: grant.capability_id }))).verdict).to.equal('allow');
  });

  it('holds cost units against a cost cap: up to the cap allowed, one unit past denied', async () => {
    const grant = await kernel.request('grant.add', grantBody(TOOL, { max_cost_units: 10 }));
    const cap = { capability_id: grant.capability_id };
    expect((await kernel.request('reserve', reserveBody('cost-1', { ...cap, cost_units: 6 }))).verdict).to.equal('allow');
    expect((await kernel.request('reserve', reserveBody('cost-2', { ...cap, cost_units: 5 }))).reason).to.equal('budget_exhausted');
    const atCap = await kernel.request('reserve', reserveBody('cost-3', { ...cap, cost_units: 4 }));
    expect(verifyReceipt(atCap.receipt!, root.publicKey).hold).to.include({ cost_units_held: 4 });
  });

  it('holds a grant with no cost cap to 2^53 - 1 cost units in all: at it allowed, one past denied, and the grant still reads back', async () => {
    const grant = await kernel.request('grant.add', grantBody(TOOL));
    const cap = { capability_id: grant.capability_id };
    const half = Math.floor(Number.MAX_SAFE_INTEGER / 2);
    expect((await kernel.request('reserve', reserveBody('uncapped-1', { ...cap, cost_units: half }))).verdict).to.equal('allow');
    const past = await kernel.request('reserve', reserveBody('uncapped-2', { ...cap, cost_units: Number.MAX_SAFE_INTEGER - half + 1 }));
    expect(past.reason).to.equal('budget_exhausted');
    expect((await kernel.request('reserve', reserveBody('uncapped-3', { ...cap, cost_units: Number.MAX_SAFE_INTEGER - half }))).verdict).to.equal('allow');
    // Before the bound, a second hold took the counters past 2^53 and every listing that held the grant answered internal.
    const listed = await kernel.request('grant.list', { live: false, limit: 10_000, after: null });
    expect(listed.grants.find((g) => g.capability_id === grant.capability_id)).to.include({ cost_units_held: Number.MAX_SAFE_INTEGER });
  });

  it('draws on a grant that covers the tool by prefix when the request names none', async () => {
    const result = await kernel.request('reserve', reserveBody('prefix-1', { tool: 'big/other' }));
    expect(result.verdict).to.equal('allow');
  });

  it('commits concurrent requests in shared transactions and answers each after its commit', async () => {
    const ids = Array.from({ length: 24 }, (_, i) => `batch-${i}`);
    const grant = await kernel.request('grant.add', grantBody('big/*'));
    const results = ids.map((id) => kernel.request('reserve', reserveBody(id, { tool: 'big/tool', capability_id: grant.capability_id })));
    const conflicting = refused(kernel.request('reserve', reserveBody('batch-0', { tool: 'big/tool', arguments: { note: 'different' }, capability_id: grant.capability_id })));
    const allowed = await Promise.all(results);
    expect(allowed.every((r) => r.verdict === 'allow')).to.equal(true);
    expect(new Set(allowed.map((r) => r.nonce!.id)).size).to.equal(ids.length);
    // A conflict in the same batch fails alone; the others' writes commit.
    expect((await conflicting).code).to.equal('request_conflict');
    const batches = kernel.stderr.filter((line) => line.includes('"batch_committed"')).map((line) => (JSON.parse(line) as { units: number }).units);
    expect(Math.max(...batches)).to.be.greaterThan(1);
  });
});

describe('kernel-proc: the execution nonce store', function () {
  this.timeout(20_000);
  const root = new KernelRoot();
  let kernel: KernelProcess;

  before(async () => {
    kernel = await KernelProcess.start(root, { mode: 'provision', settings: { nonce_capacity: 3 } });
    await kernel.request('executor.pin', pinBody(testExecutor(12)));
    await kernel.request('grant.add', grantBody(TOOL));
  });
  after(async () => {
    await kernel.stop();
    root.remove();
  });

  it('mints up to its capacity, refuses the next with a signed nonce_store_full, and never evicts a live nonce', async () => {
    const first = await kernel.request('reserve', reserveBody('n-1'));
    await kernel.request('reserve', reserveBody('n-2'));
    // Capacity minus one live: one more is fine.
    expect((await kernel.request('reserve', reserveBody('n-3'))).verdict).to.equal('allow');
    const full = await kernel.request('reserve', reserveBody('n-4'));
    expect(full).to.include({ verdict: 'deny', reason: 'nonce_store_full', state: 'denied' });
    expect(verifyReceipt(full.receipt!, root.publicKey).hold.disposition).to.equal('none');
    // The oldest nonce is still good: nothing was evicted to make room.
    const started = await kernel.request('start', { request_id: 'n-1', nonce_id: first.nonce!.id, arguments: reserveBody('n-1').arguments });
    expect(started.verdict).to.equal('allow');
    // A used nonce no longer counts.
    expect((await kernel.request('reserve', reserveBody('n-5'))).verdict).to.equal('allow');
  });
});
