// supervisor/service.json: where the running service listens, written once it
// serves and removed when it stops (README "State directory"). Every reader
// (the CLI, custody/client's fromState, custody mcp) goes through here.
//
// A supervisor killed with -9 leaves the file behind, naming a port any local
// process may have taken since: a reader that trusted it would send its token
// to that process. The file names the supervisor's pid and start time
// (/proc/<pid>/stat field 22, shared/child/proc-stat.ts) and its pid namespace;
// a reader in that namespace sends nothing unless that very process still
// runs. A reader in another one (a sidecar container sharing the state and
// the loopback, not the pids) cannot tell, and trusts the file as before.
import { readFileSync, readlinkSync } from 'node:fs';
import { CustodyError } from '../shared/errors.js';
import { isGone, processStartTicks } from '../shared/child/proc-stat.js';
import { replacePrivateFile } from '../shared/store/private-fs.js';
import type { StatePaths } from './paths.js';

export interface ServiceFile {
  readonly pid: number;
  readonly port: number;
  readonly started_at: number;
  /** The supervisor's start time in clock ticks after boot; null where /proc cannot be read. */
  readonly pid_start_ticks: number | null;
  /** The supervisor's pid namespace (/proc/self/ns/pid, e.g. "pid:[4026531836]"); null where it cannot be read. */
  readonly pid_ns: string | null;
}

function pidNamespace(): string | null {
  try {
    return readlinkSync('/proc/self/ns/pid');
  } catch {
    return null;
  }
}

/** Written by the service once it serves; replaced whole, so a reader never sees half of it. */
export function writeServiceFile(paths: StatePaths, port: number, startedAt: number): void {
  const file: ServiceFile = { pid: process.pid, port, started_at: startedAt, pid_start_ticks: processStartTicks(process.pid) ?? null, pid_ns: pidNamespace() };
  replacePrivateFile(paths.serviceJson, JSON.stringify(file) + '\n', { durable: false });
}

/** The running service's address; service_unavailable when it is not running, or the file names a process that is gone. */
export function readServiceFile(paths: StatePaths): ServiceFile {
  let text: string;
  try {
    text = readFileSync(paths.serviceJson, 'utf8');
  } catch {
    throw new CustodyError('service_unavailable', `custody is not running on ${paths.root} (no readable ${paths.serviceJson}); start it with: custody start --state ${paths.root}`);
  }
  let info: Partial<Record<keyof ServiceFile, unknown>>;
  try {
    info = JSON.parse(text) as typeof info;
  } catch {
    info = {};
  }
  const { pid, port, started_at, pid_start_ticks, pid_ns } = info;
  if (!isWhole(pid) || !isWhole(port)) throw new CustodyError('service_unavailable', `${paths.serviceJson} is damaged; restart custody`);
  const ticks = isWhole(pid_start_ticks) ? pid_start_ticks : null;
  const namespace = typeof pid_ns === 'string' ? pid_ns : null;
  // Only a reader that sees the supervisor's pids: in its pid namespace, with /proc readable.
  if (namespace !== null && namespace === pidNamespace() && isGone(pid, ticks)) {
    throw new CustodyError(
      'service_unavailable',
      `custody is not running on ${paths.root}: ${paths.serviceJson} names pid ${pid}, which has ended (killed?), so nothing was sent to port ${port}; start it with: custody start --state ${paths.root}`,
    );
  }
  return { pid, port, started_at: isWhole(started_at) ? started_at : 0, pid_start_ticks: ticks, pid_ns: namespace };
}

function isWhole(value: unknown): value is number {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0;
}
