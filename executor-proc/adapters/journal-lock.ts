// An exclusive lock on a shared resource file, across processes. Several
// executors may append to one journal, and the fence (H3, ARCHITECTURE.md §6.5) is only sound if
// "check the fence, append, fsync" and "look, fence, fsync" never overlap.
//
// Node has no flock(2). proper-lockfile (a mkdir lock with an mtime
// heartbeat) would work, but a holder stalled past its staleness threshold
// can be replaced while still running, which is two holders: exactly the
// overlap the fence must exclude. SQLite's unix VFS takes POSIX fcntl locks,
// which the kernel drops when the holder dies (kill -9 included) and which
// never go "stale" while it lives; BEGIN EXCLUSIVE on a small lock database
// is that lock, and its busy timeout is the wait. The critical section is
// synchronous, so one process never interleaves with itself inside it.
import fs from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import { CustodyError } from '../../shared/errors.js';

export const LOCK_WAIT_MS = 10_000;

export class ExclusiveFileLock {
  readonly #path: string;
  readonly #waitMs: number;
  #db: Database.Database | null = null;

  constructor(lockPath: string, waitMs = LOCK_WAIT_MS) {
    this.#path = lockPath;
    this.#waitMs = waitMs;
  }

  /** Run `section` while holding the lock; refuses with internal after waiting `waitMs`. */
  withLock<T>(section: () => T): T {
    const db = this.#open();
    try {
      db.exec('BEGIN EXCLUSIVE');
    } catch (error) {
      throw new CustodyError('internal', `lock ${this.#path} not acquired within ${this.#waitMs} ms: ${(error as Error).message}`, { cause: error });
    }
    try {
      return section();
    } finally {
      db.exec('COMMIT');
    }
  }

  close(): void {
    this.#db?.close();
    this.#db = null;
  }

  #open(): Database.Database {
    if (this.#db) return this.#db;
    // Create it private before SQLite does (it would use the umask).
    fs.mkdirSync(path.dirname(this.#path), { recursive: true, mode: 0o700 });
    const fd = fs.openSync(this.#path, fs.constants.O_RDWR | fs.constants.O_CREAT | fs.constants.O_NOFOLLOW, 0o600);
    fs.closeSync(fd);
    this.#db = new Database(this.#path, { timeout: this.#waitMs });
    return this.#db;
  }
}
