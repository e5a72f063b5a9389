// A counting semaphore: at most `capacity` operations in flight on one
// executor. Waiting for a slot is how the supervisor respects the bound;
// a request refused for lack of room was never sent, so nothing about it is
// in doubt (an operation must never be reconciled to "never claimed" just
// because the supervisor itself had too much in flight).
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
      const onAbort = () => {
        this.#waiting = this.#waiting.filter((w) => w !== wake);
        reject(new CustodyError('shutting_down', 'stopped while waiting for room on the executor'));
      };
      const wake = () => {
        signal?.removeEventListener('abort', onAbort);
        resolve(grant());
      };
      if (signal?.aborted) {
        onAbort();
        return;
      }
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#waiting.push(wake);
    });
  }
}
