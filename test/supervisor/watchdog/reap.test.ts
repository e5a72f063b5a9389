// The watchdog's kill and reap on real process groups: a leader that ignores
// SIGTERM, a member stopped with SIGSTOP, a member left behind by a leader
// that exited on its own. Done means no live member of the group is left.
import { expect } from 'chai';
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { CustodyError } from '../../../shared/errors.js';
import { type ChildExit, killGroup } from '../../../shared/child/spawn.js';
import { groupAlive } from '../../../supervisor/children/process-group.js';
import { ownDeadlinePassed } from '../../../supervisor/watchdog/deadlines.js';
import { runningNow } from '../../../shared/timeout.js';
import { type Reapable, killAndReap, reapGroup } from '../../../supervisor/watchdog/reap.js';
import { collectingLogger } from '../../helpers/children.js';

interface Group extends Reapable {
  readonly leader: ChildProcessWithoutNullStreams;
  /** The pid of the member the leader started in the background. */
  readonly member: number;
}

/**
 * A shell leading its own process group, with one background `sleep`;
 * `script` runs after it started. With `ignoreTerm` the shell ignores
 * SIGTERM from before it says the member's pid (the member keeps the
 * default): a test that signals once it has the pid never races the trap.
 */
async function startGroup(script: string, { ignoreTerm = false } = {}): Promise<Group> {
  const leader = spawn('sh', ['-c', `sleep 60 & ${ignoreTerm ? "trap '' TERM; " : ''}echo $!; ${script}`], { detached: true, stdio: ['pipe', 'pipe', 'pipe'] });
  const exited = new Promise<ChildExit>((resolve) => leader.once('exit', (code, signal) => resolve({ code, signal })));
  const member = await new Promise<number>((resolve) => leader.stdout.once('data', (chunk: Buffer) => resolve(Number(chunk.toString().trim()))));
  const pid = leader.pid!;
  return { leader, member, pid, exited, kill: (signal = 'SIGKILL') => killGroup(pid, signal) };
}

/** The process state letter from /proc (R, S, T, Z…), or null once it is gone. */
function stateOf(pid: number): string | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0] ?? null;
  } catch {
    return null;
  }
}

describe('the watchdog kills and reaps a process group', function () {
  this.timeout(20_000);
  const groups: Group[] = [];

  afterEach(() => {
    for (const group of groups.splice(0)) {
      try {
        killGroup(group.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
  });

  it('whose leader ignores SIGTERM and whose member is stopped: the leader dies of SIGKILL and no member is left alive', async () => {
    const group = await startGroup('wait', { ignoreTerm: true });
    groups.push(group);
    process.kill(group.member, 'SIGSTOP');
    await untilState(group.member, 'T');
    group.kill('SIGTERM');
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(group.leader.exitCode, 'SIGTERM alone did not end the leader').to.equal(null);

    await killAndReap(group, collectingLogger().log);

    expect(await group.exited).to.deep.equal({ code: null, signal: 'SIGKILL' });
    expect(groupAlive(group.pid)).to.equal(false);
    expect(stateOf(group.member), 'the stopped member is gone or a zombie').to.be.oneOf([null, 'Z']);
  });

  it('whose leader exited on its own, leaving a member running: the member is killed before the reap resolves', async () => {
    const group = await startGroup('exit 0');
    groups.push(group);
    expect(await group.exited).to.deep.equal({ code: 0, signal: null });
    expect(groupAlive(group.pid), 'the member outlived its leader').to.equal(true);

    const { log, lines } = collectingLogger();
    await reapGroup(group, log);

    expect(groupAlive(group.pid)).to.equal(false);
    expect(lines.join('')).not.to.contain('process_group_survived');
  });

  it('whose members this process may not signal (EPERM: a command run as another user): says the group survived, and does not throw', async function () {
    this.slow(12_000);
    const group = await startGroup('exit 0');
    groups.push(group);
    await group.exited;
    // Root can signal anything here, so kill(2)'s EPERM for the group is stood in for.
    const realKill = process.kill.bind(process);
    process.kill = ((pid: number, signal?: string | number) => {
      if (pid === -group.pid) throw Object.assign(new Error('kill EPERM'), { code: 'EPERM' });
      return realKill(pid, signal);
    });
    const { log, lines } = collectingLogger();
    try {
      expect(() => killGroup(group.pid, 'SIGKILL')).to.not.throw();
      await reapGroup(group, log);
    } finally {
      process.kill = realKill;
    }
    expect(lines.join('')).to.contain('process_group_survived');
    killGroup(group.pid, 'SIGKILL');
  });
});

describe("the watchdog's own deadline", () => {
  const deadlineMs = 1000;
  const cases: Array<{ what: string; code: string; sentAgoMs: number | null; own: boolean }> = [
    { what: 'its own timeout after the whole deadline', code: 'deadline_exceeded', sentAgoMs: 1500, own: true },
    { what: 'a deadline_exceeded that came before the deadline (the peer answered with it)', code: 'deadline_exceeded', sentAgoMs: 200, own: false },
    { what: 'another failure after the deadline', code: 'peer_exited', sentAgoMs: 1500, own: false },
    { what: 'a failure before anything was sent', code: 'deadline_exceeded', sentAgoMs: null, own: false },
  ];
  for (const { what, code, sentAgoMs, own } of cases) {
    it(`${own ? 'is' : 'is not'} ${what}`, () => {
      const sentAt = sentAgoMs === null ? null : runningNow() - sentAgoMs;
      expect(ownDeadlinePassed(new CustodyError(code as 'deadline_exceeded', 'x'), sentAt, deadlineMs)).to.equal(own);
    });
  }
});

async function untilState(pid: number, state: string): Promise<void> {
  for (let i = 0; i < 200 && stateOf(pid) !== state; i++) await new Promise((resolve) => setTimeout(resolve, 10));
  expect(stateOf(pid)).to.equal(state);
}
