// A failed child comes back: `custody restart CHILD` (and its API route)
// restarts it at once, a failed executor is retried by itself after
// restart.failed_cooldown_s, and a child stopped past its heartbeat is
// killed, reaped and restarted with its operations reconciled.
import { expect } from 'chai';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { FIXTURE_EXECUTOR, sqlite, startService, type TestService } from '../helpers/service.js';
import { until } from '../helpers/eventually.js';

interface ChildRow {
  name: string;
  role: string;
  state: string;
  pid: number | null;
  restarts: number;
  next_retry_at: number | null;
}

async function executor(service: TestService): Promise<ChildRow> {
  const { body } = await service.http('GET', '/v1/status');
  return (body.children as ChildRow[]).find((c) => c.role === 'executor')!;
}


async function incidentKinds(service: TestService): Promise<string[]> {
  const { body } = await service.http('GET', '/v1/incidents?limit=500');
  return (body.incidents as Array<{ kind: string }>).map((i) => i.kind);
}

/** kill -9 the executor and wait for the service to mark it failed (max_restarts 0: the first crash fails it). */
async function failExecutor(service: TestService): Promise<number> {
  const before = await until('a running executor', async () => {
    const row = await executor(service);
    return row.state === 'running' && row.pid !== null ? row : undefined;
  });
  process.kill(before.pid!, 'SIGKILL');
  await until('the executor failed', async () => ((await executor(service)).state === 'failed' ? true : undefined));
  return before.pid!;
}

const failFast = (cooldownS: number) => ({ restart: { max_restarts: 0, period_s: 60, backoff_initial_ms: 50, backoff_max_ms: 100, failed_cooldown_s: cooldownS } });

/** kill -9 the running executor and wait for its next process to run. */
async function crashAndWait(service: TestService): Promise<void> {
  const before = await until('a running executor', async () => {
    const row = await executor(service);
    return row.state === 'running' && row.pid !== null ? row : undefined;
  });
  process.kill(before.pid!, 'SIGKILL');
  await until('the executor restarted', async () => {
    const row = await executor(service);
    if (row.state === 'failed') throw new Error(`the executor failed: ${JSON.stringify(row)}`);
    return row.state === 'running' && row.pid !== null && row.pid !== before.pid ? true : undefined;
  });
}

describe('restart intensity and the wall clock', function () {
  this.timeout(90_000);

  it('counts restarts and uptimes on the monotonic clock: a wall clock stepped back an hour neither keeps old restarts counted and fails the child nor breaks status', async () => {
    const clockDir = mkdtempSync(path.join(tmpdir(), 'custody-clock-'));
    const clockFile = path.join(clockDir, 'offset');
    writeFileSync(clockFile, '0');
    const service = await startService({
      // A missed heartbeat under test load would be one more counted restart: the timeout is long here.
      config: { restart: { max_restarts: 2, period_s: 2, backoff_initial_ms: 50, backoff_max_ms: 100 }, timing: { heartbeat_interval_ms: 5_000, heartbeat_timeout_ms: 30_000 } },
      env: { CUSTODY_TEST_CLOCK_FILE: clockFile },
    });
    try {
      await crashAndWait(service);
      await crashAndWait(service);
      // The wall clock steps back an hour (NTP, a VM resumed); the period passes.
      writeFileSync(clockFile, String(-3_600_000));
      await new Promise((resolve) => setTimeout(resolve, 2_500));
      // Two restarts in the period are allowed: on the wall clock the two before the step would still count, and the first of these would fail it.
      await crashAndWait(service);
      await crashAndWait(service);
      expect((await executor(service)).restarts).to.be.at.least(4);
      // Uptimes too are on the monotonic clock: stepped back, they stay whole numbers of ms, and status answers as it describes.
      const status = await service.cli(['status', '--json']);
      expect(status.code, status.stderr).to.equal(0);
      const shown = JSON.parse(status.stdout) as { service: { uptime_ms: number }; children: Array<{ uptime_ms: number | null }> };
      expect(shown.service.uptime_ms).to.be.above(2_500);
      for (const child of shown.children) expect(child.uptime_ms).to.be.a('number').and.at.least(0);
    } finally {
      await service.stop();
      service.cleanup();
      rmSync(clockDir, { recursive: true, force: true });
    }
  });
});

/** A grant for the fixture tools, then fixture/sleep invoked for `ms` until its execute is in flight. */
async function sleeping(service: TestService, requestId: string, ms: number) {
  expect((await service.http('POST', '/v1/grants', { tool: 'fixture/*', max_invocations: 100, ttl_ms: 3_600_000 })).status).to.equal(201);
  const request = { tool: 'fixture/sleep', request_id: requestId, arguments: { ms } };
  expect((await service.http('POST', '/v1/invoke', { ...request, wait_ms: 50 }, 'agent')).status).to.equal(202);
  const db = path.join(service.paths.supervisorDir, 'supervisor.db');
  await until('the execute in flight', async () => ((await sqlite(db, `SELECT phase FROM requests WHERE request_id = '${requestId}'`))[0]?.phase === 'executing' ? true : undefined));
  return { request, db };
}

