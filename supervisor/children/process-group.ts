// A child runs in its own process group, with whatever it started: an
// executor's adapter host and the subprocesses adapters spawn. The group
// leader's exit is not proof that the group can no longer act; only a group
// with no live member is. Before a replacement starts, the whole group is
// killed and waited for. A zombie cannot act, so members that are only
// waiting for their reaper (init, for orphans) do not hold the restart back.
import { killGroup } from '../../shared/child/spawn.js';
import { liveGroupMembers } from '../../shared/child/process-group.js';

/** Whether any process of the group is still alive (not a zombie). */
export function groupAlive(pgid: number): boolean {
  const members = liveGroupMembers(pgid);
  return members === null ? signalReaches(pgid) : members.length > 0;
}

function signalReaches(pgid: number): boolean {
  try {
    process.kill(-pgid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** SIGKILL the group and wait until no live member is left; false if one outlived the wait. */
export async function killGroupAndWait(pgid: number, timeoutMs: number): Promise<boolean> {
  killGroup(pgid, 'SIGKILL');
  const deadline = performance.now() + timeoutMs;
  while (groupAlive(pgid)) {
    if (performance.now() > deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  return true;
}
