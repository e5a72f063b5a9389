// No poison pills (docs/POISON-AND-DISK.md): a request whose handling
// crashes its child every time is parked as `quarantined` after the second
// crash, the child restarts without that crash counting toward its
// intensity, the rest of the service goes on, and a new `custody start`
// does not resume it. Provoked through a real service with the fixture
// adapter fixture/crash, which SIGKILLs its executor whenever it is handled.
import { expect } from 'chai';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { operationIdFor } from '../../shared/protocol/binding.js';
import { attributeCrash } from '../../supervisor/operations/quarantine.js';
import { SupervisorStore } from '../../supervisor/store/supervisor-store.js';
import { collectingLogger } from '../helpers/children.js';
import { programPath } from '../../shared/entry-points.js';
import { distPath } from '../helpers/children.js';
import { FIXTURE_EXECUTOR, sqlite, startService, type TestService } from '../helpers/service.js';

type Incident = { kind: string; child: string | null; code: string | null; operation_id: string | null; message: string };

/**
 * At most 2 counted restarts: without quarantine the poison pill's third
 * crash (execute, reconcile, reconcile again) fails the executor, and every
 * later request on it fails with it.
 */
const CONFIG = {
  executors: [FIXTURE_EXECUTOR],
  restart: { max_restarts: 2, period_s: 3600, backoff_initial_ms: 50, backoff_max_ms: 500 },
};

async function invoke(service: TestService, tool: string, requestId: string, args: Record<string, unknown>) {
  return service.http('POST', '/v1/invoke', { tool, request_id: requestId, arguments: args, wait_ms: 60_000 }, 'agent');
}

async function incidents(service: TestService): Promise<Incident[]> {
  const { body } = await service.http('GET', '/v1/incidents?limit=1000');
  return (body.incidents as Incident[]).reverse();
}

async function executorState(service: TestService): Promise<{ state: string; restarts: number; pid: number }> {
  const { body } = await service.http('GET', '/v1/status');
  return (body.children as Array<{ role: string; state: string; restarts: number; pid: number }>).find((c) => c.role === 'executor')!;
}

describe('a request that crashes its executor every time it is handled', function () {
  this.timeout(120_000);
  let service: TestService | null = null;

  afterEach(() => service?.cleanup());

  it('is quarantined after 2 crashes, uncounted, while requests before and after complete, and a restart does not resume it', async () => {
    service = await startService({ config: CONFIG });
    expect((await service.http('POST', '/v1/grants', { tool: 'fixture/*', max_invocations: 100, ttl_ms: 3_600_000 })).status).to.equal(201);
    expect((await service.http('POST', '/v1/grants', { tool: 'review-notes/*', max_invocations: 100, ttl_ms: 3_600_000 })).status).to.equal(201);

    const before = await invoke(service, 'review-notes/append', 'before', { note: 'before the poison pill' });
    expect(before.body.outcome, JSON.stringify(before.body)).to.equal('completed');
    const harmless = await invoke(service, 'fixture/crash', 'harmless', { crash: false });
    expect(harmless.body.outcome, JSON.stringify(harmless.body)).to.equal('completed');

    const poison = await invoke(service, 'fixture/crash', 'poison-1', { crash: true });
    expect(poison.status, JSON.stringify(poison.body)).to.equal(409);
    expect(poison.body.code).to.equal('request_quarantined');
    expect(String(poison.body.message)).to.include('poison-1').and.include('custody reconcile poison-1');

    const rows = await sqlite(path.join(service.paths.supervisorDir, 'supervisor.db'), "SELECT phase, reason, operation_id FROM requests WHERE request_id = 'poison-1'");
    expect(rows[0]!.phase).to.equal('quarantined');
    const operationId = String(rows[0]!.operation_id);
    const mine = (await incidents(service)).filter((i) => i.operation_id === operationId);
    expect(mine.filter((i) => i.kind === 'request_crash').map((i) => i.child)).to.deep.equal(['default', 'default']);
    const parked = mine.filter((i) => i.kind === 'quarantined');
    expect(parked).to.have.length(1);
    expect(parked[0]!.message).to.include('poison-1');
    expect(parked[0]!.child).to.equal('default');

    // Two crashes, one of them counted: the executor is below its intensity (2) and serves.
    const executor = await executorState(service);
    expect(executor.state).to.equal('running');
    expect(executor.restarts).to.equal(2);
    const after = await invoke(service, 'review-notes/append', 'after', { note: 'after the poison pill' });
    expect(after.body.outcome, JSON.stringify(after.body)).to.equal('completed');

    // Asking again is answered from the log, without sending it to a child.
    const again = await invoke(service, 'fixture/crash', 'poison-1', { crash: true });
    expect(again.body.code).to.equal('request_quarantined');

    const ops = await service.cli(['ops', '--json']);
    expect(ops.code).to.equal(0);
    const listed = (JSON.parse(ops.stdout) as { operations: Array<{ name: string; phase: string | null }> }).operations;
    expect(listed.find((op) => op.name === 'poison-1')?.phase).to.equal('quarantined');
    const report = await service.cli(['report', 'poison-1']);
    expect(report.code).to.equal(4);
    expect(report.stderr).to.include('request_quarantined');

    expect(await service.stop()).to.equal(0);
    service = await service.restart();
    const exitsBefore = (await incidents(service)).filter((i) => i.kind === 'child_exit').length;
    const resumed = await invoke(service, 'review-notes/append', 'after-restart', { note: 'after a restart' });
    expect(resumed.body.outcome, JSON.stringify(resumed.body)).to.equal('completed');
    // Several recovery sweeps (every 500 ms) have passed by the time a second request completes.
    await new Promise((resolve) => setTimeout(resolve, 1500));
    const second = await invoke(service, 'review-notes/append', 'after-restart-2', { note: 'still serving' });
    expect(second.body.outcome).to.equal('completed');
    expect((await incidents(service)).filter((i) => i.kind === 'child_exit')).to.have.length(exitsBefore);
    expect((await executorState(service)).restarts).to.equal(0);
    expect(service.stderr.some((line) => line.includes('"request_resumed"') && line.includes('poison-1'))).to.equal(false);
    const still = await sqlite(path.join(service.paths.supervisorDir, 'supervisor.db'), "SELECT phase FROM requests WHERE request_id = 'poison-1'");
    expect(still[0]!.phase).to.equal('quarantined');

    // An operator's release asks once more; the third crash parks it again at once, uncounted.
    const released = await service.cli(['reconcile', 'poison-1', '--wait', '60s']);
    expect(released.code, released.stderr).to.equal(4);
    expect(released.stderr).to.include('request_quarantined');
    const log = await incidents(service);
    expect(log.filter((i) => i.operation_id === operationId).map((i) => i.kind)).to.include.members(['quarantine_released', 'quarantined']);
    expect(log.filter((i) => i.operation_id === operationId && i.kind === 'request_crash')).to.have.length(3);
    expect((await executorState(service)).state).to.equal('running');
    const last = await invoke(service, 'review-notes/append', 'after-release', { note: 'after the release' });
    expect(last.body.outcome).to.equal('completed');
  });
});

