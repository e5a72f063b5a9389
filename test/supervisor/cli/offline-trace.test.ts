// custody trace NAME when the service is down: it reads the three stores
// read-only, says so, changes nothing in the state directory (every file's
// size and mtime, and the list of files, compared), and a service started
// afterwards works. After a graceful stop, and after kill -9 of the
// supervisor, when the stores' last commits may still be in their -wal files.
import { expect } from 'chai';
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { LEDGER_MIGRATIONS } from '../../../executor-proc/ledger/schema.js';
import { KERNEL_MIGRATIONS } from '../../../kernel-proc/store/schema.js';
import { downgradeToV9 } from '../../helpers/kernel-v9.js';
import { downgradeLedgerToV5 } from '../../helpers/ledger-v5.js';
import { type TestService, sqlite, startService } from '../../helpers/service.js';

/** Every file under the state directory with its size and mtime, sorted. */
function snapshot(root: string): string[] {
  const out: string[] = [];
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const full = path.join(dir, entry.name);
      if (entry.isDirectory()) walk(full);
      else {
        const stat = statSync(full);
        out.push(`${path.relative(root, full)} ${stat.size} ${stat.mtimeMs}`);
      }
    }
  };
  walk(root);
  return out.sort();
}

function gone(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return false;
  } catch {
    return true;
  }
}

async function invoke(service: TestService, name: string): Promise<void> {
  const answer = await service.http('POST', '/v1/invoke', { tool: 'review-notes/append', arguments: { note: name }, request_id: name }, 'agent');
  expect(answer.body, JSON.stringify(answer.body)).to.include({ phase: 'settled', outcome: 'completed' });
}

/** The offline trace of `name`: exit 0, says it read the stores, and shows the operation end to end. */
async function traceOffline(service: TestService, name: string): Promise<void> {
  const text = await service.cli(['trace', name]);
  expect(text.code, text.stderr).to.equal(0);
  expect(text.stdout.split('\n')[0]).to.match(/^offline: read from the stores/);
  for (const event of ['request logged', 'phase settled', 'receipt reserve allow', 'authorization signed', 'report signed: completed', 'receipt completion allow']) {
    expect(text.stdout, event).to.contain(event);
  }
  const json = await service.cli(['trace', name, '--json']);
  const body = JSON.parse(json.stdout) as { source: string; request: { phase: string }; kernel: { state: string }; claim: { kind: string; report_status: string }; unread: unknown[] };
  expect(body).to.include({ source: 'offline' });
  expect(body.request.phase).to.equal('settled');
  expect(body.kernel.state).to.equal('completed');
  expect(body.claim).to.include({ kind: 'claim', report_status: 'completed' });
  expect(body.unread).to.deep.equal([]);
}

describe('custody trace with the service down', function () {
  this.timeout(120_000);
  let service: TestService;

  before(async () => {
    service = await startService();
    expect((await service.http('POST', '/v1/grants', { tool: 'review-notes/*', max_invocations: 100, ttl_ms: 3_600_000 })).status).to.equal(201);
  });
  after(async () => {
    await service.stop();
    service.cleanup();
  });

  it('reads through the service while it runs, and says so', async () => {
    await invoke(service, 'traced-online');
    const text = await service.cli(['trace', 'traced-online']);
    expect(text.code, text.stderr).to.equal(0);
    expect(text.stdout.split('\n')[0]).to.equal('online: read through the running service');
  });

  it('after a graceful stop: reads the stores, writes nothing, and the service starts again afterwards', async () => {
    await invoke(service, 'traced-stopped');
    expect(await service.stop()).to.equal(0);
    const before = snapshot(service.dir);
    await traceOffline(service, 'traced-stopped');
    const missing = await service.cli(['trace', 'never-ran']);
    expect(missing.code).to.not.equal(0);
    expect(missing.stderr).to.contain('operation_unknown').and.to.contain('never-ran');
    expect(snapshot(service.dir), 'nothing in the state directory changed').to.deep.equal(before);

    service = await service.restart();
    await invoke(service, 'after-stopped');
  });

  it('reads stores an older build wrote, not yet migrated (kernel.db version 9, ledger.db version 5), and the next start migrates them', async () => {
    await invoke(service, 'traced-older');
    expect(await service.stop()).to.equal(0);
    const scratch = mkdtempSync(path.join(tmpdir(), 'custody-trace-older-'));
    try {
      downgradeToV9(service.paths.kernelDir, scratch);
      downgradeLedgerToV5(service.paths.executorDir('default'), scratch);
    } finally {
      rmSync(scratch, { recursive: true, force: true });
    }
    const versions = async () => [
      (await sqlite(path.join(service.paths.kernelDir, 'kernel.db'), 'PRAGMA user_version'))[0]!.user_version,
      (await sqlite(path.join(service.paths.executorDir('default'), 'ledger.db'), 'PRAGMA user_version'))[0]!.user_version,
    ];
    expect(await versions()).to.deep.equal([9, 5]);
    const before = snapshot(service.dir);
    await traceOffline(service, 'traced-older');
    expect(snapshot(service.dir), 'nothing in the state directory changed').to.deep.equal(before);
    expect(await versions(), 'the trace migrated nothing').to.deep.equal([9, 5]);

    service = await service.restart();
    await invoke(service, 'after-older');
    expect(await versions()).to.deep.equal([KERNEL_MIGRATIONS.length, LEDGER_MIGRATIONS.length]);
  });

  it('after kill -9 of the supervisor: reads the last commits from the -wal files, writes nothing, and the service starts again', async () => {
    await invoke(service, 'traced-killed');
    const children = await sqlite(path.join(service.paths.supervisorDir, 'supervisor.db'), 'SELECT pid FROM children WHERE pid IS NOT NULL');
    process.kill(service.process.pid!, 'SIGKILL');
    // The children stop once their stdin ends; wait until they have, so nothing else writes meanwhile.
    const deadline = Date.now() + 30_000;
    while (!children.every((row) => gone(Number(row.pid)))) {
      if (Date.now() > deadline) throw new Error('the children did not exit after the supervisor was killed');
      await sleep(50);
    }
    const before = snapshot(service.dir);
    expect(before.some((line) => line.startsWith(path.join('supervisor', 'supervisor.db-wal'))), 'the killed supervisor left its -wal').to.equal(true);
    await traceOffline(service, 'traced-killed');
    expect(snapshot(service.dir), 'nothing in the state directory changed').to.deep.equal(before);

    service = await service.restart();
    await invoke(service, 'after-killed');
    const online = await service.cli(['trace', 'traced-killed']);
    expect(online.stdout.split('\n')[0]).to.equal('online: read through the running service');
  });
});
