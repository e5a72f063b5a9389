// Pause points for race tests (DESIGN §12: provoke the model's interleavings
// on the real processes). Like crashPoint, inert unless CUSTODY_FAULT names
// `executor:<cutpoint>`; then, once (CUSTODY_FAULT_DIR marks it fired), the
// process writes `<dir>/executor.<cutpoint>.reached` and waits, without
// blocking its event loop, until `<dir>/executor.<cutpoint>.release` exists.
// Other requests are served meanwhile: that is the interleaving under test.
import { existsSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { faultArmed } from '../shared/fault.js';

const POLL_MS = 10;

export async function pausePoint(cutpoint: string): Promise<void> {
  const dir = process.env.CUSTODY_FAULT_DIR;
  if (!dir || !faultArmed('executor', cutpoint)) return;
  writeFileSync(path.join(dir, `executor.${cutpoint}.reached`), `${process.pid}\n`);
  const release = path.join(dir, `executor.${cutpoint}.release`);
  while (!existsSync(release)) await sleep(POLL_MS);
}
