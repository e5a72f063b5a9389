// Store rollback through the real service (docs/ROLLBACK.md): a ledger
// restored in place, a kernel.db that lost its -wal after kill -9, and a
// ledger renamed while the service runs. Each is refused before anything is
// signed that contradicts what happened.
import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { eventually, untilHolds } from '../helpers/eventually.js';
import { type TestService, sqlite, startService } from '../helpers/service.js';

/** The notes in the journal: its effects (a fence line, written by a reconcile before never_claimed is signed, is none). */
function journal(service: TestService): string[] {
  try {
    return readFileSync(path.join(service.paths.resourcesDir, 'review-notes.jsonl'), 'utf8')
      .split('\n')
      .filter((line) => line.includes('"operation_id"'));
  } catch {
    return [];
  }
}

async function pidOf(service: TestService, role: 'kernel' | 'executor'): Promise<number> {
  const { body } = await service.http('GET', '/v1/status');
  const child = (body.children as Array<{ role: string; pid: number | null }>).find((c) => c.role === role);
  if (!child?.pid) throw new Error(`no running ${role}`);
  return child.pid;
}

/** Rotate a key, then authorize an operation under it and lose the reply to its execute (the effect ran); the service stopped after. */
async function rotateThenLoseAReply(service: TestService, rotate: string[], operation: string): Promise<void> {
  const rotated = await service.cli(rotate);
  expect(rotated.code, rotated.stderr).to.equal(0);
  expect((await service.cli(['authorize', 'review-notes/append', '--arg', 'note=two', '--operation', operation])).code).to.equal(0);
  expect((await service.cli(['execute', operation, '--drop-reply'])).code).to.equal(75);
  expect(journal(service)).to.have.length(2);
  expect(await service.stop()).to.equal(0);
}

/** Put a backup back over a stopped executor's ledger, as docs/ROLLBACK.md says: the copy over the file, its -wal and -shm removed. */
function restoreLedger(ledger: string, backup: string): void {
  writeFileSync(ledger, readFileSync(backup));
  rmSync(`${ledger}-wal`, { force: true });
  rmSync(`${ledger}-shm`, { force: true });
}

