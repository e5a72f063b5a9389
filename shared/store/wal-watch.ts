// A store's write-ahead log grows without end while another connection holds
// an old snapshot open: SQLite cannot copy the log back into the database
// past that reader's snapshot, so every commit lengthens the -wal file. The
// operators this project is built for open the stores with the sqlite3 shell
// (README "Looking inside"), and a shell left inside BEGIN, a GUI browser
// holding a read transaction, or a slow backup reading the file is enough:
// measured at 64 in flight, kernel.db-wal grew ~30 KB an operation, 90 MB in
// 3,000 operations, until the disk filled. Nothing custody does can end
// another program's transaction, so each process looks at the -wal of every
// store it has open on a timer and says, at most once a minute per store,
// which store's log is past WAL_WARN_BYTES and what holds it, until it is
// back under. Once the reader ends, the next checkpoint copies the log back
// and journal_size_limit (sqlite-store.ts) cuts the file to WAL_KEEP_BYTES.
import fs from 'node:fs';
import type { Logger } from '../log.js';

/** A -wal past this means its checkpoints cannot finish: normal operation keeps it near SQLite's 1,000-page autocheckpoint (~4 MB). */
export const WAL_WARN_BYTES = 256 * 1024 * 1024;

/** How often each process looks at its stores' -wal files (a stat each). */
const WATCH_INTERVAL_MS = 30_000;

/** At most one line per store this often while its log stays large. */
const REPEAT_MS = 60_000;

/** A store this process has open: its label ("kernel", "ledger", "supervisor") and database file. */
export interface WatchedStore {
  readonly label: string;
  readonly file: string;
}

export class WalWatch {
  readonly #log: Logger;
  readonly #stores: () => readonly WatchedStore[];
  readonly #warnBytes: number;
  /** When each store's large log was last reported (performance.now()), while it stays large. */
  readonly #reported = new Map<string, number>();

  constructor(log: Logger, stores: () => readonly WatchedStore[], warnBytes = WAL_WARN_BYTES) {
    this.#log = log;
    this.#stores = stores;
    this.#warnBytes = warnBytes;
  }

  /** Look at every store's -wal now; report the ones past the bound, and the ones back under it. */
  check(now = performance.now()): void {
    for (const store of this.#stores()) {
      const bytes = sizeOf(`${store.file}-wal`);
      const last = this.#reported.get(store.file);
      if (bytes < this.#warnBytes) {
        if (last !== undefined) {
          this.#reported.delete(store.file);
          this.#log.info('store_wal_drained', { store: store.label, file: store.file, wal_bytes: bytes });
        }
        continue;
      }
      if (last !== undefined && now - last < REPEAT_MS) continue;
      this.#reported.set(store.file, now);
      this.#log.warn('store_wal_growing', {
        store: store.label,
        file: store.file,
        wal_bytes: bytes,
        message:
          `${store.label} store ${store.file}: its write-ahead log is ${mib(bytes)} and cannot be copied back into the store, because another connection holds an old snapshot open ` +
          '(a sqlite3 shell inside BEGIN, a GUI browser, a backup still reading the file); end that transaction (COMMIT or ROLLBACK, or close the program) before the disk fills: the log is then copied back and its file cut down',
      });
    }
  }

  /** Check every WATCH_INTERVAL_MS until the returned function is called; the timer never keeps the process alive. */
  start(intervalMs = WATCH_INTERVAL_MS): () => void {
    const timer = setInterval(() => this.check(), intervalMs);
    timer.unref();
    return () => clearInterval(timer);
  }
}

/** A file's size, 0 when it is not there. */
export function sizeOf(file: string): number {
  try {
    return fs.statSync(file).size;
  } catch {
    return 0;
  }
}

export const mib = (bytes: number) => `${(bytes / (1024 * 1024)).toFixed(1)} MiB`;
