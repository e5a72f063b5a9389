// Random identifiers (request ids, nonce ids, claim ids) in hex, cut from a
// pool filled by the CSPRNG 4 KiB at a time: one randomFillSync per call
// costs ~9 µs on this machine against ~0.3 µs for a cut of the pool, and a
// governed operation names four things (docs/PERFORMANCE.md). The bytes are
// the same CSPRNG's; keys and session secrets never come from here.
import { randomFillSync } from 'node:crypto';

const POOL_BYTES = 4096;
const pool = Buffer.allocUnsafe(POOL_BYTES);
let used = POOL_BYTES;

/** `bytes` random bytes (at most the pool's 4096), as lowercase hex; each byte is handed out once. */
export function randomHex(bytes: number): string {
  if (!Number.isInteger(bytes) || bytes < 1 || bytes > POOL_BYTES) throw new RangeError(`randomHex: ${bytes} bytes is not 1..${POOL_BYTES}`);
  if (used + bytes > POOL_BYTES) {
    randomFillSync(pool);
    used = 0;
  }
  const hex = pool.toString('hex', used, used + bytes);
  used += bytes;
  return hex;
}
