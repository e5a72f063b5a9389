// Key rotation on a real service (README "Rotating keys", docs/PROTOCOL.md §12):
// an operation authorized before an executor rotation and held before its
// claim is refused with a signed epoch_retired report and its hold released;
// one invoked after completes; both verify offline with the keys receipt
// export writes. A supervisor killed between the executor's rotation and the
// kernel's pin catches the pin up at the next start (custody.json's stale
// key_epoch does not stop it). A kernel rotation re-pins a running executor
// at once and a stopped one at its next hello, which then completes an
// operation under the new kernel key.
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { expect } from 'chai';
import { readEnvelope } from '../../shared/artifacts/artifact.js';
import { until } from '../helpers/eventually.js';
import { FIXTURE_EXECUTOR, type TestService, custody, logEvents, sqlite, startService } from '../helpers/service.js';

const GRANT = { tool: 'review-notes/*', max_invocations: 100, ttl_ms: 3_600_000 };

async function invoke(service: TestService, requestId: string, note = requestId) {
  return service.http('POST', '/v1/invoke', { request_id: requestId, tool: 'review-notes/append', arguments: { note }, wait_ms: 60_000 }, 'agent');
}

/** Export an operation's artifacts and verify every one offline with the key files the export wrote. */
async function exportAndVerify(service: TestService, name: string, out: string): Promise<Record<string, string>> {
  const exported = await service.cli(['receipt', 'export', name, '--out', out, '--json']);
  expect(exported.code, exported.stderr).to.equal(0);
  const files = readdirSync(out);
  const kernelKeys = files.filter((file) => /^kernel\.e\d+\.pub$/.test(file)).flatMap((file) => ['--trusted-kernel-pubkey', path.join(out, file)]);
  const executorKeys = files.filter((file) => /^executor-.*\.e\d+\.pub$/.test(file)).flatMap((file) => ['--trusted-executor-pubkey', path.join(out, file)]);
  const signers: Record<string, string> = {};
  for (const file of files.filter((f) => f.endsWith('.json'))) {
    const verified = await custody(['receipt', 'verify', path.join(out, file), ...kernelKeys, ...executorKeys, '--json']);
    expect(verified.code, `${file}: ${verified.stderr}`).to.equal(0);
    signers[file] = path.basename((JSON.parse(verified.stdout) as { signer_key_file: string }).signer_key_file);
  }
  return signers;
}

