// Retrying with exponential backoff until a step succeeds or a stop is asked
// for. Reconciliation uses it without a count limit: it ends only with a
// signed report (ARCHITECTURE.md §7; race H4 (ARCHITECTURE.md §6.5) traces show what giving up leaves).
import { whenAborted } from '../../shared/abort-waiters.js';
import { CustodyError } from '../../shared/errors.js';

export interface BackoffOptions {
  readonly initialMs: number;
  readonly maxMs: number;
  /** Aborts the wait between attempts. */
  readonly signal?: AbortSignal;
}

export class Backoff {
  readonly #options: BackoffOptions;
  #attempt = 0;

  constructor(options: BackoffOptions) {
    this.#options = options;
  }

  get attempts(): number {
    return this.#attempt;
  }

  nextDelayMs(): number {
    const delay = Math.min(this.#options.initialMs * 2 ** this.#attempt, this.#options.maxMs);
    this.#attempt++;
    // ±20 % jitter so operations that failed together do not retry in lockstep.
    return Math.round(delay * (0.8 + Math.random() * 0.4));
  }

  /** Wait the next delay; rejects with `shutting_down` when the signal aborts. */
  wait(): Promise<void> {
    const delay = this.nextDelayMs();
    const signal = this.#options.signal;
    return new Promise((resolve, reject) => {
      if (signal?.aborted) {
        reject(new CustodyError('shutting_down', 'stopped while waiting to retry'));
        return;
      }
      // One listener on the signal however many operations wait (shared/abort-waiters.ts).
      const leave = signal
        ? whenAborted(signal, () => {
            clearTimeout(timer);
            reject(new CustodyError('shutting_down', 'stopped while waiting to retry'));
          })
        : () => undefined;
      const timer = setTimeout(() => {
        leave();
        resolve();
      }, delay);
    });
  }
}
