// The watchdog and reconciliation with adapters that hang, sleep past their
// deadline, refuse, or cannot tell what happened — fixture adapters loaded
// through custody.json, the way an operator adds a tool.
import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { readEnvelope } from '../../shared/artifacts/artifact.js';
import { isGone } from '../../shared/child/proc-stat.js';
import { groupAlive } from '../../supervisor/children/process-group.js';
import { liveGroupMembers } from '../../shared/child/process-group.js';
import { FIXTURE_EXECUTOR, sqlite, startService, type TestService } from '../helpers/service.js';
import { untilHolds } from '../helpers/eventually.js';

interface Outcome {
  phase: string;
  outcome: string | null;
  reason: string | null;
  final: boolean;
}

type Incident = { kind: string; operation_id: string | null; message: string };

/** Live processes whose process group is `pgid`. */
function groupMembers(pgid: number): number[] {
  return liveGroupMembers(pgid) ?? [];
}

async function executorPid(service: TestService): Promise<number> {
  const { body } = await service.http('GET', '/v1/status');
  return (body.children as Array<{ role: string; pid: number }>).find((c) => c.role === 'executor')!.pid;
}

async function incidentsOf(service: TestService, operationId: string): Promise<Incident[]> {
  const { body } = await service.http('GET', '/v1/incidents?limit=500');
  return (body.incidents as Incident[]).filter((i) => i.operation_id === operationId).reverse();
}

function fixtureConfig(deadlines: Record<string, number>) {
  return {
    executors: [{ ...FIXTURE_EXECUTOR, deadlines_ms: { '*': 30_000, ...deadlines } }],
  };
}

async function grantFixtures(service: TestService): Promise<void> {
  expect((await service.http('POST', '/v1/grants', { tool: 'fixture/*', max_invocations: 1000, ttl_ms: 3_600_000 })).status).to.equal(201);
}

describe('the watchdog', function () {
  this.timeout(90_000);
  let service: TestService;

  before(async () => {
    service = await startService({ config: fixtureConfig({ 'fixture/sleep': 1000, 'fixture/hang': 1000, 'fixture/subprocess': 60_000 }) });
    await grantFixtures(service);
  });

  after(async () => {
    await service.stop();
    service.cleanup();
  });

  it('kills and reaps an executor whose adapter runs past its deadline, then settles it through exactly one reconcile', async () => {
    const before = await executorPid(service);
    const answer = await service.http('POST', '/v1/invoke', { tool: 'fixture/sleep', request_id: 'slow-1', arguments: { ms: 20_000 } }, 'agent');
    const outcome = answer.body as unknown as Outcome & { operation_id: string };
    expect(outcome).to.include({ phase: 'settled', outcome: 'released', final: true });
    const after = await executorPid(service);
    expect(after, 'a fresh executor process').to.not.equal(before);
    expect(isGone(before, null), 'the old executor is gone').to.equal(true);
    const kinds = (await incidentsOf(service, outcome.operation_id)).map((i) => i.kind);
    expect(kinds).to.include.ordered.members(['watchdog', 'watchdog_kill']);
    expect(kinds.filter((k) => k === 'reconciled'), 'one reconcile exchange').to.have.length(1);
    const status = await service.http('GET', '/v1/status');
    const executor = (status.body.children as Array<{ role: string; restarts: number }>).find((c) => c.role === 'executor')!;
    expect(executor.restarts).to.be.at.least(1);
  });

  it('kills the whole process group of an executor killed alone (its adapter host too) before a replacement starts', async () => {
    const leader = await executorPid(service);
    const invoked = service.http('POST', '/v1/invoke', { tool: 'fixture/subprocess', request_id: 'group-1', arguments: {} }, 'agent');
    await new Promise((resolve) => setTimeout(resolve, 400));
    const members = groupMembers(leader).filter((pid) => pid !== leader);
    expect(members.length, 'the adapter host and its sleep run in the executor group').to.be.at.least(2);
    process.kill(leader, 'SIGKILL');
    const answer = await invoked;
    expect((answer.body as { final: boolean }).final).to.equal(true);
    expect(await executorPid(service)).to.not.equal(leader);
    for (const pid of members) expect(isGone(pid, null), `group member ${pid} is gone`).to.equal(true);
    expect(groupAlive(leader)).to.equal(false);
  });

  it('cancels a cancellable adapter instead of killing it', async () => {
    const before = await executorPid(service);
    const answer = await service.http('POST', '/v1/invoke', { tool: 'fixture/hang', request_id: 'hang-1', arguments: {} }, 'agent');
    const outcome = answer.body as unknown as Outcome & { operation_id: string };
    expect(outcome).to.include({ outcome: 'released', final: true });
    expect(await executorPid(service), 'no kill was needed').to.equal(before);
    const kinds = (await incidentsOf(service, outcome.operation_id)).map((i) => i.kind);
    expect(kinds).to.include('watchdog').and.not.to.include('watchdog_kill');
  });

  it('releases the hold of an adapter that fails before its effect', async () => {
    const answer = await service.http('POST', '/v1/invoke', { tool: 'fixture/refuse', request_id: 'refuse-1', arguments: {} }, 'agent');
    expect(answer.body).to.include({ outcome: 'released', final: true });
  });

  it('keeps asking about an operation whose adapter cannot tell, and lists it for the operator as unknown', async () => {
    const answer = await service.http('POST', '/v1/invoke', { tool: 'fixture/unsure', request_id: 'unsure-1', arguments: {}, wait_ms: 2500 }, 'agent');
    expect(answer.status).to.equal(202);
    const outcome = answer.body as unknown as Outcome & { operation_id: string };
    expect(outcome).to.include({ phase: 'reconciling', final: false });
    const ops = await service.cli(['ops', '--json']);
    const listed = (JSON.parse(ops.stdout) as { operations: Array<{ name: string; state: string }> }).operations.find((o) => o.name === 'unsure-1');
    expect(listed?.state).to.equal('unknown');
    const kinds = (await incidentsOf(service, outcome.operation_id)).map((i) => i.kind);
    expect(kinds).to.include('outcome_unknown');
    const cli = await service.cli(['invoke', 'fixture/unsure', '--request-id', 'unsure-1', '--wait', '1s']);
    expect(cli.code, 'not complete').to.equal(4);
  });
});

