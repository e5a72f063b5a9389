// A service whose clock ran an hour ahead and was set back (docs/RELIABILITY.md,
// fault model): the executor's high-water mark keeps judging windows at the
// later time, so a fresh invoke ends without effect, and the supervisor's log
// says why in the executor's words (executor-proc/handlers/execute.ts windowClosed).
import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { untilHolds } from '../helpers/eventually.js';
import { logEvents, sqlite, startService, type TestService } from '../helpers/service.js';
import { programPath } from '../../shared/entry-points.js';

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

/** A service whose kernel alone reads its clock's offset from `clockFile` (0 to begin with): its argv sets the variable for it. */
function startWithKernelClock(clockFile: string): Promise<TestService> {
  writeFileSync(clockFile, '0\n');
  return startService({
    config: (root: string) => ({ kernel: { argv: ['/usr/bin/env', `CUSTODY_TEST_CLOCK_FILE=${clockFile}`, process.execPath, programPath('kernel'), '--dir', path.join(root, 'kernel')] } }),
  });
}

describe("a kernel whose clock runs ahead of the executor's", function () {
  this.timeout(60_000);
  let dir: string;
  let service: TestService;
  const clockFile = () => path.join(dir, 'kernel-clock-offset');

  before(async () => {
    dir = mkdtempSync(path.join(tmpdir(), 'custody-kernel-clock-'));
    service = await startWithKernelClock(clockFile());
    expect((await service.http('POST', '/v1/grants', { tool: 'review-notes/append', max_invocations: 10, ttl_ms: 3 * 3_600_000 })).status).to.equal(201);
  });
  after(async () => {
    await service?.stop();
    service?.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  it('says so once, as a warning and an incident naming how far ahead, while the execute waits for its window', async () => {
    writeFileSync(clockFile(), `${600_000}\n`);
    const waiting = await service.http('POST', '/v1/invoke', { tool: 'review-notes/append', request_id: 'kernel-ahead', arguments: { note: 'ahead' }, wait_ms: 1_000 }, 'agent');
    expect(waiting.status, JSON.stringify(waiting.body)).to.equal(202);
    await untilHolds('clock_skew said', () => logEvents(service, 'clock_skew').some((line) => line.request_id === 'kernel-ahead'), 10_000);
    const said = logEvents(service, 'clock_skew').find((line) => line.request_id === 'kernel-ahead')!;
    expect(said.level).to.equal('warn');
    expect(String(said.message)).to.match(/the kernel signed kernel-ahead's window to open at .*, (59\d|600) s ahead of this supervisor's clock: the kernel's clock runs ahead/);
    const { body } = await service.http('GET', '/v1/incidents?limit=50');
    expect((body.incidents as Array<{ kind: string }>).filter((incident) => incident.kind === 'clock_skew')).to.have.length(1);
    // The execute is asked again every 5 s until its window opens (signed ten minutes ahead): not said again each time.
    await new Promise((resolve) => setTimeout(resolve, 6_000));
    expect(logEvents(service, 'clock_skew').filter((line) => line.request_id === 'kernel-ahead'), 'said once').to.have.length(1);
  });
});

describe('a kernel whose clock is stepped back after a grant expired', function () {
  this.timeout(60_000);
  let dir: string;
  let service: TestService;
  const clockFile = () => path.join(dir, 'kernel-clock-offset');

  before(async () => {
    dir = mkdtempSync(path.join(tmpdir(), 'custody-kernel-back-'));
    service = await startWithKernelClock(clockFile());
  });
  after(async () => {
    await service?.stop();
    service?.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  it('does not sign allow for the grant it refused as expired: grants are judged at max(clock, the high-water mark kernel.db keeps)', async () => {
    const kernelDb = path.join(service.paths.kernelDir, 'kernel.db');
    // Only this grant covers the tool: the one init made is revoked.
    const { body: listed } = await service.http('GET', '/v1/grants');
    for (const grant of listed.grants as Array<{ capability_id: string }>) await service.http('DELETE', `/v1/grants/${grant.capability_id}`);
    expect((await service.http('POST', '/v1/grants', { tool: 'review-notes/append', max_invocations: 10, ttl_ms: 60_000 })).status).to.equal(201);
    const invoke = (requestId: string) => service.http('POST', '/v1/invoke', { tool: 'review-notes/append', request_id: requestId, arguments: { note: requestId } }, 'agent');
    // The kernel's clock runs two minutes on: the grant has expired.
    writeFileSync(clockFile(), `${120_000}\n`);
    const expired = await invoke('after-expiry');
    expect(expired.body, JSON.stringify(expired.body)).to.include({ reason: 'capability_expired' });
    const mark = (await sqlite(kernelDb, 'SELECT clock_hwm_ms FROM head'))[0]!.clock_hwm_ms as number;
    expect(mark, 'the mark is the time it was refused at').to.be.at.least(Date.now() + 100_000);
    // Stepped back (NTP): the grant is still expired for the kernel, which signs nothing that contradicts its refusal.
    writeFileSync(clockFile(), '0\n');
    const back = await invoke('clock-set-back');
    expect(back.body, JSON.stringify(back.body)).to.include({ reason: 'capability_expired' });
    expect(await sqlite(kernelDb, "SELECT count(*) AS n FROM receipts_view WHERE request_id = 'clock-set-back' AND verdict = 'allow'")).to.deep.equal([{ n: 0 }]);
    // The mark itself never goes back, even from the sqlite3 shell.
    expect(() => execFileSync('sqlite3', [kernelDb, 'UPDATE head SET clock_hwm_ms = 1'], { stdio: 'pipe' })).to.throw(/the clock high-water mark never goes back/);
  });
});
