// The state lock across supervisors (shared/store/dir-lock.ts): a stopped
// supervisor is never displaced, not even after it has been stopped longer
// than any staleness rule would wait; a killed one is replaced at once by
// the next `custody start`, which kills its children and resumes its work.
import { expect } from 'chai';
import { spawn } from 'node:child_process';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { isCustodyError } from '../../shared/errors.js';
import { acquireDirLock } from '../../shared/store/dir-lock.js';
import { isGone } from '../../shared/child/proc-stat.js';
import { CLI, custody, FIXTURE_EXECUTOR, initTestState, sqlite, startService, type TestService } from '../helpers/service.js';

/** proper-lockfile's staleness that this lock replaced: a stop longer than it used to cost the holder its lock. */
const OLD_STALE_MS = 5000;

async function childPid(service: TestService, role: 'kernel' | 'executor'): Promise<number> {
  const { body } = await service.http('GET', '/v1/status');
  const child = (body.children as Array<{ role: string; pid: number | null }>).find((c) => c.role === role);
  if (!child?.pid) throw new Error(`no running ${role}`);
  return child.pid;
}

const config = {
  executors: [{ ...FIXTURE_EXECUTOR, deadlines_ms: { '*': 30_000 } }],
  // Long enough that the stopped executor is not the heartbeat's business here.
  timing: { heartbeat_interval_ms: 1000, heartbeat_timeout_ms: 30_000 },
};

describe('the state lock across supervisors', function () {
  this.timeout(90_000);
  let service: TestService;

  beforeEach(async () => {
    service = await startService({ config });
  });

  afterEach(async () => {
    await service.stop();
    service.cleanup();
  });

  it('refuses a second custody start beside a supervisor stopped longer than the old staleness, naming its pid; after SIGCONT the first serves on', async function () {
    this.slow(15_000);
    const supervisor = service.process.pid!;
    const executor = await childPid(service, 'executor');
    process.kill(executor, 'SIGSTOP');
    process.kill(supervisor, 'SIGSTOP');
    try {
      await sleep(OLD_STALE_MS + 1000);
      const second = await custody(['start', '--state', service.dir, '--port', '0']);
      expect(second.code, second.stderr).to.equal(3);
      expect(second.stderr).to.contain('store_locked').and.to.contain(`locked by pid ${supervisor}`);
      // The stopped executor keeps its own directory too.
      try {
        const stolen = await acquireDirLock(service.paths.executorDir('default'));
        await stolen.release();
        expect.fail('the stopped executor lost its directory lock');
      } catch (error) {
        expect(isCustodyError(error, 'store_locked'), String(error)).to.equal(true);
        expect((error as Error).message).to.contain(`locked by pid ${executor}`);
      }
    } finally {
      process.kill(supervisor, 'SIGCONT');
      process.kill(executor, 'SIGCONT');
    }
    const answer = await service.cli(['invoke', 'review-notes/append', '--arg', 'note=after the stop']);
    expect(answer.code, answer.stderr).to.equal(0);
    expect(await childPid(service, 'executor'), 'the same executor serves').to.equal(executor);
    const log = service.stderr.join('\n');
    expect(log).to.not.contain('lock_lost');
    expect(log).to.not.contain('predecessor_child_killed');
  });

  it('after kill -9 of the supervisor, the next custody start kills its children, serves at once and answers a retried request', async function () {
    this.slow(20_000);
    expect((await service.http('POST', '/v1/grants', { tool: 'fixture/*', max_invocations: 100, ttl_ms: 3_600_000 })).status).to.equal(201);
    const children = [await childPid(service, 'kernel'), await childPid(service, 'executor')];
    // Long enough that the effect is still running when the next supervisor starts, on a machine under test load:
    // its executor then outlives the kill (it waits for the effect before leaving), and the next start must kill it.
    const request = { tool: 'fixture/sleep', request_id: 'across-the-kill', arguments: { ms: 15_000 } };
    const first = await service.http('POST', '/v1/invoke', { ...request, wait_ms: 50 }, 'agent');
    expect(first.status).to.equal(202);
    const db = path.join(service.paths.supervisorDir, 'supervisor.db');
    const phase = async () => (await sqlite(db, "SELECT phase FROM requests WHERE request_id = 'across-the-kill'"))[0]?.phase;
    while ((await phase()) !== 'executing') await sleep(20);
    // The effect itself running, not only its execute frame sent: claimed in the ledger (the claim comes before the
    // effect). A frame still unread when the supervisor dies is never acted on, and the executor then leaves at once.
    const ledger = path.join(service.paths.executorDir('default'), 'ledger.db');
    const claimed = async () => (await sqlite(ledger, `SELECT operation_id FROM claims WHERE kind = 'claim' AND operation_id = '${String(first.body.operation_id)}'`)).length === 1;
    while (!(await claimed())) await sleep(20);
    service.process.kill('SIGKILL');
    await new Promise((resolve) => service.process.once('close', resolve));
    expect(await phase(), 'the kill hit the request in flight').to.equal('executing');
    const killedAt = Date.now();
    service = await service.restart();
    const tookMs = Date.now() - killedAt;
    process.stderr.write(`      (kill -9 → next start serving: ${tookMs} ms, on this machine under test load)\n`);
    for (const pid of children) expect(isGone(pid, null), `old child ${pid} is gone`).to.equal(true);
    expect(service.stderr.join('\n')).to.contain('predecessor_child_killed').and.not.contain('state_lock_waiting');
    const retried = await service.http('POST', '/v1/invoke', { ...request, wait_ms: 60_000 }, 'agent');
    expect(retried.status, JSON.stringify(retried.body)).to.equal(200);
    expect(retried.body).to.include({ final: true });
    const again = await service.http('POST', '/v1/invoke', { ...request, wait_ms: 60_000 }, 'agent');
    expect(again.body, 'the same answer again').to.deep.equal(retried.body);
  });
});

