// Telling a process apart from a later one with the same pid: the start time
// in clock ticks since boot, field 22 of /proc/<pid>/stat. A restarted
// supervisor kills a recorded child only when pid AND start time match.
import { readFileSync } from 'node:fs';

export function processStartTicks(pid: number): number | undefined {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return undefined;
  }
  // The command name (field 2) is in parentheses and may hold spaces or ')'.
  const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // rest[0] is field 3 (state); field 22 is rest[19].
  const ticks = Number(rest[19]);
  return Number.isSafeInteger(ticks) ? ticks : undefined;
}

export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Whether the process recorded as (pid, start ticks) can no longer act: no
 * such pid, a later process reusing the pid, or a zombie awaiting its reaper.
 */
export function isGone(pid: number, startTicks: number | null): boolean {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return true;
  }
  const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  if (rest[0] === 'Z' || rest[0] === 'X') return true;
  return startTicks !== null && Number(rest[19]) !== startTicks;
}