describe('key rotation: executors', function () {
  this.timeout(120_000);
  const faults = mkdtempSync(path.join(tmpdir(), 'custody-rotate-faults-'));
  let service: TestService;

  before(async () => {
    service = await startService({ env: { CUSTODY_FAULT: 'executor:pause_before_claim', CUSTODY_FAULT_DIR: faults } });
    expect((await service.http('POST', '/v1/grants', GRANT)).status).to.equal(201);
  });
  after(async () => {
    await service.stop();
    service.cleanup();
    rmSync(faults, { recursive: true, force: true });
  });

  it('refuses an operation held before its claim with a signed epoch_retired report after a rotation, releasing its hold; one invoked after completes; both verify offline', async () => {
    const kernelDb = path.join(service.paths.kernelDir, 'kernel.db');
    const ledger = path.join(service.paths.executorDir('default'), 'ledger.db');
    const oldPub = readFileSync(service.paths.executorPub('default'), 'utf8').trim();
    const before = invoke(service, 'rot-before');
    await until('execute paused before its claim', () => Promise.resolve(existsSync(path.join(faults, 'executor.pause_before_claim.reached')) ? true : undefined));
    expect(await sqlite(kernelDb, "SELECT o.state, h.state AS hold FROM operations o JOIN holds h USING (operation_id) WHERE o.request_id = 'rot-before'")).to.deep.equal([{ state: 'dispatch_committed', hold: 'reserved' }]);
    // Authorized by an operator and never executed: nobody drives it.
    const waiting = await service.cli(['authorize', 'review-notes/append', '--arg', 'note=waiting', '--operation', 'rot-waiting']);
    expect(waiting.code, waiting.stderr).to.equal(0);

    const rotated = await service.cli(['executor', 'rotate', 'default', '--json']);
    expect(rotated.code, rotated.stderr).to.equal(0);
    const answer = JSON.parse(rotated.stdout) as { key_epoch: number; public_key: string; retired_epoch: number; statement: string };
    expect(answer).to.include({ key_epoch: 2, retired_epoch: 1 });
    // Signed by the old key, naming the new one; the key file now holds the new key.
    expect(readEnvelope(answer.statement).envelope.signer).to.equal(oldPub);
    expect(readFileSync(service.paths.executorPub('default'), 'utf8').trim()).to.equal(answer.public_key);
    expect(await sqlite(kernelDb, "SELECT key_epoch, public_key FROM executor_pins WHERE executor_id = 'default' ORDER BY key_epoch")).to.deep.equal([
      { key_epoch: 1, public_key: oldPub },
      { key_epoch: 2, public_key: answer.public_key },
    ]);
    expect(await sqlite(ledger, 'SELECT epoch, public_key, statement IS NOT NULL AS stated FROM key_epochs ORDER BY epoch')).to.deep.equal([
      { epoch: 1, public_key: oldPub, stated: 0 },
      { epoch: 2, public_key: answer.public_key, stated: 1 },
    ]);
    expect(await sqlite(path.join(service.paths.supervisorDir, 'supervisor.db'), "SELECT key_epoch, public_key FROM pins WHERE name = 'default'")).to.deep.equal([{ key_epoch: 2, public_key: answer.public_key }]);

    writeFileSync(path.join(faults, 'executor.pause_before_claim.release'), '');
    const refused = await before;
    expect(refused.body, JSON.stringify(refused.body)).to.deep.include({ outcome: 'released', reason: 'epoch_retired' });
    expect(String(refused.body.cause)).to.match(/key rotation retired the key this operation was authorized under before it was claimed: .*epoch 1, which a rotation retired \(current: 2\)/);
    expect(await sqlite(kernelDb, "SELECT o.state, h.state AS hold, v.last_reason AS reason FROM operations o JOIN holds h USING (operation_id) JOIN operations_view v USING (request_id) WHERE o.request_id = 'rot-before'")).to.deep.equal([{ state: 'released', hold: 'released', reason: 'epoch_retired' }]);
    expect(await sqlite(ledger, "SELECT kind, report_status FROM claims_view WHERE operation_id = (SELECT operation_id FROM claims_view ORDER BY seq LIMIT 1)")).to.deep.equal([{ kind: 'refusal', report_status: 'never_claimed' }]);

    // The operator's authorization is settled by the rotation itself: refused by the executor, hold released.
    await until('rot-waiting released', async () => {
      const rows = await sqlite(kernelDb, "SELECT o.state, h.state AS hold FROM operations o JOIN holds h USING (operation_id) WHERE o.request_id = 'rot-waiting'");
      return rows[0]?.state === 'released' ? rows : undefined;
    });
    expect(await sqlite(kernelDb, "SELECT last_reason FROM operations_view WHERE request_id = 'rot-waiting'")).to.deep.equal([{ last_reason: 'epoch_retired' }]);
    expect(await sqlite(kernelDb, "SELECT h.state FROM holds h JOIN operations o USING (operation_id) WHERE o.request_id = 'rot-waiting'")).to.deep.equal([{ state: 'released' }]);

    const after = await invoke(service, 'rot-after');
    expect(after.body).to.deep.include({ outcome: 'completed' });

    const root = path.dirname(service.dir);
    const refusedSigners = await exportAndVerify(service, 'rot-before', path.join(root, 'export-before'));
    expect(refusedSigners['report.json']).to.equal('executor-default.e2.pub');
    expect(refusedSigners['authorization.json']).to.equal('kernel.e1.pub');
    const report = JSON.parse(readFileSync(path.join(root, 'export-before', 'report.json'), 'utf8')) as { body: { key_epoch: number; status: string; refusal: { code: string } } };
    expect(report.body).to.deep.include({ key_epoch: 2, status: 'never_claimed' });
    expect(report.body.refusal.code).to.equal('epoch_retired');
    const afterSigners = await exportAndVerify(service, 'rot-after', path.join(root, 'export-after'));
    expect(afterSigners['report.json']).to.equal('executor-default.e2.pub');
    // The retired key no longer verifies a report of the new epoch: the export picked the right one.
    const wrongKey = path.join(root, 'old.pub');
    writeFileSync(wrongKey, `${oldPub}\n`);
    const refusedVerify = await custody(['receipt', 'verify', path.join(root, 'export-after', 'report.json'), '--trusted-kernel-pubkey', path.join(root, 'export-after', 'kernel.e1.pub'), '--trusted-executor-pubkey', wrongKey]);
    expect(refusedVerify.code).to.equal(3);
  });
});