describe('a request that kills the kernel every time it is sent', function () {
  this.timeout(120_000);
  let service: TestService | null = null;

  afterEach(() => service?.cleanup());

  it('is quarantined after 2 kernel crashes while the kernel, allowed one counted restart, and the service go on, also after a restart', async () => {
    // The kernel behind a tripwire that makes it exit whenever a frame names the request: a poison pill
    // for the kernel, as an over-deep frame was. One counted restart: without quarantine the second crash
    // fails the kernel and stops the service.
    service = await startService({
      config: (root) => ({
        kernel: { argv: [process.execPath, distPath('test', 'fixtures', 'kernel-tripwire.js'), 'poison-kernel', process.execPath, programPath('kernel'), '--dir', path.join(root, 'kernel')] },
        restart: { max_restarts: 1, period_s: 3600, backoff_initial_ms: 50, backoff_max_ms: 500 },
      }),
    });
    expect((await service.http('POST', '/v1/grants', { tool: 'review-notes/*', max_invocations: 100, ttl_ms: 3_600_000 })).status).to.equal(201);
    const before = await invoke(service, 'review-notes/append', 'before', { note: 'before' });
    expect(before.body.outcome, JSON.stringify(before.body)).to.equal('completed');

    const poison = await invoke(service, 'review-notes/append', 'poison-kernel', { note: 'kills the kernel' });
    expect(poison.status, JSON.stringify(poison.body)).to.equal(409);
    expect(poison.body.code).to.equal('request_quarantined');
    const { body: status } = await service.http('GET', '/v1/status');
    const kernel = (status.children as Array<{ role: string; state: string; restarts: number }>).find((c) => c.role === 'kernel')!;
    expect(kernel).to.include({ state: 'running', restarts: 2 });
    const log = await incidents(service);
    expect(log.filter((i) => i.kind === 'request_crash').map((i) => i.child)).to.deep.equal(['kernel', 'kernel']);
    expect(log.find((i) => i.kind === 'quarantined')?.message).to.include('poison-kernel').and.include('kernel');

    const after = await invoke(service, 'review-notes/append', 'after', { note: 'after' });
    expect(after.body.outcome, JSON.stringify(after.body)).to.equal('completed');
    // The kernel never recorded it: listed from supervisor.db, state null.
    const { body: ops } = await service.http('GET', '/v1/operations', undefined, 'agent');
    expect((ops.operations as Array<{ name: string; state: string | null; phase: string }>).find((op) => op.name === 'poison-kernel')).to.include({ state: null, phase: 'quarantined' });
    // The CLI reads the same answer against the route's schema: a state of null is part of it.
    const listed = await service.cli(['ops', '--json']);
    expect(listed.code, listed.stderr).to.equal(0);
    expect((JSON.parse(listed.stdout) as { operations: Array<{ name: string; state: string | null }> }).operations.find((op) => op.name === 'poison-kernel')).to.include({ state: null });

    expect(await service.stop()).to.equal(0);
    service = await service.restart();
    const resumed = await invoke(service, 'review-notes/append', 'after-restart', { note: 'after a restart' });
    expect(resumed.body.outcome, JSON.stringify(resumed.body)).to.equal('completed');
    expect(service.stderr.some((line) => line.includes('"tripwire"'))).to.equal(false);
    const { body: again } = await service.http('GET', '/v1/status');
    expect((again.children as Array<{ role: string; restarts: number }>).find((c) => c.role === 'kernel')!.restarts).to.equal(0);
  });
});

