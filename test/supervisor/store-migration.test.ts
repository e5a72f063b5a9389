// The first start after an upgrade migrates kernel.db before the kernel's
// hello, one transaction over every row: longer than the hello timeout on a
// large store. The kernel announces it (store_migrating, docs/PROTOCOL.md §5)
// and the supervisor waits up to timing.migrate_timeout_ms instead; past that
// bound the kernel is killed, the migration rolls back and the next start
// runs it again. The migration is held at a fault point
// (kernel:during_migration) for as long as the test needs, instead of
// building a store big enough to be slow.
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { expect } from 'chai';
import { KERNEL_MIGRATIONS } from '../../kernel-proc/store/schema.js';
import { downgradeToV5 } from '../helpers/kernel-v5.js';
import { eventually } from '../helpers/eventually.js';
import { alive, parentOf } from '../helpers/procs.js';
import { type TestService, sqlite, startService } from '../helpers/service.js';

const HELLO_TIMEOUT_MS = 4_000;

async function invoke(service: TestService, id: string): Promise<Record<string, unknown>> {
  const answer = await service.http('POST', '/v1/invoke', { tool: 'review-notes/append', request_id: id, arguments: { note: `note ${id}` }, wait_ms: 30_000 }, 'agent');
  expect(answer.status, JSON.stringify(answer.body)).to.equal(200);
  return answer.body;
}

function kernelRefusals(service: TestService): string[] {
  return service.stderr.filter((line) => line.includes('"child_refused"') && line.includes('"child":"kernel"'));
}

/** The operation settled before the upgrade, as the migrated kernel.db answers for it. */
async function expectKept(service: TestService): Promise<void> {
  const before = await service.http('GET', '/v1/operations/before-upgrade', undefined, 'agent');
  expect(before.status, JSON.stringify(before.body)).to.equal(200);
  expect((before.body.kernel as { state: string }).state).to.equal('completed');
  expect(before.body.receipts).to.have.length(2);
}

/** Set timing keys in the state's custody.json, as an operator would before a start. */
function setTiming(service: TestService, timing: Record<string, number>): void {
  const config = JSON.parse(readFileSync(service.paths.config, 'utf8')) as { timing?: Record<string, number> };
  writeFileSync(service.paths.config, JSON.stringify({ ...config, timing: { ...config.timing, ...timing } }, null, 2));
}

