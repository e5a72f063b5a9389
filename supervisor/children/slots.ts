// A counting semaphore: at most `capacity` operations in flight on one
// executor. Waiting for a slot is how the supervisor respects the bound;
// a request refused for lack of room was never sent, so nothing about it is
// in doubt (an operation must never be reconciled to "never claimed" just
// because the supervisor itself had too much in flight).
import { whenAborted } from '../../shared/abort-waiters.js';
import { CustodyError } from '../../shared/errors.js';

export class Slots {
  readonly #capacity: number;
  #used = 0;
  #waiting: Array<() => void> = [];

  constructor(capacity: number) {
    this.#capacity = capacity;
  }

  get used(): number {
    return this.#used;
  }

  /** Resolves with a release function once a slot is free; rejects with `shutting_down` if the signal aborts first. */
  acquire(signal?: AbortSignal): Promise<() => void> {
    const grant = (): (() => void) => {
      this.#used++;
      let released = false;
      return () => {
        if (released) return;
        released = true;
        this.#used--;
        this.#waiting.shift()?.();
      };
    };
    if (this.#used < this.#capacity) return Promise.resolve(grant());
    return new Promise((resolve, reject) => {
      if (signal?.aborted) {
        reject(new CustodyError('shutting_down', 'stopped while waiting for room on the executor'));
        return;
      }
      // One listener on the signal however many wait (shared/abort-waiters.ts).
      const leave = signal
        ? whenAborted(signal, () => {
            this.#waiting = this.#waiting.filter((w) => w !== wake);
            reject(new CustodyError('shutting_down', 'stopped while waiting for room on the executor'));
          })
        : () => undefined;
      const wake = () => {
        leave();
        resolve(grant());
      };
      this.#waiting.push(wake);
    });
  }
}