describe('an operation left unknown', function () {
  this.timeout(60_000);

  it('is asked again with backoff, its hold kept, until a signed report settles it (model H4)', async () => {
    const markers = mkdtempSync(path.join(tmpdir(), 'custody-markers-'));
    const service = await startService({ config: fixtureConfig({}), env: { CUSTODY_FIXTURE_DIR: markers } });
    try {
      await grantFixtures(service);
      const first = await service.http('POST', '/v1/invoke', { tool: 'fixture/later', request_id: 'later-1', arguments: {}, wait_ms: 1500 }, 'agent');
      expect(first.status).to.equal(202);
      const operationId = (first.body as { operation_id: string }).operation_id;
      const kernel = path.join(service.paths.kernelDir, 'kernel.db');
      expect(await sqlite(kernel, `SELECT state, hold FROM operations_view WHERE request_id = 'later-1'`)).to.deep.equal([{ state: 'unknown', hold: 'reserved' }]);
      writeFileSync(path.join(markers, `${operationId}.applied`), '');
      const settled = await service.http('POST', '/v1/invoke', { tool: 'fixture/later', request_id: 'later-1', arguments: {}, wait_ms: 20_000 }, 'agent');
      expect(settled.body).to.include({ outcome: 'completed', final: true });
      expect(await sqlite(kernel, `SELECT state, hold FROM operations_view WHERE request_id = 'later-1'`)).to.deep.equal([{ state: 'completed', hold: 'consumed' }]);
      const report = readEnvelope((settled.body as { report: string }).report).envelope.body as { status: string };
      expect(report.status).to.equal('reconciled_applied');
    } finally {
      await service.stop();
      service.cleanup();
      rmSync(markers, { recursive: true, force: true });
    }
  });
});

