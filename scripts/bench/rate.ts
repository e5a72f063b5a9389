// Calls per second of one synchronous operation, for the bench's primitives
// (Ed25519, the strict frame decode). Numbers only; nothing asserts.

/** Runs `op` repeatedly for about `ms` milliseconds and returns calls per second. */
export function measureRate(ms: number, op: () => void): number {
  op(); // warm up (JIT, lazy tables) outside the timed window
  const deadline = performance.now() + ms;
  const start = performance.now();
  let calls = 0;
  let now = start;
  while (now < deadline) {
    for (let i = 0; i < 16; i++) op();
    calls += 16;
    now = performance.now();
  }
  return Math.round((calls * 1000) / (now - start));
}
