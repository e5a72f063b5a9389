// An executor behind a launcher that outlives it: `sh -c 'executor …; sleep'`
// without exec, so when the executor leaves, the launcher still holds the
// channel's pipes and no end of stream comes. A graceful stop must not wait
// out the whole grace for an exit that only a kill brings, and an executor
// that dies under it must be found by its missed heartbeat, its group killed,
// and a new one started: nothing runs twice (supervisor/watchdog/reap.ts).
import { expect } from 'chai';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { isGone } from '../../shared/child/proc-stat.js';
import { distPath } from '../helpers/children.js';
import { until } from '../helpers/eventually.js';
import { logEvents, sqlite, startService, type TestService } from '../helpers/service.js';

const EXECUTOR = distPath('executor-proc', 'main.js');
const GRACE_MS = 60_000;

/** The pids a process started (/proc/<pid>/task/<pid>/children). */
function childrenOf(pid: number): number[] {
  return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
}

function notes(service: TestService): string[] {
  return readFileSync(path.join(service.paths.resourcesDir, 'review-notes.jsonl'), 'utf8').split('\n').filter((line) => line.trim() !== '');
}

describe('an executor behind a launcher that outlives it (sh -c without exec)', function () {
  this.timeout(120_000);
  let service: TestService;

  beforeEach(async () => {
    service = await startService({
      config: (root) => ({
        timing: { shutdown_grace_ms: GRACE_MS, heartbeat_timeout_ms: 3000 },
        executors: [
          {
            name: 'default',
            tools: ['review-notes/*'],
            argv: ['/bin/sh', '-c', '"$@"; sleep 1000', 'sh', process.execPath, EXECUTOR, '--dir', path.join(root, 'executors', 'default'), '--resources', path.join(root, 'resources')],
          },
        ],
      }),
    });
  });

  afterEach(() => service.cleanup());

  /** The launcher's pid (the child custody started) and the executor's under it. */
  async function launcher(): Promise<{ shell: number; executor: number }> {
    const shell = await until('the launcher recorded', async () => (await sqlite(path.join(service.paths.supervisorDir, 'supervisor.db'), "SELECT pid FROM children WHERE name = 'default' AND pid IS NOT NULL"))[0]?.pid as number | undefined);
    const [executor] = childrenOf(shell);
    expect(executor, 'the executor runs under the launcher').to.be.a('number');
    return { shell, executor: executor! };
  }

  it('stops the service without waiting out the grace: the executor answered shutdown, the launcher is killed with its group, and it is said', async () => {
    expect((await service.cli(['invoke', 'review-notes/append', '--arg', 'note=one'])).code).to.equal(0);
    const { shell } = await launcher();
    const started = performance.now();
    expect(await service.stop(), service.stderr.join('\n')).to.equal(0);
    const tookMs = performance.now() - started;
    const [overdue] = logEvents(service, 'child_stop_overdue');
    expect(overdue, 'the kill is said').to.deep.include({ child: 'default', answered: true, waited_ms: 3000 });
    expect(String(overdue!.message)).to.contain('exec');
    // Before, it waited the whole grace after the answer: one minute here.
    expect(tookMs, 'the stop did not wait out the grace').to.be.below(GRACE_MS / 2);
    expect(isGone(shell, null), 'the launcher is gone').to.equal(true);
    expect(notes(service)).to.have.length(1);
  });

  it('finds an executor killed under it by its missed heartbeat, kills the launcher\'s group and serves on a new one: nothing runs twice', async () => {
    expect((await service.cli(['invoke', 'review-notes/append', '--arg', 'note=one'])).code).to.equal(0);
    const { shell, executor } = await launcher();
    process.kill(executor, 'SIGKILL');
    const missed = /"child":"default","event":"child_state","from":"running","to":"backoff","reason":"signal SIGKILL: heartbeat missed/;
    await until('the heartbeat missed and the launcher killed', () => Promise.resolve(service.stderr.some((line) => missed.test(line)) ? true : undefined));
    expect(isGone(shell, null), 'the launcher is gone').to.equal(true);
    const second = await service.cli(['invoke', 'review-notes/append', '--arg', 'note=two']);
    expect(second.code, second.stderr).to.equal(0);
    expect((await launcher()).shell, 'a new launcher').to.not.equal(shell);
    expect(notes(service).map((line) => (JSON.parse(line) as { note: string }).note)).to.deep.equal(['one', 'two']);
    expect(await service.stop()).to.equal(0);
  });
});