describe('a child still starting when its supervisor is killed', function () {
  this.timeout(60_000);

  it('is recorded with its pid before its hello, and the next custody start kills it (a child that never says hello, as one stopped or migrating)', async () => {
    const root = await initTestState({});
    // A kernel that never proves itself and never reads its stdin: it outlives its supervisor, as a stopped child does.
    const configFile = path.join(root, 'custody.json');
    const config = JSON.parse(readFileSync(configFile, 'utf8')) as { kernel: Record<string, unknown> };
    writeFileSync(configFile, JSON.stringify({ ...config, kernel: { ...config.kernel, argv: ['sleep', '120'] } }));
    const db = path.join(root, 'supervisor', 'supervisor.db');
    const kernelRow = async () => (await sqlite(db, "SELECT state, pid FROM children WHERE name = 'kernel'"))[0] as { state: string; pid: number | null } | undefined;
    const start = () => spawn(process.execPath, [CLI, 'start', '--state', root, '--port', '0'], { stdio: ['ignore', 'ignore', 'pipe'] });
    let second: ReturnType<typeof start> | null = null;
    let starting: { state: string; pid: number | null } | undefined;
    try {
      const first = start();
      for (let i = 0; i < 400 && !(starting = await kernelRow())?.pid; i++) await sleep(10);
      expect(starting, 'the starting kernel is recorded with its pid').to.deep.include({ state: 'starting' });
      const pid = starting!.pid!;
      first.kill('SIGKILL');
      await new Promise((resolve) => first.once('close', resolve));
      expect(isGone(pid, null), 'the starting kernel outlives its supervisor').to.equal(false);

      second = start();
      const stderr: string[] = [];
      second.stderr.on('data', (chunk: Buffer) => stderr.push(String(chunk)));
      for (let i = 0; i < 3000 && !isGone(pid, null); i++) await sleep(10);
      expect(isGone(pid, null), 'the next start killed it').to.equal(true);
      for (let i = 0; i < 1000 && !stderr.join('').includes('predecessor_child_killed'); i++) await sleep(10);
      expect(stderr.join('')).to.contain('predecessor_child_killed');
    } finally {
      second?.kill('SIGTERM');
      if (second) await new Promise((resolve) => second!.once('close', resolve));
      const left = await kernelRow().catch(() => undefined);
      if (left?.pid && !isGone(left.pid, null)) process.kill(-left.pid, 'SIGKILL');
      if (starting?.pid && !isGone(starting.pid, null)) process.kill(-starting.pid, 'SIGKILL');
      rmSync(path.dirname(root), { recursive: true, force: true });
    }
  });
});
