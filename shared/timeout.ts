// The one timeout race in the tree: a promise, or — once `ms` have passed —
// what `onTimeout` gives (a value to answer with, or an error it throws).
//
// Not p-timeout, measured (docs/PERFORMANCE.md): p-timeout builds a
// TimeoutError, stack and all, on every call whether or not it fires, and the
// wire client races every request: that was 2.9 % of the supervisor's busy
// time in its profile. And a timer counts from the event loop's cached time,
// which lags real time by whatever ran earlier in the turn (a grouped
// commit's fsync), so it can fire a few ms early; a caller that then compares
// performance.now() with its start (the watchdog's own-deadline rule,
// supervisor/watchdog/deadlines.ts) would not see its deadline gone. Here
// nothing is built until the deadline passes, and the timer is re-armed for
// the rest until `ms` have really passed. Like setTimeout, a bound under 1 ms
// waits 1 ms.
//
// A deadline that has passed still waits one turn of the event loop for what
// is already readable. After the process was stopped (SIGSTOP, then SIGCONT)
// or its loop stalled, every timer due runs in the timers phase, before the
// poll phase reads the answers that arrived in time and wait in a pipe or a
// socket: the supervisor killed executors (the watchdog's deadline) and
// children (a missed ping) that had answered. setImmediate runs after that
// poll (test/shared/timeout.test.ts stalls the loop past a deadline while a
// child answers).
//
// And the time this process did not run does not count (runningNow below): a
// supervisor stopped for 30 s (SIGSTOP, a debugger, swap) came back to find
// every execute's deadline passed, though the executor had been waiting on
// the supervisor itself (its head witnessed before the effect), and killed
// it, releasing operations that would have completed.
export function withTimeout<T, F = T>(work: PromiseLike<T>, ms: number, onTimeout: () => F | Promise<F>): Promise<T | F> {
  const bound = Math.max(1, ms);
  const startedAt = runningNow();
  return new Promise<T | F>((resolve, reject) => {
    let timer: NodeJS.Timeout;
    let pending: NodeJS.Immediate | undefined;
    const fire = () => {
      try {
        Promise.resolve(onTimeout()).then(resolve, reject);
      } catch (error) {
        // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- what onTimeout throws, unchanged
        reject(error);
      }
    };
    const expire = () => {
      const left = bound - (runningNow() - startedAt);
      if (left > 0) {
        timer = setTimeout(expire, Math.ceil(left));
        return;
      }
      pending = setImmediate(fire);
    };
    timer = setTimeout(expire, bound);
    work.then(
      (value) => {
        clearTimeout(timer);
        clearImmediate(pending);
        resolve(value);
      },
      (error: unknown) => {
        clearTimeout(timer);
        clearImmediate(pending);
        // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- the work's own rejection, unchanged
        reject(error);
      },
    );
  });
}

/** How often the sampler below looks at the clock while this process has a deadline to keep. */
export const RUN_SAMPLE_MS = 250;
/** A gap between two samples longer than the period by more than this is time the process did not run. */
export const STALL_MIN_MS = 250;

let lastSample = -1;
let stalledMs = 0;
let sampler: NodeJS.Timeout | null = null;
let discounting = false;

/**
 * From now on, this process's deadlines leave out the time it did not run
 * (runningNow). The supervisor's alone (supervisor/service.ts): it is the one
 * that judges other processes by its deadlines. A child keeps the plain
 * monotonic clock, so an executor whose own loop stalled does not stretch its
 * adapter's deadline past the watchdog's.
 */
export function discountStalls(): void {
  discounting = true;
}

/**
 * The monotonic clock less, once discountStalls() was called, the time this
 * process's event loop did not run (stopped, swapped out, or blocked): a
 * sampler unref'd every RUN_SAMPLE_MS, and every read, see the gap since the
 * last sample; of a gap longer than RUN_SAMPLE_MS + STALL_MIN_MS, all beyond
 * RUN_SAMPLE_MS counts as not running. What a deadline measures, so that a
 * supervisor that was not running does not blame a child for the wait
 * (supervisor/watchdog/deadlines.ts).
 */
export function runningNow(): number {
  if (!discounting) return performance.now();
  sampler ??= setInterval(() => void runningNow(), RUN_SAMPLE_MS).unref();
  const now = performance.now();
  if (lastSample >= 0) {
    const late = now - lastSample - RUN_SAMPLE_MS;
    if (late > STALL_MIN_MS) stalledMs += late;
  }
  lastSample = now;
  return now - stalledMs;
}
