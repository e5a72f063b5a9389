// Opens a process's SQLite store: private files, WAL, full sync, foreign keys,
// forward-only migrations in `user_version`. Provisioning and opening are two
// separate doors on purpose: opening never creates a store, and provisioning
// never touches an existing one, so no error path can end with a fresh empty
// store standing in for one that held claims.
import fs from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import { CustodyError, isStorageFull, registerBusyDescriber, registerStorageDescriber } from '../errors.js';
import { applyMigrations, validateMigrations, type Migration } from './migrations.js';
import { checkPrivateFile, checkPrivateFileIfPresent, ensurePrivateDir, isPathPresent, syncDirectory, type FileIdentity } from './private-fs.js';
import type { Logger } from '../log.js';
import { WalWatch, type WatchedStore, mib, sizeOf } from './wal-watch.js';

export type { FileIdentity } from './private-fs.js';
export type { Migration } from './migrations.js';

export interface StoreSpec {
  /** Names the store in messages: "kernel", "ledger", "supervisor". */
  readonly label: string;
  readonly dir: string;
  /** A file name inside `dir`, never a path. */
  readonly file: string;
  /** Versions 1..n in order; the last one is the schema this build writes. */
  readonly migrations: readonly Migration[];
}

/**
 * How long a statement waits on another connection (an operator's sqlite3
 * shell) before SQLITE_BUSY. The wait blocks the process's event loop, so it
 * stays well below the heartbeat timeout (timing.heartbeat_timeout_ms, 10 s):
 * a child waiting out a lock answers its pings late, never too late.
 */
export const STORE_BUSY_TIMEOUT_MS = 2000;

const TEMP_STORE_MEMORY = 2;

/** Files SQLite keeps beside the database; they carry its data and get the same scrutiny. */
const SIDECAR_SUFFIXES = ['-wal', '-shm', '-journal'] as const;

const SYNCHRONOUS_FULL = 2;

/**
 * What a store's -wal file is cut back to once a checkpoint has copied it
 * all back (PRAGMA journal_size_limit). Normal operation keeps the log near
 * SQLite's autocheckpoint size (~4 MB) and never reaches it; a log that grew
 * while a reader held an old snapshot open (wal-watch.ts) would otherwise
 * keep its largest size on disk for good.
 */
export const WAL_KEEP_BYTES = 16 * 1024 * 1024;

/**
 * Create a new store and bring it to the latest schema. Refuses if anything of
 * a store is already there. If it fails after creating the file, the file
 * stays: opening it is refused (user_version 0) until an operator moves it
 * aside, since only they can tell a half-made store from a damaged one.
 */
export function provisionStore(spec: StoreSpec): Database.Database {
  validateSpec(spec);
  ensurePrivateDir(spec.dir, { create: true });
  const file = storePath(spec);
  refuseLeftovers(spec, file);
  const created = createStoreFile(spec, file);
  const db = openVerified(spec, file, created);
  return finishOpen(spec, file, db, { provisioning: true });
}

/** Open an existing store, check it is private and ours, and apply forward migrations. */
export function openStore(spec: StoreSpec): Database.Database {
  validateSpec(spec);
  const file = storePath(spec);
  if (!isPathPresent(file)) {
    throw new CustodyError(
      'store_missing',
      `${spec.label} store ${file} does not exist; provision it first (custody init) — it is never created on open`,
    );
  }
  ensurePrivateDir(spec.dir, { create: false });
  const identity = checkPrivateFile(file);
  checkSidecars(file);
  const db = openVerified(spec, file, identity);
  return finishOpen(spec, file, db, { provisioning: false });
}

/** The identity (device, inode) of a private store file, for callers that record it to detect copies. */
export function storeFileIdentity(file: string): FileIdentity {
  return checkPrivateFile(file);
}

function validateSpec(spec: StoreSpec): void {
  const { file, label, migrations } = spec;
  if (file === '' || file === '.' || file === '..' || path.basename(file) !== file) {
    throw new CustodyError('internal', `${label} store file name ${JSON.stringify(file)} must be a plain file name inside ${spec.dir}`);
  }
  validateMigrations(label, migrations);
}

function storePath(spec: StoreSpec): string {
  return path.join(spec.dir, spec.file);
}

