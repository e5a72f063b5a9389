// How long a call that drives an operation (invoke, authorize, execute,
// report, reconcile) waits for its end when its body names no `wait_ms`;
// past it the answer is 202 with the state so far. The typed client waits
// that long, plus its answerTimeoutMs, before it gives a call up
// (supervisor/client/index.ts).
export const DEFAULT_WAIT_MS = 120_000;

/** The longest wait a call may ask for (`wait_ms`, `--wait`): an hour; past it the call is refused before anything is sent. */
export const MAX_WAIT_MS = 3_600_000;
