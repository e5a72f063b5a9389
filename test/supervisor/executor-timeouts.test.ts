// Whose deadline is it: the executor's own argument-check timeout is a
// refusal before any claim (argument_check_timeout) and kills nothing; only
// the supervisor's own deadline fires the watchdog. And the recovery
// sweep's reconcile is the driver's step: a hung exchange is killed at the
// tool's reconcile deadline.
import { expect } from 'chai';
import path from 'node:path';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import { isGone } from '../../shared/child/proc-stat.js';
import { FIXTURE_EXECUTOR, startService, type TestService } from '../helpers/service.js';

const run = promisify(execFile);

type Incident = { kind: string; operation_id: string | null; message: string; code: string | null };

async function executorPid(service: TestService): Promise<number> {
  const { body } = await service.http('GET', '/v1/status');
  const pid = (body.children as Array<{ role: string; pid: number | null }>).find((c) => c.role === 'executor')!.pid;
  if (pid === null) throw new Error('no running executor');
  return pid;
}

async function incidentsOf(service: TestService, operationId: string): Promise<Incident[]> {
  const { body } = await service.http('GET', '/v1/incidents?limit=500');
  return (body.incidents as Incident[]).filter((i) => i.operation_id === operationId).reverse();
}

async function kernelState(service: TestService, name: string): Promise<string | undefined> {
  const { body } = await service.http('GET', '/v1/operations?limit=1000');
  return (body.operations as Array<{ name: string; state: string }>).find((o) => o.name === name)?.state;
}

describe('executor-side and supervisor-side deadlines', function () {
  this.timeout(90_000);
  let service: TestService | undefined;

  afterEach(async () => {
    await service?.stop();
    service?.cleanup();
    service = undefined;
  });

  it("answers an executor's own argument-check timeout as argument_check_timeout, kills nothing, and releases the hold", async () => {
    service = await startService({ config: { executors: [{ ...FIXTURE_EXECUTOR, deadlines_ms: { '*': 30_000 } }] } });
    expect((await service.http('POST', '/v1/grants', { tool: 'fixture/*', max_invocations: 100, ttl_ms: 3_600_000 })).status).to.equal(201);
    const before = await executorPid(service);
    // The fixture's schema blocks its adapter host for 1.5 s; its own deadline is 300 ms, the watchdog's 30 s.
    const answer = await service.http('POST', '/v1/invoke', { tool: 'fixture/slow-check', request_id: 'slow-check-1', arguments: { block_ms: 1500 } }, 'agent');
    const outcome = answer.body as { outcome: string; final: boolean; operation_id: string };
    expect(outcome, JSON.stringify(answer.body)).to.include({ outcome: 'released', final: true });
    expect(await executorPid(service), 'the same executor serves on').to.equal(before);
    const kinds = (await incidentsOf(service, outcome.operation_id)).map((i) => i.kind);
    expect(kinds).to.not.include('watchdog').and.not.include('watchdog_kill');
    expect(service.stderr.join('\n')).to.contain('"code":"argument_check_timeout"');
    const status = await service.http('GET', '/v1/status');
    expect((status.body.children as Array<{ role: string; restarts: number }>).find((c) => c.role === 'executor')!.restarts).to.equal(0);
  });

  it("kills a hung executor at the tool's reconcile deadline when the recovery sweep reconciles an operation no request carries", async function () {
    this.slow(30_000);
    service = await startService({
      config: {
        executors: [{ ...FIXTURE_EXECUTOR, deadlines_ms: { '*': 30_000, 'fixture/sleep': 1 } }],
        kernel: { settings: { execution_window_ms: 2000 } },
        // The stopped executor is the sweep's to find hung, not the heartbeat's.
        timing: { heartbeat_interval_ms: 1000, heartbeat_timeout_ms: 60_000, reconcile_exchange_ms: 1000 },
      },
    });
    expect((await service.http('POST', '/v1/grants', { tool: 'fixture/*', max_invocations: 100, ttl_ms: 3_600_000 })).status).to.equal(201);
    const authorized = await service.http('POST', '/v1/authorize', { tool: 'fixture/sleep', arguments: { ms: 10 }, operation: 'orphan-1' });
    expect(authorized.status, JSON.stringify(authorized.body)).to.equal(200);
    const operationId = (authorized.body as { operation_id: string }).operation_id;
    // The request log loses it: the kernel's committed start is an orphan for the sweep.
    await run('sqlite3', [path.join(service.paths.supervisorDir, 'supervisor.db'), "DELETE FROM requests WHERE request_id = 'orphan-1'"]);
    const hung = await executorPid(service);
    process.kill(hung, 'SIGSTOP');
    const deadline = Date.now() + 40_000;
    while (!(await incidentsOf(service, operationId)).some((i) => i.kind === 'orphan_settled')) {
      if (Date.now() > deadline) throw new Error(`orphan not settled: ${JSON.stringify(await incidentsOf(service, operationId))}`);
      await sleep(200);
    }
    const incidents = await incidentsOf(service, operationId);
    const kill = incidents.find((i) => i.kind === 'reconcile_kill');
    // max(reconcile_exchange_ms 1000, tool deadline 1 + the executor's 5000 margin + 5000): the watchdog's rule, not the old flat 15 s or 1 s.
    expect(kill?.message, JSON.stringify(incidents)).to.contain('unanswered within 10001 ms');
    expect(isGone(hung, null), 'the hung executor was killed and reaped').to.equal(true);
    expect(await executorPid(service)).to.not.equal(hung);
    expect(await kernelState(service, 'orphan-1')).to.equal('released');
  });
});