describe('a failed child comes back', function () {
  this.timeout(90_000);
  let service: TestService | undefined;

  afterEach(async () => {
    await service?.stop();
    service?.cleanup();
    service = undefined;
  });

  it('custody restart CHILD starts a failed executor at once, and custody status said when it would have been retried', async () => {
    service = await startService({ config: failFast(300) });
    const failedAt = Date.now();
    const old = await failExecutor(service);
    const row = await executor(service);
    expect(row.next_retry_at, 'the retry is due a cool-down after the failure').to.be.within(failedAt + 299_000, Date.now() + 300_000);
    const status = await service.cli(['status']);
    expect(status.code, 'a failed child makes status exit 4').to.equal(4);
    expect(status.stdout).to.contain('NEXT RETRY').and.to.contain(new Date(row.next_retry_at!).toISOString()).and.to.contain('custody restart default');

    const restarted = await service.cli(['restart', 'default']);
    expect(restarted.code, restarted.stderr).to.equal(0);
    expect(restarted.stdout).to.match(/Restarted default: running, pid \d+/);
    const after = await executor(service);
    expect(after).to.include({ state: 'running', next_retry_at: null });
    expect(after.pid).to.not.equal(old);
    const answer = await service.cli(['invoke', 'review-notes/append', '--arg', 'note=after the restart']);
    expect(answer.code, answer.stderr).to.equal(0);
    expect(await incidentKinds(service)).to.include.members(['child_failed', 'restart_requested']);
    expect((await service.cli(['status'])).code).to.equal(0);
  });

  it('retries a failed executor by itself after restart.failed_cooldown_s, with an incident each time', async () => {
    service = await startService({ config: failFast(1) });
    for (let round = 1; round <= 2; round++) {
      const old = await failExecutor(service);
      const back = await until('the cool-down restart', async () => {
        const row = await executor(service!);
        return row.state === 'running' && row.pid !== old ? row : undefined;
      });
      expect(back.next_retry_at).to.equal(null);
      expect((await incidentKinds(service)).filter((kind) => kind === 'cooldown_restart'), `round ${round}`).to.have.length(round);
    }
  });

  it('restarts a running child gracefully through the API with the control token only, and names the children for an unknown one', async () => {
    service = await startService();
    const before = await executor(service);
    expect((await service.http('POST', '/v1/children/default/restart', {}, 'agent')).status).to.equal(403);
    const answer = await service.http('POST', '/v1/children/default/restart', {});
    expect(answer.status, JSON.stringify(answer.body)).to.equal(200);
    const child = (answer.body as { child: ChildRow }).child;
    expect(child.state).to.equal('running');
    expect(child.pid).to.not.equal(before.pid);
    // Graceful: asked to shut down, it exited 0 (a crash would read "signal SIGKILL").
    const sessions = await sqlite(path.join(service.paths.supervisorDir, 'supervisor.db'), `SELECT end_reason FROM sessions WHERE pid = ${before.pid}`);
    expect(String(sessions[0]?.end_reason)).to.contain('restart requested by the operator (code 0)');
    const unknown = await service.cli(['restart', 'nobody']);
    expect(unknown.code).to.equal(1);
    expect(unknown.stderr).to.contain('no child named "nobody"').and.to.contain('kernel, default');
  });

  it('restarts a running executor gracefully while an effect runs past the heartbeat timeout: the effect finishes and is answered, nothing killed', async () => {
    // heartbeat_timeout_ms 3 s (FAST_TIMING), the grace 10 s: the effect outlasts the one, not the other.
    service = await startService({ config: { executors: [{ ...FIXTURE_EXECUTOR, deadlines_ms: { '*': 30_000 } }] } });
    const { request, db } = await sleeping(service, 'running-through-a-restart', 6_000);
    const before = await executor(service);
    const restarted = await service.http('POST', '/v1/children/default/restart', {});
    expect(restarted.status, JSON.stringify(restarted.body)).to.equal(200);
    const answer = await service.http('POST', '/v1/invoke', { ...request, wait_ms: 60_000 }, 'agent');
    expect(answer.status, JSON.stringify(answer.body)).to.equal(200);
    expect(answer.body, JSON.stringify(answer.body)).to.deep.include({ final: true, outcome: 'completed', output: { slept: 6_000 } });
    const sessions = await sqlite(db, `SELECT end_reason FROM sessions WHERE pid = ${before.pid}`);
    expect(String(sessions[0]?.end_reason), 'it exited on its own once the effect was answered').to.contain('(code 0)');
    expect(service.stderr.join('\n')).to.not.contain('child_stop_overdue');
  });

  it('kills, reaps and restarts an executor stopped past its heartbeat, and reconciles the operation it held', async () => {
    service = await startService({ config: { executors: [{ ...FIXTURE_EXECUTOR, deadlines_ms: { '*': 30_000 } }] } });
    const { request, db } = await sleeping(service, 'held-by-a-stopped-executor', 20_000);
    const stopped = (await executor(service)).pid!;
    process.kill(stopped, 'SIGSTOP');
    const back = await until('a new executor', async () => {
      const row = await executor(service!);
      return row.state === 'running' && row.pid !== stopped ? row : undefined;
    });
    expect(back.pid).to.not.equal(stopped);
    const sessions = await sqlite(db, `SELECT end_reason FROM sessions WHERE pid = ${stopped}`);
    expect(String(sessions[0]?.end_reason)).to.contain('heartbeat missed').and.to.contain('SIGKILL');
    const answer = await service.http('POST', '/v1/invoke', { ...request, wait_ms: 60_000 }, 'agent');
    expect(answer.status, JSON.stringify(answer.body)).to.equal(200);
    expect(answer.body).to.include({ final: true });
    expect(await incidentKinds(service)).to.include('heartbeat_missed');
  });
});
