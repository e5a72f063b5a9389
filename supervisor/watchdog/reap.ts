// Killing a child and proving it gone (ARCHITECTURE.md §7 "children"): the
// leader is killed and reaped, then its whole process group is killed and
// waited for. Only a group with no live member can no longer act, so only
// then may a replacement start.
import { withTimeout } from '../../shared/timeout.js';
import type { Logger } from '../../shared/log.js';
import type { ChildSession } from '../../shared/child/spawn.js';
import { killGroupAndWait } from '../children/process-group.js';

/** How long a killed child's process group may take to empty before the restart goes ahead anyway. */
export const GROUP_EXIT_WAIT_MS = 5000;

/** What killing and reaping needs of a session: its group leader, a way to signal the group, its exit. */
export type Reapable = Pick<ChildSession, 'pid' | 'kill' | 'exited'>;

/** SIGKILL the group, wait for the leader's exit, then until no member of its group is left. */
export async function killAndReap(session: Reapable, log: Logger): Promise<void> {
  session.kill('SIGKILL');
  await session.exited;
  await reapGroup(session, log);
}

/** The leader is reaped; make sure nothing of its group is left (a survivor is logged, and does not hold the restart). */
export async function reapGroup(session: Pick<ChildSession, 'pid'>, log: Logger): Promise<void> {
  const emptied = await killGroupAndWait(session.pid, GROUP_EXIT_WAIT_MS);
  if (!emptied) log.error('process_group_survived', { child_pid: session.pid, waited_ms: GROUP_EXIT_WAIT_MS });
}

/** `shutdown`, then wait up to the grace for the exit, then SIGKILL; resolves once the leader has exited. */
export async function stopGracefully(session: Pick<ChildSession, 'channel' | 'kill' | 'exited'>, graceMs: number): Promise<void> {
  const answered = session.channel.request('shutdown', {}, { timeoutMs: graceMs }).catch(() => undefined);
  // The grace starts once the shutdown is answered (or its own wait gave up).
  await answered;
  const exited = await withTimeout(session.exited.then(() => true), graceMs, () => false);
  if (!exited) session.kill('SIGKILL');
  await session.exited;
}
