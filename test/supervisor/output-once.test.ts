// supervisor.db keeps a completed operation's output once, in its signed
// report, not a second time in `output` (supervisor/operations/outcome.ts
// outputOf): a 100 KB output adds ~100 KB to the store, not ~200 KB, and
// every answer (the first, a repeated invoke, a lookup) carries it whole. A
// row that still has `output` (written before) is answered from it.
import { expect } from 'chai';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import { FIXTURE_EXECUTOR, sqlite, startService, type TestService } from '../helpers/service.js';

const COUNT = 100_000;

describe("the supervisor's copy of an output", function () {
  this.timeout(60_000);
  let service: TestService;
  let db: string;

  before(async () => {
    service = await startService({ config: { executors: [FIXTURE_EXECUTOR] } });
    db = path.join(service.paths.supervisorDir, 'supervisor.db');
    expect((await service.http('POST', '/v1/grants', { tool: 'fixture/*', max_invocations: 100, ttl_ms: 3_600_000 })).status).to.equal(201);
  });

  after(async () => {
    await service.stop();
    service.cleanup();
  });

  const invoke = (requestId: string) =>
    service.http('POST', '/v1/invoke', { tool: 'fixture/large', arguments: { char: 'x', count: COUNT }, request_id: requestId });

  it('is the report: output is not stored beside it, and every answer carries the output whole', async () => {
    const first = await invoke('large-1');
    expect(first.body).to.include({ outcome: 'completed' });
    expect(first.body.output).to.deep.equal({ text: 'x'.repeat(COUNT) });

    const [row] = await sqlite(db, "SELECT output IS NULL AS no_copy, length(report) AS report_bytes, report ->> '$.body.output.text' = printf('%.*c', 100000, 'x') AS carried FROM requests WHERE request_id = 'large-1'");
    expect({ no_copy: row!.no_copy, carried: row!.carried }).to.deep.equal({ no_copy: 1, carried: 1 });
    expect(row!.report_bytes).to.be.above(COUNT);

    expect(await sqlite(db, "SELECT length(output) AS bytes FROM requests_output WHERE request_id = 'large-1'"), 'the shell still reads it').to.deep.equal([{ bytes: COUNT + 11 }]);
    expect(await sqlite(db, 'PRAGMA user_version'), 'an older build, which would answer null, refuses the store').to.deep.equal([{ user_version: 5 }]);

    const again = await invoke('large-1');
    expect(again.body, 'a repeated invoke answers the same').to.deep.equal(first.body);
    const looked = (await service.http('GET', '/v1/operations/large-1')).body.request as Record<string, unknown>;
    expect(looked.output).to.deep.equal(first.body.output);
    expect(looked.report).to.equal(first.body.report);
  });

  it('answers null for a report with no output, and from the column for a row that kept its output', async () => {
    const released = await service.http('POST', '/v1/invoke', { tool: 'fixture/refuse', arguments: {}, request_id: 'released-1' });
    expect(released.body).to.include({ outcome: 'released', output: null });
    expect(await sqlite(db, "SELECT output FROM requests WHERE request_id = 'released-1'")).to.deep.equal([{ output: null }]);

    await invoke('large-2');
    // As a build before this one wrote it: the output beside the report, read by this build after its start
    // (a running service reads its rows from memory until it writes them again, supervisor/store/supervisor-store.ts).
    await service.stop();
    await promisify(execFile)('sqlite3', ['-cmd', '.timeout 5000', db, `UPDATE requests SET output = '{"text":"kept beside the report"}' WHERE request_id = 'large-2'`]);
    service = await service.restart();
    const looked = (await service.http('GET', '/v1/operations/large-2')).body.request as Record<string, unknown>;
    expect(looked.output).to.deep.equal({ text: 'kept beside the report' });
  });
});
