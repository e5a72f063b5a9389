// Refusals carry their cause even when the supervisor could not check the
// arguments before reserving (the switch supervisor:skip_arguments_check, as
// if the executor could not be asked): execute refuses them before any claim
// with a signed never_claimed report that carries the code and the adapter's
// message; the kernel settles it as released with the code as its receipt's
// reason; the CLI, the API and `custody trace` say the size and the bound;
// the ledger holds a refusal (no claim can follow) and the journal nothing.
import { expect } from 'chai';
import path from 'node:path';
import { readEnvelope } from '../../shared/artifacts/artifact.js';
import { type TestService, sqlite, startService } from '../helpers/service.js';

describe('arguments refused by the executor before any claim', function () {
  this.timeout(90_000);
  let service: TestService;

  before(async () => {
    service = await startService({ env: { CUSTODY_FAULT: 'supervisor:skip_arguments_check' } });
  });

  after(async () => {
    await service?.stop();
    service?.cleanup();
  });

  const ledger = () => path.join(service.paths.executorDir('default'), 'ledger.db');
  const kernelDb = () => path.join(service.paths.kernelDir, 'kernel.db');
  const bodyOf = (text: string) => readEnvelope(text).envelope.body;
  const note = (bytes: number) => 'a'.repeat(bytes);

  async function ledgerRows(operationId: string) {
    return sqlite(ledger(), `SELECT kind, claimed_at FROM claims WHERE operation_id = '${operationId}'`);
  }

  it("answers the issue's 5000-byte note with its size and bound, settled released with the cause as the receipt's reason", async () => {
    const result = await service.cli(['invoke', 'review-notes/append', '--arg', `note=${note(5000)}`, '--request-id', 'big-note']);
    expect(result.code, result.stderr + result.stdout).to.equal(3);
    expect(result.stdout).to.match(/^Ended without effect: big-note; the executor's signed report says never_claimed, and the hold was released \(arguments_too_large: the executor refused the arguments before any claim: .*note is 5000 UTF-8 bytes; at most 4096/);
    expect(result.stdout).to.contain('change the arguments and use a new name');

    const shown = await service.http('GET', '/v1/operations/big-note');
    const request = (shown.body as { request: { operation_id: string; outcome: string; reason: string; cause: string; receipt: string; report: string } }).request;
    expect(request).to.include({ outcome: 'released', reason: 'arguments_too_large' });
    expect(request.cause).to.match(/note is 5000 UTF-8 bytes; at most 4096/);
    const receipt = bodyOf(request.receipt) as { reason: string; state: string; verdict: string; hold: { disposition: string; cost_units_charged: number } };
    expect(receipt).to.include({ reason: 'arguments_too_large', state: 'released', verdict: 'allow' });
    expect(receipt.hold).to.include({ disposition: 'released', cost_units_charged: 0 });
    const report = bodyOf(request.report) as { status: string; claimed_at: number | null; refusal: { code: string; message: string } };
    expect(report).to.include({ status: 'never_claimed', claimed_at: null });
    expect(report.refusal.code).to.equal('arguments_too_large');

    expect(await ledgerRows(request.operation_id)).to.deep.equal([{ kind: 'refusal', claimed_at: null }]);
    const holds = await sqlite(kernelDb(), `SELECT state FROM holds WHERE operation_id = '${request.operation_id}'`);
    expect(holds).to.deep.equal([{ state: 'released' }]);

    const trace = await service.cli(['trace', 'big-note']);
    expect(trace.stdout).to.match(/reason arguments_too_large \(the executor refused the arguments before any claim: .*note is 5000 UTF-8 bytes; at most 4096/);
    expect(trace.stdout).to.match(/report signed: never_claimed\s+refusal r[0-9a-f]+, before any claim: arguments_too_large: .*note is 5000 UTF-8 bytes/);
  });

  it('answers the API with the cause, and a retried invoke with the same signed report and receipt', async () => {
    const ask = () => service.http('POST', '/v1/invoke', { tool: 'review-notes/append', arguments: { note: note(4097) }, request_id: 'api-note' }, 'agent');
    const first = await ask();
    expect(first.status).to.equal(200);
    expect(first.body).to.include({ outcome: 'released', reason: 'arguments_too_large' });
    expect(first.body.cause).to.match(/note is 4097 UTF-8 bytes; at most 4096/);
    const again = await ask();
    expect(again.body.report).to.equal(first.body.report);
    expect(again.body.receipt).to.equal(first.body.receipt);
  });

  it('refuses an authorized, oversized note at execute: the executor replays the same signed report, nothing was claimed, the grant is untouched', async () => {
    const grantsBefore = (await service.http('GET', '/v1/grants')).body;
    const authorized = await service.cli(['authorize', 'review-notes/append', '--arg', `note=${note(4200)}`, '--operation', 'two-step']);
    expect(authorized.code, authorized.stderr + authorized.stdout).to.equal(0);
    const executed = await service.cli(['execute', 'two-step']);
    expect(executed.stdout).to.match(/status never_claimed/);
    const first = (await service.http('GET', '/v1/operations/two-step')).body as { request: { operation_id: string; report: string } };
    const again = await service.cli(['execute', 'two-step']);
    expect(again.stdout).to.match(/status never_claimed/);
    const second = (await service.http('GET', '/v1/operations/two-step')).body as { request: { report: string } };
    expect(second.request.report).to.equal(first.request.report);
    // The executor itself replays it: the ledger's answer for the operation is the same bytes.
    const claim = (await sqlite(ledger(), `SELECT r.report FROM reports r WHERE r.operation_id = '${first.request.operation_id}'`))[0] as { report: string };
    expect(claim.report).to.equal(first.request.report);
    expect(await ledgerRows(first.request.operation_id)).to.deep.equal([{ kind: 'refusal', claimed_at: null }]);
    const settled = await service.cli(['report', 'two-step']);
    expect(settled.code).to.equal(3);
    expect(settled.stdout).to.match(/arguments_too_large: the executor refused the arguments before any claim: .*note is 4200 UTF-8 bytes; at most 4096/);
    const grantsAfter = (await service.http('GET', '/v1/grants')).body as { grants: Array<{ invocations_used: number; invocations_held: number }> };
    const before = (grantsBefore as { grants: Array<{ invocations_used: number; invocations_held: number }> }).grants;
    expect(grantsAfter.grants.map((g) => g.invocations_used)).to.deep.equal(before.map((g) => g.invocations_used));
    expect(grantsAfter.grants.map((g) => g.invocations_held)).to.deep.equal(before.map((g) => g.invocations_held));
  });

  it('still runs a note exactly at the bound', async () => {
    const result = await service.cli(['invoke', 'review-notes/append', '--arg', `note=${note(4096)}`]);
    expect(result.code, result.stderr).to.equal(0);
  });
});
