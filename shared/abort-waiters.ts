// Many waiters on one long-lived AbortSignal (the service's stop signal) with
// one 'abort' listener per signal: each waiter that adds its own listener
// leaves as many listeners as there are requests waiting, and Node warns at
// eleven (MaxListenersExceededWarning). The listener is added on the first
// waiter and stays; waiters join and leave a set.
const waitersBySignal = new WeakMap<AbortSignal, Set<() => void>>();

/**
 * Call `onAbort` when `signal` aborts, unless the returned function was
 * called first. A signal already aborted calls nothing: callers check
 * `signal.aborted` themselves before waiting.
 */
export function whenAborted(signal: AbortSignal, onAbort: () => void): () => void {
  let waiters = waitersBySignal.get(signal);
  if (!waiters) {
    const joined = new Set<() => void>();
    waitersBySignal.set(signal, joined);
    signal.addEventListener(
      'abort',
      () => {
        const all = [...joined];
        joined.clear();
        for (const waiter of all) waiter();
      },
      { once: true },
    );
    waiters = joined;
  }
  const entry = () => onAbort();
  waiters.add(entry);
  const set = waiters;
  return () => {
    set.delete(entry);
  };
}