describe('supervisor: a kernel that migrates its store before its hello', function () {
  this.timeout(90_000);
  let service: TestService;
  let scratch: string;
  let faults: string;
  const kernelDb = () => path.join(service.paths.kernelDir, 'kernel.db');
  const reached = () => path.join(faults, 'kernel.during_migration.reached');
  const env = () => ({ CUSTODY_FAULT: 'kernel:during_migration', CUSTODY_FAULT_DIR: faults });

  /** Start the service with the kernel's migration held inside its transaction; the start resolves once the service serves. */
  async function startHeld(): Promise<{ starting: Promise<TestService>; pid: number }> {
    const starting = startService({ dir: service.dir, env: env() });
    void starting.catch(() => undefined);
    await eventually(() => existsSync(reached()), 20_000, 'the kernel inside its migration');
    return { starting, pid: Number(readFileSync(reached(), 'utf8')) };
  }

  beforeEach(async () => {
    scratch = mkdtempSync(path.join(os.tmpdir(), 'custody-migrate-'));
    faults = path.join(scratch, 'faults');
    mkdirSync(faults);
    service = await startService();
    await invoke(service, 'before-upgrade');
    expect(await service.stop()).to.equal(0);
    setTiming(service, { hello_timeout_ms: HELLO_TIMEOUT_MS });
    downgradeToV5(service.paths.kernelDir, scratch);
    expect(await sqlite(kernelDb(), 'PRAGMA user_version')).to.deep.equal([{ user_version: 5 }]);
  });

  afterEach(() => {
    (service as TestService | undefined)?.cleanup();
    rmSync(scratch, { recursive: true, force: true });
  });

  it('waits past the hello timeout for a kernel that announced its migration, then serves the old and new operations', async () => {
    const { starting, pid } = await startHeld();
    // Hold the migration past the hello timeout (counted from the spawn, before this point): without the announcement the supervisor kills this pid.
    const heldAt = performance.now();
    while (performance.now() - heldAt < HELLO_TIMEOUT_MS + 2_000) {
      expect(alive(pid), 'the migrating kernel is still alive').to.equal(true);
      await sleep(100);
    }
    writeFileSync(path.join(faults, 'kernel.during_migration.release'), '');
    service = await starting;
    expect(await sqlite(kernelDb(), 'PRAGMA user_version')).to.deep.equal([{ user_version: KERNEL_MIGRATIONS.length }]);
    const migrating = service.stderr.filter((line) => line.includes('"child_migrating"'));
    expect(migrating, 'the supervisor logged the wait').to.have.length(1);
    expect(JSON.parse(migrating[0]!)).to.include({ from: 5, to: KERNEL_MIGRATIONS.length, wait_ms: 3_600_000 });
    expect(service.stderr.some((line) => line.includes('"store_migrated"')), 'the kernel logged the end of its migration').to.equal(true);
    expect(kernelRefusals(service), 'no kernel was refused').to.deep.equal([]);
    await expectKept(service);
    expect((await invoke(service, 'after-upgrade')).outcome).to.equal('completed');
    expect(alive(pid), 'the kernel that migrated serves').to.equal(true);
  });

  it('kills a kernel whose migration outlasts timing.migrate_timeout_ms inside its transaction; the migration rolls back and the next start runs it again', async () => {
    setTiming(service, { migrate_timeout_ms: 6_000 });
    const { starting, pid } = await startHeld();
    // Never released: past the bound the supervisor kills it, inside the migration's transaction.
    await eventually(() => !alive(pid), 20_000, 'the held kernel killed');
    // The fault fires once: the restarted kernel migrates without a hold and the service comes up.
    service = await starting;
    const refused = kernelRefusals(service);
    expect(refused.length, 'the held kernel was refused').to.be.at.least(1);
    expect(refused[0]).to.match(/within 6000 ms of starting its store migration \(timing\.migrate_timeout_ms\)/);
    // Only the second kernel finished a migration, and it started from version 5: the first one's transaction rolled back.
    const migrated = service.stderr.filter((line) => line.includes('"store_migrated"')).map((line) => JSON.parse(line) as { from: number; to: number; pid: number });
    expect(migrated.map(({ from, to }) => ({ from, to }))).to.deep.equal([{ from: 5, to: KERNEL_MIGRATIONS.length }]);
    expect(migrated[0]!.pid).to.not.equal(pid);
    expect(await sqlite(kernelDb(), 'PRAGMA user_version')).to.deep.equal([{ user_version: KERNEL_MIGRATIONS.length }]);
    await expectKept(service);
    expect((await invoke(service, 'after-upgrade')).outcome).to.equal('completed');
  });

  it('stops at once on SIGTERM while a kernel migrates, killing it mid-migration, instead of waiting out the migration bound', async () => {
    setTiming(service, { migrate_timeout_ms: 120_000 });
    const { starting, pid } = await startHeld();
    // The kernel's parent is the supervisor.
    const supervisor = parentOf(pid);
    const stoppedAt = performance.now();
    process.kill(supervisor, 'SIGTERM');
    await eventually(() => !alive(supervisor), 30_000, 'the supervisor gone');
    expect(performance.now() - stoppedAt, 'the stop did not wait for the hello').to.be.below(30_000);
    expect(alive(pid), 'the migrating kernel was killed with it').to.equal(false);
    await starting.then(
      () => expect.fail('the service came up'),
      () => undefined,
    );
    // Killed inside the transaction: the store is still at version 5, and the next start migrates it.
    expect(await sqlite(kernelDb(), 'PRAGMA user_version')).to.deep.equal([{ user_version: 5 }]);
    service = await startService({ dir: service.dir });
    expect(await sqlite(kernelDb(), 'PRAGMA user_version')).to.deep.equal([{ user_version: KERNEL_MIGRATIONS.length }]);
    await expectKept(service);
  });
});
