// A service whose clock ran an hour ahead and was set back (docs/RELIABILITY.md,
// fault model): the executor's high-water mark keeps judging windows at the
// later time, so a fresh invoke ends without effect, and the supervisor's log
// says why in the executor's words (executor-proc/handlers/execute.ts windowClosed).
import { expect } from 'chai';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { untilHolds } from '../helpers/eventually.js';
import { logEvents, startService, type TestService } from '../helpers/service.js';

describe('a clock that ran ahead and was set back', function () {
  this.timeout(60_000);
  let dir: string;
  let service: TestService;
  const clockFile = () => path.join(dir, 'clock-offset');

  before(async () => {
    dir = mkdtempSync(path.join(tmpdir(), 'custody-clock-'));
    writeFileSync(clockFile(), '0\n');
    service = await startService({ env: { CUSTODY_TEST_CLOCK_FILE: clockFile() } });
    expect((await service.http('POST', '/v1/grants', { tool: 'review-notes/append', max_invocations: 10, ttl_ms: 3 * 3_600_000 })).status).to.equal(201);
  });
  after(async () => {
    await service?.stop();
    service?.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  it('ends a fresh invoke without effect, and the supervisor logs the executor saying its clock is behind its mark', async () => {
    writeFileSync(clockFile(), `${3_600_000}\n`);
    const ahead = await service.http('POST', '/v1/invoke', { tool: 'review-notes/append', request_id: 'while-ahead', arguments: { note: 'ahead' } }, 'agent');
    expect(ahead.body.outcome, JSON.stringify(ahead.body)).to.equal('completed');
    writeFileSync(clockFile(), '0\n');
    const back = await service.http('POST', '/v1/invoke', { tool: 'review-notes/append', request_id: 'set-back', arguments: { note: 'back' } }, 'agent');
    expect(back.body.outcome, JSON.stringify(back.body)).to.equal('released');
    await untilHolds('execute_unanswered logged for set-back', () => logEvents(service, 'execute_unanswered').some((line) => line.request_id === 'set-back'), 10_000);
    const line = logEvents(service, 'execute_unanswered').find((entry) => entry.request_id === 'set-back')!;
    expect(line.code).to.equal('outside_window');
    expect(String(line.message)).to.match(/this executor's clock is 3[56]\d\d s behind the latest time it has answered by \(it ran ahead and was set back\)/);
  });
});