describe('crash attribution (restart.quarantine_after_crashes)', () => {
  let dir: string;
  let store: SupervisorStore;
  const log = collectingLogger().log;

  beforeEach(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'custody-quarantine-'));
    store = SupervisorStore.provision(path.join(dir, 'supervisor'));
  });

  afterEach(() => {
    store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  function logRequest(requestId: string): void {
    store.logRequest({ request_id: requestId, operation_id: operationIdFor(requestId), kind: 'invoke', tool: 't/x', subject: 'agent', arguments: '{}', cost_units: 1, binding_hash: 'b'.repeat(64) });
  }

  for (const limit of [1, 2, 3]) {
    it(`with the bound at ${limit}, parks a request at crash ${limit} and not one before; that crash and later ones are not counted for the child`, () => {
      logRequest('pill');
      for (let crash = 1; crash < limit; crash++) {
        expect(attributeCrash(store, log, 'kernel', ['pill'], `crash ${crash}`, limit)).to.deep.equal({ counted: true, quarantined: [] });
        expect(store.getRequest('pill')!.phase).to.equal('received');
      }
      expect(attributeCrash(store, log, 'kernel', ['pill'], `crash ${limit}`, limit)).to.deep.equal({ counted: false, quarantined: ['pill'] });
      expect(store.getRequest('pill')!.phase).to.equal('quarantined');
      expect(store.openRequests().map((row) => row.request_id)).to.not.include('pill');
      // One past: already quarantined, still not counted, not counted again against it.
      expect(attributeCrash(store, log, 'kernel', ['pill'], 'one more', limit)).to.deep.equal({ counted: false, quarantined: [] });
      expect(store.crashesOf(operationIdFor('pill'))).to.equal(limit);
    });
  }

  it('counts a crash for every request in flight; one quarantined among them makes the crash uncounted', () => {
    logRequest('pill');
    logRequest('bystander');
    expect(attributeCrash(store, log, 'kernel', ['pill', 'bystander'], 'first', 2).counted).to.equal(true);
    expect(attributeCrash(store, log, 'kernel', ['pill'], 'second', 2)).to.deep.equal({ counted: false, quarantined: ['pill'] });
    expect(store.getRequest('bystander')!.phase).to.equal('received');
    expect(store.crashesOf(operationIdFor('bystander'))).to.equal(1);
  });

  it('refuses to move a quarantined request on except by a release, which goes back to what its artifacts prove', () => {
    logRequest('pill');
    store.countCrash('pill', 'kernel', 'only', 1);
    expect(() => store.movePhase('pill', 'reserved')).to.throw().with.property('code', 'request_quarantined');
    expect(store.releaseQuarantined('pill').phase).to.equal('received');
    expect(store.incidentsFor(operationIdFor('pill')).map((i) => i.kind)).to.deep.equal(['request_crash', 'quarantined', 'quarantine_released']);
  });
});

describe('a request in flight on a child that was stopped from outside', function () {
  this.timeout(60_000);
  let service: TestService | null = null;

  after(async () => {
    await service?.stop();
    service?.cleanup();
  });

  it('takes no blame when the child, found stopped (SIGSTOP), is killed for its missed heartbeat: nothing counted toward quarantine', async () => {
    service = await startService({ config: { executors: [FIXTURE_EXECUTOR] } });
    expect((await service.http('POST', '/v1/grants', { tool: 'fixture/*', max_invocations: 10, ttl_ms: 3_600_000 })).status).to.equal(201);
    const answered = invoke(service, 'fixture/sleep', 'paused-under-me', { ms: 2_000 });
    const { pid } = await (async () => {
      for (;;) {
        const row = await sqlite(path.join(service.paths.supervisorDir, 'supervisor.db'), "SELECT phase FROM requests WHERE request_id = 'paused-under-me'");
        if (row[0]?.phase === 'executing') return executorState(service);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    })();
    // An operator pauses the executor (a debugger, SIGSTOP) past the heartbeat timeout (3 s in the tests).
    process.kill(pid, 'SIGSTOP');
    const answer = await answered;
    expect(answer.body.final, JSON.stringify(answer.body)).to.equal(true);
    const missed = (await incidents(service)).filter((incident) => incident.kind === 'heartbeat_missed');
    expect(missed.map((incident) => incident.message)).to.satisfy((messages: string[]) => messages.some((message) => message.includes('stopped from outside, /proc state T')));
    expect(service.stderr.filter((line) => line.includes('"request_crash_counted"')), 'no request blamed').to.deep.equal([]);
    expect((await incidents(service)).filter((incident) => incident.kind === 'request_crash'), 'no crash counted against it').to.deep.equal([]);
  });
});