describe('key rotation: a supervisor killed between the executor rotation and the kernel pin', function () {
  this.timeout(120_000);
  const faults = mkdtempSync(path.join(tmpdir(), 'custody-rotate-crash-'));
  let service: TestService;

  after(() => {
    service?.cleanup();
    rmSync(faults, { recursive: true, force: true });
  });

  it('catches the kernel pin up from the executor statements at the next start, which a stale key_epoch in custody.json does not stop', async () => {
    service = await startService({ env: { CUSTODY_FAULT: 'supervisor:after_executor_key_rotated', CUSTODY_FAULT_DIR: faults } });
    const kernelDb = path.join(service.paths.kernelDir, 'kernel.db');
    const died = new Promise<number | null>((resolve) => service.process.once('close', (code, signal) => resolve(signal === 'SIGKILL' ? -9 : code)));
    const rotated = await service.cli(['executor', 'rotate', 'default']);
    expect(rotated.code).to.not.equal(0);
    expect(await died).to.equal(-9);
    // The executor committed epoch 2; the kernel and supervisor.db never heard of it. (Read once the orphaned executor,
    // leaving on its stdin's end, has closed its ledger: its last close checkpoints under a lock a reader meets as "locked".)
    const epochs = await until('the ledger readable', () => sqlite(path.join(service.paths.executorDir('default'), 'ledger.db'), 'SELECT max(epoch) AS epoch FROM key_epochs').catch(() => undefined));
    expect(epochs).to.deep.equal([{ epoch: 2 }]);
    expect(await sqlite(kernelDb, "SELECT max(key_epoch) AS epoch FROM executor_pins WHERE executor_id = 'default'")).to.deep.equal([{ epoch: 1 }]);

    const config = JSON.parse(readFileSync(service.paths.config, 'utf8')) as { executors: Array<{ key_epoch: number }> };
    expect(config.executors[0]!.key_epoch).to.equal(1);
    service = await service.restart();
    expect(await sqlite(kernelDb, "SELECT key_epoch FROM executor_pins WHERE executor_id = 'default' ORDER BY key_epoch")).to.deep.equal([{ key_epoch: 1 }, { key_epoch: 2 }]);
    expect(await sqlite(path.join(service.paths.supervisorDir, 'supervisor.db'), "SELECT key_epoch FROM pins WHERE name = 'default'")).to.deep.equal([{ key_epoch: 2 }]);
    expect(await sqlite(path.join(service.paths.supervisorDir, 'supervisor.db'), "SELECT count(*) AS n FROM incidents WHERE kind = 'key_rotation_caught_up'")).to.deep.equal([{ n: 1 }]);
    // custody.json still says key_epoch 1: explained, by the supervisor and by the executor, never fatal.
    expect(service.stderr.some((line) => line.includes('key_epoch_informational'))).to.equal(true);
    expect(service.stderr.some((line) => line.includes('key_epoch_setting_differs'))).to.equal(true);
    expect((await service.http('POST', '/v1/grants', GRANT)).status).to.equal(201);
    expect((await invoke(service, 'after-crash')).body).to.deep.include({ outcome: 'completed' });
    await service.stop();
  });
});

