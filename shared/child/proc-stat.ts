// The one reader of /proc/<pid>/stat (Linux). Telling a process apart from a
// later one with the same pid: the start time in clock ticks since boot,
// field 22. A restarted supervisor kills a recorded child only when pid AND
// start time match; group members are found by field 5 (process-group.ts).
import { readFileSync } from 'node:fs';

export interface Stat {
  /** Field 3: R, S, D, Z (zombie), X (dead), … */
  readonly state: string;
  /** Field 5: the process group id. */
  readonly group: number;
  /** Field 6: the session id (a child is spawned as its session's leader, and what it starts inherits it). */
  readonly session: number;
  /** Field 22: start time in clock ticks after boot. */
  readonly startTicks: number | undefined;
}

/** The fields above of a process, or undefined where it is gone or /proc cannot be read. */
export function readStat(pid: number | string): Stat | undefined {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return undefined;
  }
  // The command name (field 2) is in parentheses and may hold spaces or ')'.
  const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const ticks = Number(rest[19]);
  return { state: rest[0] ?? '', group: Number(rest[2]), session: Number(rest[3]), startTicks: Number.isSafeInteger(ticks) ? ticks : undefined };
}

/** A zombie awaits its reaper and a dead process is going: neither can act. */
export function canAct(stat: Stat): boolean {
  return stat.state !== 'Z' && stat.state !== 'X';
}

/** Stopped from outside (SIGSTOP, a debugger: /proc state T or t): alive, and answering nothing until continued. */
export function isStopped(pid: number): boolean {
  const state = readStat(pid)?.state;
  return state === 'T' || state === 't';
}

/** The session id of a live process, or undefined. */
export function processSession(pid: number): number | undefined {
  return readStat(pid)?.session;
}

/** When this machine booted (ms since the epoch, /proc/stat btime); undefined where it cannot be read. */
export function bootTimeMs(): number | undefined {
  try {
    const line = readFileSync('/proc/stat', 'utf8').split('\n').find((l) => l.startsWith('btime '));
    const seconds = Number(line?.slice(6));
    return Number.isSafeInteger(seconds) ? seconds * 1000 : undefined;
  } catch {
    return undefined;
  }
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
  if (!stat || !canAct(stat)) return true;
  return startTicks !== null && stat.startTicks !== startTicks;
}
