// A store locked from the sqlite3 shell (README "Looking inside the stores"):
// an operator's `BEGIN IMMEDIATE` left open holds the lock, each process
// waits its 2 s busy timeout, then answers store_busy naming the store, a
// 503 rather than a 500 "internal error" (supervisor.db) or a 202 promising
// a drive that had ended (kernel.db). Nothing is lost and nothing runs twice:
// asked again with the same name once the shell commits, the request
// completes with one journal line. A locked ledger is only asked again (no
// outcome marked unknown), and a locked store at a child's start is not held
// against the child.
import { expect } from 'chai';
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { logEvents, sqlite, startService, type TestService } from '../helpers/service.js';
import { untilHolds } from '../helpers/eventually.js';

/**
 * A sqlite3 shell holding the write lock of `file` until `release` commits
 * and ends it. It waits for the lock itself (`.timeout`) and stops at the
 * first error (`-bail`), so 'locked' is printed only once it holds it.
 */
async function lockStore(file: string): Promise<{ release: () => Promise<void> }> {
  const shell: ChildProcessWithoutNullStreams = spawn('sqlite3', ['-bail', file]);
  let output = '';
  shell.stdout.on('data', (chunk: Buffer) => (output += chunk.toString('utf8')));
  let exited = false;
  const ended = new Promise<void>((resolve) =>
    shell.once('close', () => {
      exited = true;
      resolve();
    }),
  );
  shell.stdin.write(".timeout 10000\nBEGIN IMMEDIATE;\nSELECT 'locked';\n");
  const deadline = Date.now() + 15_000;
  while (!output.includes('locked')) {
    if (exited || Date.now() > deadline) throw new Error('the sqlite3 shell did not take the lock');
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return {
    async release() {
      shell.stdin.end('COMMIT;\n');
      await ended;
    },
  };
}

describe('a store locked from the sqlite3 shell', function () {
  this.timeout(120_000);
  let service: TestService;

  before(async () => {
    // The default heartbeat timeout (10 s): a child waiting out its 2 s busy timeout answers its pings late, not too late.
    service = await startService({ config: { timing: { heartbeat_timeout_ms: 10_000 } } });
    const grant = await service.http('POST', '/v1/grants', { tool: 'review-notes/append', max_invocations: 100, ttl_ms: 3_600_000 });
    expect(grant.status, JSON.stringify(grant.body)).to.equal(201);
  });

  after(async () => {
    await service.stop();
    service.cleanup();
  });

  const invoke = (requestId: string, note: string) => service.http('POST', '/v1/invoke', { tool: 'review-notes/append', request_id: requestId, arguments: { note } }, 'agent');
  const journalLines = (note: string) =>
    readFileSync(path.join(service.paths.resourcesDir, 'review-notes.jsonl'), 'utf8')
      .split('\n')
      .filter((line) => line !== '' && (JSON.parse(line) as { note: string }).note === note).length;

  /** An invoke while the shell holds `file`'s lock; the shell commits once it is answered. */
  const invokeWhileLocked = async (file: string, requestId: string, note: string) => {
    const lock = await lockStore(file);
    try {
      return await invoke(requestId, note);
    } finally {
      await lock.release();
    }
  };

  it('answers 503 store_busy naming supervisor.db, records nothing, and completes once asked again after the commit', async () => {
    const supervisorDb = path.join(service.paths.supervisorDir, 'supervisor.db');
    const busy = await invokeWhileLocked(supervisorDb, 'busy-supervisor', 'supervisor locked');
    expect(busy.status, JSON.stringify(busy.body)).to.equal(503);
    expect(busy.body.code).to.equal('store_busy');
    expect(String(busy.body.message)).to.contain('supervisor store supervisor.db').and.to.contain('sqlite3 shell').and.to.contain('same name');
    expect(String(busy.body.message), 'no path reaches the caller').to.not.contain(service.dir);
    expect(await sqlite(supervisorDb, "SELECT request_id FROM requests WHERE request_id = 'busy-supervisor'")).to.deep.equal([]);
    const again = await invoke('busy-supervisor', 'supervisor locked');
    expect(again.status, JSON.stringify(again.body)).to.equal(200);
    expect(again.body).to.include({ outcome: 'completed' });
    expect(journalLines('supervisor locked')).to.equal(1);
  });

  it('answers 503 store_busy naming kernel.db and the request, logged as received; once the shell commits the service carries it on by itself, and it runs once', async () => {
    const supervisorDb = path.join(service.paths.supervisorDir, 'supervisor.db');
    const lock = await lockStore(path.join(service.paths.kernelDir, 'kernel.db'));
    try {
      const busy = await invoke('busy-kernel', 'kernel locked');
      expect(busy.status, JSON.stringify(busy.body)).to.equal(503);
      expect(busy.body).to.include({ code: 'store_busy', request_id: 'busy-kernel' });
      expect(String(busy.body.message)).to.contain('kernel store kernel.db').and.to.contain('sqlite3 shell');
      expect(await sqlite(supervisorDb, "SELECT phase FROM requests WHERE request_id = 'busy-kernel'")).to.deep.equal([{ phase: 'received' }]);
      expect(journalLines('kernel locked'), 'nothing ran while the kernel could not decide').to.equal(0);
    } finally {
      await lock.release();
    }
    // Nobody asks again: the recovery sweep finds the request the kernel never saw (it waited for the next start).
    await untilHolds('carried on without being asked', async () => (await sqlite(supervisorDb, "SELECT phase FROM requests WHERE request_id = 'busy-kernel'"))[0]?.phase === 'settled');
    expect(journalLines('kernel locked')).to.equal(1);
    expect(logEvents(service, 'request_carried_on').some((l) => l.request_id === 'busy-kernel')).to.equal(true);
    const again = await invoke('busy-kernel', 'kernel locked');
    expect(again.status, JSON.stringify(again.body)).to.equal(200);
    expect(again.body).to.include({ outcome: 'completed' });
    expect(journalLines('kernel locked')).to.equal(1);
    expect(service.stderr.some((line) => line.includes('"code":"store_busy"') && line.includes('kernel store kernel.db')), 'the service log names the store').to.equal(true);
  });

  it('names the request it picked for an invoke sent without one, so the client asks by it; the request runs once, and not again at the next start', async () => {
    const lock = await lockStore(path.join(service.paths.kernelDir, 'kernel.db'));
    let busy: Awaited<ReturnType<typeof service.http>>;
    try {
      busy = await service.http('POST', '/v1/invoke', { tool: 'review-notes/append', arguments: { note: 'unnamed while locked' } }, 'agent');
    } finally {
      await lock.release();
    }
    expect(busy.status, JSON.stringify(busy.body)).to.equal(503);
    const requestId = String(busy.body.request_id);
    expect(requestId).to.match(/^req-/);
    expect(String(busy.body.message)).to.contain(`ask again with request_id ${requestId}`).and.to.contain('sent again without it, it is a new request');
    await untilHolds('the named request completed', async () => {
      const asked = await service.http('GET', `/v1/operations/${requestId}`, undefined, 'agent');
      return (asked.body.request as { outcome?: string } | undefined)?.outcome === 'completed';
    });
    expect(journalLines('unnamed while locked')).to.equal(1);
    // A restart resumes every open request: this one is settled, and does not run again.
    expect(await service.stop()).to.equal(0);
    service = await service.restart();
    expect((await invoke('after-restart', 'after restart')).body).to.include({ outcome: 'completed' });
    expect(journalLines('unnamed while locked')).to.equal(1);
  });

  it('asks a locked ledger again instead of marking the outcome unknown; nothing runs, and the operation is released once the lock ends', async () => {
    const supervisorDb = path.join(service.paths.supervisorDir, 'supervisor.db');
    const lock = await lockStore(path.join(service.paths.executorDir('default'), 'ledger.db'));
    const answered = invoke('busy-ledger', 'ledger locked');
    try {
      // The claim waits out the lock, then the reconciliation does, more than once.
      await untilHolds('two reconciliations refused by the lock', () => logEvents(service, 'reconcile_unanswered').filter((l) => l.request_id === 'busy-ledger' && l.code === 'store_busy').length >= 2);
    } finally {
      await lock.release();
    }
    await answered;
    let final: Record<string, unknown> = {};
    await untilHolds('the operation settled', async () => {
      final = (await service.http('GET', '/v1/operations/busy-ledger', undefined, 'agent')).body.request as Record<string, unknown>;
      return final.final === true;
    });
    expect(final).to.include({ outcome: 'released' });
    expect(journalLines('ledger locked'), 'the claim never happened, nor the effect').to.equal(0);
    const operationId = String(final.operation_id);
    expect(logEvents(service, 'operation_unknown').filter((l) => l.operation_id === operationId), 'never marked unknown at the kernel').to.deep.equal([]);
    expect(await sqlite(supervisorDb, "SELECT code FROM incidents WHERE kind = 'reconcile_refused'"), 'no incident for an operator').to.deep.equal([]);
  });
});

describe('a store locked from the sqlite3 shell as its child starts', function () {
  this.timeout(120_000);
  let service: TestService;

  before(async () => {
    service = await startService({ config: { restart: { max_restarts: 1, period_s: 60, backoff_initial_ms: 50, backoff_max_ms: 300 } } });
  });

  after(async () => {
    await service.stop();
    service.cleanup();
  });

  const status = async () => (await service.http('GET', '/v1/status', undefined, 'agent')).body.children as Array<{ name: string; pid: number | null; state: string }>;
  const expectInvokeCompletes = async (note: string) => {
    const answer = await service.http('POST', '/v1/invoke', { tool: 'review-notes/append', arguments: { note } }, 'agent');
    expect(answer.status, JSON.stringify(answer.body)).to.equal(200);
    expect(answer.body).to.include({ outcome: 'completed' });
  };

  it('is not held against the child: refused starts past restart.max_restarts name the store, and it runs once the lock ends', async () => {
    const kernel = (await status()).find((c) => c.name === 'kernel')!;
    const lock = await lockStore(path.join(service.paths.kernelDir, 'kernel.db'));
    try {
      process.kill(kernel.pid!, 'SIGKILL');
      // With max_restarts 1, counted refusals would have failed the kernel (and stopped the service) after two.
      await untilHolds('three refused starts', () => logEvents(service, 'restart_failed').filter((l) => l.code === 'store_busy').length >= 3, 60_000);
    } finally {
      await lock.release();
    }
    const refusal = logEvents(service, 'restart_failed').find((l) => l.code === 'store_busy')!;
    expect(String(refusal.message)).to.contain('kernel store kernel.db');
    expect(logEvents(service, 'child_failed')).to.deep.equal([]);
    await untilHolds('the kernel running again', async () => (await status()).find((c) => c.name === 'kernel')!.state === 'running', 60_000);
    await expectInvokeCompletes('after the lock');
  });

  it('survives a child that exits while supervisor.db is locked: the record of its run is skipped and said, the child restarts once the lock ends', async () => {
    const executor = (await status()).find((c) => c.name === 'default')!;
    const lock = await lockStore(path.join(service.paths.supervisorDir, 'supervisor.db'));
    try {
      process.kill(executor.pid!, 'SIGKILL');
      await untilHolds('the skipped record said', () => logEvents(service, 'store_write_skipped').some((l) => l.code === 'store_busy'), 30_000);
    } finally {
      await lock.release();
    }
    expect(service.process.exitCode, 'the supervisor is still running').to.equal(null);
    await untilHolds('the executor running again', async () => {
      const now = (await status()).find((c) => c.name === 'default')!;
      return now.state === 'running' && now.pid !== executor.pid;
    }, 60_000);
    await expectInvokeCompletes('after the exit under the lock');
  });
});
