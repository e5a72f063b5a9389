// Wall-clock time for every decision, in integer milliseconds: times that are
// recorded or signed (windows, TTLs, rows). How long to wait (deadlines,
// polls, restart intensity, log throttling) is measured on the monotonic
// clock, performance.now(), so a wall clock stepped by NTP or a resumed VM
// neither stretches nor cuts a wait (docs/RELIABILITY.md, fault model). Tests that
// must move a process's clock (a window that closes, a clock stepped back)
// set CUSTODY_TEST_CLOCK_FILE to a file holding an offset in milliseconds;
// without that variable this is Date.now() and nothing else.
import { readFileSync } from 'node:fs';

const clockFile = process.env.CUSTODY_TEST_CLOCK_FILE;

function offsetMs(): number {
  if (!clockFile) return 0;
  try {
    const value = Number.parseInt(readFileSync(clockFile, 'utf8').trim(), 10);
    return Number.isSafeInteger(value) ? value : 0;
  } catch {
    return 0;
  }
}

export function nowMs(): number {
  return Date.now() + offsetMs();
}
