// A child whose command cannot be started at all (shared/child/spawn.ts
// spawnError): no process, so no 'exit' to wait for. The start is refused at
// once and the child moves on (backoff, restarts, failed), never left in
// `starting`. Out of processes (fork EAGAIN: a pids limit, ulimit -u) it is
// tried again uncounted, like descriptors_exhausted (docs/ARCHITECTURE.md §7).
import { expect } from 'chai';
import { accessSync, constants, mkdirSync, readdirSync, readFileSync, rmdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { spawnChild } from '../../shared/child/spawn.js';
import { CustodyError } from '../../shared/errors.js';
import { collectingLogger } from '../helpers/children.js';
import { untilHolds } from '../helpers/eventually.js';
import { parentOf } from '../helpers/procs.js';
import { custody, initTestState, logEvents, startService, type TestService } from '../helpers/service.js';
import { statePaths } from '../../supervisor/paths.js';

type ChildRow = { name: string; role: string; pid: number | null; state: string; restarts: number };

const children = async (service: TestService): Promise<ChildRow[]> => (await service.http('GET', '/v1/status', undefined, 'agent')).body.children as ChildRow[];

describe('a child command that cannot be started', function () {
  this.timeout(60_000);

  it('is refused at once with what to check when the command does not exist (ENOENT), not awaited for an exit that never comes', async () => {
    const started = Date.now();
    let refusal: unknown;
    try {
      await spawnChild({
        name: 'ghost',
        role: 'executor',
        argv: ['/nonexistent/custody-executor'],
        mode: 'serve',
        pins: { kernel: null },
        settings: {},
        limits: { maxFrameBytes: 65_536, maxDepth: 32 },
        expect: null,
        maxInFlight: 1,
        helloTimeoutMs: 20_000,
        log: collectingLogger().log,
      });
    } catch (error) {
      refusal = error;
    }
    expect(refusal).to.be.instanceOf(CustodyError);
    expect((refusal as CustodyError).code).to.equal('config_invalid');
    expect((refusal as CustodyError).message).to.contain('ENOENT').and.to.contain('executors[].argv');
    // Well before the hello timeout: the refusal did not wait for anything.
    expect(Date.now() - started).to.be.below(5_000);
  });

  it('stops custody start with the reason when an executor\'s command is missing, instead of waiting in starting for good', async () => {
    // Provisioned with a working command, then its argv pointed at a launcher that is not there (a typo, a package removed).
    const root = await initTestState({
      restart: { max_restarts: 1, period_s: 60, backoff_initial_ms: 50, backoff_max_ms: 200 },
      executors: [
        { name: 'default', tools: ['review-notes/*'] },
        { name: 'ghost', tools: ['ghost/*'] },
      ],
    });
    try {
      const configFile = statePaths(root).config;
      const config = JSON.parse(readFileSync(configFile, 'utf8')) as { executors: Array<{ name: string; argv?: string[] }> };
      config.executors.find((e) => e.name === 'ghost')!.argv = [path.join(root, 'no-such-launcher')];
      writeFileSync(configFile, JSON.stringify(config));
      const started = await custody(['--state', root, 'start'], { timeoutMs: 30_000 });
      // Refused for good at its first start (config_invalid: usage, exit 2), not restarted as a crash.
      expect(started.code, started.stderr).to.equal(2);
      const last = started.stderr.trim().split('\n').at(-1)!;
      expect(last).to.contain('custody: ghost: cannot start').and.to.contain('ENOENT').and.to.contain('executors[].argv').and.to.contain('[config_invalid]');
    } finally {
      rmSync(path.dirname(root), { recursive: true, force: true });
    }
  });
});

/** The cgroup v1 pids hierarchy when this process may make groups in it (root on most Linux machines), else null. */
function pidsHierarchy(): string | null {
  const root = '/sys/fs/cgroup/pids';
  try {
    accessSync(path.join(root, 'cgroup.procs'), constants.W_OK);
    return root;
  } catch {
    return null;
  }
}

function tasksOf(pid: number): number {
  return readdirSync(`/proc/${pid}/task`).length;
}

function childrenOf(pid: number): number[] {
  return readdirSync('/proc')
    .filter((entry) => /^\d+$/.test(entry))
    .map(Number)
    .filter((candidate) => {
      try {
        return parentOf(candidate) === pid;
      } catch {
        return false;
      }
    });
}

describe('a child started while the system refuses new processes (a pids limit)', function () {
  this.timeout(90_000);
  const hierarchy = pidsHierarchy();
  let group: string | null = null;
  let service: TestService | undefined;

  before(function () {
    if (hierarchy === null) this.skip();
  });

  after(async () => {
    if (group !== null) {
      writeFileSync(path.join(group, 'pids.max'), 'max');
      await service?.stop();
      // Every process of the group gone (the service stopped): the group can be removed.
      for (const pid of readFileSync(path.join(group, 'cgroup.procs'), 'utf8').trim().split('\n').filter(Boolean)) writeFileSync(path.join(hierarchy!, 'cgroup.procs'), pid);
      rmdirSync(group);
    }
    service?.cleanup();
  });

  it('is tried again, uncounted, past restart.max_restarts, with processes_exhausted saying why, and runs once processes can be had', async () => {
    service = await startService({ config: { restart: { max_restarts: 1, period_s: 60, backoff_initial_ms: 50, backoff_max_ms: 200 } } });
    const executor = (await children(service)).find((c) => c.role === 'executor')!;
    let host: number | undefined;
    await untilHolds('the adapter host started', () => (host = childrenOf(executor.pid!)[0]) !== undefined);
    group = path.join(hierarchy!, `custody-test-${process.pid}-${Date.now()}`);
    mkdirSync(group);
    // The kernel stays out: a process in the group that starts a thread later (libuv's pool starts lazily) would abort.
    for (const pid of [service.process.pid!, executor.pid!, host!]) writeFileSync(path.join(group, 'cgroup.procs'), String(pid));
    // Room for what runs now less the executor and its adapter host: once they are killed the group is full, so the
    // supervisor's next fork of an executor fails with EAGAIN.
    const current = Number(readFileSync(path.join(group, 'pids.current'), 'utf8'));
    const executorTasks = tasksOf(executor.pid!) + tasksOf(host!);
    writeFileSync(path.join(group, 'pids.max'), String(current - executorTasks));
    process.kill(-executor.pid!, 'SIGKILL');

    // With max_restarts 1, counted start failures would have failed the child after two.
    await untilHolds('four refused starts', () => logEvents(service!, 'restart_failed').filter((line) => line.code === 'processes_exhausted').length >= 4);
    const refusal = logEvents(service, 'restart_failed').find((line) => line.code === 'processes_exhausted')!;
    expect(String(refusal.message)).to.contain('EAGAIN').and.to.contain('pids.max');
    expect(logEvents(service, 'child_failed'), 'never failed for it').to.deep.equal([]);
    expect((await children(service)).find((c) => c.role === 'executor')!.state).to.be.oneOf(['backoff', 'starting']);

    writeFileSync(path.join(group, 'pids.max'), 'max');
    await untilHolds('the executor running again', async () => (await children(service!)).find((c) => c.role === 'executor')!.state === 'running');
    const answer = await service.http('POST', '/v1/invoke', { tool: 'review-notes/append', arguments: { note: 'after processes came back' } }, 'agent');
    expect(answer.status, JSON.stringify(answer.body)).to.equal(200);
    expect(answer.body).to.include({ outcome: 'completed' });
  });
});
