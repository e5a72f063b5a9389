// A child's log (stderr) and its answers (stdout) are separate pipes: a line
// logged before an answer may be read after it. Tests that look for a log
// line wait for it, bounded.

/** Resolves once `check` returns true; rejects after `timeoutMs`. */
export async function eventually(check: () => boolean, timeoutMs = 3000, what = 'condition'): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`${what} not met within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** Polls `probe` until it answers a value (not undefined) and resolves with it; rejects after `timeoutMs`. */
export async function until<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** Polls `check` until it holds; rejects after `timeoutMs`. */
export async function untilHolds(what: string, check: () => boolean | Promise<boolean>, timeoutMs = 30_000): Promise<void> {
  await until(what, async () => ((await check()) ? true : undefined), timeoutMs);
}