/**
 * A -wal left from a deleted database would be replayed by SQLite into the
 * new file (its frames are checked against the WAL header, not the database),
 * resurrecting old rows inside a store that claims to be fresh.
 */
function refuseLeftovers(spec: StoreSpec, file: string): void {
  for (const suffix of SIDECAR_SUFFIXES) {
    const sidecar = file + suffix;
    if (isPathPresent(sidecar)) {
      throw new CustodyError(
        'store_exists',
        `${spec.label} store: ${sidecar} is left over from an earlier store and SQLite would replay it; move it aside (and inspect it) before provisioning`,
      );
    }
  }
}

function createStoreFile(spec: StoreSpec, file: string): FileIdentity {
  const { O_CREAT, O_EXCL, O_NOFOLLOW, O_WRONLY } = fs.constants;
  let fd: number;
  try {
    fd = fs.openSync(file, O_CREAT | O_EXCL | O_NOFOLLOW | O_WRONLY, 0o600);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'EEXIST') {
      throw new CustodyError(
        'store_exists',
        `${spec.label} store ${file} already exists; provisioning never replaces a store (open it, or move it aside yourself to start over)`,
        { cause: error },
      );
    }
    throw error;
  }
  let identity: FileIdentity;
  try {
    // The open mode passed through the umask; the store must be 0600 whatever the umask was.
    fs.fchmodSync(fd, 0o600);
    const stat = fs.fstatSync(fd);
    identity = { dev: stat.dev, ino: stat.ino };
  } finally {
    fs.closeSync(fd);
  }
  // SQLite syncs the directory for the -wal it creates, not for the database file we just created.
  syncDirectory(spec.dir);
  return identity;
}


/**
 * better-sqlite3 has no O_NOFOLLOW, so the file is checked by lstat before
 * the open and again after it; a symlink or a different inode at the path
 * after opening means the path changed under us. A swap there and back
 * within the open would go unseen, but only this uid (or root) can write
 * in a 0700 directory, so that is an attacker who already owns the store.
 */
function openVerified(spec: StoreSpec, file: string, expected: FileIdentity): Database.Database {
  let db: Database.Database;
  try {
    db = new Database(file, { fileMustExist: true, timeout: STORE_BUSY_TIMEOUT_MS });
  } catch (error) {
    throw new CustodyError('store_identity', `${spec.label} store ${file} could not be opened after it was checked: ${messageOf(error)}`, {
      cause: error,
    });
  }
  try {
    const found = checkPrivateFile(file);
    if (found.dev !== expected.dev || found.ino !== expected.ino) {
      throw new CustodyError(
        'store_identity',
        `${spec.label} store ${file} changed while being opened (expected dev ${expected.dev} inode ${expected.ino}, found dev ${found.dev} inode ${found.ino}); something replaced the file`,
      );
    }
  } catch (error) {
    db.close();
    throw error;
  }
  return db;
}

function finishOpen(spec: StoreSpec, file: string, db: Database.Database, mode: { provisioning: boolean }): Database.Database {
  // Named first (describeBusyStores), so that a lock another connection holds while it opens names this store.
  OPENED_STORES.add(`${spec.label} store ${path.basename(file)}`);
  const entry = { label: spec.label, file, db };
  OPEN_STORES.add(entry);
  try {
    applyPragmas(spec, file, db);
    // Before the migrations: a store its user cannot write is store_permissions, not a migration that failed.
    proveWritable(spec, file, db);
    applyMigrations(db, `${spec.label} store ${file}`, spec.migrations, { ...mode, label: spec.label });
    // The first read above created -wal and -shm; SQLite gives them the database's mode, which we verify rather than trust.
    checkSidecars(file);
    return db;
  } catch (error) {
    // Described while this store is still among the open ones: once closed, a full disk at a start named "a store of this process".
    const full = fullAtOpen(error, file);
    const failure = full ? new CustodyError('storage_full', describeFullStores(messageOf(full), 'start it again'), { cause: error }) : error;
    OPEN_STORES.delete(entry);
    db.close();
    throw failure;
  }
}

/**
 * A full disk as an open meets it (the error that says so, or null):
 * SQLITE_FULL, or the -shm that cannot be given its size
 * (SQLITE_IOERR_SHMSIZE, which applyPragmas called "not a readable SQLite
 * database").
 */
