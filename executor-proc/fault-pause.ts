// Pause points of the executor and its adapter host (shared/fault.ts): inert
// unless CUSTODY_FAULT names `executor:<cutpoint>`; the process then writes
// `<dir>/executor.<cutpoint>.reached` and waits for
// `<dir>/executor.<cutpoint>.release`.
import { pausePoint as sharedPausePoint } from '../shared/fault.js';

export function pausePoint(cutpoint: string): Promise<void> {
  return sharedPausePoint('executor', cutpoint);
}