describe('a supervisor killed while an effect runs', function () {
  this.timeout(90_000);

  it('leaves a child that a new supervisor finds by pid and start time, kills, and whose operation it settles', async () => {
    let service = await startService({ config: fixtureConfig({ 'fixture/sleep': 60_000 }) });
    try {
      await grantFixtures(service);
      const executor = await executorPid(service);
      void service.http('POST', '/v1/invoke', { tool: 'fixture/sleep', request_id: 'orphaned', arguments: { ms: 45_000 } }, 'agent').catch(() => undefined);
      // The kill meets the effect running: the request executing and its claim in the ledger (the claim comes before
      // the effect), not a guessed second after the invoke.
      const db = path.join(service.paths.supervisorDir, 'supervisor.db');
      const phase = async () => (await sqlite(db, "SELECT phase FROM requests WHERE request_id = 'orphaned'"))[0]?.phase;
      const ledger = path.join(service.paths.executorDir('default'), 'ledger.db');
      // This service's only operation: its claim, and no report yet.
      const claimed = async () => (await sqlite(ledger, "SELECT count(*) AS n FROM claims_view WHERE state = 'outcome_unknown'"))[0]?.n === 1;
      await untilHolds('the effect running', async () => (await phase()) === 'executing' && (await claimed()), 30_000);
      service.process.kill('SIGKILL');
      await new Promise((resolve) => service.process.once('close', resolve));
      expect(await phase(), 'the kill hit the request in flight').to.equal('executing');
      expect(() => process.kill(executor, 0), 'the executor outlives its supervisor while its effect runs').not.to.throw();
      service = await service.restart();
      expect(isGone(executor, null), 'the new supervisor killed it').to.equal(true);
      const { body } = await service.http('GET', '/v1/incidents?limit=100');
      expect((body.incidents as Incident[]).map((i) => i.kind)).to.include('predecessor_killed');
      const answer = await service.http('POST', '/v1/invoke', { tool: 'fixture/sleep', request_id: 'orphaned', arguments: { ms: 45_000 } }, 'agent');
      expect(answer.body).to.include({ outcome: 'released', final: true });
    } finally {
      await service.stop();
      service.cleanup();
    }
  });
});

describe('an executor whose supervisor is killed', function () {
  this.timeout(60_000);
  let service: TestService;

  before(async () => {
    service = await startService({ config: fixtureConfig({}) });
    await grantFixtures(service);
  });
  after(() => service.cleanup());

  it('kills what its adapters left running in its group as it leaves: nothing of the group outlives it', async () => {
    const executor = await executorPid(service);
    const answer = await service.http('POST', '/v1/invoke', { tool: 'fixture/subprocess', request_id: 'left-behind', arguments: { leave: true } }, 'agent');
    expect(answer.body, JSON.stringify(answer.body)).to.include({ outcome: 'completed' });
    const left = (answer.body.output as { left: number }).left;
    expect(groupMembers(executor), 'the sleep runs in the executor group').to.include(left);
    service.process.kill('SIGKILL');
    await untilHolds('the executor left', () => isGone(executor, null), 20_000);
    await untilHolds('the sleep it left is gone too', () => isGone(left, null), 5_000);
    expect(groupAlive(executor)).to.equal(false);
  });

  /** An adapter leaves a sleep in the executor's group; then the supervisor and the executor both die of SIGKILL. The sleep's pid. */
  async function leaveASleepThenKillBoth(requestId: string): Promise<number> {
    const executor = await executorPid(service);
    const answer = await service.http('POST', '/v1/invoke', { tool: 'fixture/subprocess', request_id: requestId, arguments: { leave: true } }, 'agent');
    expect(answer.body, JSON.stringify(answer.body)).to.include({ outcome: 'completed' });
    // Stopped first, so that the executor runs nothing of its own leaving.
    process.kill(executor, 'SIGSTOP');
    service.process.kill('SIGKILL');
    await new Promise((resolve) => service.process.once('close', resolve));
    process.kill(executor, 'SIGKILL');
    await untilHolds('the executor is gone', () => isGone(executor, null), 10_000);
    return (answer.body.output as { left: number }).left;
  }

  it('killed with it (no chance to leave), what its group left is killed by the next custody start before it serves', async () => {
    service = await service.restart();
    const left = await leaveASleepThenKillBoth('left-behind-2');
    expect(isGone(left, null), 'the sleep outlived its executor').to.equal(false);
    service = await service.restart();
    expect(isGone(left, null), 'killed before the next start served').to.equal(true);
    expect(service.stderr.join('\n')).to.contain('predecessor_group_killed');
  });

  it('leaves alone what a child recorded before the machine last booted names: its pids and start times count from another boot', async () => {
    const left = await leaveASleepThenKillBoth('left-behind-3');
    try {
      // As if the rows were written before a reboot: nothing they name may be taken for the child's.
      execFileSync('sqlite3', [path.join(service.paths.supervisorDir, 'supervisor.db'), 'UPDATE children SET updated_at = 1']);
      service = await service.restart();
      expect(isGone(left, null), 'not killed on the word of a row from another boot').to.equal(false);
      expect(service.stderr.join('\n')).to.not.contain('predecessor_group_killed');
    } finally {
      if (!isGone(left, null)) process.kill(left, 'SIGKILL');
    }
  });
});