function fullAtOpen(error: unknown, file: string): unknown {
  const cause = error instanceof CustodyError && error.code === 'store_schema' ? error.cause : error;
  const code = (cause as { code?: unknown } | null)?.code;
  return isStorageFull(cause) || (code === 'SQLITE_IOERR_SHMSIZE' && (freeBytes(file) ?? MIN_ROOM_BYTES) < MIN_ROOM_BYTES) ? cause : null;
}

function applyPragmas(spec: StoreSpec, file: string, db: Database.Database): void {
  let journalMode: unknown;
  try {
    journalMode = db.pragma('journal_mode = WAL', { simple: true });
  } catch (error) {
    throw new CustodyError('store_schema', `${spec.label} store ${file} is not a readable SQLite database: ${messageOf(error)}`, {
      cause: error,
    });
  }
  if (journalMode !== 'wal') {
    throw new CustodyError(
      'internal',
      `${spec.label} store ${file} refused WAL mode (journal_mode is ${String(journalMode)}); the filesystem may lack shared-memory support`,
    );
  }
  db.pragma('synchronous = FULL');
  db.pragma('foreign_keys = ON');
  // Every statement of a multi-statement transaction keeps a statement journal
  // (to undo that statement alone); past 64 KiB SQLite moved it into a file it
  // created and unlinked in /var/tmp, and the kernel's start and settle
  // transactions passed that on almost every operation: an open, ~19 writes,
  // an unlink and a close each time, and file-system journal work for the
  // fsyncs that followed (docs/PERFORMANCE.md, "Statement journals in
  // memory"). Temporary data is never durable, so memory loses nothing. Sorts
  // go to memory too: a read whose sort could grow with history sorts keys
  // only (ops.list) or sorts in JavaScript what it returns anyway.
  db.pragma(`temp_store = ${TEMP_STORE_MEMORY}`);
  db.pragma(`journal_size_limit = ${WAL_KEEP_BYTES}`);
  const synchronous = db.pragma('synchronous', { simple: true });
  const foreignKeys = db.pragma('foreign_keys', { simple: true });
  const tempStore = db.pragma('temp_store', { simple: true });
  const walKeep = db.pragma('journal_size_limit', { simple: true });
  if (synchronous !== SYNCHRONOUS_FULL || foreignKeys !== 1 || tempStore !== TEMP_STORE_MEMORY || walKeep !== WAL_KEEP_BYTES) {
    throw new CustodyError(
      'internal',
      `${spec.label} store ${file}: pragmas did not take (synchronous=${String(synchronous)}, foreign_keys=${String(foreignKeys)}, temp_store=${String(tempStore)}, journal_size_limit=${String(walKeep)})`,
    );
  }
}

/**
 * SQLite opens a file its process may not write (mode 0400 to a non-root
 * user, an immutable file, a read-only mount) read-only without a word, and
 * only the first write fails: the supervisor booted on such a supervisor.db
 * and then waited an hour for children it could not record. One write,
 * rolled back, proves now that this store takes writes; nothing reaches the
 * disk. It waits for no lock: a write transaction held elsewhere (an
 * operator's sqlite3 shell) answers SQLITE_BUSY, which a read-only
 * connection never does, and the store is opened as before.
 */
export function proveWritable(spec: StoreSpec, file: string, db: Database.Database): void {
  const version = Number(db.pragma('user_version', { simple: true }));
  const busyTimeout = Number(db.pragma('busy_timeout', { simple: true }));
  db.pragma('busy_timeout = 0');
  try {
    db.exec('BEGIN');
    db.pragma(`user_version = ${version}`);
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    // SQLITE_READONLY and its extended codes (a read-only -shm: _CANTLOCK; a directory: _DIRECTORY), but not _DBMOVED, the file renamed under us.
    if (typeof code === 'string' && ((code.startsWith('SQLITE_READONLY') && code !== 'SQLITE_READONLY_DBMOVED') || code === 'SQLITE_PERM')) {
      const readOnly = [file, ...SIDECAR_SUFFIXES.map((suffix) => file + suffix)].filter((each) => {
        const mode = lstatMode(each);
        return mode !== null && (mode & 0o200) === 0;
      });
      const fix = readOnly.length > 0 ? `run: chmod 600 ${readOnly.join(' ')}` : "check whether its filesystem is mounted read-only or the file is immutable (lsattr)";
      throw new CustodyError(
        'store_permissions',
        `${spec.label} store ${file} cannot be written by this process (uid ${String(process.getuid?.())}): ${messageOf(error)}; ${fix}`,
        { cause: error },
      );
    }
    if (typeof code !== 'string' || !code.startsWith('SQLITE_BUSY')) throw error;
  } finally {
    if (db.inTransaction) db.exec('ROLLBACK');
    db.pragma(`busy_timeout = ${busyTimeout}`);
  }
}

