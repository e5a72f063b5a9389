// Fault injection for the crash matrix (docs/RELIABILITY.md lists every
// cutpoint). Inert unless the environment names a cutpoint:
// CUSTODY_FAULT="<role>:<cutpoint>[,…]". At a named crash cutpoint the
// process kills itself with SIGKILL, exactly as an operator's `kill -9` would:
// no handlers, no flush, no goodbye. At a named pause point it waits (see
// pausePoint) so that a test can kill it, or another process, while the work
// is pinned in flight.
// With CUSTODY_FAULT_DIR set, each cutpoint fires once: a marker file created
// there (O_EXCL) before the kill keeps the restarted process from dying again.
import { closeSync, existsSync, openSync, renameSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

function armed(role: string, cutpoint: string): boolean {
  const spec = process.env.CUSTODY_FAULT;
  if (!spec) return false;
  return spec.split(',').some((entry) => entry.trim() === `${role}:${cutpoint}`);
}

function claimOnce(role: string, cutpoint: string): boolean {
  const dir = process.env.CUSTODY_FAULT_DIR;
  if (!dir) return true;
  try {
    closeSync(openSync(path.join(dir, `${role}.${cutpoint}.fired`), 'wx', 0o600));
    return true;
  } catch {
    return false;
  }
}

/** Die here, as if by `kill -9`, when a test armed this cutpoint. */
export function crashPoint(role: string, cutpoint: string): void {
  if (!armed(role, cutpoint) || !claimOnce(role, cutpoint)) return;
  process.stderr.write(JSON.stringify({ ts: new Date().toISOString(), level: 'warn', event: 'fault_injected', role, cutpoint }) + '\n');
  process.kill(process.pid, 'SIGKILL');
}

/** Whether a cutpoint is armed, for faults that are not crashes (a hang, a slow step). */
export function faultArmed(role: string, cutpoint: string): boolean {
  return armed(role, cutpoint) && claimOnce(role, cutpoint);
}

const PAUSE_POLL_MS = 10;

/**
 * A pause point: inert unless CUSTODY_FAULT names `<role>:<cutpoint>` and
 * CUSTODY_FAULT_DIR is set; then, once, the process writes
 * `<dir>/<role>.<cutpoint>.reached` (its pid) and waits, without blocking its
 * event loop, until `<dir>/<role>.<cutpoint>.release` exists. Other requests
 * are served meanwhile: that is the interleaving under test.
 */
export async function pausePoint(role: string, cutpoint: string): Promise<void> {
  const dir = process.env.CUSTODY_FAULT_DIR;
  if (!dir || !faultArmed(role, cutpoint)) return;
  markReached(dir, role, cutpoint);
  const release = path.join(dir, `${role}.${cutpoint}.release`);
  while (!existsSync(release)) await sleep(PAUSE_POLL_MS);
}

/**
 * pausePoint for code that cannot yield (a migration inside one synchronous
 * transaction): the same files, but the thread itself waits, so the process
 * serves nothing meanwhile, as it would while that work ran.
 */
export function holdPoint(role: string, cutpoint: string): void {
  const dir = process.env.CUSTODY_FAULT_DIR;
  if (!dir || !faultArmed(role, cutpoint)) return;
  markReached(dir, role, cutpoint);
  const release = path.join(dir, `${role}.${cutpoint}.release`);
  const cell = new Int32Array(new SharedArrayBuffer(4));
  while (!existsSync(release)) Atomics.wait(cell, 0, 0, PAUSE_POLL_MS);
}

/**
 * `<dir>/<role>.<cutpoint>.reached` holding this pid, there whole or not at
 * all: written beside it and renamed, so a test that sees the file reads the
 * pid (a plain write let it read an empty file, and then pid 0).
 */
function markReached(dir: string, role: string, cutpoint: string): void {
  const reached = path.join(dir, `${role}.${cutpoint}.reached`);
  writeFileSync(`${reached}.${process.pid}.tmp`, `${process.pid}\n`);
  renameSync(`${reached}.${process.pid}.tmp`, reached);
}
