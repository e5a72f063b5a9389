// What the bench reads from /proc and the state directory: CPU time and RSS
// of every process of a running service (supervisor, kernel, executors and
// whatever they spawned, e.g. the adapter host), and the bytes of its stores.
import { readFileSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';

/** Clock ticks per second of /proc/<pid>/stat utime and stime (USER_HZ, 100 on Linux). */
const USER_HZ = 100;

export interface ProcessSample {
  readonly role: string;
  readonly pid: number;
  readonly cpu_ms: number;
  readonly rss_bytes: number;
  /** /proc/<pid>/io write_bytes: what the process sent toward the disk (pages it dirtied: WAL frames, checkpoints, journals). */
  readonly write_bytes: number;
}

function statFields(pid: number): string[] | null {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name is in parentheses and may hold spaces: fields start after the last ')'.
    return text.slice(text.lastIndexOf(')') + 2).split(' ');
  } catch {
    return null;
  }
}

function parentOf(pid: number): number | null {
  const fields = statFields(pid);
  return fields ? Number(fields[1]) : null;
}

function cpuMsOf(pid: number): number {
  const fields = statFields(pid);
  if (!fields) return 0;
  // Fields after the command: state(0) ppid(1) … utime(11) stime(12).
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / USER_HZ;
}

/**
 * CPU of this process's children that have ended and been waited for
 * (/proc/self/stat cutime + cstime): around a synchronous spawn, the CPU of
 * that child alone, every thread of it.
 */
export function reapedChildrenCpuMs(): number {
  const fields = statFields(process.pid)!;
  return ((Number(fields[13]) + Number(fields[14])) * 1000) / USER_HZ;
}

function rssOf(pid: number): number {
  try {
    const line = readFileSync(`/proc/${pid}/status`, 'utf8').split('\n').find((l) => l.startsWith('VmRSS:'));
    return line ? Number(line.split(/\s+/)[1]) * 1024 : 0;
  } catch {
    return 0;
  }
}

function writeBytesOf(pid: number): number {
  try {
    const line = readFileSync(`/proc/${pid}/io`, 'utf8').split('\n').find((l) => l.startsWith('write_bytes:'));
    return line ? Number(line.split(/\s+/)[1]) : 0;
  } catch {
    return 0;
  }
}

/**
 * Every process under `supervisorPid`, named by role: the supervisor, the
 * children it reports in /v1/status (kernel, executor:<name>), and their
 * descendants as `<role>/child` (the executor's adapter host).
 */
export function sampleTree(supervisorPid: number, children: ReadonlyArray<{ role: string; name: string; pid: number | null }>): ProcessSample[] {
  const named = new Map<number, string>([[supervisorPid, 'supervisor']]);
  for (const child of children) if (child.pid !== null) named.set(child.pid, child.role === 'kernel' ? 'kernel' : `${child.role}:${child.name}`);
  const pids = readdirSync('/proc').filter((entry) => /^\d+$/.test(entry)).map(Number);
  const roleOf = (pid: number): string | null => {
    let current: number | null = pid;
    let hops = 0;
    while (current !== null && current > 1 && hops < 16) {
      const role = named.get(current);
      if (role !== undefined) return current === pid ? role : role === 'supervisor' ? 'supervisor/child' : `${role}/child`;
      current = parentOf(current);
      hops++;
    }
    return null;
  };
  const samples: ProcessSample[] = [];
  for (const pid of pids) {
    const role = roleOf(pid);
    if (role !== null) samples.push({ role, pid, cpu_ms: cpuMsOf(pid), rss_bytes: rssOf(pid), write_bytes: writeBytesOf(pid) });
  }
  return samples;
}

/** CPU ms spent by each role between two samples (a process that appeared in between counts from zero). */
export function cpuBetween(before: readonly ProcessSample[], after: readonly ProcessSample[]): Record<string, number> {
  const start = new Map(before.map((s) => [s.pid, s.cpu_ms]));
  const byRole: Record<string, number> = {};
  for (const s of after) byRole[s.role] = (byRole[s.role] ?? 0) + s.cpu_ms - (start.get(s.pid) ?? 0);
  return byRole;
}

/** Bytes each role sent toward the disk between two samples (/proc/<pid>/io write_bytes). */
export function writtenBetween(before: readonly ProcessSample[], after: readonly ProcessSample[]): Record<string, number> {
  const start = new Map(before.map((s) => [s.pid, s.write_bytes]));
  const byRole: Record<string, number> = {};
  for (const s of after) byRole[s.role] = (byRole[s.role] ?? 0) + s.write_bytes - (start.get(s.pid) ?? 0);
  return byRole;
}

export function rssByRole(samples: readonly ProcessSample[]): Record<string, number> {
  const byRole: Record<string, number> = {};
  for (const s of samples) byRole[s.role] = (byRole[s.role] ?? 0) + s.rss_bytes;
  return byRole;
}

/** Every file under `root` whose name `wanted` accepts, as paths relative to the root. */
export function filesUnder(root: string, wanted: (name: string) => boolean): string[] {
  const files: string[] = [];
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const full = path.join(dir, entry.name);
      if (entry.isDirectory()) walk(full);
      else if (wanted(entry.name)) files.push(path.relative(root, full));
    }
  };
  walk(root);
  return files;
}

/** Bytes of every SQLite store (and its -wal) under the state root, by file relative to the root. */
export function storeBytes(root: string): Record<string, number> {
  return Object.fromEntries(filesUnder(root, (name) => /\.db(-wal)?$/.test(name)).map((file) => [file, statSync(path.join(root, file)).size]));
}