describe('key rotation: the kernel, with one executor stopped during it', function () {
  this.timeout(120_000);
  let service: TestService;

  before(async () => {
    service = await startService({
      config: {
        executors: [{ name: 'rot-a' }, { name: 'rot-b' }],
        restart: { max_restarts: 0, period_s: 60, backoff_initial_ms: 50, backoff_max_ms: 100, failed_cooldown_s: 3600 },
      },
    });
    expect((await service.http('POST', '/v1/grants', GRANT)).status).to.equal(201);
  });
  after(async () => {
    await service.stop();
    service.cleanup();
  });

  const stateOf = async (name: string) => ((await service.http('GET', '/v1/status')).body.children as Array<{ name: string; state: string; pid: number | null }>).find((c) => c.name === name)!;
  const kernelEpochsOf = async (name: string) => sqlite(path.join(service.paths.executorDir(name), 'ledger.db'), 'SELECT epoch FROM kernel_epochs ORDER BY epoch');

  it('re-pins a running executor at once and a stopped one at its next hello; both then complete operations under the new kernel key', async () => {
    const stopped = await until('rot-b running', async () => {
      const row = await stateOf('rot-b');
      return row.state === 'running' ? row : undefined;
    });
    process.kill(stopped.pid!, 'SIGKILL');
    await until('rot-b failed', async () => ((await stateOf('rot-b')).state === 'failed' ? true : undefined));

    const oldKernel = readFileSync(path.join(service.paths.kernelDir, 'kernel.pub'), 'utf8').trim();
    const rotated = await service.cli(['kernel', 'rotate', '--json']);
    expect(rotated.code, rotated.stderr).to.equal(0);
    const answer = JSON.parse(rotated.stdout) as { key_epoch: number; public_key: string; statement: string; executors: Array<{ name: string; kernel_epoch: number | null }> };
    expect(answer.key_epoch).to.equal(2);
    expect(readEnvelope(answer.statement).envelope.signer).to.equal(oldKernel);
    expect(answer.executors).to.deep.equal([{ name: 'rot-a', kernel_epoch: 2 }, { name: 'rot-b', kernel_epoch: null }]);
    expect(readFileSync(path.join(service.paths.kernelDir, 'kernel.pub'), 'utf8').trim()).to.equal(answer.public_key);
    expect(await sqlite(path.join(service.paths.kernelDir, 'kernel.db'), 'SELECT epoch, statement IS NOT NULL AS stated FROM kernel_epochs ORDER BY epoch')).to.deep.equal([{ epoch: 1, stated: 0 }, { epoch: 2, stated: 1 }]);
    expect(await kernelEpochsOf('rot-a')).to.deep.equal([{ epoch: 1 }, { epoch: 2 }]);
    expect(await kernelEpochsOf('rot-b')).to.deep.equal([{ epoch: 1 }]);

    const restarted = await service.cli(['restart', 'rot-b']);
    expect(restarted.code, restarted.stderr).to.equal(0);
    expect(await kernelEpochsOf('rot-b')).to.deep.equal([{ epoch: 1 }, { epoch: 2 }]);

    // Sequential invokes alternate between the two executors (README "Executor pools").
    for (const id of ['k-1', 'k-2', 'k-3', 'k-4']) {
      const done = await invoke(service, id);
      expect(done.body, JSON.stringify(done.body)).to.deep.include({ outcome: 'completed' });
      const authorization = (await sqlite(path.join(service.paths.kernelDir, 'kernel.db'), `SELECT authorization FROM operations WHERE request_id = '${id}'`))[0]!.authorization as string;
      expect(readEnvelope(authorization).envelope.signer).to.equal(answer.public_key);
    }
    // Both served some: rot-b, restarted after the rotation, verified authorizations signed by the new kernel key.
    for (const name of ['rot-a', 'rot-b']) {
      const claims = await sqlite(path.join(service.paths.executorDir(name), 'ledger.db'), "SELECT count(*) AS n FROM claims_view WHERE state = 'completed'");
      expect(Number(claims[0]!.n), name).to.be.greaterThan(0);
    }
  });
});

