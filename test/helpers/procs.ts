// Processes as the tests see them through /proc: alive (a zombie awaiting its
// reaper counts as gone, as shared/child/proc-stat.ts judges it) and
// its parent.
import { readFileSync } from 'node:fs';
import { isGone } from '../../shared/child/proc-stat.js';

export function alive(pid: number): boolean {
  return !isGone(pid, null);
}

/** Field 4 of /proc/<pid>/stat (the command name before it may hold spaces or ')'). */
export function parentOf(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
}