describe('store rollback through the service', function () {
  this.timeout(120_000);
  let services: TestService[] = [];

  // after, not afterEach: the tests of one restored state share its service.
  after(() => {
    for (const service of services) service.cleanup();
    services = [];
  });

  describe('a ledger restored in place (same inode) after an effect whose reply was lost', () => {
    let again: TestService;
    let ledger: string;
    let witnessed: number;
    let restoredHead: number;

    before(async () => {
      // No sweep may settle op-2 between the lost reply and the stop: the restore must meet it open, as in the report.
      const service = await startService({ config: { timing: { recovery_sweep_ms: 600_000, executor_wait_ms: 500 } } });
      services.push(service);
      expect((await service.cli(['invoke', 'review-notes/append', '--arg', 'note=one'])).code).to.equal(0);
      ledger = path.join(service.paths.executorDir('default'), 'ledger.db');
      const backup = path.join(path.dirname(service.dir), 'ledger.backup');
      copyFileSync(ledger, backup);

      expect((await service.cli(['authorize', 'review-notes/append', '--arg', 'note=two', '--operation', 'op-2'])).code).to.equal(0);
      expect((await service.cli(['execute', 'op-2', '--drop-reply'])).code).to.equal(75);
      expect(journal(service)).to.have.length(2);
      expect(await service.stop()).to.equal(0);
      witnessed = (await sqlite(path.join(service.paths.supervisorDir, 'supervisor.db'), "SELECT head FROM witness WHERE name = 'default'"))[0]?.head as number;

      // The operator's restore: the old bytes into the same file (same device and inode), its -wal and -shm removed.
      restoreLedger(ledger, backup);
      restoredHead = ((await sqlite(ledger, 'SELECT seq FROM head'))[0]?.seq as number | undefined) ?? 0;
      expect(restoredHead, 'the restored copy is older than the witness').to.be.below(witnessed);
      again = await service.restart();
      services.push(again);
    });

    it('is refused with store_rolled_back: reconcile is not "ended without effect" (exit 4), the hold stays, an incident names the store and both heads', async () => {
      const reconciled = await again.cli(['reconcile', 'op-2', '--wait', '5s']);
      // 4: not complete, the outcome unknown; never 3 (ended without effect) nor 0.
      expect(reconciled.code, reconciled.stdout + reconciled.stderr).to.equal(4);
      expect(reconciled.stdout + reconciled.stderr).to.not.match(/without effect/i);
      expect(reconciled.stdout + reconciled.stderr).to.contain('store_rolled_back');

      const [operation] = await sqlite(path.join(again.paths.kernelDir, 'kernel.db'), "SELECT state, hold FROM operations_view WHERE request_id = 'op-2'");
      expect(operation?.hold, 'the hold is not released').to.not.equal('released');
      expect(operation?.state).to.not.match(/released|never_claimed/);
      expect(journal(again), 'the effect is never run again').to.have.length(2);

      const incidents = await sqlite(path.join(again.paths.supervisorDir, 'supervisor.db'), "SELECT kind, message FROM incidents WHERE code = 'store_rolled_back' ORDER BY id");
      expect(incidents.map((i) => i.kind)).to.include('store_rolled_back');
      const message = String(incidents[0]?.message);
      expect(message).to.contain(ledger);
      expect(message).to.contain(`head ${restoredHead}`);
      expect(message).to.contain(`head ${witnessed}`);
      expect(message).to.contain('custody recover-rollback default');

      // Failed for good, not restarted in a loop, and said so by status.
      const status = await again.cli(['status', '--json']);
      expect(status.code, 'status says a child failed').to.equal(4);
      const executor = (JSON.parse(status.stdout) as { children: Array<{ name: string; state: string; restarts: number; failure: string | null }> }).children.find((c) => c.name === 'default');
      expect(executor?.state).to.equal('failed');
      expect(executor?.restarts).to.equal(0);
      expect(executor?.failure).to.contain('custody recover-rollback default');

      // A new call meanwhile is told the way back, not to restart (a restart is refused again); nothing is logged.
      const invoked = await again.http('POST', '/v1/invoke', { request_id: 'while-rolled-back', tool: 'review-notes/append', arguments: { note: 'x' } }, 'agent');
      expect(invoked.body.code).to.equal('executor_unavailable');
      expect(String(invoked.body.message)).to.contain('store_rolled_back').and.to.contain('custody recover-rollback default').and.to.not.contain('restart one with');
    });

    it('takes the way back with recover-rollback: op-2 is recorded again as a claim with no report, never re-run, and reconciliation settles it from the journal', async () => {
      const recovered = await again.cli(['recover-rollback', 'default', '--json']);
      expect(recovered.code, recovered.stderr).to.equal(0);
      const result = JSON.parse(recovered.stdout) as { recorded: string[]; head: number; witnessed: number };
      const [request] = await sqlite(path.join(again.paths.supervisorDir, 'supervisor.db'), "SELECT operation_id FROM requests WHERE request_id = 'op-2'");
      expect(result.recorded).to.include(request?.operation_id);
      expect(result.head).to.be.at.least(witnessed);
      const [claim] = await sqlite(ledger, `SELECT kind FROM claims WHERE operation_id = '${String(request?.operation_id)}'`);
      expect(claim?.kind).to.equal('claim');

      const reconciled = await again.cli(['reconcile', 'op-2', '--json']);
      expect(reconciled.code, reconciled.stdout + reconciled.stderr).to.equal(0);
      const [operation] = await sqlite(path.join(again.paths.kernelDir, 'kernel.db'), "SELECT state, hold FROM operations_view WHERE request_id = 'op-2'");
      expect(operation?.hold).to.equal('consumed');
      expect(journal(again), 'one line per effect, still').to.have.length(2);
      // It serves again, and the next operation goes through.
      expect((await again.cli(['invoke', 'review-notes/append', '--arg', 'note=three'])).code).to.equal(0);
      expect(journal(again)).to.have.length(3);
      const again2 = await again.cli(['recover-rollback', 'default']);
      expect(again2.code, 'nothing to recover once it serves').to.not.equal(0);
    });
  });

  it('keeps refusing a ledger whose way back was cut short (the executor killed after recording claims, before raising its head): run again, it records the rest and nothing runs twice', async () => {
    const faultDir = mkdtempSync(path.join(tmpdir(), 'custody-recover-cut-'));
    try {
      const service = await startService({
        config: { timing: { recovery_sweep_ms: 600_000 } },
        env: { CUSTODY_FAULT: 'executor:after_recover_claims', CUSTODY_FAULT_DIR: faultDir },
      });
      services.push(service);
      expect((await service.cli(['grant', 'add', '--tool', 'review-notes/append', '--max', '100', '--ttl', '1h'])).code).to.equal(0);
      expect((await service.cli(['invoke', 'review-notes/append', '--arg', 'note=one'])).code).to.equal(0);
      const ledger = path.join(service.paths.executorDir('default'), 'ledger.db');
      const backup = path.join(path.dirname(service.dir), 'ledger.backup');
      copyFileSync(ledger, backup);
      // The lost claim (op-2, its effect done), and operations authorized and never run: entries the lost copy never
      // held, more of them than the heads the restore lost.
      for (const operation of ['op-3', 'op-4', 'op-5']) {
        const authorized = await service.cli(['authorize', 'review-notes/append', '--arg', `note=${operation}`, '--operation', operation]);
        expect(authorized.code, authorized.stdout + authorized.stderr).to.equal(0);
      }
      expect((await service.cli(['authorize', 'review-notes/append', '--arg', 'note=two', '--operation', 'op-2'])).code).to.equal(0);
      expect((await service.cli(['execute', 'op-2', '--drop-reply'])).code).to.equal(75);
      expect(journal(service)).to.have.length(2);
      expect(await service.stop()).to.equal(0);
      const supervisorDb = path.join(service.paths.supervisorDir, 'supervisor.db');
      const witnessed = (await sqlite(supervisorDb, "SELECT head FROM witness WHERE name = 'default'"))[0]?.head as number;
      restoreLedger(ledger, backup);
      const restoredHead = ((await sqlite(ledger, 'SELECT seq FROM head'))[0]?.seq as number | undefined) ?? 0;
      expect(witnessed - restoredHead, `the restore lost fewer heads than there are entries to record (witness ${witnessed}, restored ${restoredHead})`).to.be.below(5);
      const again = await service.restart();
      services.push(again);

      const cut = await again.cli(['recover-rollback', 'default']);
      expect(cut.code, 'the executor died under it').to.not.equal(0);
      expect(existsSync(path.join(faultDir, 'executor.after_recover_claims.fired')), 'killed where the test says').to.equal(true);
      const recorded = await sqlite(ledger, "SELECT count(*) AS n FROM claims WHERE kind = 'claim'");
      expect(recorded[0]?.n, 'op-1 to op-5 recorded before the kill').to.equal(5);
      expect((await sqlite(ledger, 'SELECT seq FROM head'))[0]?.seq, 'the head left where the restore put it').to.equal(restoredHead);

      const restarted = await again.cli(['restart', 'default']);
      expect(restarted.code, 'its hello is still below the witness').to.not.equal(0);
      expect(restarted.stdout + restarted.stderr).to.contain('store_rolled_back');
      const replay = await again.cli(['execute', 'op-2']);
      expect(replay.code, replay.stdout + replay.stderr).to.not.equal(0);
      expect(journal(again), 'nothing ran again').to.have.length(2);

      const recovered = await again.cli(['recover-rollback', 'default', '--json']);
      expect(recovered.code, recovered.stderr).to.equal(0);
      const result = JSON.parse(recovered.stdout) as { recorded: string[]; already: number; head: number };
      expect(result).to.deep.include({ recorded: [], already: 5 });
      expect(result.head).to.be.at.least(witnessed);
      expect((await again.cli(['reconcile', 'op-2'])).code, 'op-2 found in the journal').to.equal(0);
      expect((await again.cli(['reconcile', 'op-3'])).code, 'op-3 fenced: ended without effect').to.equal(3);
      expect(journal(again), 'op-2 once, op-3 never').to.have.length(2);
    } finally {
      rmSync(faultDir, { recursive: true, force: true });
    }
  });

  it('signs no "never claimed" for an operation a whole-state restore forgot: authorized before the backup, run after it, its window closed; the tool says applied, so it stays in doubt with its hold', async () => {
    // A 6 s window: authorized, stopped, backed up, started, executed inside it; then the restore, and the window closes.
    const WINDOW_MS = 6_000;
    const service = await startService({ config: { kernel: { settings: { nonce_ttl_ms: WINDOW_MS } } } });
    services.push(service);
    expect((await service.cli(['authorize', 'review-notes/append', '--arg', 'note=w1', '--operation', 'w1'])).code).to.equal(0);
    const authorizedAt = Date.now();
    expect(await service.stop()).to.equal(0);
    // The operator's backup of a stopped service: every store, none left out, so no head can tell it from the present.
    const stores = [
      path.join(service.paths.kernelDir, 'kernel.db'),
      path.join(service.paths.supervisorDir, 'supervisor.db'),
      path.join(service.paths.executorDir('default'), 'ledger.db'),
      path.join(service.paths.executorDir('default'), 'archive.db'),
    ];
    const backups = stores.map((store) => {
      const backup = `${store}.backup`;
      copyFileSync(store, backup);
      return backup;
    });
    const ran = await service.restart();
    services.push(ran);
    const executed = await ran.cli(['execute', 'w1']);
    expect(executed.code, executed.stderr).to.equal(0);
    expect(Date.now() - authorizedAt, 'executed inside its window').to.be.below(WINDOW_MS);
    expect(journal(ran), 'the effect happened').to.have.length(1);
    expect(await ran.stop()).to.equal(0);
    // The whole state put back; the world (the tool's journal) is not.
    stores.forEach((store, i) => restoreLedger(store, backups[i]!));
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, authorizedAt + WINDOW_MS + 500 - Date.now())));

    const restored = await ran.restart();
    services.push(restored);
    const kernel = path.join(restored.paths.kernelDir, 'kernel.db');
    // The sweep reconciles w1 at once (its window closed, nobody drives it): wait until the executor has answered it.
    await eventually(() => /"event":"ledger_contradicted"|"event":"never_claimed"/.test(restored.stderr.join('\n')), 20_000, 'w1 answered by its executor');
    const [operation] = await sqlite(kernel, "SELECT state, hold FROM operations_view WHERE request_id = 'w1'");
    expect(operation?.hold, 'the hold is not released as "no effect"').to.not.equal('released');
    expect(operation?.state).to.not.match(/released/);
    const [request] = await sqlite(path.join(restored.paths.supervisorDir, 'supervisor.db'), "SELECT operation_id FROM requests WHERE request_id = 'w1'");
    const reports = await sqlite(path.join(restored.paths.executorDir('default'), 'ledger.db'), `SELECT kind FROM claims WHERE operation_id = '${String(request?.operation_id)}'`);
    expect(reports, 'no refusal recorded, nothing signed').to.deep.equal([]);
    expect(restored.stderr.join('\n')).to.contain('this ledger never claimed it');
    const reconciled = await restored.cli(['reconcile', 'w1', '--wait', '2s']);
    expect(reconciled.code, 'never "ended without effect"').to.not.equal(3);
    expect(reconciled.stdout + reconciled.stderr).to.not.match(/without effect/i);
    expect(journal(restored), 'and never run again').to.have.length(1);
  });

  it('takes the way back for a ledger restored from before a kernel key rotation: the ledger learns the new key first, then records the operation the new key authorized', async () => {
    const service = await startService({ config: { timing: { recovery_sweep_ms: 600_000 } } });
    services.push(service);
    expect((await service.cli(['invoke', 'review-notes/append', '--arg', 'note=one'])).code).to.equal(0);
    const ledger = path.join(service.paths.executorDir('default'), 'ledger.db');
    const backup = path.join(path.dirname(service.dir), 'ledger.before-rotation');
    expect((await sqlite(ledger, `.backup '${backup}'`)).length).to.equal(0);
    await rotateThenLoseAReply(service, ['kernel', 'rotate'], 'op-r');
    restoreLedger(ledger, backup);
    const again = await service.restart();
    services.push(again);
    // Before the keys were caught up first, this failed with signer_untrusted and the executor stayed failed.
    const recovered = await again.cli(['recover-rollback', 'default', '--json']);
    expect(recovered.code, recovered.stdout + recovered.stderr).to.equal(0);
    const [request] = await sqlite(path.join(again.paths.supervisorDir, 'supervisor.db'), "SELECT operation_id FROM requests WHERE request_id = 'op-r'");
    expect((JSON.parse(recovered.stdout) as { recorded: string[] }).recorded).to.include(request?.operation_id);
    expect(await sqlite(ledger, 'SELECT epoch FROM kernel_epochs ORDER BY epoch')).to.deep.equal([{ epoch: 1 }, { epoch: 2 }]);
    const reconciled = await again.cli(['reconcile', 'op-r', '--json']);
    expect(reconciled.code, reconciled.stdout + reconciled.stderr).to.equal(0);
    expect(journal(again), 'op-r was not run again').to.have.length(2);
  });

  it('takes the way back for a ledger restored from before an executor key rotation: the ledger learns its own newer key from executor.statements, is refused as rolled back, and recover-rollback records what the old copy forgot', async () => {
    const service = await startService({ config: { timing: { recovery_sweep_ms: 600_000 } } });
    services.push(service);
    expect((await service.cli(['invoke', 'review-notes/append', '--arg', 'note=one'])).code).to.equal(0);
    const dir = service.paths.executorDir('default');
    const ledger = path.join(dir, 'ledger.db');
    const backup = path.join(path.dirname(service.dir), 'ledger.before-executor-rotation');
    expect((await sqlite(ledger, `.backup '${backup}'`)).length).to.equal(0);
    await rotateThenLoseAReply(service, ['executor', 'rotate', 'default'], 'op-e');
    expect(readFileSync(path.join(dir, 'executor.statements'), 'utf8').trim().split('\n'), 'the statement is kept beside the key').to.have.length(1);
    restoreLedger(ledger, backup);
    // Before executor.statements, the restored ledger named the destroyed key and the whole service refused to start (ledger_identity).
    const again = await service.restart();
    services.push(again);
    expect(again.stderr.some((line) => line.includes('ledger_key_epochs_caught_up')), 'the epochs were caught up').to.equal(true);
    expect(await sqlite(ledger, 'SELECT epoch FROM key_epochs ORDER BY epoch')).to.deep.equal([{ epoch: 1 }, { epoch: 2 }]);
    const incidents = await sqlite(path.join(again.paths.supervisorDir, 'supervisor.db'), "SELECT child FROM incidents WHERE code = 'store_rolled_back'");
    expect(incidents.map((row) => row.child), 'still refused as rolled back: the epochs did not move its head').to.include('default');
    const recovered = await again.cli(['recover-rollback', 'default', '--json']);
    expect(recovered.code, recovered.stdout + recovered.stderr).to.equal(0);
    const [request] = await sqlite(path.join(again.paths.supervisorDir, 'supervisor.db'), "SELECT operation_id FROM requests WHERE request_id = 'op-e'");
    expect((JSON.parse(recovered.stdout) as { recorded: string[] }).recorded).to.include(request?.operation_id);
    const reconciled = await again.cli(['reconcile', 'op-e', '--json']);
    expect(reconciled.code, reconciled.stdout + reconciled.stderr).to.equal(0);
    expect(journal(again), 'op-e was not run again').to.have.length(2);
    expect((await again.cli(['invoke', 'review-notes/append', '--arg', 'note=three'])).code, 'it serves under its current key').to.equal(0);
    expect(journal(again)).to.have.length(3);
  });

  it('refuses a kernel whose kernel.db lost its -wal after kill -9: the service says store_rolled_back and does not start', async () => {
    const service = await startService();
    services.push(service);
    expect((await service.cli(['invoke', 'review-notes/append', '--arg', 'note=one'])).code).to.equal(0);
    const witnessed = (await sqlite(path.join(service.paths.supervisorDir, 'supervisor.db'), "SELECT head FROM witness WHERE name = 'kernel'"))[0]?.head as number;
    expect(witnessed, 'the supervisor saw the kernel decide').to.be.above(0);
    // Both at once, so nothing restarts the kernel or lets it close (and checkpoint) cleanly.
    const kernel = await pidOf(service, 'kernel');
    service.process.kill('SIGKILL');
    process.kill(kernel, 'SIGKILL');
    await service.stop();
    const kernelDb = path.join(service.paths.kernelDir, 'kernel.db');
    await eventually(() => {
      try {
        process.kill(kernel, 0);
        return false;
      } catch {
        return true;
      }
    }, 10_000, `kernel pid ${kernel} gone`);
    rmSync(`${kernelDb}-wal`, { force: true });
    rmSync(`${kernelDb}-shm`, { force: true });

    let failure: Error | null = null;
    try {
      services.push(await service.restart());
    } catch (error) {
      failure = error as Error;
    }
    expect(failure, 'the service must not start on a rolled-back kernel').to.not.equal(null);
    expect(failure!.message).to.contain('store_rolled_back');
    const incidents = await sqlite(path.join(service.paths.supervisorDir, 'supervisor.db'), "SELECT child, message FROM incidents WHERE code = 'store_rolled_back'");
    expect(incidents.map((i) => i.child)).to.include('kernel');
    expect(String(incidents[0]?.message)).to.contain(kernelDb);
  });

  it('refuses the next claim once ledger.db is renamed away while the service runs, and runs nothing under the old file', async () => {
    const service = await startService();
    services.push(service);
    expect((await service.cli(['invoke', 'review-notes/append', '--arg', 'note=one'])).code).to.equal(0);
    const ledger = path.join(service.paths.executorDir('default'), 'ledger.db');
    renameSync(ledger, `${ledger}.moved`);
    const second = await service.cli(['invoke', 'review-notes/append', '--arg', 'note=two', '--request-id', 'two', '--wait', '5s']);
    expect(second.code).to.not.equal(0);
    expect(journal(service), 'nothing ran after the rename').to.have.length(1);
    await eventually(() => service.stderr.some((line) => line.includes('store_replaced')), 10_000, 'store_replaced logged');
  });

  it('decides nothing on a kernel.db restored in place while the service runs (sqlite3 .restore): the kernel refuses the batch, exits, and its hello is refused', async () => {
    const service = await startService();
    services.push(service);
    const kernelDb = path.join(service.paths.kernelDir, 'kernel.db');
    expect((await service.cli(['invoke', 'review-notes/append', '--arg', 'note=one'])).code).to.equal(0);
    const backup = path.join(path.dirname(service.dir), 'kernel.backup');
    expect((await sqlite(kernelDb, `.backup '${backup}'`)).length).to.equal(0);
    expect((await service.cli(['invoke', 'review-notes/append', '--arg', 'note=two', '--request-id', 'two'])).code).to.equal(0);
    const before = (await sqlite(kernelDb, 'SELECT seq FROM head'))[0]?.seq as number;
    // The same inode: the path check passes; the head read inside the next batch is below what this kernel committed.
    execFileSync('sqlite3', [kernelDb, `.restore '${backup}'`]);
    const restored = (await sqlite(kernelDb, 'SELECT seq FROM head'))[0]?.seq as number;
    expect(restored).to.be.below(before);
    const three = await service.cli(['invoke', 'review-notes/append', '--arg', 'note=three', '--request-id', 'three', '--wait', '5s']);
    expect(three.code, three.stdout + three.stderr).to.not.equal(0);
    await eventually(() => service.stderr.some((line) => line.includes('"event":"store_rolled_back"') && line.includes('"role":"kernel"')), 10_000, 'the kernel logs store_rolled_back');
    // Nothing was decided on the restored store, and nothing ran.
    expect(await sqlite(kernelDb, "SELECT count(*) AS n FROM operations WHERE request_id = 'three'")).to.deep.equal([{ n: 0 }]);
    expect((await sqlite(kernelDb, 'SELECT seq FROM head'))[0]?.seq).to.equal(restored);
    expect(journal(service)).to.have.length(2);
    // The replacement kernel presents the restored head in its hello, below the witness: refused.
    const supervisorDb = path.join(service.paths.supervisorDir, 'supervisor.db');
    await untilHolds('an incident for the kernel', async () => {
      const incidents = await sqlite(supervisorDb, "SELECT message FROM incidents WHERE code = 'store_rolled_back' AND child = 'kernel'");
      return incidents.some((incident) => String(incident.message).includes(`presents head ${restored}, below the head ${before}`));
    }, 15_000);
  });
});
