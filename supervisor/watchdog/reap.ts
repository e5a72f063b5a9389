// Killing a child and proving it gone (ARCHITECTURE.md §7 "children"): the
// leader is killed and reaped, then its whole process group is killed and
// waited for. Only a group with no live member can no longer act, so only
// then may a replacement start.
import { setTimeout as sleep } from 'node:timers/promises';
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

/** How long a graceful stop waits: for the answer to `shutdown`, then for the exit. */
export interface StopWaits {
  /** `timing.shutdown_grace_ms`: the operations in flight finish before the child answers. */
  readonly graceMs: number;
  /** `timing.heartbeat_timeout_ms`: from the answer (or the wait for it given up) to the exit. */
  readonly leaveMs: number;
}

/**
 * `shutdown`, answered at once (docs/PROTOCOL.md: the child then lets what it
 * accepted finish and exits), then the answers to every request still in
 * flight on the channel within the grace, then the exit within `leaveMs`: a
 * child with nothing left to answer has nothing to do but close its store,
 * which a kill leaves as whole as a close does. Past those waits it is
 * killed, and said: a launcher that outlives its child (`sh -c 'executor …;
 * …'` without exec) holds the channel open after the child left, and no exit
 * comes until the kill.
 */
export async function stopGracefully(session: Pick<ChildSession, 'channel' | 'kill' | 'exited'>, waits: StopWaits, log: Logger): Promise<void> {
  let gone = false;
  void session.exited.then(() => (gone = true));
  const started = performance.now();
  const answered = await session.channel.request('shutdown', {}, { timeoutMs: waits.graceMs }).then(
    () => true,
    () => false,
  );
  while (!gone && session.channel.inFlight > 0 && performance.now() - started < waits.graceMs) await sleep(DRAIN_POLL_MS);
  const exited = gone || (await withTimeout(session.exited.then(() => true), waits.leaveMs, () => false));
  if (!exited) {
    const inFlight = session.channel.inFlight;
    log.warn('child_stop_overdue', {
      answered,
      in_flight: inFlight,
      waited_ms: waits.leaveMs,
      message: !answered
        ? `it did not answer shutdown within ${waits.graceMs} ms (timing.shutdown_grace_ms), nor exit ${waits.leaveMs} ms later: killed with its process group`
        : inFlight > 0
          ? `${inFlight} request(s) still unanswered ${waits.graceMs} ms after shutdown (timing.shutdown_grace_ms): killed with its process group`
          : `it answered shutdown and every request but had not exited ${waits.leaveMs} ms later (timing.heartbeat_timeout_ms): killed with its process group. A launcher that outlives its child (sh -c '… ; …' without exec) keeps the channel open after the child left: end the launcher's command with exec`,
    });
    session.kill('SIGKILL');
  }
  await session.exited;
}

/** How often a stop looks whether the requests in flight are answered. */
const DRAIN_POLL_MS = 20;
