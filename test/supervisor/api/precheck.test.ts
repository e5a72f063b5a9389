// Refusals carry their cause: a call the adapter would refuse (its byte bound,
// its schema, no adapter for the tool) is refused before anything is
// reserved, naming the size and the bound; a tool no executor serves says
// so and nothing is recorded; a served tool no grant covers says so, naming
// the tool. Checked on the CLI's output and exit code, the API's
// answer, and the stores: no request logged, no operation, no hold.
import { expect } from 'chai';
import path from 'node:path';
import { FIXTURE_EXECUTOR, type TestService, sqlite, startService } from '../../helpers/service.js';

describe('refusals before reserving', function () {
  this.timeout(90_000);
  let service: TestService;

  before(async () => {
    // fixture/* is served (its adapters loaded) but no grant covers it.
    service = await startService({ config: { executors: [FIXTURE_EXECUTOR] } });
  });

  after(async () => {
    await service?.stop();
    service?.cleanup();
  });

  const kernelOperations = async () => Number((await sqlite(path.join(service.paths.kernelDir, 'kernel.db'), 'SELECT count(*) AS n FROM operations'))[0]!.n);
  const requests = async () => Number((await sqlite(path.join(service.paths.supervisorDir, 'supervisor.db'), 'SELECT count(*) AS n FROM requests'))[0]!.n);
  const grantUse = async () => {
    const { grants } = (await service.http('GET', '/v1/grants')).body as { grants: Array<{ invocations_used: number; invocations_held: number }> };
    return grants.map((g) => [g.invocations_used, g.invocations_held]);
  };

  const note = (bytes: number) => `note=${'a'.repeat(bytes)}`;
  const refusals: Array<{ what: string; args: string[]; code: string; says: RegExp }> = [
    { what: 'a note one byte past the bound', args: ['review-notes/append', '--arg', note(4097)], code: 'arguments_too_large', says: /note is 4097 UTF-8 bytes; at most 4096/ },
    { what: "the issue's 5000-byte note", args: ['review-notes/append', '--arg', note(5000)], code: 'arguments_too_large', says: /note is 5000 UTF-8 bytes; at most 4096/ },
    { what: 'an argument the schema does not know', args: ['review-notes/append', '--arg', 'note=x', '--arg', 'colour=red'], code: 'arguments_invalid', says: /Unrecognized key: "colour"/ },
    { what: 'a granted tool no adapter serves', args: ['review-notes/delete', '--arg', 'note=x'], code: 'adapter_unknown', says: /no adapter serves tool review-notes\/delete/ },
  ];

  for (const { what, args, code, says } of refusals) {
    it(`refuses ${what} with its cause, before any request, operation or hold`, async () => {
      const [ops, reqs, use] = [await kernelOperations(), await requests(), await grantUse()];
      const result = await service.cli(['invoke', ...args]);
      expect(result.code, result.stderr + result.stdout).to.equal(3);
      expect(result.stderr).to.match(says);
      expect(result.stderr).to.contain(`[${code}]`);
      expect(result.stderr).to.contain('nothing was reserved');
      expect([await kernelOperations(), await requests(), await grantUse()]).to.deep.equal([ops, reqs, use]);
    });
  }

  it('runs a note exactly at the bound', async () => {
    const result = await service.cli(['invoke', 'review-notes/append', '--arg', note(4096)]);
    expect(result.code, result.stderr).to.equal(0);
    expect(result.stdout).to.match(/^Completed: /);
  });

  it('answers the API with the code and the size and bound', async () => {
    const answer = await service.http('POST', '/v1/invoke', { tool: 'review-notes/append', arguments: { note: 'b'.repeat(5000) } }, 'agent');
    expect(answer.status).to.equal(413);
    expect(answer.body.code).to.equal('arguments_too_large');
    expect(answer.body.message).to.match(/5000 UTF-8 bytes; at most 4096/);
  });

  it('says that no executor serves a tool, not that a grant is missing, and records nothing', async () => {
    const before = await requests();
    const result = await service.cli(['invoke', 'nosuch/tool', '--request-id', 'unserved-1']);
    expect(result.code).to.equal(3);
    expect(result.stderr).to.match(/no executor serves nosuch\/tool: .*GET \/v1\/tools lists them.*nothing was recorded \[tool_unknown\]/);
    expect(await requests(), 'no request logged').to.equal(before);
    expect((await service.http('GET', '/v1/operations/unserved-1', undefined, 'agent')).status).to.equal(404);
  });

  it('says that no grant covers a served tool, naming it', async () => {
    const result = await service.cli(['invoke', 'fixture/hang']);
    expect(result.code).to.equal(3);
    expect(result.stdout).to.match(/denied: capability_unknown\): no grant covers fixture\/hang; an operator can add one: custody grant add --tool fixture\/hang/);
    const name = /Refused: (\S+)/.exec(result.stdout)![1]!;
    const trace = await service.cli(['trace', name]);
    expect(trace.stdout).to.match(/reason capability_unknown \(no grant covers fixture\/hang/);
  });
});
