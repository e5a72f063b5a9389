// Callers waiting for a child's next session (a restart in progress): each
// waits with its own deadline; all are answered when a session comes up, or
// rejected when the child fails or stops.
import type { CustodyError } from '../../shared/errors.js';
import type { ChildSession } from '../../shared/child/spawn.js';
import { withTimeout } from '../../shared/timeout.js';

interface Waiter {
  resolve(session: ChildSession): void;
  reject(reason: CustodyError): void;
}

export class SessionWaiters {
  #waiters: Waiter[] = [];

  wait(timeoutMs: number, onTimeout: () => CustodyError): Promise<ChildSession> {
    let waiter!: Waiter;
    const session = new Promise<ChildSession>((resolve, reject) => {
      waiter = { resolve, reject };
      this.#waiters.push(waiter);
    });
    return withTimeout(session, timeoutMs, () => {
      this.#waiters = this.#waiters.filter((w) => w !== waiter);
      throw onTimeout();
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
