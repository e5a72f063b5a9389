// A supervisor that was stopped (SIGSTOP, a debugger, swap) does not blame
// an executor for the time it did not run itself: the execute below waits on
// the supervisor (its claim's head witnessed before the effect) all through
// the stop, and comes back well within its deadline's running time
// (shared/timeout.ts runningNow, supervisor/watchdog/deadlines.ts).
import { expect } from 'chai';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { until } from '../../helpers/eventually.js';
import { FIXTURE_EXECUTOR, startService, type TestService } from '../../helpers/service.js';

const DEADLINE_MS = 2_000;

describe('the watchdog after its own supervisor was stopped', function () {
  this.timeout(60_000);
  let service: TestService;
  let faults: string;

  before(async () => {
    faults = mkdtempSync(path.join(tmpdir(), 'custody-sup-stopped-'));
    service = await startService({
      env: { CUSTODY_FAULT: 'executor:pause_before_claim', CUSTODY_FAULT_DIR: faults },
      config: { executors: [{ ...FIXTURE_EXECUTOR, deadlines_ms: { '*': DEADLINE_MS } }] },
    });
    expect((await service.http('POST', '/v1/grants', { tool: 'fixture/*', max_invocations: 10, ttl_ms: 3_600_000 })).status).to.equal(201);
  });

  after(async () => {
    if (service) process.kill(service.process.pid!, 'SIGCONT');
    await service?.stop();
    service?.cleanup();
    rmSync(faults, { recursive: true, force: true });
  });

  it('lets an execute that waited on the stopped supervisor complete, past the deadline on the wall clock: no kill, no release', async () => {
    const answer = service.http('POST', '/v1/invoke', { tool: 'fixture/sleep', request_id: 'waited-on-me', arguments: { ms: 100 }, wait_ms: 30_000 }, 'agent');
    await until('the execute paused before its claim', () => Promise.resolve(existsSync(path.join(faults, 'executor.pause_before_claim.reached')) ? true : undefined));
    const stoppedAt = performance.now();
    process.kill(service.process.pid!, 'SIGSTOP');
    // The executor claims now and waits for the stopped supervisor to witness its head before the effect.
    writeFileSync(path.join(faults, 'executor.pause_before_claim.release'), '');
    await new Promise((resolve) => setTimeout(resolve, DEADLINE_MS + 1_500));
    process.kill(service.process.pid!, 'SIGCONT');
    expect(performance.now() - stoppedAt, 'the stop outlasted the deadline').to.be.above(DEADLINE_MS);
    const { status, body } = await answer;
    expect(status, JSON.stringify(body)).to.equal(200);
    expect(body).to.include({ outcome: 'completed', phase: 'settled' });
    const { body: current } = await service.http('GET', '/v1/status');
    const executor = (current.children as Array<{ role: string; restarts: number }>).find((child) => child.role === 'executor')!;
    expect(executor.restarts, 'the executor was not killed').to.equal(0);
    expect(service.stderr.filter((line) => line.includes('watchdog')), 'no watchdog kill').to.deep.equal([]);
  });
});