function lstatMode(file: string): number | null {
  try {
    return fs.lstatSync(file).mode;
  } catch {
    return null;
  }
}

function checkSidecars(file: string): void {
  for (const suffix of SIDECAR_SUFFIXES) checkPrivateFileIfPresent(file + suffix);
}


/** The stores this process has open, to name them when SQLite says a disk is full. */
const OPEN_STORES = new Set<{ readonly label: string; readonly file: string; readonly db: Database.Database }>();
/** "<label> store <file name>" of each store this process has opened: a process opens one to three. */
const OPENED_STORES = new Set<string>();

/** The stores this process has open now, for the WAL watch. */
function openStoreFiles(): WatchedStore[] {
  return [...OPEN_STORES].filter((store) => store.db.open).map(({ label, file }) => ({ label, file }));
}

/** Watch the -wal of every store this process opens (wal-watch.ts), reporting to `log`; returns the function that stops it. */
export function watchStoreWals(log: Logger): () => void {
  return new WalWatch(log, openStoreFiles).start();
}

/** Room a store asks for at least: one WAL's worth to checkpoint into, and never less than 1 MiB. */
const MIN_ROOM_BYTES = 1024 * 1024;

function freeBytes(file: string): number | null {
  try {
    const stat = fs.statfsSync(path.dirname(file));
    return stat.bavail * stat.bsize;
  } catch {
    return null;
  }
}

/**
 * SQLITE_FULL does not say which database it came from: name every open
 * store of this process whose filesystem has less room than it asks for
 * (all of them when none is that short), with its size and what to free.
 */
export function describeFullStores(cause: string, then = 'ask again with the same name'): string {
  const stores = [...OPEN_STORES].filter((store) => store.db.open);
  for (const store of [...OPEN_STORES]) if (!store.db.open) OPEN_STORES.delete(store);
  const described = stores.map((store) => {
    const size = sizeOf(store.file);
    const wal = sizeOf(`${store.file}-wal`);
    const free = freeBytes(store.file);
    const need = Math.max(MIN_ROOM_BYTES, wal);
    return { short: free !== null && free < need, text: `${store.label} store ${store.file} (${mib(size)}, WAL ${mib(wal)}; ${free === null ? 'free space unknown' : `${mib(free)} free`}) needs at least ${mib(need)} more` };
  });
  const named = described.some((d) => d.short) ? described.filter((d) => d.short) : described;
  const which = named.length > 0 ? named.map((d) => d.text).join('; ') : 'a store of this process';
  return `the disk is full: ${which} (${cause}); free space on its filesystem, then ${then}`;
}

registerStorageDescriber(describeFullStores);

/**
 * SQLITE_BUSY: another connection to one of this process's stores (an
 * operator's sqlite3 shell holding a write transaction open) kept its lock
 * past STORE_BUSY_TIMEOUT_MS. The stores are named by label and file name,
 * not path: the message reaches API callers.
 */
export function describeBusyStores(cause: string): string {
  // Every store this process opened, closed ones too: a setup that failed on the lock closes its store before the error is described.
  const names = [...OPENED_STORES];
  const which = names.length === 0 ? 'a store of this process' : names.length === 1 ? `the ${names[0]}` : `one of ${names.join(', ')}`;
  return `${which} stayed locked by another connection (${cause}): an open write transaction, such as BEGIN IMMEDIATE left open in a sqlite3 shell; end it (COMMIT, ROLLBACK or close the shell), then ask again with the same name`;
}

registerBusyDescriber(describeBusyStores);

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
