// The live members of a process group, read from /proc (Linux). A child runs
// as the leader of its own group (spawned detached, ARCHITECTURE.md §7), with
// whatever it started: an executor's adapter host and the subprocesses
// adapters spawn. A zombie cannot act, so members only waiting for their
// reaper are not counted.
import { readdirSync } from 'node:fs';
import { canAct, readStat } from './proc-stat.js';

/** The pids of the group's live (not zombie) members; null where /proc cannot be read. */
export function liveGroupMembers(pgid: number): number[] | null {
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return null;
  }
  const members: number[] = [];
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = readStat(entry);
    if (stat?.group === pgid && canAct(stat)) members.push(Number(entry));
  }
  return members;
}

/**
 * A child leaving after its supervisor is gone (stdin ended, and the process
 * that started it is no longer its parent): everything it started still in
 * its group is killed, since no supervisor is left to reap the group. Without
 * this, a subprocess an adapter left behind (`sh -c 'sleep 60; …'`) outlived
 * the executor and could act after reconciliation had answered. Only members
 * of this process's own group, read while it is alive (so the group id cannot
 * have been reused), and never this process. Returns the pids signalled.
 */
export function killOwnGroupMembers(): number[] {
  const members = liveGroupMembers(process.pid) ?? [];
  const killed: number[] = [];
  for (const pid of members) {
    if (pid === process.pid) continue;
    try {
      process.kill(pid, 'SIGKILL');
      killed.push(pid);
    } catch {
      // gone meanwhile, or not ours to signal
    }
  }
  return killed;
}
