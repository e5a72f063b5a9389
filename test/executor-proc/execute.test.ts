// execute_once over a real executor process: verification before anything
// is claimed, one effect per operation, byte-identical replay.
import { expect } from 'chai';
import type { CustodyError } from '../../shared/errors.js';
import {
  type Executor,
  type Home,
  KERNEL,
  OTHER_KERNEL,
  authorize,
  executeBody,
  makeHome,
  notesFor,
  provisioned,
  removeHome,
  sqlite,
  startExecutor,
  stopExecutor,
} from './helpers.js';
import { decodeArtifact } from '../../shared/artifacts/artifact.js';
import { refused } from '../helpers/codes.js';


describe('executor-proc execute_once', function () {
  this.timeout(30_000);
  let home: Home;
  let executor: Executor;

  before(async () => {
    home = makeHome();
    await provisioned(home);
    executor = await startExecutor(home);
  });

  after(async () => {
    await stopExecutor(executor);
    removeHome(home);
  });

  it('appends one journal line and answers with a signed completed report', async () => {
    const auth = authorize(executor);
    const result = await executor.channel.request('execute', executeBody(auth));
    expect(result.status).to.equal('completed');
    expect(result.replayed).to.equal(false);
    const report = decodeArtifact('report', result.report, { trustedSigners: [executor.identity.public_key] });
    expect(report.body.operation_id).to.equal(auth.operationId);
    expect(report.body.executor_id).to.equal('alpha');
    expect(report.body.claimed_at).to.be.a('number');
    expect(report.body.output).to.deep.equal(notesFor(home, auth.operationId)[0]);
    expect(notesFor(home, auth.operationId)).to.have.length(1);
  });

  it('replays the retained report byte for byte and appends nothing more', async () => {
    const auth = authorize(executor);
    const first = await executor.channel.request('execute', executeBody(auth));
    const second = await executor.channel.request('execute', executeBody(auth));
    expect(second.report).to.equal(first.report);
    expect(second.replayed).to.equal(true);
    expect(notesFor(home, auth.operationId)).to.have.length(1);
  });

  it('runs the effect once when two executions of one operation race', async () => {
    const auth = authorize(executor);
    const results = await Promise.allSettled([
      executor.channel.request('execute', executeBody(auth)),
      executor.channel.request('execute', executeBody(auth)),
    ]);
    expect(notesFor(home, auth.operationId)).to.have.length(1);
    const fulfilled = results.filter((r) => r.status === 'fulfilled');
    expect(fulfilled.length).to.be.at.least(1);
    for (const r of results) {
      if (r.status === 'rejected') expect((r.reason as CustodyError).code).to.equal('outcome_unknown');
    }
  });

  const refusals: Array<{ title: string; code: string; make: () => ReturnType<typeof executeBody> }> = [
    {
      title: 'an authorization signed by a kernel key this executor has not pinned (the supervisor gives it the kernel statements and asks again)',
      code: 'kernel_key_unpinned',
      make: () => executeBody(authorize(executor, { signer: OTHER_KERNEL })),
    },
    {
      title: 'an authorization addressed to another executor',
      code: 'not_addressed_to_me',
      make: () => executeBody(authorize(executor, { executor: { ...executor.identity, id: 'beta' } })),
    },
    {
      title: 'an authorization for another key epoch',
      code: 'not_addressed_to_me',
      make: () => executeBody(authorize(executor, { executor: { ...executor.identity, key_epoch: 2 } })),
    },
    {
      title: 'changed arguments',
      code: 'arguments_changed',
      make: () => executeBody(authorize(executor), { args: { note: 'a different note' } }),
    },
    {
      title: 'an expected invocation other than the one the authorization binds',
      code: 'invocation_mismatch',
      make: () => {
        const auth = authorize(executor);
        return { ...executeBody(auth), expected: { ...auth.expected, request_id: 'req-someone-else' } };
      },
    },
    {
      title: 'an expired authorization',
      code: 'outside_window',
      make: () => executeBody(authorize(executor, { notBefore: Date.now() - 120_000, expiresAt: Date.now() - 60_000 })),
    },
    {
      title: 'an authorization whose window has not opened',
      code: 'window_not_open',
      make: () => executeBody(authorize(executor, { notBefore: Date.now() + 60_000, expiresAt: Date.now() + 120_000 })),
    },
    {
      title: 'a tool no adapter serves',
      code: 'adapter_unknown',
      make: () => executeBody(authorize(executor, { tool: 'nobody/serves-this', args: {} })),
    },
    {
      title: 'an adapter that declares no contract',
      code: 'adapter_contract_missing',
      make: () => executeBody(authorize(executor, { tool: 'fixture/no-contract', args: {} })),
    },
  ];
  for (const { title, code, make } of refusals) {
    it(`refuses ${title} with ${code} and claims nothing`, async () => {
      const body = make();
      const error = await refused(executor.channel.request('execute', body));
      expect(error.code).to.equal(code);
      const rows = sqlite(home.ledgerFile, `SELECT count(*) AS n FROM claims WHERE operation_id = '${body.expected.operation_id}'`).rows;
      expect(rows[0]?.n).to.equal(0);
      expect(notesFor(home, body.expected.operation_id)).to.have.length(0);
    });
  }

  // Arguments the adapter refuses are refused for good (the authorization binds them): a
  // refusal under the claims' unique key and a signed never_claimed report with the cause.
  const argumentRefusals: Array<{ title: string; code: string; args: Record<string, string | boolean>; says: RegExp }> = [
    { title: 'a note of 4,097 UTF-8 bytes', code: 'arguments_too_large', args: { note: 'é'.repeat(2048) + 'x' }, says: /note is 4097 UTF-8 bytes; at most 4096/ },
    { title: 'arguments outside the adapter schema', code: 'arguments_invalid', args: { note: 'fine', extra: true }, says: /Unrecognized key: "extra"/ },
  ];
  for (const { title, code, args, says } of argumentRefusals) {
    it(`answers ${title} with a signed never_claimed report carrying ${code} and its message, records a refusal so no claim can follow, and replays it`, async () => {
      const auth = authorize(executor, { args });
      const first = await executor.channel.request('execute', executeBody(auth));
      expect(first).to.include({ status: 'never_claimed', replayed: false });
      const report = decodeArtifact('report', first.report, { trustedSigners: [executor.identity.public_key] });
      expect(report.body.claimed_at).to.equal(null);
      expect(report.body.refusal?.code).to.equal(code);
      expect(report.body.refusal?.message).to.match(says);
      const rows = sqlite(home.ledgerFile, `SELECT kind, claim_id FROM claims WHERE operation_id = '${auth.operationId}'`).rows;
      expect(rows).to.deep.equal([{ kind: 'refusal', claim_id: report.body.claim_id }]);
      expect(notesFor(home, auth.operationId)).to.have.length(0);
      const again = await executor.channel.request('execute', executeBody(auth));
      expect(again).to.deep.equal({ report: first.report, status: 'never_claimed', replayed: true });
      const reconciled = await executor.channel.request('reconcile_operation', { authorization: auth.text, expected: auth.expected });
      expect(reconciled.report).to.equal(first.report);
    });
  }

  it('accepts a note of exactly 4,096 UTF-8 bytes', async () => {
    const note = 'é'.repeat(2048);
    expect(Buffer.byteLength(note)).to.equal(4096);
    const auth = authorize(executor, { args: { note } });
    const result = await executor.channel.request('execute', executeBody(auth));
    expect(result.status).to.equal('completed');
    expect(notesFor(home, auth.operationId)[0]?.note).to.equal(note);
  });

  it('reports failed_before_effect when the adapter refuses before its effect', async () => {
    const auth = authorize(executor, { tool: 'fixture/refuse', args: {} });
    const result = await executor.channel.request('execute', executeBody(auth));
    expect(result.status).to.equal('failed_before_effect');
  });

  it('keeps the claim without a report when the adapter throws, and never runs it again', async () => {
    const auth = authorize(executor, { tool: 'fixture/unsure', args: {} });
    const first = await refused(executor.channel.request('execute', executeBody(auth)));
    expect(first.code).to.equal('outcome_unknown');
    const again = await refused(executor.channel.request('execute', executeBody(auth)));
    expect(again.code).to.equal('outcome_unknown');
    const view = sqlite(home.ledgerFile, `SELECT state FROM claims_view WHERE operation_id = '${auth.operationId}'`).rows;
    expect(view).to.deep.equal([{ state: 'outcome_unknown' }]);
  });

  it('shows the claim, its time and its report status through claims.get', async () => {
    const auth = authorize(executor);
    const result = await executor.channel.request('execute', executeBody(auth));
    const { claim } = await executor.channel.request('claims.get', { operation_id: auth.operationId });
    expect(claim).to.include({ operation_id: auth.operationId, kind: 'claim', report_status: 'completed', report: result.report, archived: false });
    expect(claim?.claimed_at).to.be.a('number');
    expect((await executor.channel.request('claims.get', { operation_id: 'f'.repeat(64) })).claim).to.equal(null);
  });

  it('signs reports with its own key, never with the kernel key', async () => {
    const auth = authorize(executor);
    const result = await executor.channel.request('execute', executeBody(auth));
    expect(() => decodeArtifact('report', result.report, { trustedSigners: [KERNEL.publicKeyHex] })).to.throw();
  });
});
