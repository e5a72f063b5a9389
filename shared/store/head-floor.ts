// The lowest head a store may still present to the process that has it open
// (docs/ROLLBACK.md, "A store rewritten under its running process"). The
// kernel and each executor remember the highest head they have read after a
// commit; every write reads the head again inside its own transaction, and a
// lower one means the file went back under the process (a `sqlite3 …
// ".restore"` while it ran): the write is refused with store_rolled_back.
import { CustodyError } from '../errors.js';

export class HeadFloor {
  #seen = 0;

  /** A head read outside any transaction (after a commit, at the hello): later writes must read at least it. */
  saw(head: number): number {
    this.#seen = Math.max(this.#seen, head);
    return head;
  }

  /** Inside a write's transaction, before anything is written: refuses a head below the floor. */
  check(head: number, store: string, who: string, wayBack: string): void {
    if (head >= this.#seen) return;
    throw new CustodyError(
      'store_rolled_back',
      `${store} now holds head ${head}, below the head ${this.#seen} this ${who} already read: it was restored from an older copy while the ${who} ran. ` +
        `Nothing was written; the ${who} restarts, and its hello is refused until ${wayBack} (docs/ROLLBACK.md)`,
    );
  }
}