describe('key rotation: the kernel, while its statement cannot reach a busy executor', function () {
  this.timeout(120_000);
  let service: TestService;
  const latch = path.join(tmpdir(), `custody-rotate-latch-${process.pid}`);

  before(async () => {
    service = await startService({ config: { executors: [{ ...FIXTURE_EXECUTOR, max_in_flight: 1 }] } });
    expect((await service.http('POST', '/v1/grants', { tool: '*', max_invocations: 100, ttl_ms: 3_600_000 })).status).to.equal(201);
  });
  after(async () => {
    rmSync(latch, { force: true });
    await service.stop();
    service.cleanup();
  });

  it('gives the executor the kernel statements when it refuses an authorization signed by the new key (kernel_key_unpinned), and the operation completes once, never marked unknown', async () => {
    // The executor's one place is taken, so kernel.rotated is refused there (too_many_in_flight) and deferred.
    const held = service.http('POST', '/v1/invoke', { tool: 'fixture/latch', request_id: 'held', arguments: { path: latch }, wait_ms: 60_000 }, 'agent');
    await until('the latch running', () => Promise.resolve(service.stderr.some((line) => line.includes('fixture/latch started')) ? true : undefined));
    const rotated = await service.cli(['kernel', 'rotate', '--json']);
    expect(rotated.code, rotated.stderr).to.equal(0);
    const answer = JSON.parse(rotated.stdout) as { public_key: string; executors: Array<{ name: string; kernel_epoch: number | null }> };
    expect(answer.executors, 'the statement did not reach the busy executor').to.deep.equal([{ name: 'default', kernel_epoch: null }]);
    const ledger = path.join(service.paths.executorDir('default'), 'ledger.db');
    expect(await sqlite(ledger, 'SELECT epoch FROM kernel_epochs ORDER BY epoch')).to.deep.equal([{ epoch: 1 }]);
    writeFileSync(latch, '');
    expect((await held).body).to.deep.include({ outcome: 'completed' });

    const done = await invoke(service, 'after-rotation');
    expect(done.body, JSON.stringify(done.body)).to.deep.include({ outcome: 'completed' });
    const operation = (await sqlite(path.join(service.paths.kernelDir, 'kernel.db'), "SELECT authorization FROM operations WHERE request_id = 'after-rotation'"))[0]!;
    expect(readEnvelope(operation.authorization as string).envelope.signer).to.equal(answer.public_key);
    expect(await sqlite(ledger, 'SELECT epoch FROM kernel_epochs ORDER BY epoch')).to.deep.equal([{ epoch: 1 }, { epoch: 2 }]);
    expect(await sqlite(ledger, "SELECT count(*) AS n FROM claims_view WHERE state = 'completed'")).to.deep.equal([{ n: 2 }]);
    const notes = readFileSync(path.join(service.paths.resourcesDir, 'review-notes.jsonl'), 'utf8').split('\n').filter((line) => line.includes('after-rotation'));
    expect(notes, 'one journal line').to.have.length(1);
    expect(logEvents(service, 'executor_kernel_pin').some((line) => line.why === 'kernel_key_unpinned'), 'the statements were given on the refusal').to.equal(true);
    const incidents = await sqlite(path.join(service.paths.supervisorDir, 'supervisor.db'), "SELECT kind FROM incidents WHERE kind IN ('outcome_unknown', 'reconcile_refused')");
    expect(incidents, 'nothing was marked unknown').to.deep.equal([]);
  });
});

