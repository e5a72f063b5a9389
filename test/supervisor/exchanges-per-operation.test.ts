// What one invoke costs the children, counted in their stores and their
// adapter, through the whole service: the kernel decides it in two write
// batches (reserve_start, then settle: its store head moves by two, where a
// reserve and a start sent apart make three), and the adapter's argument
// check runs once (arguments.check before the reserve; execute takes that
// verdict, executor-proc/admitted-arguments.ts). docs/PERFORMANCE.md "Stop
// 19: reserve and start in one exchange" and "Stop 19: one argument check
// per operation".
import { expect } from 'chai';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { FIXTURE_EXECUTOR, sqlite, startService, type TestService } from '../helpers/service.js';

describe('the exchanges of one operation, through the service', function () {
  this.timeout(60_000);
  let service: TestService;
  let fixtureDir: string;

  before(async () => {
    // fixture/counted-check appends to $CUSTODY_FAULT_DIR/argument-checks each time its schema runs.
    fixtureDir = mkdtempSync(path.join(tmpdir(), 'custody-exchanges-'));
    service = await startService({
      config: { executors: [FIXTURE_EXECUTOR] },
      env: { CUSTODY_FAULT_DIR: fixtureDir },
    });
    expect((await service.http('POST', '/v1/grants', { tool: 'fixture/*', max_invocations: 100, ttl_ms: 3_600_000 })).status).to.equal(201);
  });

  after(async () => {
    await service.stop();
    service.cleanup();
    rmSync(fixtureDir, { recursive: true, force: true });
  });

  const kernelHead = async () => (await sqlite(path.join(service.paths.kernelDir, 'kernel.db'), 'SELECT seq FROM head'))[0]!.seq as number;
  const checks = () => {
    const file = path.join(fixtureDir, 'argument-checks');
    return existsSync(file) ? readFileSync(file, 'utf8').split('\n').filter((line) => line !== '').length : 0;
  };

  it('takes two kernel write batches and one run of the adapter’s argument check per invoke', async () => {
    for (const n of [1, 2, 3]) {
      const head = await kernelHead();
      const before = checks();
      const answer = await service.http('POST', '/v1/invoke', { tool: 'fixture/counted-check', arguments: { n }, request_id: `counted-${n}` });
      expect(answer.body, JSON.stringify(answer.body)).to.include({ outcome: 'completed' });
      expect(answer.body.output).to.deep.equal({ n });
      expect(await kernelHead(), `invoke ${n}: kernel write batches`).to.equal(head + 2);
      expect(checks(), `invoke ${n}: argument checks`).to.equal(before + 1);
    }
  });
});
