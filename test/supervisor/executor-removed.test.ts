// An executor taken out of custody.json while an operation started on it is
// unfinished: the operation is never moved to another executor (only that
// ledger can say whether it ran), and the recovery sweep says what to do,
// naming the identity and the way back, instead of a restart command for a
// child that no longer exists.
import { expect } from 'chai';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { untilHolds } from '../helpers/eventually.js';
import { FIXTURE_EXECUTOR, type TestService, sqlite, startService } from '../helpers/service.js';

type Incident = { kind: string; code: string | null; operation_id: string | null; message: string };

describe('an executor removed from custody.json with an operation unfinished on it', function () {
  this.timeout(90_000);
  let service: TestService;
  const latch = path.join(tmpdir(), `custody-removed-latch-${process.pid}`);

  before(async () => {
    service = await startService({ config: { executors: [{ ...FIXTURE_EXECUTOR, name: 'a' }, { ...FIXTURE_EXECUTOR, name: 'b' }] } });
    expect((await service.http('POST', '/v1/grants', { tool: 'fixture/*', max_invocations: 100, ttl_ms: 3_600_000 })).status).to.equal(201);
  });
  after(async () => {
    rmSync(latch, { force: true });
    await service.stop();
    service.cleanup();
  });

  it('leaves the operation waiting, run nowhere else, and names the identity and how to bring it back', async () => {
    // The first latch goes to a, the second to b (the fewest in flight).
    for (const id of ['on-a', 'on-b']) {
      const held = await service.http('POST', '/v1/invoke', { tool: 'fixture/latch', request_id: id, arguments: { path: latch }, wait_ms: 0 }, 'agent');
      expect(held.status, JSON.stringify(held.body)).to.equal(202);
      const db = path.join(service.paths.supervisorDir, 'supervisor.db');
      await untilHolds(`${id} executing`, async () => (await sqlite(db, `SELECT phase FROM requests WHERE request_id = '${id}'`))[0]?.phase === 'executing');
    }
    const onB = (await sqlite(path.join(service.paths.supervisorDir, 'supervisor.db'), "SELECT operation_id, executor FROM requests WHERE request_id = 'on-b'"))[0] as { operation_id: string; executor: string };
    expect(onB.executor).to.equal('b');
    service.process.kill('SIGKILL');
    await new Promise((resolve) => service.process.once('close', resolve));
    const file = service.paths.config;
    const config = JSON.parse(readFileSync(file, 'utf8')) as { executors: Array<{ name: string }> };
    writeFileSync(file, JSON.stringify({ ...config, executors: config.executors.filter((e) => e.name !== 'b') }));
    writeFileSync(latch, '');
    service = await service.restart();
    const incidents = async () => ((await service.http('GET', '/v1/incidents?limit=500')).body.incidents as Incident[]).filter((i) => i.operation_id === onB.operation_id);
    await untilHolds('the sweep says the operation waits', async () => (await incidents()).some((i) => i.kind === 'waiting_for_executor'));
    const waiting = (await incidents()).find((i) => i.kind === 'waiting_for_executor')!;
    expect(waiting.code).to.equal('executor_unknown');
    expect(waiting.message).to.contain('custody.json no longer lists').and.to.contain('Put that executor back');
    // Never run on a: its ledger has no claim of it, and the request is not final.
    const claims = await sqlite(path.join(service.paths.executorDir('a'), 'ledger.db'), `SELECT count(*) AS n FROM claims WHERE operation_id = '${onB.operation_id}'`);
    expect(claims).to.deep.equal([{ n: 0 }]);
    const phase = (await sqlite(path.join(service.paths.supervisorDir, 'supervisor.db'), "SELECT phase FROM requests WHERE request_id = 'on-b'"))[0]?.phase;
    expect(phase).to.not.equal('settled');
  });
});