describe('key rotation: the kernel, after a rotation supervisor.db could not record', function () {
  this.timeout(60_000);
  let service: TestService;

  before(async () => {
    service = await startService();
    expect((await service.http('POST', '/v1/grants', GRANT)).status).to.equal(201);
  });
  after(async () => {
    await service.stop();
    service.cleanup();
  });

  it('catches the supervisor pin up from the kernel before the next rotation, which then verifies and goes on from the unrecorded epoch', async () => {
    const supervisorDb = path.join(service.paths.supervisorDir, 'supervisor.db');
    const pins = async () => sqlite(supervisorDb, "SELECT key_epoch FROM pins WHERE name = 'kernel'");
    // supervisor.db is held by another writer (an operator's shell) while the kernel rotates: the kernel commits, the
    // supervisor cannot record it (store_busy after its busy timeout), and the rotation is answered as failed.
    const shell = new Database(supervisorDb);
    shell.exec('BEGIN IMMEDIATE');
    let lost;
    try {
      lost = await service.cli(['kernel', 'rotate']);
    } finally {
      shell.exec('ROLLBACK');
      shell.close();
    }
    expect(lost.code, 'the rotation was not recorded').to.not.equal(0);
    expect(lost.stderr).to.contain('store_busy');
    expect((await sqlite(path.join(service.paths.kernelDir, 'kernel.db'), 'SELECT max(epoch) AS epoch FROM kernel_epochs'))[0]?.epoch, 'the kernel committed it').to.equal(2);
    expect(await pins(), 'supervisor.db did not record it').to.deep.equal([{ key_epoch: 1 }]);
    // Before the catch-up, this one's statement (signed by the epoch-2 key) did not verify from the pin: rotation_invalid, for good.
    const rotated = await service.cli(['kernel', 'rotate', '--json']);
    expect(rotated.code, rotated.stderr).to.equal(0);
    expect((JSON.parse(rotated.stdout) as { key_epoch: number }).key_epoch).to.equal(3);
    expect(await pins()).to.deep.equal([{ key_epoch: 3 }]);
    const done = await invoke(service, 'after-two-rotations');
    expect(done.body, JSON.stringify(done.body)).to.deep.include({ outcome: 'completed' });
  });
});

describe('key rotation: the kernel killed after committing its new key, before answering', function () {
  this.timeout(120_000);
  const faults = mkdtempSync(path.join(tmpdir(), 'custody-rotate-kernel-crash-'));
  let service: TestService;

  before(async () => {
    service = await startService({ env: { CUSTODY_FAULT: 'kernel:after_kernel_rotation_commit', CUSTODY_FAULT_DIR: faults } });
    expect((await service.http('POST', '/v1/grants', GRANT)).status).to.equal(201);
  });
  after(async () => {
    await service.stop();
    service.cleanup();
    rmSync(faults, { recursive: true, force: true });
  });

  it('promotes the committed key at the kernel restart, catches the supervisor pin up at its hello, re-pins the executor, and serves under the new key', async () => {
    const kernelDir = service.paths.kernelDir;
    const oldKernel = readFileSync(path.join(kernelDir, 'kernel.pub'), 'utf8').trim();
    const rotated = await service.cli(['kernel', 'rotate']);
    expect(rotated.code).to.not.equal(0);
    expect(existsSync(path.join(faults, 'kernel.after_kernel_rotation_commit.fired'))).to.equal(true);
    const supervisorDb = path.join(service.paths.supervisorDir, 'supervisor.db');
    const [pin] = await until('the supervisor pin caught up', async () => {
      const rows = await sqlite(supervisorDb, "SELECT key_epoch, public_key FROM pins WHERE name = 'kernel'");
      return rows[0]?.key_epoch === 2 ? rows : undefined;
    });
    expect(pin!.public_key).to.not.equal(oldKernel);
    expect(readFileSync(path.join(kernelDir, 'kernel.pub'), 'utf8').trim()).to.equal(pin!.public_key);
    expect(existsSync(path.join(kernelDir, 'kernel.next.key'))).to.equal(false);
    expect(await sqlite(path.join(kernelDir, 'kernel.db'), 'SELECT epoch, public_key FROM kernel_epochs ORDER BY epoch')).to.deep.equal([
      { epoch: 1, public_key: oldKernel },
      { epoch: 2, public_key: pin!.public_key },
    ]);
    await until('the executor re-pinned', async () => {
      const rows = await sqlite(path.join(service.paths.executorDir('default'), 'ledger.db'), 'SELECT max(epoch) AS epoch FROM kernel_epochs');
      return rows[0]?.epoch === 2 ? true : undefined;
    });
    const done = await invoke(service, 'after-kernel-crash');
    expect(done.body, JSON.stringify(done.body)).to.deep.include({ outcome: 'completed' });
    const signers = await exportAndVerify(service, 'after-kernel-crash', path.join(path.dirname(service.dir), 'export-kernel'));
    expect(signers['receipt-2-completion.json']).to.equal('kernel.e2.pub');
  });
});
