// The one timeout race in the tree: a promise, or — when `ms` pass first —
// what `onTimeout` gives (a value to answer with, or an error it throws).
// p-timeout underneath; its timer is cleared either way. Like setTimeout, a
// bound under 1 ms waits 1 ms (p-timeout refuses 0).
import pTimeout from 'p-timeout';

export function withTimeout<T, F = T>(work: PromiseLike<T>, ms: number, onTimeout: () => F | Promise<F>): Promise<T | F> {
  return pTimeout<T, F>(work, { milliseconds: Math.max(1, ms), fallback: onTimeout });
}
