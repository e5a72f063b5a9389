// Callers waiting for a child's next session (a restart in progress): each
// waits with its own deadline; all are answered when a session comes up, or
// rejected when the child fails or stops.
import { type CustodyError } from '../../shared/errors.js';
import { type ChildSession } from '../../shared/child/spawn.js';

interface Waiter {
  resolve(session: ChildSession): void;
  reject(reason: CustodyError): void;
}

export class SessionWaiters {
  #waiters: Waiter[] = [];

  wait(timeoutMs: number, onTimeout: () => CustodyError): Promise<ChildSession> {
    return new Promise<ChildSession>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#waiters = this.#waiters.filter((w) => w !== waiter);
        reject(onTimeout());
      }, timeoutMs);
      const waiter: Waiter = {
        resolve: (session) => {
          clearTimeout(timer);
          resolve(session);
        },
        reject: (reason) => {
          clearTimeout(timer);
          reject(reason);
        },
      };
      this.#waiters.push(waiter);
    });
  }

  resolveAll(session: ChildSession): void {
    for (const waiter of this.#take()) waiter.resolve(session);
  }

  rejectAll(reason: CustodyError): void {
    for (const waiter of this.#take()) waiter.reject(reason);
  }

  #take(): Waiter[] {
    const waiters = this.#waiters;
    this.#waiters = [];
    return waiters;
  }
}
