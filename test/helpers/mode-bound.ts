// Running a step bound by file modes. Root writes any file whatever its mode
// (CAP_DAC_OVERRIDE), so a test of what a mode forbids runs that step, when it
// is root, without that capability: `setpriv` (util-linux) drops it from the
// bounding set before exec, and the step stays root, the owner of the files
// the test made, held to their owner bits like any user.
import { spawnSync } from 'node:child_process';

export const IS_ROOT = process.getuid?.() === 0;

/** The command prefix that runs a program held to file modes: setpriv for root, nothing for anyone else. */
export const MODE_BOUND: readonly string[] = IS_ROOT ? ['setpriv', '--bounding-set=-dac_override,-dac_read_search'] : [];

/** Whether MODE_BOUND can run here (setpriv present, and allowed to drop the capabilities). */
export function modeBoundAvailable(): boolean {
  if (!IS_ROOT) return true;
  return spawnSync(MODE_BOUND[0]!, [...MODE_BOUND.slice(1), process.execPath, '-e', ''], { stdio: 'ignore' }).status === 0;
}
