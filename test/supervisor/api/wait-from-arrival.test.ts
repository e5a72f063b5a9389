// An invoke's wait_ms counts from the moment it arrived, not from the moment
// its drive began: the check before the reserve (here, the wait for a
// running executor while the only one restarts) spends it too, so a client
// that allows the answer its wait plus a margin (supervisor/client) hears by
// then. The executor is killed and restarts after a backoff of 1.5 s; an
// invoke sent while it is down waits for it, then runs a tool that runs
// until the test lets it end; with wait_ms 5000 the 202 comes ~5 s after
// sending, not ~5 s after the executor came back. (A check that outlasts the
// whole wait is answered when it ends: nothing is logged before it.)
import { expect } from 'chai';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { FIXTURE_EXECUTOR, startService, type TestService } from '../../helpers/service.js';
import { until } from '../../helpers/eventually.js';

type Child = { role: string; state: string; pid: number | null };

describe('the wait a call asks for', function () {
  this.timeout(90_000);
  let service: TestService;

  before(async () => {
    service = await startService({
      config: {
        executors: [FIXTURE_EXECUTOR],
        restart: { max_restarts: 20, period_s: 60, backoff_initial_ms: 1_500, backoff_max_ms: 1_500, quarantine_after_crashes: 10 },
      },
    });
    expect((await service.http('POST', '/v1/grants', { tool: 'fixture/*', max_invocations: 100, ttl_ms: 3_600_000 })).status).to.equal(201);
  });

  after(async () => {
    await service?.stop();
    service?.cleanup();
  });

  const executor = async () => ((await service.http('GET', '/v1/status')).body.children as Child[]).find((c) => c.role === 'executor')!;

  it('counts from the call\'s arrival: the wait for a running executor before the reserve is part of it', async () => {
    const running = await until('a running executor', async () => {
      const row = await executor();
      return row.state === 'running' && row.pid !== null ? row : undefined;
    });
    process.kill(running.pid!, 'SIGKILL');
    await until('the executor is down', async () => ((await executor()).state !== 'running' ? true : undefined));
    const sent = performance.now();
    const latch = mkdtempSync(path.join(tmpdir(), 'custody-wait-'));
    // When the executor is running again, as the status shows it, while the call waits.
    let backAfter: number | null = null;
    const watching = (async () => {
      while (backAfter === null && performance.now() - sent < 20_000) {
        const row = await executor();
        if (row.state === 'running' && row.pid !== null && row.pid !== running.pid) backAfter = performance.now() - sent;
        else await new Promise((resolve) => setTimeout(resolve, 50));
      }
    })();
    const answer = await service.http('POST', '/v1/invoke', { tool: 'fixture/latch', request_id: 'wait-1', arguments: { path: path.join(latch, 'go') }, wait_ms: 5_000 }, 'agent');
    const elapsed = performance.now() - sent;
    await watching;
    writeFileSync(path.join(latch, 'go'), '');
    expect(answer.status, JSON.stringify(answer.body)).to.equal(202);
    expect(answer.body).to.include({ request_id: 'wait-1', final: false });
    expect(backAfter, 'the call waited for the restarted executor, which came back inside the wait').to.be.within(1_200, 5_000);
    // Counted from the drive's start it would have been the time the executor took to come back (over 1.2 s), then 5 s.
    expect(elapsed, 'the 202 came wait_ms after sending').to.be.within(4_900, 6_000);
    const ended = await service.http('POST', '/v1/invoke', { tool: 'fixture/latch', request_id: 'wait-1', arguments: { path: path.join(latch, 'go') }, wait_ms: 30_000 }, 'agent');
    expect(ended.body).to.include({ request_id: 'wait-1', outcome: 'completed' });
    rmSync(latch, { recursive: true, force: true });
  });
});
