// Telling a process apart from a later one with the same pid: the start time
// in clock ticks since boot, field 22 of /proc/<pid>/stat. A restarted
// supervisor kills a recorded child only when pid AND start time match.
import { readFileSync } from 'node:fs';

interface Stat {
  /** Field 3: R, S, D, Z (zombie), X (dead), … */
  readonly state: string;
  /** Field 22: start time in clock ticks after boot. */
  readonly startTicks: number | undefined;
}

function readStat(pid: number): Stat | undefined {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return undefined;
  }
  // The command name (field 2) is in parentheses and may hold spaces or ')'.
  const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const ticks = Number(rest[19]);
  return { state: rest[0] ?? '', startTicks: Number.isSafeInteger(ticks) ? ticks : undefined };
}

export function processStartTicks(pid: number): number | undefined {
  return readStat(pid)?.startTicks;
}

/**
 * Whether the process recorded as (pid, start ticks) can no longer act: no
 * such pid, a later process reusing the pid, or a zombie awaiting its reaper.
 */
export function isGone(pid: number, startTicks: number | null): boolean {
  const stat = readStat(pid);
  if (!stat || stat.state === 'Z' || stat.state === 'X') return true;
  return startTicks !== null && stat.startTicks !== startTicks;
}
