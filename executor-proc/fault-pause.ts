// Pause points of the executor and its adapter host (shared/fault.ts): inert
// unless CUSTODY_FAULT names `executor:<cutpoint>`; the process then writes
// `<dir>/executor.<cutpoint>.reached` and waits for
// `<dir>/executor.<cutpoint>.release`.
import { pausePoint as sharedPausePoint } from '../shared/fault.js';

export function pausePoint(cutpoint: string): Promise<void> {
  return sharedPausePoint('executor', cutpoint);
}

const held = new Map<string, Promise<void>>();

/**
 * A pause point that holds everyone: the first caller pauses as at
 * `pausePoint`, and every caller arriving while it is paused waits for the
 * same release, so that all of them go on in one turn of the event loop (a
 * test fills a grouped commit this way). Null when the point is not armed,
 * so the hot path awaits nothing.
 */
export function pauseTogether(cutpoint: string): Promise<void> | null {
  const pending = held.get(cutpoint);
  if (pending) return pending;
  if (!process.env.CUSTODY_FAULT_DIR || !process.env.CUSTODY_FAULT?.includes(`executor:${cutpoint}`)) return null;
  const gate = sharedPausePoint('executor', cutpoint).finally(() => held.delete(cutpoint));
  held.set(cutpoint, gate);
  return gate;
}
